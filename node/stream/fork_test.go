package stream_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

func fork(src string, offset, sub int64) *stream.ForkOptions {
	return &stream.ForkOptions{Source: src, Offset: offset, SubOffset: sub}
}

func mustCreate(t *testing.T, svc *stream.Service, name string, o stream.CreateOptions) stream.Info {
	t.Helper()
	info, created, err := svc.Create(context.Background(), name, o)
	if err != nil || !created {
		t.Fatalf("create %s: %v (created=%v)", name, err, created)
	}
	return info
}

func join(v []string) string { return strings.Join(v, "|") }

func TestForkSharesHistoryWithoutCopying(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 256<<10)
	mustCreate(t, h.svc, "/src", stream.CreateOptions{ContentType: "text/plain"})
	for _, v := range []string{"a", string(big), "c"} {
		if _, err := h.svc.Append(ctx, "/src", recs(v)); err != nil {
			t.Fatal(err)
		}
	}
	before := h.w.Stats().PayloadBytes
	info := mustCreate(t, h.svc, "/fork", stream.CreateOptions{Fork: fork("/src", -1, 0)})
	if info.NextOffset != 3 || info.ContentType != "text/plain" {
		t.Fatalf("fork info %+v: want tail 3 and the source's content type", info)
	}
	if grew := h.w.Stats().PayloadBytes - before; grew != 0 {
		t.Fatalf("creating a fork wrote %d bytes to the WAL; it must share the source's history", grew)
	}
	if _, err := h.svc.Append(ctx, "/fork", recs("F")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Append(ctx, "/src", recs("S")); err != nil {
		t.Fatal(err)
	}
	if got := join(readValues(t, h.svc, "/fork", 0)); got != "a|"+string(big)+"|c|F" {
		t.Fatalf("fork reads %.40q…", got)
	}
	if got := join(readValues(t, h.svc, "/fork", 3)); got != "F" {
		t.Fatalf("fork from its fork point reads %q", got)
	}
	if got := join(readValues(t, h.svc, "/src", 3)); got != "S" {
		t.Fatalf("source after the fork point reads %q", got)
	}
	// A fork's long-poll waits for the fork's appends, not the source's.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := h.svc.Append(ctx, "/src", recs("S2")); err != nil {
		t.Fatal(err)
	}
	if ok, err := h.svc.WaitFor(wctx, "/fork", 4); ok || err != nil {
		t.Fatalf("fork waiter woke for a source append: %v %v", ok, err)
	}
}

func TestForkAtOffsetsAndSubOffsets(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	mustCreate(t, h.svc, "/bin", stream.CreateOptions{ContentType: "application/octet-stream", Initial: recs("first")})
	if _, err := h.svc.Append(ctx, "/bin", recs("second")); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, h.svc, "/json", stream.CreateOptions{ContentType: "application/json", Initial: recs(`{"a":1}`, `{"b":2}`, `{"c":3}`, `{"d":4}`)})

	for _, tc := range []struct {
		name string
		o    *stream.ForkOptions
		want string
	}{
		{"/f0", fork("/bin", 0, 0), ""},
		{"/f1", fork("/bin", 1, 0), "first"},
		{"/f2", fork("/bin", 2, 0), "first|second"},
		{"/fb3", fork("/bin", 1, 3), "first|sec"},
		{"/fb6", fork("/bin", 1, 6), "first|second"},
		{"/fj2", fork("/json", 0, 2), `{"a":1}|{"b":2}`},
		{"/fj4", fork("/json", 0, 4), `{"a":1}|{"b":2}|{"c":3}|{"d":4}`},
	} {
		info := mustCreate(t, h.svc, tc.name, stream.CreateOptions{Fork: tc.o})
		if got := join(readValues(t, h.svc, tc.name, 0)); got != tc.want {
			t.Errorf("%s reads %q, want %q", tc.name, got, tc.want)
		}
		// The tail a fork reports is where a reader that got everything
		// continues: reading there returns nothing.
		if got := readValues(t, h.svc, tc.name, info.NextOffset); len(got) != 0 {
			t.Errorf("%s at its tail %d reads %q", tc.name, info.NextOffset, got)
		}
	}
	// Appends land after the inherited prefix; forks of forks compose cuts.
	if _, err := h.svc.Append(ctx, "/fb3", recs("OND")); err != nil {
		t.Fatal(err)
	}
	if got := join(readValues(t, h.svc, "/fb3", 0)); got != "first|sec|OND" {
		t.Fatalf("/fb3 after append: %q", got)
	}
	mustCreate(t, h.svc, "/fbb", stream.CreateOptions{Fork: fork("/fb3", 1, 2)})
	if got := join(readValues(t, h.svc, "/fbb", 0)); got != "first|se" {
		t.Fatalf("fork of a cut fork: %q", got)
	}
	if _, _, err := h.svc.Create(ctx, "/fbx", stream.CreateOptions{Fork: fork("/fb3", 1, 4)}); !errors.Is(err, stream.ErrInvalidArgument) {
		t.Fatalf("sub-offset past a cut record: %v", err)
	}

	for name, o := range map[string]*stream.ForkOptions{
		"beyond tail":          fork("/bin", 3, 0),
		"binary overshoot":     fork("/bin", 0, 6),
		"json overshoot":       fork("/json", 0, 5),
		"sub-offset at tail":   fork("/bin", -1, 1),
		"negative sub-offset":  fork("/bin", 0, -1),
		"source name is wrong": fork("no-slash", 0, 0),
	} {
		if _, _, err := h.svc.Create(ctx, "/bad", stream.CreateOptions{Fork: o}); !errors.Is(err, stream.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, _, err := h.svc.Create(ctx, "/bad", stream.CreateOptions{Fork: fork("/nope", 0, 0)}); !errors.Is(err, stream.ErrNotFound) {
		t.Errorf("missing source: %v, want ErrNotFound", err)
	}
	if _, _, err := h.svc.Create(ctx, "/bad", stream.CreateOptions{ContentType: "text/plain", Fork: fork("/json", 0, 0)}); !errors.Is(err, stream.ErrConflict) {
		t.Errorf("content type mismatch: %v, want ErrConflict", err)
	}
	// Idempotent re-create: an omitted fork offset matches; a different
	// sub-offset does not.
	if _, created, err := h.svc.Create(ctx, "/fb3", stream.CreateOptions{Fork: fork("/bin", 1, 3)}); err != nil || created {
		t.Errorf("identical fork re-create: %v %v", created, err)
	}
	if _, _, err := h.svc.Create(ctx, "/fb3", stream.CreateOptions{Fork: fork("/bin", 1, 4)}); !errors.Is(err, stream.ErrConflict) {
		t.Errorf("fork re-create with another sub-offset: %v", err)
	}
	if _, _, err := h.svc.Create(ctx, "/fb3", stream.CreateOptions{ContentType: "application/octet-stream"}); !errors.Is(err, stream.ErrConflict) {
		t.Errorf("plain re-create of a fork: %v", err)
	}
}

func TestForkProducerAndWriterStateNotInherited(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	mustCreate(t, h.svc, "/s", stream.CreateOptions{})
	p := &stream.Producer{ID: "ds:p", Epoch: 3, Seq: 0}
	if _, err := h.svc.AppendBatch(ctx, "/s", stream.AppendRequest{Records: recs("x"), Producer: p, WriterSeq: "m", Close: true}); err != nil {
		t.Fatal(err)
	}
	info := mustCreate(t, h.svc, "/f", stream.CreateOptions{Fork: fork("/s", -1, 0)})
	if info.Closed {
		t.Fatal("a fork of a closed stream starts open")
	}
	res, err := h.svc.AppendBatch(ctx, "/f", stream.AppendRequest{Records: recs("y"), Producer: &stream.Producer{ID: "ds:p", Epoch: 0, Seq: 0}, WriterSeq: "a"})
	if err != nil || res.Duplicate {
		t.Fatalf("fork append with a producer the source knew: %+v %v", res, err)
	}
}

func TestSoftDeleteAndCascadingGC(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	mustCreate(t, h.svc, "/l0", stream.CreateOptions{Initial: recs("A")})
	mustCreate(t, h.svc, "/l1", stream.CreateOptions{Fork: fork("/l0", -1, 0), Initial: recs("B")})
	mustCreate(t, h.svc, "/l2", stream.CreateOptions{Fork: fork("/l1", -1, 0), Initial: recs("C")})

	for _, name := range []string{"/l0", "/l1"} {
		if err := h.svc.Delete(ctx, name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
		if _, err := h.svc.Head(ctx, name); !errors.Is(err, stream.ErrGone) {
			t.Fatalf("head of soft-deleted %s: %v, want ErrGone", name, err)
		}
	}
	if err := h.svc.Delete(ctx, "/l1"); !errors.Is(err, stream.ErrGone) {
		t.Fatalf("second delete: %v, want ErrGone", err)
	}
	if _, _, err := h.svc.Create(ctx, "/l1", stream.CreateOptions{}); !errors.Is(err, stream.ErrConflict) {
		t.Fatalf("re-create of a soft-deleted name: %v, want ErrConflict", err)
	}
	if _, _, err := h.svc.Create(ctx, "/x", stream.CreateOptions{Fork: fork("/l1", -1, 0)}); !errors.Is(err, stream.ErrConflict) {
		t.Fatalf("fork of a soft-deleted stream: %v, want ErrConflict", err)
	}
	if got := join(readValues(t, h.svc, "/l2", 0)); got != "A|B|C" {
		t.Fatalf("fork of soft-deleted sources reads %q", got)
	}

	// The soft deletes and references survive a restart.
	h.reopen()
	if _, err := h.svc.Head(ctx, "/l0"); !errors.Is(err, stream.ErrGone) {
		t.Fatalf("after restart /l0: %v", err)
	}
	if got := join(readValues(t, h.svc, "/l2", 0)); got != "A|B|C" {
		t.Fatalf("after restart /l2 reads %q", got)
	}

	// Deleting the last fork removes the whole chain.
	if err := h.svc.Delete(ctx, "/l2"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/l0", "/l1", "/l2"} {
		if _, err := h.svc.Head(ctx, name); !errors.Is(err, stream.ErrNotFound) || errors.Is(err, stream.ErrGone) {
			t.Errorf("head %s after cascade: %v, want ErrNotFound", name, err)
		}
		if _, err := registryRecord(t, h, name); !errors.Is(err, metadata.ErrNotFound) {
			t.Errorf("registry record %s after cascade: %v", name, err)
		}
	}
	// The names are free again.
	mustCreate(t, h.svc, "/l0", stream.CreateOptions{})
}

func TestRejectedForkLeaksNoReference(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	mustCreate(t, h.svc, "/src", stream.CreateOptions{ContentType: "text/plain", Initial: recs("d")})
	if _, _, err := h.svc.Create(ctx, "/f", stream.CreateOptions{ContentType: "application/json", Fork: fork("/src", -1, 0)}); !errors.Is(err, stream.ErrConflict) {
		t.Fatal(err)
	}
	// An existing target with another config: the reference taken for the
	// attempt is given back.
	mustCreate(t, h.svc, "/g", stream.CreateOptions{ContentType: "application/json"})
	if _, _, err := h.svc.Create(ctx, "/g", stream.CreateOptions{Fork: fork("/src", -1, 0)}); !errors.Is(err, stream.ErrConflict) {
		t.Fatal(err)
	}
	if err := h.svc.Delete(ctx, "/src"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Head(ctx, "/src"); !errors.Is(err, stream.ErrNotFound) || errors.Is(err, stream.ErrGone) {
		t.Fatalf("source after delete: %v, want a hard delete (no leaked reference)", err)
	}
}

func TestStartRepairsLeakedReferences(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	mustCreate(t, h.svc, "/src", stream.CreateOptions{Initial: recs("d")})
	// Simulate a crash between taking a reference and creating the fork.
	reg := meta.NewRegistry(h.cli, "/test/")
	if _, err := reg.UpdateStream(ctx, "/src", func(m *metadata.Stream) error { m.ForkRefs += 2; return nil }); err != nil {
		t.Fatal(err)
	}
	h.reopen()
	defer startReaper(t, h.svc, stream.LifecycleOptions{})()
	if m, err := registryRecord(t, h, "/src"); err != nil || m.ForkRefs != 0 {
		t.Fatalf("after repair: %+v %v", m, err)
	}
	if err := h.svc.Delete(ctx, "/src"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.Head(ctx, "/src"); errors.Is(err, stream.ErrGone) {
		t.Fatal("source soft-deleted by a leaked reference")
	}
}

func TestForkExpiryInheritanceAndExpiredSource(t *testing.T) {
	h, clock := newClockHarness(t)
	ctx := context.Background()
	mustCreate(t, h.svc, "/src", stream.CreateOptions{TTL: 10 * time.Second, Initial: recs("a")})
	if info := mustCreate(t, h.svc, "/inherit", stream.CreateOptions{Fork: fork("/src", -1, 0)}); info.TTL != 10*time.Second {
		t.Fatalf("inherited TTL %s", info.TTL)
	}
	at := clock.Now().Add(time.Hour)
	if info := mustCreate(t, h.svc, "/own", stream.CreateOptions{ExpiresAt: at, Fork: fork("/src", -1, 0)}); !info.ExpiresAt.Equal(at) || info.TTL != 0 {
		t.Fatalf("own expiry: %+v", info)
	}
	// The source expires while forks read it: gone, not absent, and its
	// data stays readable through the forks.
	clock.Advance(8 * time.Second)
	if got := join(readValues(t, h.svc, "/own", 0)); got != "a" { // reading a fork does not touch the source
		t.Fatal(got)
	}
	clock.Advance(3 * time.Second)
	if _, err := h.svc.Head(ctx, "/src"); !errors.Is(err, stream.ErrGone) {
		t.Fatalf("expired source with forks: %v, want ErrGone", err)
	}
	if _, err := h.svc.Head(ctx, "/inherit"); !errors.Is(err, stream.ErrNotFound) {
		t.Fatalf("fork with the inherited TTL should have expired too: %v", err)
	}
	defer startReaper(t, h.svc, stream.LifecycleOptions{ReapInterval: 10 * time.Millisecond})()
	waitFor(t, func() bool {
		m, err := registryRecord(t, h, "/src")
		_, ferr := registryRecord(t, h, "/inherit")
		return err == nil && m.SoftDeleted && m.ForkRefs == 1 && errors.Is(ferr, metadata.ErrNotFound)
	})
	if got := join(readValues(t, h.svc, "/own", 0)); got != "a" {
		t.Fatalf("fork of an expired source reads %q", got)
	}
	if err := h.svc.Delete(ctx, "/own"); err != nil {
		t.Fatal(err)
	}
	if _, err := registryRecord(t, h, "/src"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("expired source after its last fork went: %v", err)
	}
}

// TestForkReadsSourceFromObjectStorage: a fork's inherited history is read
// through the source's chunk index wherever the batches live, so once the
// source is flushed to object storage and the WAL is gone, the fork still
// reads it — and new forks (sub-offsets included) resolve against objects.
func TestForkReadsSourceFromObjectStorage(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityObject)
	ctx := context.Background()
	mustCreate(t, h.svc, "/src", stream.CreateOptions{Initial: recs("alpha")})
	if _, err := h.svc.Append(ctx, "/src", recs("bravo")); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, h.svc, "/json", stream.CreateOptions{ContentType: "application/json", Initial: recs("1", "2", "3")})
	mustCreate(t, h.svc, "/f1", stream.CreateOptions{Fork: fork("/src", 1, 2)})
	if _, err := h.svc.Append(ctx, "/f1", recs("!")); err != nil {
		t.Fatal(err)
	}
	// Every ack above waited for a committed flush; drop the WAL entirely.
	h.close()
	if err := os.RemoveAll(h.dir); err != nil {
		t.Fatal(err)
	}
	h.open()
	if got := join(readValues(t, h.svc, "/f1", 0)); got != "alpha|br|!" {
		t.Fatalf("fork after restart from objects reads %q", got)
	}
	mustCreate(t, h.svc, "/f2", stream.CreateOptions{Fork: fork("/src", 1, 3)})
	mustCreate(t, h.svc, "/f3", stream.CreateOptions{Fork: fork("/json", 0, 2)})
	if got := join(readValues(t, h.svc, "/f2", 0)); got != "alpha|bra" {
		t.Fatalf("fork resolved against objects reads %q", got)
	}
	if got := join(readValues(t, h.svc, "/f3", 0)); got != "1|2" {
		t.Fatalf("JSON fork resolved against objects reads %q", got)
	}
	if _, _, err := h.svc.Create(ctx, "/f4", stream.CreateOptions{Fork: fork("/json", 0, 4)}); !errors.Is(err, stream.ErrInvalidArgument) {
		t.Fatalf("JSON sub-offset past a message in objects: %v", err)
	}
}

// TestTrimStopsAtForkPoint: a source cannot be trimmed past the offset a
// live fork still reads from it, and retention stops there too.
func TestTrimStopsAtForkPoint(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	mustCreate(t, h.svc, "/tsrc", stream.CreateOptions{})
	for i := 0; i < 5; i++ {
		if _, err := h.svc.Append(ctx, "/tsrc", []record.Record{{Value: []byte{byte(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(t, h.svc, "/tfork", stream.CreateOptions{Fork: fork("/tsrc", 3, 0)})
	four := int64(4)
	if _, err := h.svc.Configure(ctx, "/tsrc", stream.ConfigChange{TrimBefore: &four}); !errors.Is(err, stream.ErrConflict) {
		t.Fatalf("trim past the fork point: %v, want ErrConflict", err)
	}
	three := int64(3)
	if _, err := h.svc.Configure(ctx, "/tsrc", stream.ConfigChange{TrimBefore: &three}); err != nil {
		t.Fatalf("trim up to the fork point: %v", err)
	}
	page, err := h.svc.Read(ctx, "/tfork", stream.ReadOptions{})
	if err != nil || len(page.Records) != 3 {
		t.Fatalf("fork reads %d records after the source was trimmed to its fork point: %v", len(page.Records), err)
	}
}
