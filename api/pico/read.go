package pico

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

// readParams are the parsed query parameters of a read.
type readParams struct {
	offset    int64
	hasOffset bool
	limit     int
	maxBytes  int
	base64    bool
	live      string
	cursor    string
	// batches: the client accepts stored batches (format=batches or
	// Accept), so the page is read as batches, not decoded records.
	batches bool
}

// parseReadParams validates every read parameter before anything is read,
// so a typo is a 400 rather than a silently different read.
func parseReadParams(q url.Values) (readParams, int, string, error) {
	var p readParams
	var err error
	if err := knownParams(q, readParamNames); err != nil {
		return p, http.StatusBadRequest, wire.CodeBadRequest, err
	}
	if p.offset, p.hasOffset, err = queryNonNegative(q, wire.QueryOffset); err != nil {
		return p, http.StatusBadRequest, wire.CodeInvalidOffset, err
	}
	limit, hasLimit, err := queryNonNegative(q, wire.QueryLimit)
	if err != nil {
		return p, http.StatusBadRequest, wire.CodeBadRequest, err
	}
	if hasLimit && limit == 0 {
		// 0 would read as "no limit" inside; say so instead of guessing.
		return p, http.StatusBadRequest, wire.CodeBadRequest, errors.New("limit=0: want at least 1 (omit limit for the default)")
	}
	maxBytes, _, err := queryNonNegative(q, wire.QueryMaxBytes)
	if err != nil {
		return p, http.StatusBadRequest, wire.CodeBadRequest, err
	}
	// The service caps both; min() here only keeps the int conversion safe.
	p.limit, p.maxBytes = int(min(limit, 1<<30)), int(min(maxBytes, 1<<30))
	switch enc := q.Get(wire.QueryEncoding); enc {
	case "", wire.EncodingUTF8:
	case wire.EncodingBase64:
		p.base64 = true
	default:
		return p, http.StatusBadRequest, wire.CodeBadRequest, fmt.Errorf("encoding=%q: want utf8 or base64", enc)
	}
	switch p.live = q.Get(wire.QueryLive); p.live {
	case "", wire.LiveLongPoll, wire.LiveSSE:
	default:
		return p, http.StatusBadRequest, wire.CodeBadRequest, fmt.Errorf("live=%q: want long-poll or sse", p.live)
	}
	p.cursor = q.Get(wire.QueryCursor)
	return p, 0, "", nil
}

// readParamNames are the query parameters a stream GET takes
// (docs/api.md#query-parameters).
var readParamNames = []string{wire.QueryOffset, wire.QueryLimit, wire.QueryMaxBytes, wire.QueryFormat,
	wire.QueryEncoding, wire.QueryLive, wire.QueryCursor}

// knownParams refuses a query parameter the endpoint does not take, naming
// it: a misspelt or invented parameter (timeout=, limt=) silently ignored
// would give a different read than the client meant.
func knownParams(q url.Values, names []string) error {
	for k := range q {
		if !slices.Contains(names, k) {
			return fmt.Errorf("unknown query parameter %q (this endpoint takes %s)", k, strings.Join(names, ", "))
		}
	}
	return nil
}

func queryNonNegative(q url.Values, key string) (int64, bool, error) {
	vs, ok := q[key]
	if !ok || len(vs) == 0 {
		return 0, false, nil
	}
	n, err := httpx.ParseUint(vs[0])
	if err != nil || n > 1<<62 {
		return 0, true, fmt.Errorf("%s=%q is not a non-negative integer", key, vs[0])
	}
	return int64(n), true, nil
}

// nextCursor returns the Pico-Cursor for a response. Cursors are time
// buckets, so that every client polling one stream in one interval builds
// the same next URL (a CDN collapses them into one upstream request), and
// they always move past the cursor the client sent, so a live read can never
// be answered from a cached response of the same URL.
func (h *Handler) nextCursor(client string) string {
	return strconv.FormatInt(h.nextCursorValue(client), 10)
}

// nextCursorValue is nextCursor as a number: an SSE event renders it
// straight into its buffer, without a string per event.
func (h *Handler) nextCursorValue(client string) int64 {
	cur := h.cfg.Now().UnixNano() / int64(h.cfg.CursorInterval)
	if client != "" {
		if c, err := strconv.ParseInt(client, 10, 64); err == nil && c >= cur && c < 1<<62 {
			cur = c + 1
		}
	}
	return cur
}

// readBufPool recycles response buffers of reads.
var readBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func (h *Handler) read(w http.ResponseWriter, r *http.Request, name string) {
	p, status, code, err := parseReadParams(r.URL.Query())
	if err != nil {
		httpx.WriteError(w, status, code, err.Error())
		return
	}
	if p.live == wire.LiveSSE {
		h.serveSSE(w, r, name, p)
		return
	}
	// One service call finds the stream and reads the page; its content
	// type then picks the response format. Stored batches are asked for
	// whenever the client takes them; a page read that way for a client
	// that turns out to prefer another format is decoded (writePage).
	p.batches = acceptsBatches(r)
	res, err := h.readPage(r.Context(), name, &p)
	if err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	// A page of stored batches may lie in the block cache's memory: its
	// loan ends once the response is written (Write has returned: the
	// connection's buffer or the socket has the bytes) and nothing of
	// the page is used any more. A deferred func, so it sees the page
	// a long-poll re-read put in res.
	defer func() { res.Release() }()
	format, ok := h.format(w, r, res.Stream.ContentType)
	if !ok {
		return
	}
	if p.live == wire.LiveLongPoll && pageEmpty(res) && !res.Closed {
		ctx, cancel := context.WithTimeout(r.Context(), h.cfg.LongPollTimeout)
		ok, err := h.svc.WaitFor(ctx, name, p.offset)
		cancel()
		if err != nil {
			h.writeServiceError(w, r, err)
			return
		}
		if r.Context().Err() != nil {
			return // the client left; nobody reads the answer
		}
		if ok {
			res.Release() // an empty page; replaced by the next read
			res, err = h.readPage(r.Context(), name, &p)
			if err != nil {
				h.writeServiceError(w, r, err)
				return
			}
		}
		if pageEmpty(res) {
			// Timed out (or the stream was closed at this offset): no
			// content, but every position header, so the client polls on.
			hd := w.Header()
			h.setReadHeaders(hd, res, p)
			hd.Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	h.writePage(w, res, p, format, res.Stream.ContentType)
}

// serveSSE starts a live=sse read, which describes the stream first (its
// pages are cached per stream incarnation).
func (h *Handler) serveSSE(w http.ResponseWriter, r *http.Request, name string, p readParams) {
	info, err := h.svc.Head(r.Context(), name)
	if err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	format, ok := h.format(w, r, info.ContentType)
	if !ok {
		return
	}
	if format != formatJSON {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, "live=sse sends JSON records; format="+format.String()+" is not available")
		return
	}
	h.sse(w, r, name, p, info)
}

// format negotiates the response format of a read (format query, Accept)
// for a stream of content type streamCT; ok=false means it answered 400/406.
func (h *Handler) format(w http.ResponseWriter, r *http.Request, streamCT string) (readFormat, bool) {
	accept := r.Header.Get("Accept")
	if r.URL.Query().Get(wire.QueryLive) == wire.LiveSSE && strings.Contains(accept, "text/event-stream") {
		// EventSource always sends this Accept; SSE carries JSON records.
		accept = ""
	}
	format, err := chooseFormat(r.URL.Query().Get(wire.QueryFormat), accept, streamCT)
	switch {
	case errors.Is(err, errNotAcceptable):
		httpx.WriteError(w, http.StatusNotAcceptable, wire.CodeNotAcceptable, err.Error())
	case err != nil:
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
	}
	return format, err == nil
}

// readPage reads one page at p.offset. A client that gave no offset reads
// from the stream's start; if a trim raced past that start in between, it
// follows the new start once rather than failing a read it never pinned.
// Only a read that named its offset may be served from object storage by a
// node that does not own the stream; any other is redirected to the owner.
func (h *Handler) readPage(ctx context.Context, name string, p *readParams) (stream.ReadResult, error) {
	opts := stream.ReadOptions{Offset: p.offset, MaxRecords: p.limit, MaxBytes: p.maxBytes,
		FromStart: !p.hasOffset, LocalOnly: p.live != "" || !p.hasOffset, Batches: p.batches}
	res, err := h.svc.Read(ctx, name, opts)
	var te *stream.TrimmedError
	if !p.hasOffset && errors.As(err, &te) {
		res, err = h.svc.Read(ctx, name, opts)
	}
	if err == nil && !p.hasOffset && pageEmpty(res) {
		p.offset = res.NextOffset // where a long-poll waits
	}
	return res, err
}

func (h *Handler) setReadHeaders(hd http.Header, res stream.ReadResult, p readParams) {
	hd.Set(wire.HeaderNextOffset, strconv.FormatInt(res.NextOffset, 10))
	hd.Set(wire.HeaderStartOffset, strconv.FormatInt(res.StartOffset, 10))
	hd.Set(wire.HeaderUpToDate, strconv.FormatBool(res.UpToDate))
	hd.Set(wire.HeaderCursor, h.nextCursor(p.cursor))
	hd.Set(wire.HeaderRecordCount, strconv.Itoa(len(res.Records)+res.BatchRecords))
	if res.Closed {
		hd.Set(wire.HeaderClosed, "true")
	}
}

// acceptsBatches reports whether a read may be answered with stored
// batches: format=batches, or no format and an Accept naming their media
// type (at any q; chooseFormat decides, writePage decodes if it must).
func acceptsBatches(r *http.Request) bool {
	switch r.URL.Query().Get(wire.QueryFormat) {
	case wire.FormatBatches:
		return true
	case "":
		return strings.Contains(strings.ToLower(r.Header.Get("Accept")), wire.MediaRecordBatches)
	}
	return false
}

// pageEmpty reports whether a page holds no records in either form.
func pageEmpty(res stream.ReadResult) bool { return len(res.Records) == 0 && len(res.Batches) == 0 }

// batchRecords decodes the records of a page read as batches (res.Batches)
// from offset from on, for a response format that needs them. A batch in
// two pieces (it straddled two of the cache's GETs) is joined to decode.
func batchRecords(res stream.ReadResult, from int64) ([]record.Record, error) {
	recs := make([]record.Record, 0, res.BatchRecords)
	err := record.WalkPieces(res.Batches, func(batch [][]byte, h record.BatchHeader, _ int) error {
		b := batch[0]
		if len(batch) > 1 {
			b = record.Gather(make([]byte, 0, h.Size()), batch, 0, h.Size())
		}
		n := len(recs)
		var err error
		if recs, err = record.DecodeRecords(b, recs); err != nil {
			return err
		}
		if n == 0 {
			i := 0
			for i < len(recs) && recs[i].Offset < from {
				i++
			}
			recs = recs[i:]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

func (h *Handler) writePage(w http.ResponseWriter, res stream.ReadResult, p readParams, format readFormat, streamCT string) {
	if format == formatBatches && len(res.Records) == 0 {
		writeBatches(w, h, res, p)
		return
	}
	if format == formatBatches {
		format = formatBinary // a page that could not be read as stored batches
	}
	if len(res.Batches) > 0 {
		recs, err := batchRecords(res, res.From)
		if err != nil {
			httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error())
			return
		}
		res.Records, res.Batches, res.BatchRecords = recs, nil, 0
	}
	bp := readBufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	hd := w.Header()
	switch format {
	case formatBinary, formatRaw:
		// Sized exactly in advance, so written in pieces: a catch-up page
		// of several MiB never exists twice (records, rendered copy), and
		// a thousand concurrent readers hold a piece each, not a page.
		size := binarySize(res.Records)
		if format == formatRaw {
			size = rawSize(res.Records)
			hd.Set("Content-Type", rawContentType(streamCT))
		} else {
			hd.Set("Content-Type", wire.MediaBatch)
		}
		h.setReadHeaders(hd, res, p)
		hd.Set("Cache-Control", "no-store")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Content-Length", strconv.Itoa(size))
		w.WriteHeader(http.StatusOK)
		buf = writeRecordsInPieces(w, buf, res.Records, format == formatRaw)
		if cap(buf) <= maxPooledBody {
			*bp = buf[:0]
			readBufPool.Put(bp)
		}
		return
	default:
		hd.Set("Content-Type", wire.MediaJSON)
		buf = appendRecordsJSON(growTo(buf, 256+estimateSize(res.Records)), res.Records, p.base64, wire.IsJSON(streamCT))
	}
	h.setReadHeaders(hd, res, p)
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Length", strconv.Itoa(len(buf)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
	if cap(buf) <= maxPooledBody {
		*bp = buf[:0]
		readBufPool.Put(bp)
	}
}

// writeBatches writes a page of stored batches as they are: each batch is
// handed to the connection straight from the memory it was read into (the
// block cache's; one that straddles two GETs in its two pieces), with no
// decode, render or copy of ours.
func writeBatches(w http.ResponseWriter, h *Handler, res stream.ReadResult, p readParams) {
	size := 0
	for _, b := range res.Batches {
		size += len(b)
	}
	hd := w.Header()
	hd.Set("Content-Type", wire.MediaRecordBatches)
	h.setReadHeaders(hd, res, p)
	hd.Set(wire.HeaderPageOffset, strconv.FormatInt(res.From, 10))
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Length", strconv.Itoa(size))
	w.WriteHeader(http.StatusOK)
	for _, b := range res.Batches {
		if _, err := w.Write(b); err != nil {
			return // the client is gone
		}
	}
}

// writePiece is the size at which writeRecordsInPieces hands what it has
// rendered to the connection.
const writePiece = 64 << 10

// writeRecordsInPieces renders recs in the binary frame (or raw, values
// only) into buf, writing it out whenever it holds writePiece bytes; it
// returns buf for reuse. A write error ends it: the client is gone, and
// the handler has nothing more to tell it.
func writeRecordsInPieces(w http.ResponseWriter, buf []byte, recs []record.Record, raw bool) []byte {
	if !raw {
		buf = codec.AppendFrameHeader(buf, len(recs))
	}
	for i := range recs {
		if raw {
			buf = append(buf, recs[i].Value...)
		} else {
			buf = appendRecordsBinaryOne(buf, &recs[i])
		}
		if len(buf) >= writePiece {
			if _, err := w.Write(buf); err != nil {
				return buf[:0]
			}
			buf = buf[:0]
		}
	}
	if len(buf) > 0 {
		_, _ = w.Write(buf)
	}
	return buf[:0]
}

// rawContentType labels a raw read of a stream of content type streamCT. The
// values of a JSON stream, concatenated, are not one JSON document ({"a":1}{"b":2}),
// so that read is labelled as bytes; any other stream's concatenated values
// are still its type (text lines, bytes).
func rawContentType(streamCT string) string {
	if wire.IsJSON(streamCT) {
		return wire.MediaOctetStream
	}
	return streamCT
}

func growTo(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, 0, n)
	}
	return b
}
