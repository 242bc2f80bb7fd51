package picomq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// The Durable Streams half of Stream. Reference: the protocol's PROTOCOL.md
// and docs/durable-streams.md (PicoMQ's facade, api/ds).

func (s *stream) dsCreate(ctx context.Context, contentType string, retention time.Duration, cfg createConfig) (CreateResult, error) {
	switch {
	case retention != 0:
		return CreateResult{}, unsupported(s.c.proto, "retention", "streams expire as a whole (WithTTL, WithExpiresAt)")
	case cfg.retentionBytes != 0:
		return CreateResult{}, unsupported(s.c.proto, "WithRetentionBytes", "streams expire as a whole (WithTTL, WithExpiresAt)")
	case cfg.kafkaTopic != nil:
		return CreateResult{}, unsupported(s.c.proto, "WithKafkaTopic", "set topic aliases over Pico")
	case cfg.ttl < 0:
		return CreateResult{}, errors.New("picomq: negative TTL")
	}
	h := http.Header{}
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	h.Set("Content-Type", contentType)
	if cfg.ttl > 0 {
		secs := int64((cfg.ttl + time.Second - 1) / time.Second)
		h.Set(wire.DSHeaderTTL, strconv.FormatInt(secs, 10))
	}
	if !cfg.expiresAt.IsZero() {
		h.Set(wire.DSHeaderExpiresAt, cfg.expiresAt.UTC().Format(time.RFC3339Nano))
	}
	if cfg.closed {
		h.Set(wire.DSHeaderClosed, "true")
	}
	resp, err := s.c.do(ctx, &call{method: "PUT", path: s.name, header: h, owner: &s.owner})
	if err != nil {
		return CreateResult{}, err
	}
	drain(resp)
	info := StreamInfo{
		Name:        s.name,
		ContentType: resp.Header.Get("Content-Type"),
		Next:        resp.Header.Get(wire.DSHeaderNextOffset),
		Closed:      headerTrue(resp.Header, wire.DSHeaderClosed),
		TTL:         cfg.ttl,
		ExpiresAt:   cfg.expiresAt,
	}
	if info.ContentType == "" {
		info.ContentType = contentType
	}
	s.setContentType(info.ContentType)
	return CreateResult{Created: resp.StatusCode == http.StatusCreated, Info: info}, nil
}

// dsBody renders records as one Durable Streams append body: a JSON array
// on JSON streams (one record per element, so a record that is itself an
// array stays one record), the concatenated bytes otherwise.
func dsBody(records []AppendRecord, jsonMode bool) ([]byte, error) {
	if err := dsCheckRecords(records); err != nil {
		return nil, err
	}
	n := 2
	for i := range records {
		n += len(records[i].Body) + 1
	}
	body := make([]byte, 0, n)
	if !jsonMode {
		for i := range records {
			body = append(body, records[i].Body...)
		}
		return body, nil
	}
	body = append(body, '[')
	for i := range records {
		if i > 0 {
			body = append(body, ',')
		}
		v := bytes.TrimSpace(records[i].Body)
		if !json.Valid(v) {
			return nil, &ClientError{Status: http.StatusBadRequest, Code: "bad_request", Kind: KindBadRequest,
				Message: fmt.Sprintf("record %d is not valid JSON, but the stream holds application/json", i)}
		}
		body = append(body, v...)
	}
	return append(body, ']'), nil
}

// dsCheckRecords refuses what a Durable Streams record cannot carry.
func dsCheckRecords(records []AppendRecord) error {
	for i := range records {
		if records[i].Key != nil {
			return unsupported(ProtocolDurableStreams, "record keys", "a Durable Streams record is a value")
		}
		if len(records[i].Headers) > 0 {
			return unsupported(ProtocolDurableStreams, "record headers", "a Durable Streams record is a value")
		}
	}
	return nil
}

func (s *stream) dsAppend(ctx context.Context, records []AppendRecord, p *producerHeaders) (Ack, error) {
	if err := dsCheckRecords(records); err != nil {
		return Ack{}, err
	}
	ct, err := s.knownContentType(ctx)
	if err != nil {
		return Ack{}, err
	}
	jsonMode := wire.IsDSJSONMode(ct)
	body, err := dsBody(records, jsonMode)
	if err != nil {
		return Ack{}, err
	}
	count := len(records)
	if !jsonMode {
		count = 1 // a byte-stream body is one record
	}
	return s.dsAppendBody(ctx, ct, body, count, p)
}

func (s *stream) dsAppendBody(ctx context.Context, ct string, body []byte, count int, p *producerHeaders) (Ack, error) {
	resp, err := s.post(ctx, dsHeaders, ct, body, p)
	if err != nil {
		var ce *ClientError
		if errors.As(err, &ce) && ce.Code == "content_type_mismatch" {
			s.mu.Lock()
			s.contentType = "" // re-learn it: the stream was re-created
			s.mu.Unlock()
		}
		return Ack{}, err
	}
	drain(resp)
	ack := Ack{Count: count, Next: resp.Header.Get(wire.DSHeaderNextOffset)}
	// Producer retries of a batch already written get 204 without the
	// producer's new data status.
	if p != nil && resp.StatusCode == http.StatusNoContent {
		ack.Duplicate = true
		ack.Next = ""
		return ack, nil
	}
	if n, ok := dsRecordOffset(ack.Next); ok && n >= int64(count) {
		ack.Start = s.c.PositionAt(n - int64(count))
	}
	return ack, nil
}

func (s *stream) dsClose(ctx context.Context) (string, error) {
	h := http.Header{}
	h.Set(wire.DSHeaderClosed, "true")
	resp, err := s.c.do(ctx, &call{method: "POST", path: s.name, header: h, owner: &s.owner})
	if err != nil {
		return "", err
	}
	drain(resp)
	return resp.Header.Get(wire.DSHeaderNextOffset), nil
}

func (s *stream) dsRead(ctx context.Context, from string, opts ReadOptions) (Page, error) {
	if from == "" {
		from = "-1"
	}
	q := url.Values{}
	q.Set("offset", from)
	setLongPoll(q, opts)
	r, err := s.getPage(ctx, dsHeaders, q, nil)
	if err != nil || r.noContent {
		return r.page, err
	}
	page := r.page
	ct := r.header.Get("Content-Type")
	s.setContentType(ct)
	page.Records, err = dsRecords(r.body, wire.IsDSJSONMode(ct), from, page.Next, s.c)
	if err != nil {
		return Page{}, fmt.Errorf("picomq: GET %s: %w", s.name, err)
	}
	return page, nil
}

// dsRecords splits a Durable Streams payload into records: the elements of
// the JSON array of a JSON stream, or the page's bytes as one record. The
// protocol gives no per-record positions; on PicoMQ, where a position names
// a record offset, they are derived from the page's end position (next).
func dsRecords(body []byte, jsonMode bool, from, next string, c *client) ([]Record, error) {
	if !jsonMode {
		if len(body) == 0 {
			return nil, nil
		}
		pos := from
		if pos == PositionNow {
			pos = ""
		}
		return []Record{{Position: pos, Body: body}}, nil
	}
	var vals []json.RawMessage
	if err := json.Unmarshal(body, &vals); err != nil {
		return nil, fmt.Errorf("decoding the JSON page: %v", err)
	}
	recs := make([]Record, len(vals))
	end, derived := dsRecordOffset(next)
	derived = derived && end >= int64(len(vals))
	for i, v := range vals {
		recs[i].Body = []byte(v)
		switch {
		case derived:
			recs[i].Position = c.PositionAt(end - int64(len(vals)) + int64(i))
		case i == 0 && from != PositionNow:
			recs[i].Position = from
		}
	}
	return recs, nil
}

func (s *stream) dsHead(ctx context.Context) (StreamInfo, error) {
	return s.head(ctx, func(info *StreamInfo, h http.Header) {
		info.Next = h.Get(wire.DSHeaderNextOffset)
		info.Closed = headerTrue(h, wire.DSHeaderClosed)
		if secs, err := strconv.ParseInt(h.Get(wire.DSHeaderTTL), 10, 64); err == nil {
			info.TTL = time.Duration(secs) * time.Second
		}
		if t, err := time.Parse(time.RFC3339Nano, h.Get(wire.DSHeaderExpiresAt)); err == nil {
			info.ExpiresAt = t
		}
	})
}
