package pico

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// controlEvent is the data of an SSE control event.
type controlEvent struct {
	NextOffset int64  `json:"nextOffset"`
	UpToDate   bool   `json:"upToDate"`
	Closed     bool   `json:"closed"`
	Cursor     string `json:"cursor"`
}

// sse serves live=sse: a text/event-stream of
//
//	event: data      id: <next offset>   data: [JSON records]
//	event: control   id: <next offset>   data: {"nextOffset","upToDate","closed","cursor"}
//	event: error                         data: {"error":{…}}   (then the server ends the stream)
//
// Every event's id is the offset after it, so the browser's automatic
// reconnect (Last-Event-ID) resumes exactly where the stream left off. The
// connection ends after --sse-timeout (clients reconnect), when a closed
// stream has been read to its end, or on an error event. Between appends the
// handler is parked in WaitFor: no polling, one timer per keep-alive tick.
func (h *Handler) sse(w http.ResponseWriter, r *http.Request, name string, p readParams, info stream.Info) {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := parseUint(id)
		if err != nil || n > 1<<62 {
			httpx.WriteError(w, http.StatusBadRequest, wire.CodeInvalidOffset, "Last-Event-ID "+strconv.Quote(id)+" is not an offset")
			return
		}
		p.offset, p.hasOffset = int64(n), true
	}
	if !p.hasOffset {
		p.offset = info.StartOffset
	}
	// The first read happens before the 200 is committed, so a bad offset
	// or a missing stream is an ordinary JSON error response.
	res, err := h.readPage(r.Context(), name, &p)
	if err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", wire.MediaEventStream)
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	hd.Set(wire.HeaderStartOffset, strconv.FormatInt(res.StartOffset, 10))
	w.WriteHeader(http.StatusOK)

	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SSETimeout)
	defer cancel()
	bp := readBufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	defer func() {
		if cap(buf) <= maxPooledBody {
			*bp = buf[:0]
			readBufPool.Put(bp)
		}
	}()
	for {
		buf = buf[:0]
		next := strconv.AppendInt(nil, res.NextOffset, 10)
		if len(res.Records) > 0 {
			buf = append(buf, "event: data\nid: "...)
			buf = append(buf, next...)
			buf = append(buf, "\ndata: "...)
			// The JSON encoder escapes every control character, so the
			// records are one line and need no data: continuation lines.
			buf = appendRecordsJSON(buf, res.Records, p.base64)
			buf = append(buf, "\n\n"...)
		}
		ctl, _ := json.Marshal(controlEvent{NextOffset: res.NextOffset, UpToDate: res.UpToDate, Closed: res.Closed, Cursor: h.nextCursor(p.cursor)})
		buf = append(buf, "event: control\nid: "...)
		buf = append(buf, next...)
		buf = append(buf, "\ndata: "...)
		buf = append(buf, ctl...)
		buf = append(buf, "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if res.Closed {
			return // a closed stream read to its end: nothing will follow
		}
		p.offset = res.NextOffset
		if res.UpToDate {
			if !h.sseWait(ctx, w, rc, name, p.offset) {
				return
			}
		}
		res, err = h.svc.Read(ctx, name, stream.ReadOptions{Offset: p.offset, MaxRecords: p.limit, MaxBytes: p.maxBytes})
		if err != nil {
			if ctx.Err() == nil {
				h.sseError(w, rc, err)
			}
			return
		}
	}
}

// sseWait parks until the stream may have something past offset, writing
// keep-alive comments while idle. It returns false when the connection is
// to end (deadline, client gone, write failure, or an error event sent).
func (h *Handler) sseWait(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, name string, offset int64) bool {
	for {
		wctx, cancel := context.WithTimeout(ctx, h.cfg.SSEKeepAlive)
		ok, err := h.svc.WaitFor(wctx, name, offset)
		idle := wctx.Err() != nil
		cancel()
		switch {
		case err != nil:
			h.sseError(w, rc, err)
			return false
		case ok:
			return true
		case ctx.Err() != nil:
			return false
		case !idle:
			// WaitFor returned without data and without timing out: the
			// stream was closed at offset. Read once more to report it.
			return true
		}
		if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
			return false
		}
		if rc.Flush() != nil {
			return false
		}
	}
}

// sseError reports an error after the 200 was sent, as an error event.
func (h *Handler) sseError(w http.ResponseWriter, rc *http.ResponseController, err error) {
	_, code, ok := classify(err)
	msg := err.Error()
	if !ok {
		h.cfg.Logger.Error("live read failed", "err", err)
		msg = "internal error"
	}
	body, _ := json.Marshal(wire.ErrorBody{Error: wire.ErrorDetail{Code: code, Message: msg}})
	buf := make([]byte, 0, len(body)+32)
	buf = append(buf, "event: error\ndata: "...)
	buf = append(buf, body...)
	buf = append(buf, "\n\n"...)
	_, _ = w.Write(buf)
	_ = rc.Flush()
}
