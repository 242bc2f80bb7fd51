// Package replication carries the stream service's replication messages
// between nodes (node/stream/replicate.go, replica.go) over the nodes'
// HTTP listeners: an owner keeps one upgraded connection to each follower
// node (/_sys/replica/stream, conn.go) and pipelines its frames on it; a
// node taking a stream over POSTs to /_sys/replica/tail; frames POSTed to
// /_sys/replica/append (how owners of the previous release ship) are
// still applied. Requests carry the cluster's shared secret
// (meta.Registry.ClusterSecret) as a bearer token; the paths bypass the
// client token file and the append budget (a follower's budget held by
// its own clients' appends, which wait for other nodes' copies, must
// never stall the copies those nodes wait for).
package replication

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// Paths of the replication endpoints.
const (
	PathAppend = "/_sys/replica/append"
	PathTail   = "/_sys/replica/tail"
	pathPrefix = "/_sys/replica/"
)

// MaxBody bounds one replication request or answer.
const MaxBody = 256 << 20

// Service is what the endpoints need from the stream service.
type Service interface {
	ApplyReplica(ctx context.Context, frames []stream.ReplicaFrame) ([]stream.ReplicaResult, error)
	StartReplica(frames []stream.ReplicaFrame) ([]stream.ReplicaResult, func(context.Context) error, error)
	ReplicaTail(ctx context.Context, id uint64, epoch, from int64) (stream.ReplicaFrame, error)
	Members(ctx context.Context) ([]stream.Member, error)
}

// Transport implements stream.Transport and serves the endpoints.
type Transport struct {
	// SentBytes and ReceivedBytes count the bodies of this node's
	// replication requests and their answers (the owner's side).
	SentBytes, ReceivedBytes atomic.Int64

	// Log receives what goes wrong on served connections (nil: discarded).
	Log *slog.Logger

	svc    atomic.Pointer[Service]
	secret string
	auth   string // "Bearer " + secret
	client *http.Client

	connMu sync.Mutex
	conns  map[net.Conn]struct{} // served replication connections
	closed bool
}

func (t *Transport) logf(format string, args ...any) {
	if t.Log != nil {
		t.Log.Warn(fmt.Sprintf(format, args...))
	}
}

// New returns a transport authenticating with secret. SetService must be
// called before it is used (the service is opened after the transport).
func New(secret string) *Transport {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		// Followers answer only once their fsync is done; a request is
		// bounded by its context (RequestTimeout), not here.
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true,
	}
	return &Transport{secret: secret, auth: "Bearer " + secret, client: &http.Client{Transport: tr}}
}

// SetService connects the transport to the stream service.
func (t *Transport) SetService(s Service) { t.svc.Store(&s) }

func (t *Transport) service() Service {
	if p := t.svc.Load(); p != nil {
		return *p
	}
	return nil
}

func (t *Transport) nodeURL(ctx context.Context, node string) (string, error) {
	svc := t.service()
	if svc == nil {
		return "", errors.New("replication: not started")
	}
	ms, err := svc.Members(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if m.NodeID == node {
			return strings.TrimSuffix(m.AdvertiseURL, "/"), nil
		}
	}
	return "", fmt.Errorf("replication: node %q is not a live member", node)
}

func (t *Transport) post(ctx context.Context, node, path string, body []byte) ([]byte, error) {
	base, err := t.nodeURL(ctx, node)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	t.SentBytes.Add(int64(len(body)))
	req.Header.Set("Authorization", t.auth)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("replication: %s %s: %w", node, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("replication: %s %s: read answer: %w", node, path, err)
	}
	t.ReceivedBytes.Add(int64(len(data)))
	if len(data) > MaxBody {
		return nil, fmt.Errorf("replication: %s %s: answer larger than %d bytes", node, path, MaxBody)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("replication: %s %s: %s: %s", node, path, resp.Status, bytes.TrimSpace(data[:min(len(data), 512)]))
	}
	return data, nil
}

// Tail implements stream.Transport.
func (t *Transport) Tail(ctx context.Context, node string, id uint64, epoch, from int64) (stream.ReplicaFrame, error) {
	q := url.Values{"stream": {strconv.FormatUint(id, 10)}, "epoch": {strconv.FormatInt(epoch, 10)}, "from": {strconv.FormatInt(from, 10)}}
	data, err := t.post(ctx, node, PathTail+"?"+q.Encode(), nil)
	if err != nil {
		return stream.ReplicaFrame{}, err
	}
	frames, err := stream.DecodeReplicaFrames(data)
	if err != nil {
		return stream.ReplicaFrame{}, err
	}
	if len(frames) != 1 || frames[0].StreamID != id {
		return stream.ReplicaFrame{}, fmt.Errorf("replication: %s answered %d frames for stream %d", node, len(frames), id)
	}
	return frames[0], nil
}

// Route serves the replication paths and hands every other request to next.
func (t *Transport) Route(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, pathPrefix) {
			next.ServeHTTP(w, r)
			return
		}
		t.serve(w, r)
	})
}

func (t *Transport) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == PathStream {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			httpx.WriteError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "the replication connection is a GET upgrade")
			return
		}
		if !t.authorized(w, r) {
			return
		}
		t.serveStream(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httpx.WriteError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "replication endpoints take POST")
		return
	}
	if !t.authorized(w, r) {
		return
	}
	svc := t.service()
	switch r.URL.Path {
	case PathAppend:
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
		if err != nil {
			httpx.WriteError(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge, err.Error())
			return
		}
		frames, err := stream.DecodeReplicaFrames(body)
		if err != nil {
			httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
			return
		}
		res, err := svc.ApplyReplica(r.Context(), frames)
		if err != nil {
			writeErr(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(stream.AppendReplicaResults(nil, res))
	case PathTail:
		q := r.URL.Query()
		id, err1 := strconv.ParseUint(q.Get("stream"), 10, 64)
		epoch, err2 := strconv.ParseInt(q.Get("epoch"), 10, 64)
		from, err3 := strconv.ParseInt(q.Get("from"), 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, "stream, epoch and from must be integers: "+err.Error())
			return
		}
		f, err := svc.ReplicaTail(r.Context(), id, epoch, from)
		if err != nil {
			writeErr(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(stream.AppendReplicaFrames(nil, []stream.ReplicaFrame{f}))
	default:
		httpx.WriteError(w, http.StatusNotFound, wire.CodeNotFoundRoute, "no such replication endpoint")
	}
}

// authorized checks the cluster secret and that the service is started,
// answering the request when not.
func (t *Transport) authorized(w http.ResponseWriter, r *http.Request) bool {
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(t.auth)) != 1 {
		httpx.WriteError(w, http.StatusUnauthorized, wire.CodeUnauthorized, "replication endpoints take the cluster secret only")
		return false
	}
	if t.service() == nil {
		httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "replication is not started yet")
		return false
	}
	return true
}

func writeErr(w http.ResponseWriter, err error) {
	switch stream.KindOf(err) {
	case stream.KindInvalidArgument:
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
	case stream.KindConflict:
		httpx.WriteError(w, http.StatusConflict, wire.CodeExists, err.Error())
	default:
		httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error())
	}
}
