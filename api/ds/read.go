package ds

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// Read modes (the live query parameter).
const (
	liveNone     = ""
	liveLongPoll = "long-poll"
	liveSSE      = "sse"
)

// readQuery is a parsed GET query.
type readQuery struct {
	offset    offsetSpec
	hasOffset bool
	live      string
	cursor    string
}

// parseReadQuery validates the query. Unknown parameters are ignored (the
// protocol's extensions rely on it), but offset must be well formed, given
// at most once, and present for live reads.
func parseReadQuery(raw string) (readQuery, error) {
	var q readQuery
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, fmt.Errorf("malformed query string: %v", err)
	}
	if vs, ok := vals["offset"]; ok {
		if len(vs) != 1 {
			return q, errors.New("offset given more than once")
		}
		if vs[0] == "" {
			return q, errors.New("offset is empty")
		}
		if q.offset, err = parseOffset(vs[0]); err != nil {
			return q, err
		}
		q.hasOffset = true
	}
	if vs, ok := vals["live"]; ok {
		if len(vs) != 1 {
			return q, errors.New("live given more than once")
		}
		switch vs[0] {
		case liveLongPoll, liveSSE:
			q.live = vs[0]
		default:
			return q, fmt.Errorf("live=%q: want long-poll or sse", truncateForMessage(vs[0]))
		}
		if !q.hasOffset {
			return q, fmt.Errorf("live=%s needs an offset (-1 for the start, now for the tail)", q.live)
		}
	}
	if vs := vals["cursor"]; len(vs) > 0 {
		q.cursor = vs[0]
	}
	return q, nil
}

// cacheControl is what shared caches may do with a catch-up or long-poll
// 200: the bytes at an offset range never change, so they may be cached
// briefly and served stale while revalidating. Requests with credentials
// get private caching only.
func cacheControl(r *http.Request) string {
	if r.Header.Get("Authorization") != "" {
		return "private, max-age=60, stale-while-revalidate=300"
	}
	return "public, max-age=60, stale-while-revalidate=300"
}

// etag names the response for the range [from, next) of one stream
// incarnation, and whether the response carried the closed signal. The
// records of a range never change, so this identifies the body exactly.
func etag(id uint64, from, next int64, closed bool) string {
	var b strings.Builder
	b.WriteByte('"')
	b.WriteString(strconv.FormatUint(id, 36))
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(from, 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(next, 10))
	if closed {
		b.WriteString(":c")
	}
	b.WriteByte('"')
	return b.String()
}

// etagMatches implements If-None-Match: a list of (possibly weak) tags, or *.
func etagMatches(header, tag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == tag {
			return true
		}
	}
	return false
}

func (h *Handler) readOptions(offset int64) stream.ReadOptions {
	return stream.ReadOptions{Offset: offset, MaxRecords: h.cfg.ReadRecords, MaxBytes: h.cfg.ReadBytes}
}

// read is GET: catch-up, long-poll or SSE.
func (h *Handler) read(w http.ResponseWriter, r *http.Request, name string) {
	q, err := parseReadQuery(r.URL.RawQuery)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, wire.CodeInvalidOffset, err.Error())
		return
	}
	ctx := r.Context()
	from := q.offset.record
	if q.offset.now {
		// A read at the tail: it touches the stream (resets a sliding
		// TTL) like any read, but returns no data.
		info, err := h.svc.Touch(ctx, name)
		if err != nil {
			h.serviceError(w, r, err)
			return
		}
		from = info.NextOffset
		if q.live == liveNone {
			h.writeNow(w, info)
			return
		}
	}
	switch q.live {
	case liveSSE:
		h.sse(w, r, name, from, q.cursor)
	case liveLongPoll:
		h.longPoll(w, r, name, from, q.cursor)
	default:
		h.catchUp(w, r, name, from)
	}
}

// writeNow answers a catch-up read at offset=now: no data, the tail, and no
// ETag or caching (the tail moves).
func (h *Handler) writeNow(w http.ResponseWriter, info stream.Info) {
	hd := w.Header()
	hd.Set("Content-Type", info.ContentType)
	hd.Set(wire.DSHeaderNextOffset, formatOffset(info.NextOffset))
	hd.Set(wire.DSHeaderUpToDate, "true")
	hd.Set("Cache-Control", "no-store")
	if info.Closed {
		hd.Set(wire.DSHeaderClosed, "true")
	}
	body := ""
	if wire.IsDSJSONMode(info.ContentType) {
		body = "[]"
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(body))
}

func (h *Handler) catchUp(w http.ResponseWriter, r *http.Request, name string, from int64) {
	if res, ok := h.readPage(w, r, name, from); ok {
		h.writeRecords(w, r, from, res, "")
	}
}

// readPage reads a page of name from offset from for request r; a failure
// it answers itself (ok false).
func (h *Handler) readPage(w http.ResponseWriter, r *http.Request, name string, from int64) (res stream.ReadResult, ok bool) {
	res, err := h.svc.Read(r.Context(), name, h.readOptions(from))
	if err != nil {
		h.serviceError(w, r, err)
		return res, false
	}
	return res, true
}

// writeRecords writes a 200 with the records of res. cursor is set for live
// (long-poll) responses.
func (h *Handler) writeRecords(w http.ResponseWriter, r *http.Request, from int64, res stream.ReadResult, cursor string) {
	info := res.Stream
	hd := w.Header()
	hd.Set("Content-Type", info.ContentType)
	hd.Set(wire.DSHeaderNextOffset, formatOffset(res.NextOffset))
	if res.UpToDate {
		hd.Set(wire.DSHeaderUpToDate, "true")
	}
	if res.Closed {
		hd.Set(wire.DSHeaderClosed, "true")
	}
	if cursor != "" {
		hd.Set(wire.DSHeaderCursor, cursor)
	}
	tag := etag(info.ID, from, res.NextOffset, res.Closed)
	hd.Set("ETag", tag)
	hd.Set("Cache-Control", cacheControl(r))
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatches(inm, tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	var body []byte
	if wire.IsDSJSONMode(info.ContentType) {
		body = appendJSONArray(make([]byte, 0, 2+estimate(res)), res.Records)
	} else {
		body = appendConcat(make([]byte, 0, estimate(res)), res.Records)
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func estimate(res stream.ReadResult) int {
	n := 0
	for _, r := range res.Records {
		n += len(r.Value) + 1
	}
	return n
}

// longPoll answers at once if there is data (or the stream is closed at
// the reader's offset), else waits up to the long-poll timeout for data.
func (h *Handler) longPoll(w http.ResponseWriter, r *http.Request, name string, from int64, clientCursor string) {
	ctx := r.Context()
	res, ok := h.readPage(w, r, name, from)
	if !ok {
		return
	}
	if len(res.Records) == 0 && !res.Closed {
		wctx, cancel := context.WithTimeout(ctx, h.cfg.LongPollTimeout)
		_, err := h.svc.WaitFor(wctx, name, from)
		cancel()
		if err != nil {
			h.serviceError(w, r, err)
			return
		}
		if ctx.Err() != nil {
			return // the client went away
		}
		if res, ok = h.readPage(w, r, name, from); !ok {
			return
		}
	}
	if len(res.Records) > 0 {
		h.writeRecords(w, r, from, res, responseCursor(h.cfg.Now(), clientCursor))
		return
	}
	// Nothing new: 204 at the reader's offset, the tail.
	hd := w.Header()
	hd.Set(wire.DSHeaderNextOffset, formatOffset(res.NextOffset))
	hd.Set(wire.DSHeaderUpToDate, "true")
	hd.Set("Cache-Control", "no-store")
	if res.Closed {
		hd.Set(wire.DSHeaderClosed, "true")
	} else {
		hd.Set(wire.DSHeaderCursor, responseCursor(h.cfg.Now(), clientCursor))
	}
	w.WriteHeader(http.StatusNoContent)
}

// sse streams data and control events from offset from: catch-up first, a
// data event and a control event per page, then live as data arrives, a
// keep-alive control event at every long-poll timeout, and a final control
// event with streamClosed when the stream is closed and fully sent. The
// connection ends after the SSE timeout; the client resumes from the last
// streamNextOffset.
func (h *Handler) sse(w http.ResponseWriter, r *http.Request, name string, from int64, clientCursor string) {
	ctx := r.Context()
	// Read first, so a missing stream is a plain 404, not an event stream.
	res, ok := h.readPage(w, r, name, from)
	if !ok {
		return
	}
	info := res.Stream
	text, jsonMode := isText(info.ContentType), wire.IsDSJSONMode(info.ContentType)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no") // tell proxies not to buffer events
	if !text {
		hd.Set(wire.DSHeaderSSEDataEncoding, "base64")
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	deadline := time.Now().Add(h.cfg.SSETimeout)
	var buf []byte
	offset := from
	for {
		if len(res.Records) > 0 {
			buf = buf[:0]
			var payload []byte
			if jsonMode {
				payload = appendJSONArray(nil, res.Records)
			} else {
				payload = appendConcat(nil, res.Records)
			}
			if text {
				buf = appendSSEData(buf, payload)
			} else {
				buf = appendSSEBase64(buf, payload)
			}
			offset = res.NextOffset
			buf = appendSSEControl(buf, h.control(offset, res, clientCursor))
			if !h.flushEvents(w, rc, buf) {
				return
			}
			if res.Closed {
				return
			}
			if !res.UpToDate {
				var err error
				if res, err = h.svc.Read(ctx, name, h.readOptions(offset)); err != nil {
					return // the stream went away mid-stream: end it
				}
				continue
			}
		} else {
			// Caught up: say so (or that the stream is closed and over).
			buf = appendSSEControl(buf[:0], h.control(offset, res, clientCursor))
			if !h.flushEvents(w, rc, buf) || res.Closed {
				return
			}
		}
		// Wait for data, a close, the keep-alive tick or the end of the
		// connection's life.
		wait := min(h.cfg.LongPollTimeout, time.Until(deadline))
		if wait <= 0 {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		_, err := h.svc.WaitFor(wctx, name, offset)
		cancel()
		if err != nil || ctx.Err() != nil {
			return
		}
		if res, err = h.svc.Read(ctx, name, h.readOptions(offset)); err != nil {
			return
		}
		if len(res.Records) == 0 && !res.Closed && time.Until(deadline) <= 0 {
			return
		}
	}
}

// control builds the control event that follows a page (or a wait).
func (h *Handler) control(offset int64, res stream.ReadResult, clientCursor string) wire.DSControlEvent {
	c := wire.DSControlEvent{StreamNextOffset: formatOffset(offset)}
	if res.Closed {
		// The final event: no cursor, the reader must not reconnect.
		c.StreamClosed = true
		c.UpToDate = true
		return c
	}
	c.StreamCursor = responseCursor(h.cfg.Now(), clientCursor)
	c.UpToDate = res.UpToDate
	return c
}

func (h *Handler) flushEvents(w http.ResponseWriter, rc *http.ResponseController, buf []byte) bool {
	if _, err := w.Write(buf); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// setStreamHeaders sets what a create and a HEAD both answer: the
// stream's content type, its tail offset and whether it is closed.
func setStreamHeaders(hd http.Header, info stream.Info) {
	hd.Set("Content-Type", info.ContentType)
	hd.Set(wire.DSHeaderNextOffset, formatOffset(info.NextOffset))
	if info.Closed {
		hd.Set(wire.DSHeaderClosed, "true")
	}
}

// head is HEAD: the stream's metadata. It does not count as a read for a
// sliding TTL.
func (h *Handler) head(w http.ResponseWriter, r *http.Request, name string) {
	info, err := h.svc.Head(r.Context(), name)
	if err != nil {
		h.serviceError(w, r, err)
		return
	}
	hd := w.Header()
	setStreamHeaders(hd, info)
	hd.Set("Cache-Control", "no-store")
	if info.TTL > 0 {
		hd.Set(wire.DSHeaderTTL, strconv.FormatInt(int64(info.TTL/time.Second), 10))
	}
	if !info.ExpiresAt.IsZero() {
		hd.Set(wire.DSHeaderExpiresAt, info.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	w.WriteHeader(http.StatusOK)
}
