package ds

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// maxSafeInteger is the largest producer epoch or sequence accepted: the
// protocol bounds them to 2^53-1 so JavaScript clients can hold them.
const maxSafeInteger = 1<<53 - 1

// maxTTLSeconds keeps a TTL representable as a time.Duration.
const maxTTLSeconds = int64(time.Duration(1<<63-1) / time.Second)

// headerValue returns a header's first value and whether it was sent at
// all: several protocol rules depend on presence, even of an empty value.
func headerValue(r *http.Request, name string) (string, bool) {
	return canonicalHeaderValue(r, textproto.CanonicalMIMEHeaderKey(name))
}

// canonicalHeaderValue is headerValue for a name in canonical form (the
// append path's, TestHeaderNamesCanonical), looked up as it is.
func canonicalHeaderValue(r *http.Request, name string) (string, bool) {
	v, ok := r.Header[name]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// closedRequested is the Stream-Closed request header: only "true" (any
// case) counts; any other value is treated as absent, as the protocol says.
func closedRequested(r *http.Request) bool {
	v, _ := canonicalHeaderValue(r, wire.DSHeaderClosed)
	return strings.EqualFold(strings.TrimSpace(v), "true")
}

// isDecimal reports whether s is a canonical non-negative decimal: digits
// only, no sign, no leading zeros (except "0" itself).
func isDecimal(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// readBody reads the request body up to the append limit into dst[:0]
// (nil: a new buffer). ok=false means an error response was written.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, dst []byte) ([]byte, bool) {
	if r.ContentLength > h.cfg.MaxAppendBytes {
		h.fail(w, r, http.StatusRequestEntityTooLarge, wire.CodeTooLarge,
			fmt.Sprintf("body of %d bytes exceeds the limit of %d", r.ContentLength, h.cfg.MaxAppendBytes))
		return nil, false
	}
	body, err := httpx.ReadBody(w, r, dst, h.cfg.MaxAppendBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.fail(w, r, http.StatusRequestEntityTooLarge, wire.CodeTooLarge,
				fmt.Sprintf("body exceeds the limit of %d bytes", h.cfg.MaxAppendBytes))
			return nil, false
		}
		h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, "reading body: "+err.Error())
		return nil, false
	}
	return body, true
}

// toRecords turns a body into the records of one append: JSON streams store
// one record per (flattened) value, other streams one record per append.
func toRecords(body []byte, contentType string, create bool) ([]record.Record, error) {
	return appendRecords(nil, body, contentType, create)
}

// appendRecords is toRecords appending to dst[:0].
func appendRecords(dst []record.Record, body []byte, contentType string, create bool) ([]record.Record, error) {
	if len(body) == 0 {
		return nil, nil
	}
	if !wire.IsDSJSONMode(contentType) {
		return append(dst[:0], record.Record{Value: body}), nil
	}
	vals, err := flattenJSON(body, create)
	if err != nil {
		return nil, err
	}
	recs := dst[:0]
	for _, v := range vals {
		recs = append(recs, record.Record{Value: v})
	}
	return recs, nil
}

// appendScratch is an append's memory, pooled: the body and its records
// are copied into the WAL entry by the service, so both are free again
// once AppendBatch returns.
type appendScratch struct {
	body []byte
	recs [1]record.Record
}

var appendPool = sync.Pool{New: func() any { return &appendScratch{body: make([]byte, 0, 4<<10)} }}

// maxPooledBody keeps one huge append from pinning its buffer in the pool.
const maxPooledBody = 1 << 20

// create is PUT: create a stream (or fork), or confirm an identical one.
func (h *Handler) create(w http.ResponseWriter, r *http.Request, name string) {
	opts := stream.CreateOptions{Closed: closedRequested(r)}

	forkedFrom, isFork := headerValue(r, wire.DSHeaderForkedFrom)
	if ct := strings.TrimSpace(r.Header.Get("Content-Type")); ct != "" {
		if _, _, err := mime.ParseMediaType(ct); err != nil {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("Content-Type %q: %v", truncateForMessage(ct), err))
			return
		}
		opts.ContentType = ct
	} else if !isFork {
		opts.ContentType = wire.MediaOctetStream
	}

	ttl, hasTTL := headerValue(r, wire.DSHeaderTTL)
	exp, hasExp := headerValue(r, wire.DSHeaderExpiresAt)
	if hasTTL && hasExp {
		h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, "send Stream-TTL or Stream-Expires-At, not both")
		return
	}
	if hasTTL {
		n, err := strconv.ParseInt(ttl, 10, 64)
		if !isDecimal(ttl) || err != nil || n > maxTTLSeconds {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("Stream-TTL %q: want a whole number of seconds (digits only, no leading zeros)", truncateForMessage(ttl)))
			return
		}
		if n == 0 {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, "Stream-TTL 0 would expire the stream at once; omit the header for a stream that does not expire")
			return
		}
		opts.TTL = time.Duration(n) * time.Second
	}
	if hasExp {
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(exp))
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("Stream-Expires-At %q: want an RFC 3339 timestamp", truncateForMessage(exp)))
			return
		}
		opts.ExpiresAt = t
	}

	forkOffset, hasForkOffset := headerValue(r, wire.DSHeaderForkOffset)
	subOffset, hasSubOffset := headerValue(r, wire.DSHeaderForkSubOffset)
	if !isFork && (hasForkOffset || hasSubOffset) {
		h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, "Stream-Fork-Offset and Stream-Fork-Sub-Offset need Stream-Forked-From")
		return
	}
	if isFork {
		src, err := sourceName(forkedFrom)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, "Stream-Forked-From: "+err.Error())
			return
		}
		fo := &stream.ForkOptions{Source: src, Offset: -1}
		if hasForkOffset {
			o, err := parseOffset(forkOffset)
			if err != nil {
				h.fail(w, r, http.StatusBadRequest, wire.CodeInvalidOffset, "Stream-Fork-Offset: "+err.Error())
				return
			}
			if !o.now {
				fo.Offset = o.record
			}
		}
		if hasSubOffset {
			n, err := strconv.ParseInt(subOffset, 10, 64)
			if !isDecimal(subOffset) || err != nil {
				h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("Stream-Fork-Sub-Offset %q: want a non-negative integer", truncateForMessage(subOffset)))
				return
			}
			fo.SubOffset = n
		}
		opts.Fork = fo
	}

	body, ok := h.readBody(w, r, nil)
	if !ok {
		return
	}
	if len(body) > 0 {
		ct := opts.ContentType
		if ct == "" {
			// A fork that inherits its content type: learn it so the
			// initial body is split the right way.
			info, err := h.svc.Head(r.Context(), opts.Fork.Source)
			if err == nil {
				ct = info.ContentType
			}
		}
		recs, err := toRecords(body, ct, true)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
			return
		}
		opts.Initial = recs
	}

	info, created, err := h.svc.Create(r.Context(), name, opts)
	if err != nil {
		h.serviceError(w, r, err)
		return
	}
	hd := w.Header()
	setStreamHeaders(hd, info)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		hd.Set("Location", h.absoluteURL(r))
	}
	w.WriteHeader(status)
}

// sourceName maps a Stream-Forked-From value (a path under Prefix, or an
// absolute URL of one) to a stream name.
func sourceName(v string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(v))
	if err != nil {
		return "", fmt.Errorf("%q is not a stream path", truncateForMessage(v))
	}
	name, err := streamName(u.Path)
	if err != nil {
		return "", err
	}
	return name, nil
}

// absoluteURL is the request's URL made absolute with the configured base
// URL (or the request's Host).
func (h *Handler) absoluteURL(r *http.Request) string {
	base := h.cfg.BaseURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	return base + r.URL.EscapedPath()
}

// append is POST: append a body, close the stream, or both.
func (h *Handler) append(w http.ResponseWriter, r *http.Request, name string) {
	req := stream.AppendRequest{Close: closedRequested(r)}

	id, hasID := canonicalHeaderValue(r, wire.DSHeaderProducerID)
	epoch, hasEpoch := canonicalHeaderValue(r, wire.DSHeaderProducerEpoch)
	seq, hasSeq := canonicalHeaderValue(r, wire.DSHeaderProducerSeq)
	if hasID || hasEpoch || hasSeq {
		if !(hasID && hasEpoch && hasSeq) {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, "Producer-Id, Producer-Epoch and Producer-Seq go together: send all three or none")
			return
		}
		if id == "" {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, "Producer-Id must not be empty")
			return
		}
		e, errE := parseProducerNumber(epoch)
		s, errS := parseProducerNumber(seq)
		if errE != nil || errS != nil {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("Producer-Epoch %q / Producer-Seq %q: want integers from 0 to 2^53-1", truncateForMessage(epoch), truncateForMessage(seq)))
			return
		}
		req.Producer = &stream.Producer{ID: producerPrefix + id, Epoch: e, Seq: s}
	}
	if ws, ok := canonicalHeaderValue(r, wire.DSHeaderSeq); ok {
		if ws == "" {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, "Stream-Seq must not be empty")
			return
		}
		req.WriterSeq = ws
	}

	sc := appendPool.Get().(*appendScratch)
	defer func() {
		if cap(sc.body) <= maxPooledBody {
			sc.recs[0] = record.Record{}
			appendPool.Put(sc)
		}
	}()
	body, ok := h.readBody(w, r, sc.body[:0])
	sc.body = body[:0]
	if !ok {
		return
	}
	if len(body) == 0 && !req.Close {
		h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, "empty body: an append needs data (or Stream-Closed: true to close the stream)")
		return
	}
	if len(body) > 0 {
		ct := strings.TrimSpace(r.Header.Get("Content-Type"))
		if ct == "" {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, "Content-Type is required on an append with a body")
			return
		}
		if !wire.IsPlainMediaType(ct) { // a plain type/subtype always parses
			if _, _, err := mime.ParseMediaType(ct); err != nil {
				h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("Content-Type %q: %v", truncateForMessage(ct), err))
				return
			}
		}
		// The service checks ct against the stream's type (a closed stream
		// answers every append alike); ct decides JSON mode, as the two
		// must name the same media type.
		req.ContentType = ct
		recs, err := appendRecords(sc.recs[:0], body, ct, false)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
			return
		}
		req.Records = recs
	}

	res, err := h.svc.AppendBatch(r.Context(), name, req)
	if err != nil {
		h.serviceError(w, r, err)
		return
	}
	hd := w.Header()
	next := res.NextOffset
	if next < 0 {
		// A duplicate whose original offsets are no longer remembered:
		// the tail is the best position to continue from.
		if info, err := h.svc.Head(r.Context(), name); err == nil {
			next = info.NextOffset
		}
	}
	if next >= 0 {
		hd[wire.DSHeaderNextOffset] = []string{formatOffset(next)} // canonical: no Set
	}
	if res.Closed {
		hd.Set(wire.DSHeaderClosed, "true")
	}
	status := http.StatusNoContent
	if req.Producer != nil {
		hd.Set(wire.DSHeaderProducerEpoch, strconv.FormatUint(res.ProducerEpoch, 10))
		hd.Set(wire.DSHeaderProducerSeq, strconv.FormatUint(res.ProducerSeq, 10))
		// A producer's new data is acknowledged with 200; duplicates
		// and close-only requests have nothing new and get 204.
		if !res.Duplicate && len(req.Records) > 0 {
			status = http.StatusOK
		}
	}
	w.WriteHeader(status)
}

// parseProducerNumber reads Producer-Epoch and Producer-Seq: plain
// decimal digits within JSON's safe integer range.
func parseProducerNumber(s string) (uint64, error) {
	n, err := httpx.ParseUint(s)
	if err != nil || n > maxSafeInteger {
		return 0, errors.New("not an integer from 0 to 2^53-1")
	}
	return n, nil
}

// delete is DELETE.
func (h *Handler) delete(w http.ResponseWriter, r *http.Request, name string) {
	if err := h.svc.Delete(r.Context(), name); err != nil {
		h.serviceError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
