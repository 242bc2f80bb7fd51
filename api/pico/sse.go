package pico

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

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
// Readers woken by one append share one rendered page (nextPage).
func (h *Handler) sse(w http.ResponseWriter, r *http.Request, name string, p readParams, info stream.Info) {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := httpx.ParseUint(id)
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
	pg := h.pages.fromResult(info.ID, wire.IsJSON(info.ContentType), p, res)
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", wire.MediaEventStream)
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	hd.Set(wire.HeaderStartOffset, strconv.FormatInt(res.StartOffset, 10))
	w.WriteHeader(http.StatusOK)

	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.SSETimeout)
	defer cancel()
	ka := keepAlive{parent: ctx, every: h.cfg.SSEKeepAlive}
	defer ka.stop()
	bp := readBufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	defer func() {
		if cap(buf) <= maxPooledBody {
			*bp = buf[:0]
			readBufPool.Put(bp)
		}
	}()
	for {
		buf = appendSSEPage(buf[:0], pg, h.nextCursorValue(p.cursor))
		if _, err := w.Write(buf); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if pg.closed {
			return // a closed stream read to its end: nothing will follow
		}
		p.offset = pg.next
		if pg.upToDate {
			if !h.sseWait(&ka, w, rc, name, p.offset) {
				return
			}
		}
		pg, err = h.nextPage(ctx, name, p)
		if err != nil {
			if ctx.Err() == nil {
				h.sseError(w, rc, err)
			}
			return
		}
	}
}

// appendSSEPage renders pg as its events: a data event when it holds
// records, then its control event.
func appendSSEPage(buf []byte, pg ssePage, cursor int64) []byte {
	var nb [20]byte
	next := strconv.AppendInt(nb[:0], pg.next, 10)
	if pg.count > 0 {
		buf = append(buf, "event: data\nid: "...)
		buf = append(buf, next...)
		buf = append(buf, "\ndata: "...)
		// The JSON encoder escapes every control character, so the
		// records are one line and need no data: continuation lines.
		buf = append(buf, pg.data...)
		buf = append(buf, "\n\n"...)
	}
	buf = append(buf, "event: control\nid: "...)
	buf = append(buf, next...)
	buf = append(buf, "\ndata: "...)
	buf = appendControl(buf, pg, cursor)
	return append(buf, "\n\n"...)
}

// appendControl renders a wire.ControlEvent by hand: it is written once per
// reader per append, so fan-out pays for every allocation here (the
// cursor, a JSON string of digits, is rendered from its number).
func appendControl(dst []byte, pg ssePage, cursor int64) []byte {
	dst = append(dst, `{"nextOffset":`...)
	dst = strconv.AppendInt(dst, pg.next, 10)
	dst = append(dst, `,"upToDate":`...)
	dst = strconv.AppendBool(dst, pg.upToDate)
	dst = append(dst, `,"closed":`...)
	dst = strconv.AppendBool(dst, pg.closed)
	dst = append(dst, `,"cursor":"`...)
	dst = strconv.AppendInt(dst, cursor, 10)
	return append(dst, `"}`...)
}

// keepAlive is the wait deadline of an idle SSE connection. Its context
// is created once per keep-alive interval, not once per wait: on a busy
// stream a reader waits many times per interval, and a timer per wait
// was a measurable share of fan-out CPU.
type keepAlive struct {
	parent context.Context
	every  time.Duration
	ctx    context.Context
	cancel context.CancelFunc
}

// wait returns the context to wait with, renewing it if it expired.
func (k *keepAlive) wait() context.Context {
	if k.ctx == nil || k.ctx.Err() != nil {
		k.stop()
		k.ctx, k.cancel = context.WithTimeout(k.parent, k.every)
	}
	return k.ctx
}

func (k *keepAlive) stop() {
	if k.cancel != nil {
		k.cancel()
		k.ctx, k.cancel = nil, nil
	}
}

// sseWait parks until the stream may have something past offset, writing
// keep-alive comments while idle. It returns false when the connection is
// to end (deadline, client gone, write failure, or an error event sent).
func (h *Handler) sseWait(ka *keepAlive, w http.ResponseWriter, rc *http.ResponseController, name string, offset int64) bool {
	for {
		wctx := ka.wait()
		ok, err := h.svc.WaitFor(wctx, name, offset)
		idle := wctx.Err() != nil
		switch {
		case err != nil:
			h.sseError(w, rc, err)
			return false
		case ok:
			return true
		case ka.parent.Err() != nil:
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

// ssePage is one rendered page of a live read.
type ssePage struct {
	data     []byte // JSON array of the records; shared, never modified
	count    int
	next     int64
	upToDate bool
	closed   bool
}

// nextPage returns the page at p.offset. Live readers of one stream wake
// together and ask for the same page, so rendered pages are shared through
// h.pages: one read and one JSON encoding per append instead of one per
// reader. Freshness comes from a Head (a map lookup), never from the
// cache: up-to-date, closed, trimmed and deleted are always current.
func (h *Handler) nextPage(ctx context.Context, name string, p readParams) (ssePage, error) {
	info, err := h.svc.Head(ctx, name)
	if err != nil {
		return ssePage{}, err
	}
	if p.offset < info.StartOffset {
		return ssePage{}, &stream.TrimmedError{Name: name, Offset: p.offset, StartOffset: info.StartOffset}
	}
	key := pageKey{id: info.ID, offset: p.offset, limit: p.limit, maxBytes: p.maxBytes, base64: p.base64}
	if pg, ok := h.pages.get(key); ok {
		pg.upToDate = pg.next >= info.NextOffset
		pg.closed = pg.upToDate && info.Closed
		return pg, nil
	}
	res, err := h.svc.Read(ctx, name, stream.ReadOptions{Offset: p.offset, MaxRecords: p.limit, MaxBytes: p.maxBytes})
	if err != nil {
		return ssePage{}, err
	}
	return h.pages.fromResult(info.ID, wire.IsJSON(info.ContentType), p, res), nil
}

// pageKey identifies a rendered page: the stream incarnation (ids are
// never reused), the offset and everything that shapes the page.
type pageKey struct {
	id       uint64
	offset   int64
	limit    int
	maxBytes int
	base64   bool
}

// pageCache holds the most recently rendered pages. Records below the high
// watermark never change, so a cached page is never wrong, only possibly
// shorter than what a fresh read would return; the reader then simply reads
// again from the page's end.
type pageCache struct {
	mu    sync.Mutex
	pages map[pageKey]ssePage
	order []pageKey // FIFO of keys for eviction
}

// maxCachedPages bounds the cache: enough for the live tails of many
// streams, small enough that it never matters for memory (pages are at
// most one read's max_bytes, and live pages are tiny).
const maxCachedPages = 256

func (c *pageCache) get(k pageKey) (ssePage, bool) {
	c.mu.Lock()
	pg, ok := c.pages[k]
	c.mu.Unlock()
	return pg, ok
}

// fromResult renders res (a page of stream incarnation id; jsonValues: the
// stream holds JSON) and caches it if it holds records.
func (c *pageCache) fromResult(id uint64, jsonValues bool, p readParams, res stream.ReadResult) ssePage {
	pg := ssePage{count: len(res.Records), next: res.NextOffset, upToDate: res.UpToDate, closed: res.Closed}
	if pg.count == 0 {
		return pg
	}
	pg.data = appendRecordsJSON(make([]byte, 0, 64+estimateSize(res.Records)), res.Records, p.base64, jsonValues)
	k := pageKey{id: id, offset: p.offset, limit: p.limit, maxBytes: p.maxBytes, base64: p.base64}
	c.mu.Lock()
	if c.pages == nil {
		c.pages = make(map[pageKey]ssePage)
	}
	if _, dup := c.pages[k]; !dup {
		if len(c.order) >= maxCachedPages {
			delete(c.pages, c.order[0])
			c.order = c.order[1:]
		}
		c.order = append(c.order, k)
	}
	c.pages[k] = pg
	c.mu.Unlock()
	return pg
}

// sseError reports an error after the 200 was sent, as an error event.
func (h *Handler) sseError(w http.ResponseWriter, rc *http.ResponseController, err error) {
	a, msg := errorTable.Lookup(h.cfg.Logger, err, "live read failed")
	body, _ := json.Marshal(wire.ErrorBody{Error: wire.ErrorDetail{Code: a.Code, Message: msg}})
	buf := make([]byte, 0, len(body)+32)
	buf = append(buf, "event: error\ndata: "...)
	buf = append(buf, body...)
	buf = append(buf, "\n\n"...)
	_, _ = w.Write(buf)
	_ = rc.Flush()
}
