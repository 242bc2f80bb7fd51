package pico

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

func TestCreateStatusesAndBody(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	r := s.do("PUT", "/orders/1042", nil, "Content-Type", "application/json", wire.HeaderRetentionMs, "3600000")
	wantStatus(t, r, 201, "create")
	wantHeader(t, r, "Location", "/orders/1042", "create")
	wantHeader(t, r, wire.HeaderNextOffset, "0", "create")
	wantHeader(t, r, wire.HeaderStartOffset, "0", "create")
	wantHeader(t, r, wire.HeaderKafkaTopic, "orders.1042", "create")
	wantHeader(t, r, wire.HeaderRetentionMs, "3600000", "create")
	var d streamJSON
	r.json(t, &d)
	if d.Name != "/orders/1042" || d.ContentType != "application/json" || d.KafkaTopic != "orders.1042" || d.RetentionMs != 3600000 || d.ID == 0 || d.CreatedAt.IsZero() {
		t.Fatalf("create body %+v", d)
	}

	// Identical config (charset ignored, retention omitted matches): 200.
	r = s.do("PUT", "/orders/1042", nil, "Content-Type", "application/json; charset=utf-8")
	wantStatus(t, r, 200, "identical re-create")
	if r.Header.Get("Location") != "" {
		t.Fatal("200 re-create has a Location")
	}
	wantStatus(t, s.do("PUT", "/orders/1042", nil, "Content-Type", "application/json", wire.HeaderKafkaTopic, "orders.1042"), 200, "re-create naming the same topic")
	for _, c := range []struct {
		what string
		hdrs []string
	}{
		{"other content type", []string{"Content-Type", "text/plain"}},
		{"other topic", []string{"Content-Type", "application/json", wire.HeaderKafkaTopic, "elsewhere"}},
		{"other retention", []string{"Content-Type", "application/json", wire.HeaderRetentionMs, "5"}},
	} {
		wantError(t, s.do("PUT", "/orders/1042", nil, c.hdrs...), 409, wire.CodeExists, c.what)
	}

	// No Content-Type: application/octet-stream.
	r = s.do("PUT", "/raw", nil)
	wantStatus(t, r, 201, "create without content type")
	r.json(t, &d)
	if d.ContentType != wire.MediaOctetStream {
		t.Fatalf("default content type %q", d.ContentType)
	}

	for _, c := range []struct {
		path   string
		hdrs   []string
		status int
		code   string
	}{
		{"/a/../b", nil, 400, wire.CodeInvalidName},
		{"/a//b", nil, 400, wire.CodeInvalidName},
		{"/metrics/x", nil, 403, wire.CodeReservedName},
		{"/_sys/x", nil, 404, wire.CodeNotFoundRoute},
		{"/x", []string{"Content-Type", wire.MediaBatch}, 400, wire.CodeBadRequest},
		{"/x", []string{"Content-Type", "no/such/type"}, 400, wire.CodeBadRequest},
		{"/x", []string{wire.HeaderRetentionMs, "-1"}, 400, wire.CodeBadRequest},
		{"/x", []string{wire.HeaderRetentionBytes, "lots"}, 400, wire.CodeBadRequest},
	} {
		wantError(t, s.do("PUT", c.path, nil, c.hdrs...), c.status, c.code, "PUT "+c.path+fmt.Sprint(c.hdrs))
	}
}

func TestTopicAliases(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/orders/eu", "text/plain")
	r := s.do("HEAD", "/orders/eu", nil)
	wantHeader(t, r, wire.HeaderKafkaTopic, "orders.eu", "derived alias")

	// Explicit alias that is taken: 409, and nothing is created.
	wantError(t, s.do("PUT", "/other", nil, wire.HeaderKafkaTopic, "orders.eu"), 409, wire.CodeTopicConflict, "taken alias")
	wantStatus(t, s.do("HEAD", "/other", nil), 404, "HEAD after failed create")
	// A derived alias that is taken is simply not set.
	s.create("/x", "text/plain", wire.HeaderKafkaTopic, "y.z")
	r = s.create("/y/z", "text/plain")
	if got := r.Header.Get(wire.HeaderKafkaTopic); got != "" {
		t.Fatalf("/y/z got alias %q, which /x holds", got)
	}
	// Names that are not legal topics get none; an empty header opts out.
	if got := s.create("/a/b:c", "text/plain").Header.Get(wire.HeaderKafkaTopic); got != "" {
		t.Fatalf("/a/b:c got alias %q", got)
	}
	if got := s.create("/plain/one", "text/plain", wire.HeaderKafkaTopic, "").Header.Get(wire.HeaderKafkaTopic); got != "" {
		t.Fatalf("empty Pico-Kafka-Topic still derived %q", got)
	}
	for _, bad := range []string{"has space", "a/b", "__consumer_offsets", "..", strings.Repeat("t", 250)} {
		wantError(t, s.do("PUT", "/bad", nil, wire.HeaderKafkaTopic, bad), 400, wire.CodeInvalidTopic, "topic "+bad)
	}
	// Deleting a stream frees its alias.
	wantStatus(t, s.do("DELETE", "/orders/eu", nil), 204, "delete")
	s.create("/other", "text/plain", wire.HeaderKafkaTopic, "orders.eu")
}

func TestHeadAndDelete(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/h", "text/plain; charset=utf-8")
	s.do("POST", "/h", []byte("x"))
	r := s.do("HEAD", "/h", nil)
	wantStatus(t, r, 200, "head")
	wantHeader(t, r, "Content-Type", "text/plain; charset=utf-8", "head")
	wantHeader(t, r, wire.HeaderNextOffset, "1", "head")
	wantHeader(t, r, wire.HeaderStartOffset, "0", "head")
	wantHeader(t, r, wire.HeaderKafkaTopic, "h", "head")
	if r.Header.Get(wire.HeaderStreamID) == "" || len(r.Body) != 0 {
		t.Fatalf("head: %v %q", r.Header, r.Body)
	}
	id := r.Header.Get(wire.HeaderStreamID)

	r = s.do("HEAD", "/nope", nil)
	wantStatus(t, r, 404, "head missing")
	wantHeader(t, r, wire.HeaderErrorCode, wire.CodeNotFound, "head missing")

	// A body on DELETE is ignored.
	wantStatus(t, s.do("DELETE", "/h", []byte("ignored")), 204, "delete")
	wantError(t, s.do("GET", "/h", nil), 404, wire.CodeNotFound, "read after delete")
	wantError(t, s.do("DELETE", "/h", nil), 404, wire.CodeNotFound, "second delete")
	r = s.create("/h", "text/plain")
	if r.Header.Get(wire.HeaderStreamID) == id {
		t.Fatal("re-created stream kept its predecessor's id")
	}
	if recs, _ := s.readJSON("/h"); len(recs) != 0 {
		t.Fatalf("re-created stream holds %d old records", len(recs))
	}
	wantError(t, s.do("PATCH", "/h", nil), 405, wire.CodeMethodNotAllowed, "PATCH on a stream")
}

func TestAppendSingleBody(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/s", "text/plain")
	r := s.do("POST", "/s", []byte("hello"), "Content-Type", "text/plain; charset=utf-8",
		wire.HeaderKey, "k1", "Pico-Header-Trace-Id", "abc", "pico-header-b", "1", "Pico-Header-B", "2")
	wantStatus(t, r, 200, "append")
	wantHeader(t, r, wire.HeaderOffset, "0", "append")
	wantHeader(t, r, wire.HeaderNextOffset, "1", "append")
	wantHeader(t, r, wire.HeaderRecordCount, "1", "append")
	var ack appendAck
	r.json(t, &ack)
	if ack.Offset != 0 || ack.NextOffset != 1 || ack.Count != 1 || ack.Timestamp <= 0 || strconv.FormatInt(ack.Timestamp, 10) != r.Header.Get(wire.HeaderTimestamp) {
		t.Fatalf("ack %+v headers %v", ack, r.Header)
	}
	// No Content-Type at all is accepted (the stream's type is assumed).
	wantStatus(t, s.do("POST", "/s", []byte("")), 200, "append without content type")

	recs, _ := s.readJSON("/s")
	if len(recs) != 2 || *recs[0].Value != "hello" || *recs[0].Key != "k1" || recs[1].Value == nil || *recs[1].Value != "" || recs[1].Key != nil {
		t.Fatalf("read back %+v", recs)
	}
	h := recs[0].Headers
	if len(h) != 3 || h[0].Key != "b" || *h[0].Value != "1" || h[1].Key != "b" || *h[1].Value != "2" || h[2].Key != "trace-id" || *h[2].Value != "abc" {
		t.Fatalf("record headers %+v", h)
	}
}

func TestAppendContentTypes(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/j", "application/json")
	wantError(t, s.do("POST", "/j", []byte("x"), "Content-Type", "text/plain"), 409, wire.CodeContentTypeMismatch, "other content type")
	wantError(t, s.do("POST", "/j", []byte("x"), "Content-Type", "bad type/"), 415, wire.CodeUnsupportedMedia, "unparseable content type")
	wantError(t, s.do("POST", "/j", []byte("x"), "Content-Type", "application/vnd.picomq.batch+xml"), 415, wire.CodeUnsupportedMedia, "unknown Pico media type")
	wantError(t, s.do("POST", "/j", []byte(`{"a":`), "Content-Type", "application/json"), 400, wire.CodeBadRequest, "invalid JSON on a JSON stream")
	wantError(t, s.do("POST", "/nope", []byte(`{}`)), 404, wire.CodeNotFound, "append to a missing stream")
	wantStatus(t, s.do("POST", "/j", []byte(`{"a":1}`), "Content-Type", "application/json"), 200, "valid JSON")
}

func TestAppendJSONBatch(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/b", "application/octet-stream")
	s.do("POST", "/b", []byte("first"))
	batch := `[
		{"key":"k","value":"text","headers":[{"key":"h","value":"v"},{"key":"n","value":null}]},
		{"value":"/wA=","valueEncoding":"base64","key":"AQ==","keyEncoding":"base64"},
		{"value":{"nested":[1,2]}},
		{"value":null},
		{"offset":99,"timestamp":5,"value":"echoed from a read"}
	]`
	r := s.do("POST", "/b", []byte(batch), "Content-Type", wire.MediaBatchJSON)
	wantStatus(t, r, 200, "JSON batch")
	var ack appendAck
	r.json(t, &ack)
	if ack.Offset != 1 || ack.NextOffset != 6 || ack.Count != 5 {
		t.Fatalf("ack %+v: want offsets 1..5 in one append", ack)
	}
	recs, _ := s.readJSON("/b?offset=1&encoding=base64")
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	if len(recs) != 5 || *recs[0].Value != b64("text") || *recs[0].Key != b64("k") ||
		*recs[1].Value != b64("\xff\x00") || *recs[1].Key != b64("\x01") ||
		*recs[2].Value != b64(`{"nested":[1,2]}`) || recs[3].Value != nil || *recs[4].Value != b64("echoed from a read") {
		t.Fatalf("read back %+v", recs)
	}
	if recs[4].Offset != 5 || recs[0].Timestamp != recs[4].Timestamp {
		t.Fatalf("offsets/timestamps not assigned by the server: %+v", recs[4])
	}
	if len(recs[0].Headers) != 2 || recs[0].Headers[1].Value != nil {
		t.Fatalf("headers %+v", recs[0].Headers)
	}

	// A page read as JSON posts back unchanged (the formats mirror).
	page := s.do("GET", "/b?offset=1", nil)
	r = s.do("POST", "/b", page.Body, "Content-Type", wire.MediaBatchJSON)
	wantStatus(t, r, 200, "re-post a read page")
	again, _ := s.readJSON("/b?offset=6")
	orig, _ := s.readJSON("/b?offset=1&limit=5")
	for i := range orig {
		orig[i].Offset, orig[i].Timestamp = 0, 0
		again[i].Offset, again[i].Timestamp = 0, 0
	}
	if a, b := fmt.Sprint(jsonDump(orig)), fmt.Sprint(jsonDump(again)); a != b {
		t.Fatalf("round trip through a read page changed records:\n%s\n%s", a, b)
	}

	for _, bad := range []string{
		`{"value":"x"}`, `[]`, `null`, `[{"value":"x"}] trailing`, `[{"key":"k"}]`, `[{"value":"x","vaule":"y"}]`,
		`[{"value":"!!","valueEncoding":"base64"}]`, `[{"value":"x","valueEncoding":"rot13"}]`, `[{"value":"x","key":5}]`,
		`[{"value":"x","headers":[{"value":"no key"}]}]`, `[{"value":"x","headers":[{"key":"h","value":{}}]}]`,
		`[{"value":{},"valueEncoding":"base64"}]`, `not json`,
	} {
		wantError(t, s.do("POST", "/b", []byte(bad), "Content-Type", wire.MediaBatchJSON), 400, wire.CodeInvalidBatch, "batch "+bad)
	}
	if _, r := s.readJSON("/b"); r.Header.Get(wire.HeaderNextOffset) != "11" {
		t.Fatalf("rejected batches wrote something: next offset %s", r.Header.Get(wire.HeaderNextOffset))
	}

	// On a JSON stream every value must be JSON; a string value is text,
	// so it must be sent as JSON (valueEncoding json or a JSON value).
	s.create("/jb", "application/json")
	wantStatus(t, s.do("POST", "/jb", []byte(`[{"value":{"a":1}},{"value":"s","valueEncoding":"json"},{"value":null}]`), "Content-Type", wire.MediaBatchJSON), 200, "JSON values")
	wantError(t, s.do("POST", "/jb", []byte(`[{"value":"not json"}]`), "Content-Type", wire.MediaBatchJSON), 400, wire.CodeBadRequest, "text value on a JSON stream")
	recs, _ = s.readJSON("/jb")
	if len(recs) != 3 || *recs[0].Value != `{"a":1}` || *recs[1].Value != `"s"` {
		t.Fatalf("JSON stream read %+v", recs)
	}
}

func jsonDump(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestAppendBinaryBatchAndReadBack(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/bin", "application/octet-stream")
	in := []codec.Record{
		{Key: []byte("k"), Value: []byte{0, 1, 2}, Headers: []codec.Header{{Key: "h", Value: []byte("v")}, {Key: "null"}}},
		{Value: nil},
		{Key: []byte{}, Value: []byte{}},
	}
	r := s.do("POST", "/bin", codec.Encode(in), "Content-Type", wire.MediaBatch)
	wantStatus(t, r, 200, "binary batch")
	wantHeader(t, r, wire.HeaderRecordCount, "3", "binary batch")
	wantHeader(t, r, wire.HeaderNextOffset, "3", "binary batch")

	r = s.do("GET", "/bin", nil, "Accept", wire.MediaBatch)
	wantStatus(t, r, 200, "binary read")
	wantHeader(t, r, "Content-Type", wire.MediaBatch, "binary read")
	out, err := codec.Decode(r.Body, nil, codec.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 {
		t.Fatalf("%d records", len(out))
	}
	for i := range out {
		if out[i].Offset != int64(i) || out[i].Timestamp <= 0 {
			t.Fatalf("record %d offset/timestamp %d/%d", i, out[i].Offset, out[i].Timestamp)
		}
		out[i].Offset, out[i].Timestamp = 0, 0
	}
	if jsonDump(out) != jsonDump(in) || out[1].Value != nil || out[2].Key == nil {
		t.Fatalf("read back\n%s\nwant\n%s", jsonDump(out), jsonDump(in))
	}

	for name, bad := range map[string][]byte{
		"garbage":   []byte("not a batch"),
		"truncated": codec.Encode(in)[:20],
		"trailing":  append(codec.Encode(in), 0),
		"empty":     codec.AppendFrameHeader(nil, 0),
	} {
		wantError(t, s.do("POST", "/bin", bad, "Content-Type", wire.MediaBatch), 400, wire.CodeInvalidBatch, name)
	}
}

func TestAppendLimits(t *testing.T) {
	s := newServer(t, Config{MaxAppendBytes: 4096, MaxRecordBytes: 100, MaxBatchRecords: 3, MaxRecordHeaders: 2}, stream.Config{})
	s.create("/l", "application/octet-stream")
	wantError(t, s.do("POST", "/l", make([]byte, 5000)), 413, wire.CodeTooLarge, "body over the limit")
	wantError(t, s.do("POST", "/l", make([]byte, 101)), 413, wire.CodeRecordTooLarge, "record over the limit")
	wantStatus(t, s.do("POST", "/l", make([]byte, 100)), 200, "record at the limit")
	wantError(t, s.do("POST", "/l", []byte(`[{"value":"1"},{"value":"2"},{"value":"3"},{"value":"4"}]`), "Content-Type", wire.MediaBatchJSON),
		413, wire.CodeTooManyRecords, "JSON batch over the record limit")
	wantError(t, s.do("POST", "/l", codec.Encode(make([]codec.Record, 4)), "Content-Type", wire.MediaBatch),
		413, wire.CodeTooManyRecords, "binary batch over the record limit")
	wantError(t, s.do("POST", "/l", codec.Encode([]codec.Record{{Value: make([]byte, 101)}}), "Content-Type", wire.MediaBatch),
		413, wire.CodeRecordTooLarge, "binary record over the limit")
	wantError(t, s.do("POST", "/l", []byte("x"), "Pico-Header-A", "1", "Pico-Header-B", "2", "Pico-Header-C", "3"),
		400, wire.CodeInvalidHeader, "too many record headers")
	wantError(t, s.do("POST", "/l", []byte(`[{"value":"x","headers":[{"key":"a"},{"key":"b"},{"key":"c"}]}]`), "Content-Type", wire.MediaBatchJSON),
		400, wire.CodeInvalidBatch, "too many headers in a JSON record")
	r := s.do("POST", "/l", nil) // an empty body is a record with an empty value
	wantStatus(t, r, 200, "empty body")
	if _, r := s.readJSON("/l"); r.Header.Get(wire.HeaderNextOffset) != "2" {
		t.Fatalf("rejected appends wrote something: next %s", r.Header.Get(wire.HeaderNextOffset))
	}
}

func TestReadFormatsAndNegotiation(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/t", "text/plain")
	for _, v := range []string{"a\n", "bc\n", "d\n"} {
		s.do("POST", "/t", []byte(v))
	}
	raw := func(r resp) string { return string(r.Body) }
	for _, c := range []struct {
		query, accept, ct, body string
		status                  int
	}{
		{"", "", wire.MediaJSON, "", 200},
		{"", "*/*", wire.MediaJSON, "", 200},
		{"", "text/plain", "text/plain", "a\nbc\nd\n", 200},
		{"", "text/plain;q=0.5, application/json", wire.MediaJSON, "", 200},
		{"", "application/json;q=0.1, text/plain;q=0.9", "text/plain", "a\nbc\nd\n", 200},
		{"", "text/csv, " + wire.MediaBatch, wire.MediaBatch, "", 200},
		{"format=raw", wire.MediaBatch, "text/plain", "a\nbc\nd\n", 200},
		{"format=json", "text/plain", wire.MediaJSON, "", 200},
		{"format=binary", "", wire.MediaBatch, "", 200},
		{"offset=1&limit=1&format=raw", "", "text/plain", "bc\n", 200},
	} {
		r := s.do("GET", "/t?"+c.query, nil, "Accept", c.accept)
		wantStatus(t, r, c.status, c.query+" / "+c.accept)
		wantHeader(t, r, "Content-Type", c.ct, c.query+" / "+c.accept)
		if c.body != "" && raw(r) != c.body {
			t.Fatalf("%s / %s: body %q, want %q", c.query, c.accept, r.Body, c.body)
		}
	}
	wantError(t, s.do("GET", "/t", nil, "Accept", "text/csv"), 406, wire.CodeNotAcceptable, "nothing acceptable")
	wantError(t, s.do("GET", "/t?format=xml", nil), 400, wire.CodeBadRequest, "unknown format")
	// A body on GET is ignored.
	wantStatus(t, s.do("GET", "/t", []byte("ignored")), 200, "GET with a body")
}

func TestReadPagingHeadersAndErrors(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/p", "text/plain")
	s.do("POST", "/p", []byte(`[{"value":"aaaa"},{"value":"bbbb"},{"value":"cccc"}]`), "Content-Type", wire.MediaBatchJSON)
	s.do("POST", "/p", []byte("dddd"))

	recs, r := s.readJSON("/p?offset=1&limit=2")
	if len(recs) != 2 || recs[0].Offset != 1 || *recs[1].Value != "cccc" {
		t.Fatalf("limit: %+v", recs)
	}
	wantHeader(t, r, wire.HeaderNextOffset, "3", "limit")
	wantHeader(t, r, wire.HeaderUpToDate, "false", "limit")
	wantHeader(t, r, wire.HeaderRecordCount, "2", "limit")
	wantHeader(t, r, wire.HeaderStartOffset, "0", "limit")
	if r.Header.Get(wire.HeaderCursor) == "" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v", r.Header)
	}
	// max_bytes counts key+value bytes; one record is returned even if
	// it alone is larger.
	recs, r = s.readJSON("/p?max_bytes=9")
	if len(recs) != 2 {
		t.Fatalf("max_bytes=9: %d records, want 2", len(recs))
	}
	recs, _ = s.readJSON("/p?max_bytes=1")
	if len(recs) != 1 {
		t.Fatalf("max_bytes=1: %d records, want 1", len(recs))
	}
	recs, r = s.readJSON("/p?offset=3")
	wantHeader(t, r, wire.HeaderUpToDate, "true", "tail")
	if len(recs) != 1 {
		t.Fatalf("tail: %+v", recs)
	}
	recs, r = s.readJSON("/p?offset=4")
	if len(recs) != 0 || string(r.Body) != "[]" {
		t.Fatalf("at next offset: %q", r.Body)
	}
	wantHeader(t, r, wire.HeaderNextOffset, "4", "at next offset")

	for _, c := range []struct {
		q      string
		status int
		code   string
	}{
		{"offset=5", 416, wire.CodeOffsetOutOfRange},
		{"offset=-1", 400, wire.CodeInvalidOffset},
		{"offset=1e3", 400, wire.CodeInvalidOffset},
		{"offset=+1", 400, wire.CodeInvalidOffset},
		{"limit=x", 400, wire.CodeBadRequest},
		{"max_bytes=-5", 400, wire.CodeBadRequest},
		{"encoding=hex", 400, wire.CodeBadRequest},
		{"live=websocket", 400, wire.CodeBadRequest},
	} {
		wantError(t, s.do("GET", "/p?"+c.q, nil), c.status, c.code, c.q)
	}

	// Cursors move forward past whatever the client echoes.
	c1, _ := strconv.ParseInt(r.Header.Get(wire.HeaderCursor), 10, 64)
	r = s.do("GET", "/p?offset=4&cursor="+strconv.FormatInt(c1+10, 10), nil)
	if c2, _ := strconv.ParseInt(r.Header.Get(wire.HeaderCursor), 10, 64); c2 != c1+11 {
		t.Fatalf("cursor after echoing %d: %d, want %d", c1+10, c2, c1+11)
	}
}

// TestReadFormatsAgree: keys, binary headers and timestamps read back the
// same in all three formats.
func TestReadFormatsAgree(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/f", "application/octet-stream")
	in := []codec.Record{{Key: []byte("k"), Value: []byte("v1"), Headers: []codec.Header{{Key: "h", Value: []byte{0xff}}}}, {Value: []byte("v2")}}
	s.do("POST", "/f", codec.Encode(in), "Content-Type", wire.MediaBatch)
	recs, _ := s.readJSON("/f")
	bin, _ := codec.Decode(s.do("GET", "/f?format=binary", nil).Body, nil, codec.Limits{})
	raw := s.do("GET", "/f?format=raw", nil).Body
	if len(recs) != 2 || len(bin) != 2 || string(raw) != "v1v2" {
		t.Fatalf("json %d, binary %d, raw %q", len(recs), len(bin), raw)
	}
	if *recs[0].Headers[0].Value != base64.StdEncoding.EncodeToString([]byte{0xff}) || recs[0].Headers[0].ValueEncoding != "base64" ||
		!bytes.Equal(bin[0].Headers[0].Value, []byte{0xff}) || recs[0].Timestamp != bin[0].Timestamp {
		t.Fatalf("formats disagree: %+v vs %+v", recs[0], bin[0])
	}
}

// TestRawReadOfJSONStreamIsBytes: the values of a JSON stream concatenated
// ({"a":1}{"b":2}) are not one JSON document, so a raw read of one is
// labelled application/octet-stream, and asking for the stream's own JSON
// type by Accept gets JSON records (application/json) or a 406, never
// concatenated values labelled as JSON.
func TestRawReadOfJSONStreamIsBytes(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	for _, ct := range []string{wire.MediaJSON, "application/ld+json"} {
		name := "/j/" + strings.ReplaceAll(ct, "/", "-")
		s.create(name, ct)
		s.do("POST", name, []byte(`{"a":1}`), "Content-Type", ct)
		s.do("POST", name, []byte(`{"b":2}`), "Content-Type", ct)
		r := s.do("GET", name+"?format=raw", nil)
		wantStatus(t, r, 200, ct+" format=raw")
		wantHeader(t, r, "Content-Type", wire.MediaOctetStream, ct+" format=raw")
		if string(r.Body) != `{"a":1}{"b":2}` {
			t.Fatalf("%s format=raw: body %q", ct, r.Body)
		}
	}
	r := s.do("GET", "/j/application-ld+json", nil, "Accept", "application/ld+json")
	wantError(t, r, 406, wire.CodeNotAcceptable, "Accept: the stream's own +json type")
	r = s.do("GET", "/j/application-ld+json", nil, "Accept", "application/ld+json, application/json;q=0.5")
	wantStatus(t, r, 200, "Accept: +json, then application/json")
	wantHeader(t, r, "Content-Type", wire.MediaJSON, "Accept: +json, then application/json")
	// Other streams keep their type on raw reads.
	s.create("/j/text", "text/plain")
	s.do("POST", "/j/text", []byte("a\n"))
	wantHeader(t, s.do("GET", "/j/text?format=raw", nil), "Content-Type", "text/plain", "text stream format=raw")
}
