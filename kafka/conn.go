package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
)

// connState is what one connection remembers between requests.
type connState struct {
	remote    string
	clientID  string
	mechanism string // SASL mechanism chosen by SaslHandshake
	// rawSASL: a SaslHandshake v0 succeeded, so the next frame is a raw
	// SASL token, not a request (handleSASLHandshake).
	rawSASL bool
	// authenticated is read by the frame reader too: before it is set a
	// connection may only send small frames, all within AuthTimeout of
	// the accept. deadlineMu orders the reader's deadline against the
	// one set at login (loggedIn).
	authenticated atomic.Bool
	deadlineMu    sync.Mutex
	principal     *auth.Principal // nil while unauthenticated or with auth off
	// scram is a SCRAM login between its client-first and client-final
	// messages.
	scram *auth.ScramConversation
}

// request is one framed request as read off the wire.
type request struct {
	key, version int16
	corr         int32
	clientID     string
	req          kmsg.Request // nil when the body was not decoded (see decodeRequest)
	// unsupported: a known key at a version outside our range, decoded
	// only to answer UNSUPPORTED_VERSION (unsupportedVersionResponse).
	unsupported bool
}

// readAhead is how many framed requests a connection reads ahead of the one
// being handled: clients pipeline, and reading on keeps a closed connection
// noticed (it cancels the request in progress, ending a long-poll early).
// Each costs at most one frame of memory.
const readAhead = 4

// maxProducesInFlight is how many produce requests of one connection may
// await durability at once (Kafka clients keep up to 5 in flight per
// connection with idempotence on).
const maxProducesInFlight = 8

// reply is a response on its way out, in request order: resp, or a produce
// whose response is ready once its batches are durable.
type reply struct {
	r       request
	resp    kmsg.Response
	produce *produceCall
	raw     []byte // a frame sent as is: the answer to a raw SASL token
}

// serveConn runs one connection: a reader goroutine frames requests, this
// goroutine handles them in order, and a writer goroutine sends the
// responses in the same order (clients pipeline and rely on it). A produce
// is only submitted here (its batches enter the write-ahead log in request
// order) and the writer waits for its durability, so the next pipelined
// produce is submitted meanwhile and joins the same commit group. Any other
// request waits until the produces before it are answered, so it sees
// their effects as it would if requests ran one at a time. Every
// connection has its own goroutines and no connection ever waits on
// another (a long-poll fetch blocks only its own).
func (s *Server) serveConn(c net.Conn) {
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	// Produces run on a context of their own: not cancelled when Close
	// ends the connection's waits, nor when the client leaves, only at
	// Close's deadline (s.hard) or once this connection is done. A
	// produce in progress on a node that has just been drained is then
	// still answered properly: cancelled, its routing failed and the
	// client got a bare NOT_LEADER_OR_FOLLOWER, without the KIP-951 hint
	// to the partition's new leader, and waited out its metadata
	// back-off (up to 5 s, the rolling drill's longest pause). Its wait
	// for durability failed too, for a batch that was written.
	produceCtx, cancelProduces := context.WithCancel(s.hard)
	defer cancelProduces()
	cc := &connState{remote: c.RemoteAddr().String()}
	cc.authenticated.Store(s.cfg.Auth == nil)
	// Before login every byte is due by loginBy, counted from the accept:
	// a client that keeps sending ApiVersions without ever logging in is
	// closed all the same. With authentication off the first request is
	// due by then too, so a silent new connection is not held for
	// IdleTimeout.
	loginBy := time.Now().Add(s.cfg.AuthTimeout)
	frames := make(chan []byte, readAhead)
	go func() {
		defer close(frames)
		defer cancel() // the client is gone (or closed its side): stop waiting for it
		r := bufio.NewReaderSize(c, 64<<10)
		for first := true; ; first = false {
			// A logged-in connection may wait IdleTimeout for its next
			// request, and once a size prefix has arrived the frame must
			// follow within FrameTimeout; before login, everything is due
			// by loginBy. So trickled or abandoned frames (slowloris)
			// end, and a client cannot hold memory without sending bytes.
			cc.deadlineMu.Lock()
			authed := cc.authenticated.Load()
			deadline, limit := time.Now().Add(s.cfg.IdleTimeout), s.cfg.MaxFrameBytes
			if !authed {
				limit = min(limit, maxUnauthenticatedFrame)
			}
			bounded := !authed || first
			if bounded {
				deadline = loginBy
			}
			_ = c.SetReadDeadline(deadline)
			cc.deadlineMu.Unlock()
			frame, err := readFrame(r, limit, func() {
				if !bounded {
					_ = c.SetReadDeadline(time.Now().Add(s.cfg.FrameTimeout))
				}
			})
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
					s.log.Debug("kafka: closing connection", "remote", cc.remote, "err", err)
				}
				return
			}
			select {
			case frames <- frame:
			case <-ctx.Done():
				return
			}
		}
	}()

	replies := make(chan reply, maxProducesInFlight)
	var producing sync.WaitGroup // produces queued and not yet answered
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		s.writeReplies(c, replies, &producing, cancel)
	}()
	// Runs before cancel: responses already queued still go out (a
	// produce's durability is awaited) before the connection closes.
	defer func() {
		close(replies)
		<-writerDone
	}()

	for frame := range frames {
		s.lastRequest.Store(time.Now().UnixNano())
		if cc.rawSASL {
			// The SASL messages after a SaslHandshake v0 come as raw
			// frames: each is answered with a raw frame (empty when the
			// mechanism has nothing to say), failure closes the
			// connection (Kafka's v0).
			out, done, err := s.authenticate(ctx, cc, frame)
			if err != nil {
				s.log.Debug("kafka: SASL (handshake v0) failed; closing connection", "remote", cc.remote, "err", err)
				return
			}
			cc.rawSASL = !done
			if done {
				s.loggedIn(c, cc)
			}
			replies <- reply{raw: append(binary.BigEndian.AppendUint32(nil, uint32(len(out))), out...)}
			continue
		}
		r, err := decodeRequest(frame)
		if err != nil {
			// A request we cannot parse leaves the stream unframed for
			// what follows: Kafka closes the connection too.
			s.log.Debug("kafka: bad request; closing connection", "remote", cc.remote, "err", err)
			return
		}
		cc.clientID = r.clientID
		if pr, ok := r.req.(*kmsg.ProduceRequest); ok && cc.authenticated.Load() && !r.unsupported {
			producing.Add(1)
			replies <- reply{r: r, produce: s.startProduce(produceCtx, cc, pr)}
			continue
		}
		producing.Wait()
		wasAuthed := cc.authenticated.Load()
		resp, err := s.dispatch(ctx, cc, r)
		if !wasAuthed && cc.authenticated.Load() {
			s.loggedIn(c, cc)
		}
		if err != nil {
			s.log.Debug("kafka: request refused; closing connection", "remote", cc.remote,
				"key", r.key, "version", r.version, "err", err)
			return
		}
		if resp != nil {
			replies <- reply{r: r, resp: resp}
		}
	}
}

// writeReplies sends the responses of one connection in request order,
// waiting for each produce's durability first. After a failed write it
// only drains (answering no one), so the request loop never blocks on it.
func (s *Server) writeReplies(c net.Conn, replies <-chan reply, producing *sync.WaitGroup, cancel context.CancelFunc) {
	var out []byte
	broken := false
	for rp := range replies {
		resp := rp.resp
		if rp.produce != nil {
			if resp = rp.produce.finish(); resp != nil {
				resp.SetVersion(rp.r.version)
			}
		}
		frame := rp.raw
		var pieces net.Buffers
		if frame == nil && resp != nil && !broken {
			if f, ok := resp.(*fetchReply); ok {
				pieces, out = fetchFrame(out[:0], rp.r, f.FetchResponse, f.pieces)
			} else {
				out = encodeResponse(out[:0], rp.r, resp)
			}
			frame = out
		}
		if frame != nil && !broken {
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			var err error
			if pieces != nil {
				_, err = pieces.WriteTo(c) // writev: the batches from where they lie
			} else {
				_, err = c.Write(frame)
			}
			if err != nil {
				broken = true
				cancel()
				_ = c.Close() // ends the reader, and so the request loop
			}
		}
		if f, ok := resp.(*fetchReply); ok {
			// Written (or never to be): the cache may reuse the memory
			// its record batches were sent from.
			f.release()
		}
		if cap(out) > 1<<20 {
			out = nil // do not keep a large fetch's buffer per idle connection
		}
		if rp.produce != nil {
			producing.Done()
		}
	}
}

// loggedIn lifts the login deadline off a connection that just
// authenticated: the frame reader may already wait for the next request
// under it. The reader sets its deadline under the same lock after
// loading authenticated, so it cannot put the login deadline back.
func (s *Server) loggedIn(c net.Conn, cc *connState) {
	cc.deadlineMu.Lock()
	_ = c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
	cc.deadlineMu.Unlock()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// maxUnauthenticatedFrame bounds frames before SASL authentication
// succeeds: ApiVersions, SaslHandshake and SaslAuthenticate are small.
const maxUnauthenticatedFrame = 64 << 10

// readFrame reads one size-prefixed frame, refusing sizes outside
// [minFrame, max] before allocating anything. started is called once the
// size prefix is in. The buffer grows with the bytes that actually
// arrive, so a large size prefix followed by silence costs nothing.
func readFrame(r *bufio.Reader, max int32, started func()) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(hdr[:]))
	if size < minFrame || size > max {
		return nil, fmt.Errorf("frame size %d outside [%d, %d]", size, minFrame, max)
	}
	if started != nil {
		started()
	}
	frame := make([]byte, 0, min(int(size), 64<<10))
	for len(frame) < int(size) {
		if len(frame) == cap(frame) {
			grown := make([]byte, len(frame), min(int(size), 2*cap(frame)))
			copy(grown, frame)
			frame = grown
		}
		n, err := r.Read(frame[len(frame):cap(frame)])
		frame = frame[:len(frame)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return frame, nil
}

// minFrame is the smallest request header: key, version, correlation id and
// a null client id.
const minFrame = 2 + 2 + 4 + 2

// decodeRequest parses a request header and, for a key and version this
// server handles, its body. An ApiVersions request of a version newer than
// advertised is returned undecoded (req nil): KIP-511 says to answer it with
// a v0 error naming our ApiVersions range, whatever its body holds.
func decodeRequest(frame []byte) (request, error) {
	var r request
	if len(frame) < minFrame {
		return r, fmt.Errorf("request of %d bytes is shorter than a header", len(frame))
	}
	r.key = int16(binary.BigEndian.Uint16(frame[0:]))
	r.version = int16(binary.BigEndian.Uint16(frame[2:]))
	r.corr = int32(binary.BigEndian.Uint32(frame[4:]))
	n := int16(binary.BigEndian.Uint16(frame[8:]))
	rest := frame[minFrame:]
	if n > 0 {
		if int(n) > len(rest) {
			return r, fmt.Errorf("client id of %d bytes in a %d-byte request", n, len(frame))
		}
		r.clientID, rest = string(rest[:n]), rest[n:]
	}
	h, ok := handlers[r.key]
	if !ok {
		return r, fmt.Errorf("unsupported api key %d", r.key)
	}
	req := kmsg.RequestForKey(r.key)
	if r.version < h.min || r.version > h.max {
		if r.key == kmsg.ApiVersions.Int16() && r.version > h.max {
			return r, nil
		}
		// Another version of a key we serve: answered with
		// UNSUPPORTED_VERSION in a response of its own version when
		// kmsg knows that version; otherwise the body cannot be framed
		// back and the connection closes.
		if r.version < 0 || r.version > req.MaxVersion() {
			return r, fmt.Errorf("unsupported version %d of %s (supported %d-%d)", r.version, kmsg.NameForKey(r.key), h.min, h.max)
		}
		r.unsupported = true
	}
	req.SetVersion(r.version)
	if req.IsFlexible() {
		var err error
		if rest, err = skipTags(rest); err != nil {
			return r, err
		}
	}
	if err := req.ReadFrom(rest); err != nil {
		return r, fmt.Errorf("decode %s v%d: %w", kmsg.NameForKey(r.key), r.version, err)
	}
	r.req = req
	return r, nil
}

// skipTags skips the tagged-field section of a flexible request header.
func skipTags(b []byte) ([]byte, error) {
	num, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("bad tag count in request header")
	}
	b = b[k:]
	for ; num > 0; num-- {
		if _, k = binary.Uvarint(b); k <= 0 {
			return nil, errors.New("bad tag in request header")
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, errors.New("bad tag size in request header")
		}
		b = b[k+int(size):]
	}
	return b, nil
}

// encodeResponse frames resp: size, correlation id, the header's empty tag
// section for flexible versions (never for ApiVersions, whose response
// header is v0 so a client can read it before knowing our versions), body.
func encodeResponse(dst []byte, r request, resp kmsg.Response) []byte {
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(r.corr))
	if resp.IsFlexible() && r.key != kmsg.ApiVersions.Int16() {
		dst = append(dst, 0)
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst, uint32(len(dst)-4))
	return dst
}

// dispatch applies the authentication gate and runs the handler. A nil
// response with nil error means "send nothing" (acks=0).
func (s *Server) dispatch(ctx context.Context, cc *connState, r request) (kmsg.Response, error) {
	if r.req == nil {
		// ApiVersions newer than ours (KIP-511): the answer lists only
		// the ApiVersions range, as Kafka's does, so the client asks
		// again at our newest version. A client given every key here
		// would use them from this v0 body, which has no features:
		// franz-go then never saw transaction.version on that
		// connection.
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.SetVersion(0)
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		h := handlers[kmsg.ApiVersions.Int16()]
		resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{{ApiKey: kmsg.ApiVersions.Int16(), MinVersion: h.min, MaxVersion: h.max}}
		return resp, nil
	}
	if !cc.authenticated.Load() {
		switch r.key {
		case kmsg.ApiVersions.Int16(), kmsg.SASLHandshake.Int16(), kmsg.SASLAuthenticate.Int16():
		default:
			return nil, fmt.Errorf("%s before SASL authentication", kmsg.NameForKey(r.key))
		}
	}
	if r.unsupported {
		if pr, ok := r.req.(*kmsg.ProduceRequest); ok && pr.Acks == 0 {
			return nil, nil // acks=0: Kafka never answers
		}
		return unsupportedVersionResponse(r.req), nil
	}
	resp, err := s.handle(ctx, cc, r.req)
	if err != nil || resp == nil {
		return nil, err
	}
	resp.SetVersion(r.version)
	return resp, nil
}

// allow checks that the connection's principal may act at level on the
// stream name (always true with authentication off).
func (s *Server) allow(cc *connState, level auth.Level, name string) error {
	if s.cfg.Auth == nil || cc.principal.Allows(level, name) {
		return nil
	}
	return fmt.Errorf("%w: %s access to %s", kerr.TopicAuthorizationFailed, level, name)
}
