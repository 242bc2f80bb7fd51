package picomq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// SubscribeOptions tune a Subscription.
type SubscribeOptions struct {
	// NoReconnect ends the subscription when its connection ends (the
	// server ends SSE connections after --sse-timeout). By default the
	// subscription reconnects from the last position it delivered, so no
	// record is lost or repeated.
	NoReconnect bool
	// MaxRetries bounds consecutive failed connection attempts before the
	// subscription gives up (0 = the client's RetryPolicy.MaxAttempts).
	MaxRetries int
	// OnEvent, when set, receives every event on the subscription's own
	// goroutine, the one reading the connection, as soon as the event is
	// decoded; Events then delivers nothing and is only closed when the
	// subscription ends. It saves the hand-over of each event to the
	// consumer's goroutine (a scheduler wake, tens of microseconds on a
	// busy machine): the lowest append-to-delivery latency the client
	// offers. The connection is not read while OnEvent runs, so a slow
	// OnEvent slows the subscription as a slow Events receiver does.
	// OnEvent must not call Close (Close waits for the goroutine running
	// it); cancel the subscription's context instead, or Close from
	// elsewhere. Position, reconnects and Err behave as with Events:
	// Position moves past an event once OnEvent has returned.
	OnEvent func(Event)
}

// EventType tells data events from control events.
type EventType int

const (
	// EventData carries records.
	EventData EventType = iota + 1
	// EventControl carries the position after the events so far, and
	// whether the reader is caught up or the stream closed.
	EventControl
)

func (t EventType) String() string {
	switch t {
	case EventData:
		return "data"
	case EventControl:
		return "control"
	}
	return "unknown"
}

// Event is one server-sent event of a subscription.
type Event struct {
	Type EventType
	// Records are the records of a data event, in order.
	Records []Record
	// Next is the position after this event: resuming there neither loses
	// nor repeats a record.
	Next string
	// UpToDate (control): the reader has everything appended so far.
	UpToDate bool
	// Closed (control): the stream is closed and fully delivered; it is
	// the last event.
	Closed bool
	// Cursor (control): the server's live cursor.
	Cursor string
}

// Subscription delivers a stream's records as they are appended, over
// server-sent events. Receive from Events until it is closed, then check
// Err:
//
//	sub, err := stream.Subscribe(ctx, client.Beginning(), picomq.SubscribeOptions{})
//	…
//	defer sub.Close()
//	for ev := range sub.Events() {
//		for _, rec := range ev.Records { … }
//	}
//	if err := sub.Err(); err != nil { … }
//
// A subscription ends when its context is cancelled, on Close, when a
// closed stream has been delivered to its end, or on an error that
// reconnecting cannot fix (the stream was deleted, reconnects kept failing).
type Subscription struct {
	s      *stream
	opts   SubscribeOptions
	events chan Event
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	err        error
	pos        string
	cursor     string
	reconnects int
	jsonMode   bool // Durable Streams: the stream is application/json
}

// Events returns the channel of events. It is closed when the subscription
// ends.
func (sub *Subscription) Events() <-chan Event { return sub.events }

// Err returns why the subscription ended: nil after Close, a cancelled
// context or the end of a closed stream.
func (sub *Subscription) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.err
}

// Close ends the subscription and waits until its connection is closed.
func (sub *Subscription) Close() error {
	sub.cancel()
	<-sub.done
	return nil
}

// Position returns the position after the last event handed over on
// Events: where a new subscription would resume. It may lag the event the
// consumer just received by a moment (never run ahead of it); a consumer
// that needs an exact resume point keeps the Next of the last event it
// processed.
func (sub *Subscription) Position() string {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.pos
}

// Reconnects returns how many times the subscription has reconnected.
func (sub *Subscription) Reconnects() int {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.reconnects
}

func (s *stream) Subscribe(ctx context.Context, from string, opts SubscribeOptions) (*Subscription, error) {
	if err := s.checkName(); err != nil {
		return nil, err
	}
	if opts.MaxRetries <= 0 {
		opts.MaxRetries = s.c.retry.MaxAttempts
	}
	sub := &Subscription{s: s, opts: opts, events: make(chan Event), done: make(chan struct{})}
	if s.ds() {
		if from == "" {
			from = "-1"
		}
		ct := s.cachedContentType()
		if ct == "" || from == PositionNow {
			// "now" is resolved here, so that a reconnect before the
			// first event cannot skip what was appended in between.
			info, err := s.dsHead(ctx)
			if err != nil {
				return nil, err
			}
			ct = info.ContentType
			if from == PositionNow {
				from = info.Next
			}
		}
		sub.jsonMode = wire.IsDSJSONMode(ct)
	} else {
		var err error
		if from, err = s.picoPosition(ctx, from); err != nil {
			return nil, err
		}
	}
	sub.pos = from
	ctx, cancel := context.WithCancel(ctx)
	sub.cancel = cancel
	resp, err := sub.connect(ctx, false)
	if err != nil {
		cancel()
		return nil, err
	}
	go sub.run(ctx, resp)
	return sub, nil
}

// connect opens the event stream at the current position.
func (sub *Subscription) connect(ctx context.Context, resume bool) (*http.Response, error) {
	s := sub.s
	sub.mu.Lock()
	pos, cursor := sub.pos, sub.cursor
	sub.mu.Unlock()
	q := url.Values{}
	h := http.Header{}
	h.Set("Accept", wire.MediaEventStream)
	if s.ds() {
		q.Set("offset", pos)
		q.Set("live", "sse")
		if cursor != "" {
			q.Set("cursor", cursor)
		}
	} else {
		if pos != "" {
			q.Set(wire.QueryOffset, pos)
			if resume {
				h.Set("Last-Event-ID", pos)
			}
		}
		q.Set(wire.QueryLive, wire.LiveSSE)
		// The format parameter wins over Accept: the server's content
		// negotiation refuses "Accept: text/event-stream" with 406.
		q.Set(wire.QueryFormat, wire.FormatJSON)
	}
	// One attempt: run decides about retries, with its own budget.
	resp, err := s.c.do(ctx, &call{method: "GET", path: s.name, query: q, header: h, owner: &s.owner})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		drain(resp)
		return nil, fmt.Errorf("picomq: subscribe %s: status %d, want 200", s.name, resp.StatusCode)
	}
	return resp, nil
}

func (sub *Subscription) finish(err error) {
	sub.mu.Lock()
	if sub.err == nil {
		sub.err = err
	}
	sub.mu.Unlock()
}

// run reads events from resp and reconnects until the subscription ends.
func (sub *Subscription) run(ctx context.Context, resp *http.Response) {
	defer close(sub.done)
	defer close(sub.events)
	defer sub.cancel()
	failures := 0
	for {
		delivered, closed, err := sub.read(ctx, resp)
		resp.Body.Close()
		if ctx.Err() != nil || closed {
			return
		}
		if err != nil && !retryableStreamError(err) {
			sub.finish(err)
			return
		}
		if sub.opts.NoReconnect {
			sub.finish(err)
			return
		}
		if delivered {
			failures = 0
		} else {
			failures++
		}
		// Reconnect, backing off while attempts fail.
		for {
			if failures > 0 {
				if failures >= sub.opts.MaxRetries {
					if err == nil {
						err = errors.New("picomq: subscription: connections keep ending without events")
					}
					sub.finish(fmt.Errorf("picomq: subscription gave up after %d attempts: %w", failures, err))
					return
				}
				if sleepCtx(ctx, sub.s.c.retry.delay(failures, retryAfterOf(err))) != nil {
					return
				}
			}
			resp, err = sub.connect(ctx, true)
			if ctx.Err() != nil {
				if err == nil {
					resp.Body.Close()
				}
				return
			}
			if err == nil {
				break
			}
			if !retryableStreamError(err) {
				sub.finish(err)
				return
			}
			failures++
		}
		sub.mu.Lock()
		sub.reconnects++
		sub.mu.Unlock()
	}
}

func retryAfterOf(err error) time.Duration {
	var ce *ClientError
	if errors.As(err, &ce) {
		return ce.RetryAfter
	}
	return 0
}

// retryableStreamError: what a reconnect may fix.
func retryableStreamError(err error) bool {
	ok, _ := retryableError(err)
	return ok
}

// read delivers the events of one connection. It reports whether any event
// was delivered, and whether the stream's end was reached (closed).
func (sub *Subscription) read(ctx context.Context, resp *http.Response) (delivered, closed bool, err error) {
	s := sub.s
	base64Data := s.ds() && resp.Header.Get(wire.DSHeaderSSEDataEncoding) == "base64"
	r := newSSEReader(resp.Body)
	var pending []byte // Durable Streams: data waiting for its control event
	havePending := false
	for {
		ev, err := r.next()
		if err != nil {
			if err == io.EOF {
				return delivered, false, nil
			}
			return delivered, false, err
		}
		// At most a data and a control event: on the stack, not a slice
		// allocated per event.
		var outBuf [2]Event
		out := outBuf[:0]
		if s.ds() {
			switch ev.event {
			case "data":
				pending, havePending = ev.data, true
				if base64Data {
					pending, err = base64.StdEncoding.DecodeString(string(stripNewlines(ev.data)))
					if err != nil {
						return delivered, false, fmt.Errorf("picomq: subscription: bad base64 data event: %v", err)
					}
				}
				continue
			case "control":
				var c wire.DSControlEvent
				if err := json.Unmarshal(ev.data, &c); err != nil {
					return delivered, false, fmt.Errorf("picomq: subscription: bad control event %q: %v", ev.data, err)
				}
				if havePending {
					sub.mu.Lock()
					from := sub.pos
					sub.mu.Unlock()
					recs, err := dsRecords(pending, sub.jsonMode, from, c.StreamNextOffset, s.c)
					if err != nil {
						return delivered, false, fmt.Errorf("picomq: subscription: %v", err)
					}
					if len(recs) > 0 {
						out = append(out, Event{Type: EventData, Records: recs, Next: c.StreamNextOffset})
					}
					pending, havePending = nil, false
				}
				out = append(out, Event{Type: EventControl, Next: c.StreamNextOffset, UpToDate: c.UpToDate || c.StreamClosed, Closed: c.StreamClosed, Cursor: c.StreamCursor})
			default:
				continue
			}
		} else {
			switch ev.event {
			case wire.EventData:
				recs, err := decodeDataEvent(ev.data)
				if err != nil {
					return delivered, false, fmt.Errorf("picomq: subscription: bad data event: %v", err)
				}
				next := ev.id
				if next == "" && len(recs) > 0 {
					if n, err := strconv.ParseInt(recs[len(recs)-1].Position, 10, 64); err == nil {
						next = strconv.FormatInt(n+1, 10)
					}
				}
				out = append(out, Event{Type: EventData, Records: recs, Next: next})
			case wire.EventControl:
				sub.mu.Lock()
				prevCursor := sub.cursor
				sub.mu.Unlock()
				c, err := decodeControlEvent(ev.data, prevCursor)
				if err != nil {
					return delivered, false, fmt.Errorf("picomq: subscription: bad control event %q: %v", ev.data, err)
				}
				out = append(out, Event{Type: EventControl, Next: offsetString(c.NextOffset, ev.id), UpToDate: c.UpToDate, Closed: c.Closed, Cursor: c.Cursor})
			case wire.EventError:
				var eb wire.ErrorBody
				_ = json.Unmarshal(ev.data, &eb)
				ce := &ClientError{Status: statusOfCode(eb.Error.Code), Code: eb.Error.Code, Message: eb.Error.Message, Method: "GET", URL: s.name}
				ce.Kind = kindOf(ce.Status, ce.Code)
				return delivered, false, ce
			default:
				continue
			}
		}
		for _, e := range out {
			if err := sub.deliver(ctx, e); err != nil {
				return delivered, false, err
			}
			delivered = true
			sub.mu.Lock()
			if e.Next != "" {
				sub.pos = e.Next
			}
			if e.Cursor != "" {
				sub.cursor = e.Cursor
			}
			sub.mu.Unlock()
			if e.Closed {
				return true, true, nil
			}
		}
	}
}

// offsetString is n in decimal: id itself when it is that (the node gives
// a control event the id of its next offset), so that no string is
// allocated for it.
func offsetString(n int64, id string) string {
	var b [20]byte
	if string(strconv.AppendInt(b[:0], n, 10)) == id {
		return id
	}
	return strconv.FormatInt(n, 10)
}

// deliver hands e to the consumer: to OnEvent on this goroutine when it
// is set, else on the Events channel.
func (sub *Subscription) deliver(ctx context.Context, e Event) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if sub.opts.OnEvent != nil {
		sub.opts.OnEvent(e)
		return nil
	}
	select {
	case sub.events <- e:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// statusOfCode maps the error code of an SSE error event (which has no
// status of its own) to the status the same error has on a plain response.
func statusOfCode(code string) int {
	switch code {
	case wire.CodeNotFound:
		return http.StatusNotFound
	case wire.CodeUnavailable, wire.CodeRequestTimeout, wire.CodeServiceUnavailable:
		return http.StatusServiceUnavailable
	case wire.CodeOffsetTrimmed:
		return http.StatusGone
	case wire.CodeInternal:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

func stripNewlines(b []byte) []byte {
	if !bytes.ContainsAny(b, "\r\n") {
		return b
	}
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c != '\r' && c != '\n' {
			out = append(out, c)
		}
	}
	return out
}

// sseReader parses a text/event-stream (the WHATWG server-sent events
// format): fields per line, events end at a blank line, lines end with LF,
// CRLF or CR, comment lines start with a colon.
type sseReader struct {
	r      *bufio.Reader
	lines  [][]byte // lines split off the last read that are not consumed yet
	lastID string   // the id of the last event that had one
}

type sseEvent struct {
	event string
	id    string
	data  []byte
}

// maxSSELine bounds one line (a data event of a large page is one line).
const maxSSELine = 64 << 20

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// line returns the next line without its terminator. The line may be
// the reader's buffer: it is valid until the next call.
func (p *sseReader) line() ([]byte, error) {
	if len(p.lines) > 0 {
		l := p.lines[0]
		p.lines = p.lines[1:]
		return l, nil
	}
	var buf []byte
	for {
		chunk, err := p.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			buf = append(buf, chunk...)
			if len(buf) > maxSSELine {
				return nil, fmt.Errorf("picomq: server-sent event line above %d bytes", maxSSELine)
			}
			continue
		}
		if err != nil {
			if err == io.EOF && len(buf)+len(chunk) > 0 {
				// An unterminated last line is dropped, as the format
				// says: the event it belongs to never completed.
				return nil, io.EOF
			}
			return nil, err
		}
		if buf != nil {
			chunk = append(buf, chunk...)
		}
		// Otherwise chunk is the bufio buffer's, valid until the next
		// read: next copies what it keeps of a line (a copy of every line
		// was three allocations per event for nothing).
		chunk = chunk[:len(chunk)-1] // the LF
		if bytes.IndexByte(chunk, '\r') < 0 {
			return chunk, nil
		}
		// CR alone also ends a line; CRLF leaves an empty tail. The
		// lines after the first are returned by later calls, after
		// later reads: they are copies.
		parts := bytes.Split(bytes.Clone(chunk), []byte{'\r'})
		if len(parts[len(parts)-1]) == 0 {
			parts = parts[:len(parts)-1]
		}
		p.lines = parts[1:]
		return parts[0], nil
	}
}

// eventName returns an event's name as a string, without allocating for
// the names a server sends.
func eventName(b []byte) string {
	switch string(b) {
	case wire.EventData:
		return wire.EventData
	case wire.EventControl:
		return wire.EventControl
	case wire.EventError:
		return wire.EventError
	}
	return string(b)
}

// next returns the next complete event. Its fields are its own: nothing
// in it aliases the reader's buffer.
func (p *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data []byte
	seen := false
	for {
		l, err := p.line()
		if err != nil {
			return sseEvent{}, err
		}
		if len(l) == 0 {
			if !seen {
				continue
			}
			if data != nil {
				ev.data = data
			}
			if ev.event == "" {
				ev.event = "message"
			}
			return ev, nil
		}
		if l[0] == ':' {
			continue // a comment (keep-alive)
		}
		field, value, found := bytes.Cut(l, []byte{':'})
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(field) {
		case "event":
			ev.event, seen = eventName(value), true
		case "data":
			if data != nil {
				data = append(data, '\n')
			} else {
				data = []byte{}
			}
			data = append(data, value...)
			seen = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				// The node gives a data event and the control event
				// after it the same id: one string for both.
				if string(value) != p.lastID {
					p.lastID = string(value)
				}
				ev.id, seen = p.lastID, true
			}
		}
	}
}
