package picomq

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
	"github.com/PicoMQ/picomq/sdk/wire/recordbatch"
)

// The Pico half of Stream. Reference: docs/api.md and api/pico.

// streamJSON is the stream description of create, GET /_streams/{name} and
// listings.
type streamJSON struct {
	Name           string    `json:"name"`
	ID             uint64    `json:"id"`
	ContentType    string    `json:"contentType"`
	CreatedAt      time.Time `json:"createdAt"`
	KafkaTopic     string    `json:"kafkaTopic"`
	RetentionMs    int64     `json:"retentionMs"`
	RetentionBytes int64     `json:"retentionBytes"`
	StartOffset    int64     `json:"startOffset"`
	NextOffset     int64     `json:"nextOffset"`
	Closed         bool      `json:"closed"`
	Owner          string    `json:"owner"`
}

func (j streamJSON) info() StreamInfo {
	next := ""
	if j.NextOffset >= 0 {
		next = strconv.FormatInt(j.NextOffset, 10) // -1: asked a node that does not own it
	}
	return StreamInfo{
		Name: j.Name, ContentType: j.ContentType,
		Start: strconv.FormatInt(j.StartOffset, 10), Next: next,
		Closed: j.Closed, ID: j.ID, CreatedAt: j.CreatedAt, KafkaTopic: j.KafkaTopic,
		Retention: time.Duration(j.RetentionMs) * time.Millisecond, RetentionBytes: j.RetentionBytes,
		Owner: j.Owner,
	}
}

func decodeJSON(resp *http.Response, v any) error {
	b, err := readAll(resp)
	if err != nil {
		return err
	}
	return unmarshalBody(resp, b, v)
}

// unmarshalBody decodes b, resp's body, into v.
func unmarshalBody(resp *http.Response, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("picomq: %s %s: decoding the response: %v", resp.Request.Method, resp.Request.URL.Redacted(), err)
	}
	return nil
}

// decodeAppendAck reads a Pico append's body: by hand when it has the
// server's exact shape, else with encoding/json.
func decodeAppendAck(resp *http.Response) (appendAckJSON, error) {
	b, err := readAll(resp)
	if err != nil {
		return appendAckJSON{}, err
	}
	if a, ok := parseAppendAck(b); ok {
		return a, nil
	}
	var a appendAckJSON
	err = unmarshalBody(resp, b, &a)
	return a, err
}

func (s *stream) picoCreate(ctx context.Context, contentType string, retention time.Duration, cfg createConfig) (CreateResult, error) {
	switch {
	case cfg.ttl != 0:
		return CreateResult{}, unsupported(s.c.proto, "WithTTL", "use a retention period instead")
	case !cfg.expiresAt.IsZero():
		return CreateResult{}, unsupported(s.c.proto, "WithExpiresAt", "use a retention period instead")
	case cfg.closed:
		return CreateResult{}, unsupported(s.c.proto, "CreateClosed", "Pico streams cannot be closed")
	case retention < 0 || cfg.retentionBytes < 0:
		return CreateResult{}, fmt.Errorf("picomq: negative retention")
	}
	h := http.Header{}
	if contentType == "" {
		contentType = wire.MediaOctetStream
	}
	h.Set("Content-Type", contentType)
	if retention > 0 {
		h.Set(wire.HeaderRetentionMs, strconv.FormatInt(max(retention.Milliseconds(), 1), 10))
	}
	if cfg.retentionBytes > 0 {
		h.Set(wire.HeaderRetentionBytes, strconv.FormatInt(cfg.retentionBytes, 10))
	}
	if cfg.kafkaTopic != nil {
		h[wire.HeaderKafkaTopic] = []string{*cfg.kafkaTopic}
	}
	resp, err := s.c.do(ctx, &call{method: "PUT", path: s.name, header: h, owner: &s.owner})
	if err != nil {
		return CreateResult{}, err
	}
	created := resp.StatusCode == http.StatusCreated
	var j streamJSON
	if err := decodeJSON(resp, &j); err != nil {
		return CreateResult{}, err
	}
	info := j.info()
	s.setContentType(info.ContentType)
	return CreateResult{Created: created, Info: info}, nil
}

// producerHeaders identify one producer batch.
type producerHeaders struct {
	id    string
	epoch uint64
	seq   uint64
}

// encodeBatch renders records as a Pico record codec frame.
func encodeBatch(dst []byte, records []AppendRecord) []byte {
	dst = codec.AppendFrameHeader(dst, len(records))
	for i := range records {
		dst = appendCodecRecord(dst, &records[i])
	}
	return dst
}

func appendCodecRecord(dst []byte, r *AppendRecord) []byte {
	value := r.Body
	if value == nil {
		value = []byte{} // an empty value, not a null one
	}
	dst, start := codec.BeginRecord(dst, 0, 0, r.Key, value, len(r.Headers))
	for _, h := range r.Headers {
		dst = codec.AppendHeader(dst, h.Key, h.Value)
	}
	return codec.EndRecord(dst, start)
}

// encodedSize is the codec size of r.
func encodedSize(r *AppendRecord) int {
	n := codec.RecordOverhead + len(r.Key) + len(r.Body)
	for _, h := range r.Headers {
		n += codec.HeaderOverhead + len(h.Key) + len(h.Value)
	}
	return n
}

// appendAckJSON is the body of a successful Pico append.
type appendAckJSON struct {
	Offset     int64 `json:"offset"`
	NextOffset int64 `json:"nextOffset"`
	Timestamp  int64 `json:"timestamp"`
	Count      int   `json:"count"`
	Duplicate  bool  `json:"duplicate"`
}

func (s *stream) picoAppend(ctx context.Context, records []AppendRecord, p *producerHeaders) (Ack, error) {
	n := codec.FrameHeaderSize
	for i := range records {
		n += encodedSize(&records[i])
	}
	return s.picoAppendBody(ctx, encodeBatch(make([]byte, 0, n), records), len(records), p)
}

// picoAppendBody posts an encoded frame of count records.
func (s *stream) picoAppendBody(ctx context.Context, body []byte, count int, p *producerHeaders) (Ack, error) {
	resp, err := s.post(ctx, picoHeaders, wire.MediaBatch, body, p)
	if err != nil {
		return Ack{}, err
	}
	a, err := decodeAppendAck(resp)
	if err != nil {
		return Ack{}, err
	}
	ack := Ack{Count: count, Duplicate: a.Duplicate || resp.Header.Get(wire.HeaderDuplicate) == "true"}
	if a.Timestamp > 0 {
		ack.Timestamp = time.UnixMilli(a.Timestamp)
	}
	if a.Offset >= 0 && a.NextOffset >= 0 {
		ack.Start = strconv.FormatInt(a.Offset, 10)
		ack.Next = strconv.FormatInt(a.NextOffset, 10)
	}
	return ack, nil
}

// picoPosition resolves a position for the query: "now" asks the server
// for the stream's end; "" and "-1" mean the stream's start (the offset
// parameter is left out, which follows trims).
func (s *stream) picoPosition(ctx context.Context, from string) (string, error) {
	switch from {
	case "", "-1":
		return "", nil
	case PositionNow:
		info, err := s.picoHead(ctx)
		if err != nil {
			return "", err
		}
		return info.Next, nil
	}
	if n, err := strconv.ParseInt(from, 10, 64); err != nil || n < 0 {
		return "", &ClientError{Status: http.StatusBadRequest, Code: wire.CodeInvalidOffset, Kind: KindBadRequest,
			Message: fmt.Sprintf("position %q is not a Pico position (a Next returned by a read, %q, or %q)", from, "0", PositionNow)}
	}
	return from, nil
}

// readAccept asks for a read page as stored batches (the node hands them
// on without decoding them), else the binary frame.
var readAccept = http.Header{"Accept": {wire.MediaRecordBatches + ", " + wire.MediaBatch + ";q=0.5"}}

func (s *stream) picoRead(ctx context.Context, from string, opts ReadOptions) (Page, error) {
	r, err := s.picoReadStart(ctx, from, opts)
	if err != nil {
		return Page{}, err
	}
	return s.picoReadFinish(r, false)
}

// picoReadStart sends a page read and returns once its headers are in
// (r.page holds Next, UpToDate, Cursor); picoReadFinish reads the body and
// decodes the records.
func (s *stream) picoReadStart(ctx context.Context, from string, opts ReadOptions) (pageReply, error) {
	off, err := s.picoPosition(ctx, from)
	if err != nil {
		return pageReply{}, err
	}
	q := url.Values{}
	if off != "" {
		q.Set(wire.QueryOffset, off)
	}
	// Stored batches, or the binary frame where a page cannot be served
	// so (or from a node that predates them): by Accept, not format=, so
	// either kind of node answers, and the Content-Type says which.
	if opts.Limit > 0 {
		q.Set(wire.QueryLimit, strconv.Itoa(opts.Limit))
	}
	if opts.MaxBytes > 0 {
		q.Set(wire.QueryMaxBytes, strconv.Itoa(opts.MaxBytes))
	}
	setLongPoll(q, opts)
	return s.startPage(ctx, picoHeaders, q, readAccept)
}

// picoReadFinish reads and decodes the body of a reply from picoReadStart.
// With lazy (a Records iterator's reads) a page of stored batches is left
// to be decoded as its records are handed out (page.lazy, no Records).
func (s *stream) picoReadFinish(r pageReply, lazy bool) (Page, error) {
	if r.noContent {
		return r.page, nil
	}
	if err := r.readBody(); err != nil {
		return Page{}, err
	}
	page := r.page
	page.body = r.body
	var last int64 = -1 // the offset of the page's last record
	var err error
	if wire.MediaType(r.header.Get("Content-Type")) == wire.MediaRecordBatches {
		var from int64
		if v := r.header.Get(wire.HeaderPageOffset); v != "" {
			if from, err = strconv.ParseInt(v, 10, 64); err != nil {
				return Page{}, fmt.Errorf("picomq: GET %s: %s %q: %w", s.name, wire.HeaderPageOffset, v, err)
			}
		}
		hint := pageRecordsHint(r.header, len(r.body))
		if lazy && page.Next != "" {
			l, err := newLazyPage(s.name, r.body, from, hint, len(page.Next))
			if err != nil {
				return Page{}, err
			}
			if l.has {
				page.lazy = l
			}
			return page, nil
		}
		page.Records, last, err = decodeBatchesPage(r.body, from, hint, len(page.Next))
	} else {
		var recs []codec.Record
		if recs, err = codec.Decode(r.body, nil, codec.Limits{}); err == nil {
			page.Records = fromCodecRecords(recs)
			if len(recs) > 0 {
				last = recs[len(recs)-1].Offset
			}
		}
	}
	if err != nil {
		return Page{}, fmt.Errorf("picomq: GET %s: %w", s.name, err)
	}
	if page.Next == "" && last >= 0 {
		page.Next = strconv.FormatInt(last+1, 10)
	}
	return page, nil
}

// decodeBatchesPage decodes a page of stored batches straight into
// Records, sized by hint (pageRecordsHint), their positions by nextLen
// (the length of the page's next position, which is above every offset
// in it), and returns them with the offset of the last (-1 for none).
// No []codec.Record is built on the way: for a catch-up page of 4,000
// records of 1 KiB that slice was 0.35 MB of the page's 0.8 MB of fresh
// memory besides the body, and fresh memory is most of what a catch-up
// costs the client (docs/benchmarks.md). The positions are slices of one
// string per page.
func decodeBatchesPage(body []byte, from int64, hint, nextLen int) ([]Record, int64, error) {
	out := make([]Record, 0, hint)
	var scratch [20]byte
	// The decimal offsets one after another, and each one's length.
	digits := make([]byte, 0, hint*min(max(nextLen, len(strconv.AppendInt(scratch[:0], from, 10))), 20))
	lens := make([]uint8, 0, hint)
	last := int64(-1)
	err := recordbatch.Each(body, from, func(r codec.Record) {
		n := len(digits)
		digits = strconv.AppendInt(digits, r.Offset, 10)
		lens = append(lens, uint8(len(digits)-n))
		out = append(out, Record{Timestamp: time.UnixMilli(r.Timestamp), Key: r.Key, Body: r.Value, Headers: fromCodecHeaders(r.Headers)})
		last = r.Offset
	})
	if err != nil {
		return nil, -1, err
	}
	positions := string(digits)
	for i := range out {
		n := int(lens[i])
		out[i].Position, positions = positions[:n], positions[n:]
	}
	return out, last, nil
}

// fromCodecRecords converts the records of a binary frame page, their
// positions slices of one string.
func fromCodecRecords(recs []codec.Record) []Record {
	out := make([]Record, len(recs))
	var digits []byte
	for i := range recs {
		r := &recs[i]
		digits = strconv.AppendInt(digits, r.Offset, 10)
		out[i] = Record{Timestamp: time.UnixMilli(r.Timestamp), Key: r.Key, Body: r.Value, Headers: fromCodecHeaders(r.Headers)}
	}
	positions := string(digits)
	var scratch [20]byte
	for i := range recs {
		n := len(strconv.AppendInt(scratch[:0], recs[i].Offset, 10))
		out[i].Position, positions = positions[:n], positions[n:]
	}
	return out
}

func fromCodecHeaders(hs []codec.Header) []Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]Header, len(hs))
	for j, hd := range hs {
		out[j] = Header{Key: hd.Key, Value: hd.Value}
	}
	return out
}

// pageRecordsHint is the capacity to decode a page of bodyLen bytes into:
// its Pico-Record-Count, so that decoding a catch-up page of thousands of
// records does not grow the slice by doubling (a third more allocation
// than the page's records need, and copies), at most one record per
// minimalRecordBytes of body, so a header cannot make the client allocate
// more than the body warrants.
func pageRecordsHint(h http.Header, bodyLen int) int {
	n, err := strconv.Atoi(h.Get(wire.HeaderRecordCount))
	if err != nil || n < 0 {
		return 0
	}
	return min(n, bodyLen/minimalRecordBytes+1)
}

// minimalRecordBytes is the smallest a record of a RecordBatch v2 takes:
// length, attributes, timestamp and offset deltas, key and value lengths
// and a header count, one byte each at least.
const minimalRecordBytes = 7

func (s *stream) picoHead(ctx context.Context) (StreamInfo, error) {
	return s.head(ctx, func(info *StreamInfo, h http.Header) {
		info.Start = h.Get(wire.HeaderStartOffset)
		info.Next = h.Get(wire.HeaderNextOffset)
		info.Closed = h.Get(wire.HeaderClosed) == "true"
		info.KafkaTopic = h.Get(wire.HeaderKafkaTopic)
		info.Owner = h.Get("Pico-Owner")
		info.ID, _ = strconv.ParseUint(h.Get(wire.HeaderStreamID), 10, 64)
		if ms, err := strconv.ParseInt(h.Get(wire.HeaderRetentionMs), 10, 64); err == nil {
			info.Retention = time.Duration(ms) * time.Millisecond
		}
		info.RetentionBytes, _ = strconv.ParseInt(h.Get(wire.HeaderRetentionBytes), 10, 64)
	})
}

func (s *stream) picoDescribe(ctx context.Context) (StreamInfo, error) {
	resp, err := s.c.do(ctx, &call{method: "GET", path: wire.PathStreams + s.name, retry: true})
	if err != nil {
		return StreamInfo{}, err
	}
	var j streamJSON
	if err := decodeJSON(resp, &j); err != nil {
		return StreamInfo{}, err
	}
	info := j.info()
	s.setContentType(info.ContentType)
	return info, nil
}

func (s *stream) picoTrim(ctx context.Context, before string) (StreamInfo, error) {
	n, err := strconv.ParseInt(before, 10, 64)
	if err != nil || n < 0 {
		return StreamInfo{}, fmt.Errorf("picomq: Trim: %q is not a Pico position", before)
	}
	body, _ := json.Marshal(map[string]int64{"trimBefore": n})
	h := http.Header{}
	h.Set("Content-Type", wire.MediaMergePatch)
	resp, err := s.c.do(ctx, &call{method: "PATCH", path: wire.PathStreams + s.name, header: h, body: body})
	if err != nil {
		return StreamInfo{}, err
	}
	var j streamJSON
	if err := decodeJSON(resp, &j); err != nil {
		return StreamInfo{}, err
	}
	return j.info(), nil
}

func (c *client) picoList(ctx context.Context, opts ListOptions) (ListPage, error) {
	q := url.Values{}
	if opts.Prefix != "" {
		q.Set(wire.QueryPrefix, opts.Prefix)
	}
	if opts.Limit > 0 {
		q.Set(wire.QueryLimit, strconv.Itoa(opts.Limit))
	}
	if opts.Cursor != "" {
		q.Set(wire.QueryListCursor, opts.Cursor)
	}
	resp, err := c.do(ctx, &call{method: "GET", path: wire.PathStreams, query: q, retry: true})
	if err != nil {
		return ListPage{}, err
	}
	var l struct {
		Streams    []streamJSON `json:"streams"`
		NextCursor string       `json:"nextCursor"`
	}
	if err := decodeJSON(resp, &l); err != nil {
		return ListPage{}, err
	}
	page := ListPage{NextCursor: l.NextCursor, Streams: make([]StreamInfo, len(l.Streams))}
	for i, j := range l.Streams {
		page.Streams[i] = j.info()
	}
	return page, nil
}

func decodeText(s string, enc string) ([]byte, error) {
	if enc == wire.EncodingBase64 {
		return base64.StdEncoding.DecodeString(s)
	}
	return []byte(s), nil
}

// decodeJSONValue decodes the value of a JSON read record: an embedded
// JSON value is the stored bytes as they are; a string is decoded per its
// encoding; null is nil.
func decodeJSONValue(r wire.JSONRecord) ([]byte, error) {
	t, err := r.ValueText()
	if err != nil || t == nil {
		return nil, err
	}
	if r.ValueEmbedded() {
		return []byte(*t), nil
	}
	return decodeText(*t, r.ValueEncoding)
}

// decodeJSONRecords decodes the records of a Pico JSON read (SSE data
// events carry them).
func decodeJSONRecords(data []byte) ([]Record, error) {
	var in []wire.JSONRecord
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, err
	}
	out := make([]Record, len(in))
	for i, r := range in {
		rec := Record{Position: strconv.FormatInt(r.Offset, 10), Timestamp: time.UnixMilli(r.Timestamp)}
		var err error
		if r.Key != nil {
			if rec.Key, err = decodeText(*r.Key, r.KeyEncoding); err != nil {
				return nil, fmt.Errorf("record %d key: %v", r.Offset, err)
			}
		}
		if rec.Body, err = decodeJSONValue(r); err != nil {
			return nil, fmt.Errorf("record %d value: %v", r.Offset, err)
		}
		for _, h := range r.Headers {
			hd := Header{Key: h.Key}
			if h.Value != nil {
				if hd.Value, err = decodeText(*h.Value, h.ValueEncoding); err != nil {
					return nil, fmt.Errorf("record %d header %q: %v", r.Offset, h.Key, err)
				}
			}
			rec.Headers = append(rec.Headers, hd)
		}
		out[i] = rec
	}
	return out, nil
}
