package pico

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

func TestListStreamsPaginated(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	for _, n := range []string{"/a/1", "/a/2", "/a/3", "/ab", "/b/1"} {
		s.create(n, "text/plain")
	}
	s.do("POST", "/a/2", []byte("x"))
	list := func(q string) listJSON {
		t.Helper()
		r := s.do("GET", "/_streams?"+q, nil)
		wantStatus(t, r, 200, "list "+q)
		var l listJSON
		r.json(t, &l)
		return l
	}
	names := func(l listJSON) string {
		var n []string
		for _, s := range l.Streams {
			n = append(n, s.Name)
		}
		return strings.Join(n, ",")
	}
	if l := list(""); names(l) != "/a/1,/a/2,/a/3,/ab,/b/1" || l.NextCursor != "" {
		t.Fatalf("list all: %s cursor %q", names(l), l.NextCursor)
	}
	if l := list("prefix=/a/"); names(l) != "/a/1,/a/2,/a/3" {
		t.Fatalf("prefix /a/: %s", names(l))
	}
	l := list("prefix=/a&limit=2")
	if names(l) != "/a/1,/a/2" || l.NextCursor == "" {
		t.Fatalf("page 1: %s cursor %q", names(l), l.NextCursor)
	}
	if l.Streams[1].NextOffset != 1 || l.Streams[1].KafkaTopic != "a.2" || l.Streams[1].ContentType != "text/plain" {
		t.Fatalf("listed stream %+v", l.Streams[1])
	}
	// A stream created between pages does not disturb the cursor.
	s.create("/a/0", "text/plain")
	l = list("prefix=/a&limit=2&cursor=" + l.NextCursor)
	if names(l) != "/a/3,/ab" || l.NextCursor != "" {
		t.Fatalf("page 2: %s cursor %q", names(l), l.NextCursor)
	}
	for _, q := range []string{"limit=0", "limit=x", "cursor=!!!", "cursor=Zm9v", "prefix=a"} {
		wantError(t, s.do("GET", "/_streams?"+q, nil), 400, wire.CodeBadRequest, "list "+q)
	}
	if l := list("limit=100000"); len(l.Streams) != 6 {
		t.Fatalf("a huge limit is capped, not refused: %d streams", len(l.Streams))
	}
	wantError(t, s.do("POST", "/_streams", nil), 405, wire.CodeMethodNotAllowed, "POST /_streams")
	wantError(t, s.do("GET", "/_nothing", nil), 404, wire.CodeNotFoundRoute, "unknown admin path")
}

func TestDescribeAndPatch(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/orders/1", "application/json")
	s.create("/other", "text/plain", wire.HeaderKafkaTopic, "taken")

	r := s.do("GET", "/_streams/orders/1", nil)
	wantStatus(t, r, 200, "describe")
	var d streamJSON
	r.json(t, &d)
	if d.Name != "/orders/1" || d.KafkaTopic != "orders.1" || d.ContentType != "application/json" || d.NextOffset != 0 || d.CreatedAt.IsZero() {
		t.Fatalf("describe %+v", d)
	}
	wantError(t, s.do("GET", "/_streams/nope", nil), 404, wire.CodeNotFound, "describe missing")

	patch := func(body string, hdrs ...string) resp {
		return s.do("PATCH", "/_streams/orders/1", []byte(body), append([]string{"Content-Type", wire.MediaMergePatch}, hdrs...)...)
	}
	r = patch(`{"kafkaTopic":"orders-v2","retentionMs":60000,"retentionBytes":1048576}`)
	wantStatus(t, r, 200, "patch")
	r.json(t, &d)
	if d.KafkaTopic != "orders-v2" || d.RetentionMs != 60000 || d.RetentionBytes != 1048576 {
		t.Fatalf("patched %+v", d)
	}
	h := s.do("HEAD", "/orders/1", nil)
	wantHeader(t, h, wire.HeaderKafkaTopic, "orders-v2", "HEAD after patch")
	wantHeader(t, h, wire.HeaderRetentionMs, "60000", "HEAD after patch")
	// The old alias is free again; the new one is taken.
	s.create("/x", "text/plain", wire.HeaderKafkaTopic, "orders.1")
	wantError(t, s.do("PUT", "/y", nil, wire.HeaderKafkaTopic, "orders-v2"), 409, wire.CodeTopicConflict, "create on a patched alias")

	wantError(t, patch(`{"kafkaTopic":"taken"}`), 409, wire.CodeTopicConflict, "patch to a taken alias")
	wantError(t, patch(`{"kafkaTopic":"no spaces"}`), 400, wire.CodeInvalidTopic, "invalid alias")
	for _, bad := range []string{`{"retentionMs":-1}`, `{"retentionMs":"1h"}`, `{"trimBefore":null}`, `{"color":"red"}`, `[]`, `null`, `{} {}`} {
		wantError(t, patch(bad), 400, wire.CodeBadRequest, "patch "+bad)
	}
	wantError(t, s.do("PATCH", "/_streams/orders/1", []byte(`{}`), "Content-Type", "text/plain"), 415, wire.CodeUnsupportedMedia, "patch as text")
	wantError(t, s.do("PATCH", "/_streams/nope", []byte(`{}`)), 404, wire.CodeNotFound, "patch missing")
	wantError(t, s.do("DELETE", "/_streams/orders/1", nil), 405, wire.CodeMethodNotAllowed, "DELETE via admin")

	// null removes, and an empty object changes nothing.
	r = patch(`{"kafkaTopic":null,"retentionMs":null}`)
	d = streamJSON{}
	r.json(t, &d)
	if d.KafkaTopic != "" || d.RetentionMs != 0 || d.RetentionBytes != 1048576 {
		t.Fatalf("after null patch %+v", d)
	}
	if h := s.do("HEAD", "/orders/1", nil); h.Header.Get(wire.HeaderKafkaTopic) != "" {
		t.Fatal("removed alias still in HEAD")
	}
	wantStatus(t, patch(`{}`), 200, "empty patch")

	// Reserved names are not client-writable.
	wantError(t, s.do("PATCH", "/_streams/_sys/x", []byte(`{"kafkaTopic":"sys"}`)), 403, wire.CodeReservedName, "patch of a reserved name")

	// Config survives a restart.
	s.restart()
	r = s.do("GET", "/_streams/orders/1", nil)
	d = streamJSON{}
	r.json(t, &d)
	if d.KafkaTopic != "" || d.RetentionBytes != 1048576 {
		t.Fatalf("after restart %+v", d)
	}
}

func TestTrim(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/t", "text/plain")
	for i := 0; i < 5; i++ {
		s.do("POST", "/t", []byte(fmt.Sprint(i)))
	}
	trim := func(n string) resp {
		return s.do("PATCH", "/_streams/t", []byte(`{"trimBefore":`+n+`}`), "Content-Type", wire.MediaJSON)
	}
	r := trim("3")
	wantStatus(t, r, 200, "trim")
	var d streamJSON
	r.json(t, &d)
	if d.StartOffset != 3 || d.NextOffset != 5 {
		t.Fatalf("after trim %+v", d)
	}
	wantHeader(t, s.do("HEAD", "/t", nil), wire.HeaderStartOffset, "3", "HEAD after trim")

	// Reads below the start offset: 410 with the start offset.
	r = s.do("GET", "/t?offset=1", nil)
	e := wantError(t, r, 410, wire.CodeOffsetTrimmed, "read below start")
	wantHeader(t, r, wire.HeaderStartOffset, "3", "read below start")
	if e.StartOffset == nil || *e.StartOffset != 3 {
		t.Fatalf("trimmed error body %+v", e)
	}
	wantError(t, s.do("GET", "/t?offset=0&live=sse", nil), 410, wire.CodeOffsetTrimmed, "SSE below start")
	// Without an offset a read starts at the start offset.
	recs, r := s.readJSON("/t")
	if len(recs) != 2 || recs[0].Offset != 3 {
		t.Fatalf("read from start: %+v", recs)
	}
	wantHeader(t, r, wire.HeaderStartOffset, "3", "read from start")

	// The start offset never moves back; beyond the end is 416.
	r = trim("1")
	r.json(t, &d)
	if d.StartOffset != 3 {
		t.Fatalf("trim backwards moved the start to %d", d.StartOffset)
	}
	wantError(t, trim("6"), 416, wire.CodeOffsetOutOfRange, "trim past the end")
	wantStatus(t, trim("5"), 200, "trim everything")
	recs, _ = s.readJSON("/t")
	if len(recs) != 0 {
		t.Fatalf("fully trimmed stream returned %+v", recs)
	}
	// Appends continue at the next offset.
	wantHeader(t, s.do("POST", "/t", []byte("5")), wire.HeaderOffset, "5", "append after trim")

	// The trim is durable.
	s.restart()
	wantHeader(t, s.do("HEAD", "/t", nil), wire.HeaderStartOffset, "5", "HEAD after restart")
	wantError(t, s.do("GET", "/t?offset=4", nil), 410, wire.CodeOffsetTrimmed, "read below start after restart")
}

// fakeClock is a settable clock for retention tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestRetentionByTimeAndSize(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	s := newServer(t, Config{}, stream.Config{Now: clock.Now})
	s.create("/rt", "text/plain", wire.HeaderRetentionMs, "60000")
	s.do("POST", "/rt", []byte("old-1"))
	s.do("POST", "/rt", []byte(`[{"value":"old-2"},{"value":"old-3"}]`), "Content-Type", wire.MediaBatchJSON)
	clock.Add(50 * time.Second)
	s.do("POST", "/rt", []byte("new-1"))
	clock.Add(20 * time.Second) // the first two appends are now 70s old

	ctx := context.Background()
	s.env.Svc.ApplyRetention(ctx)
	wantHeader(t, s.do("HEAD", "/rt", nil), wire.HeaderStartOffset, "3", "time retention")
	recs, _ := s.readJSON("/rt")
	if len(recs) != 1 || *recs[0].Value != "new-1" {
		t.Fatalf("after time retention: %+v", recs)
	}
	wantError(t, s.do("GET", "/rt?offset=0", nil), 410, wire.CodeOffsetTrimmed, "read of expired data")
	clock.Add(time.Hour)
	s.env.Svc.ApplyRetention(ctx)
	wantHeader(t, s.do("HEAD", "/rt", nil), wire.HeaderStartOffset, "4", "everything expired")

	// Size: batches are dropped oldest first until the rest fits; the
	// newest batch always stays.
	s.create("/rs", "text/plain")
	for i := 0; i < 10; i++ {
		s.do("POST", "/rs", []byte(strings.Repeat("x", 1000)))
	}
	// Each append is one ~1.1 KB batch: 3500 bytes keep three of them.
	s.do("PATCH", "/_streams/rs", []byte(`{"retentionBytes":3500}`))
	s.env.Svc.ApplyRetention(ctx)
	wantHeader(t, s.do("HEAD", "/rs", nil), wire.HeaderStartOffset, "7", "size retention")
	s.do("PATCH", "/_streams/rs", []byte(`{"retentionBytes":1}`))
	s.env.Svc.ApplyRetention(ctx)
	r := s.do("HEAD", "/rs", nil)
	wantHeader(t, r, wire.HeaderStartOffset, "9", "size retention below one batch")
	if recs, _ := s.readJSON("/rs"); len(recs) != 1 {
		t.Fatalf("size retention must keep the newest batch: %d records", len(recs))
	}
	// Retention is durable across restarts like a trim.
	s.restart()
	wantHeader(t, s.do("HEAD", "/rs", nil), wire.HeaderStartOffset, "9", "after restart")
}

// TestCompactionSetting: a stream becomes compacted by key at create
// (Pico-Compaction, Kafka config names) or by PATCH "compaction"; the
// description lists the resolved settings; bad values are 400s; null
// turns compaction off.
func TestCompactionSetting(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/kv/1", "text/plain", wire.HeaderCompaction, "cleanup.policy=compact,delete; min.compaction.lag.ms=10")
	var d streamJSON
	s.do("GET", "/_streams/kv/1", nil).json(t, &d)
	if d.Compaction["cleanup.policy"] != "compact,delete" || d.Compaction["min.compaction.lag.ms"] != "10" ||
		d.Compaction["delete.retention.ms"] != "86400000" {
		t.Fatalf("created compaction %v", d.Compaction)
	}
	for _, bad := range []string{"cleanup.policy=shred", "min.cleanable.dirty.ratio=2", "retention.ms=1", "compact"} {
		wantError(t, s.do("PUT", "/kv/bad", nil, wire.HeaderCompaction, bad), 400, wire.CodeBadRequest, "create with "+bad)
	}
	patch := func(body string) resp {
		return s.do("PATCH", "/_streams/kv/2", []byte(body), "Content-Type", wire.MediaMergePatch)
	}
	s.create("/kv/2", "text/plain")
	r := patch(`{"compaction":{"cleanup.policy":"compact","delete.retention.ms":0,"min.cleanable.dirty.ratio":"0.1"}}`)
	wantStatus(t, r, 200, "patch compaction")
	d = streamJSON{}
	r.json(t, &d)
	if d.Compaction["cleanup.policy"] != "compact" || d.Compaction["delete.retention.ms"] != "0" || d.Compaction["min.cleanable.dirty.ratio"] != "0.1" {
		t.Fatalf("patched compaction %v", d.Compaction)
	}
	// A later PATCH of one config keeps the others.
	r = patch(`{"compaction":{"segment.ms":5000}}`)
	d = streamJSON{}
	r.json(t, &d)
	if d.Compaction["segment.ms"] != "5000" || d.Compaction["delete.retention.ms"] != "0" {
		t.Fatalf("second patch %v", d.Compaction)
	}
	for _, bad := range []string{`{"compaction":{"cleanup.policy":"x"}}`, `{"compaction":{"retention.ms":1}}`, `{"compaction":[]}`, `{"compaction":{"segment.ms":0}}`} {
		wantError(t, patch(bad), 400, wire.CodeBadRequest, "patch "+bad)
	}
	r = patch(`{"compaction":null}`)
	d = streamJSON{}
	r.json(t, &d)
	if d.Compaction != nil {
		t.Fatalf("compaction after null %v", d.Compaction)
	}
}
