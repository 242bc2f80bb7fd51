package stream_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/extent"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	"github.com/PicoMQ/picomq/wal"
)

// dirTier is a minimal object store for testing the service's flush and
// recovery logic in isolation: one file per object, each stream's batches
// concatenated. The real tiering package (segment format, S3, cache) is
// tested against MinIO in tiering/ and end to end in e2e/.
type dirTier struct {
	dir    string
	mu     sync.Mutex
	index  map[string]map[uint64][2]int64 // object → stream → (offset, length)
	fail   bool
	puts   int
	delete int
	keys   []string // uploaded, in order
	sizes  []int    // their sizes
	pref   []string // Prefetch calls, in order
	// prefAtRead is, for each ReadBatches call, the Prefetch calls made
	// before it (a cold reader's demand GET and its prefetches overlap
	// only if the prefetches come first).
	prefAtRead [][]string
}

func (d *dirTier) Prefetch(ref *stream.ObjectRef) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pref = append(d.pref, ref.Key)
}

func (d *dirTier) Upload(ctx context.Context, key string, streams []tiering.StreamBatches) ([]stream.ObjectRef, int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail {
		return nil, 0, errors.New("object store down")
	}
	var data []byte
	idx := map[uint64][2]int64{}
	var out []stream.ObjectRef
	for _, s := range streams {
		start := int64(len(data))
		for _, b := range s.Batches {
			data = append(data, b...)
		}
		idx[s.Stream] = [2]int64{start, int64(len(data)) - start}
		first, _ := record.ParseHeader(s.Batches[0])
		last, _ := record.ParseHeader(s.Batches[len(s.Batches)-1])
		out = append(out, stream.ObjectRef{Key: key, Extent: extent.Extent{StreamID: s.Stream, First: first.BaseOffset, Next: last.LastOffset() + 1, Offset: start, Length: int64(len(data)) - start}})
	}
	p := filepath.Join(d.dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, 0, err
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return nil, 0, err
	}
	if d.index == nil {
		d.index = map[string]map[uint64][2]int64{}
	}
	d.index[key] = idx
	d.keys = append(d.keys, key)
	d.sizes = append(d.sizes, len(data))
	d.puts++
	return out, int64(len(data)), nil
}

func (d *dirTier) ReadBatches(ctx context.Context, ref *stream.ObjectRef, from int64, maxBytes int) ([]byte, error) {
	key, id := ref.Key, ref.StreamID
	d.mu.Lock()
	r, ok := d.index[key][id]
	d.prefAtRead = append(d.prefAtRead, slices.Clone(d.pref))
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("object %s has no stream %d", key, id)
	}
	data, err := os.ReadFile(filepath.Join(d.dir, filepath.FromSlash(key)))
	if err != nil {
		return nil, err
	}
	data = data[r[0] : r[0]+r[1]]
	// Skip batches that end before from, as the real reader does with its
	// footer index, then return at least one batch and as many more as fit
	// in maxBytes, as the real reader does.
	for len(data) >= record.HeaderSize {
		h, err := record.ParseHeader(data)
		if err != nil {
			return nil, err
		}
		if h.LastOffset() >= from {
			break
		}
		data = data[h.Size():]
	}
	n := 0
	for n < len(data) {
		h, err := record.ParseHeader(data[n:])
		if err != nil {
			return nil, err
		}
		if n > 0 && n+h.Size() > maxBytes {
			break
		}
		n += h.Size()
	}
	return data[:n], nil
}

func (d *dirTier) Delete(ctx context.Context, key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delete++
	delete(d.index, key)
	return os.Remove(filepath.Join(d.dir, filepath.FromSlash(key)))
}

type tierHarness struct {
	t      *testing.T
	dir    string
	reg    *meta.Registry
	sess   *meta.Session
	tier   *dirTier
	real   stream.Tier // instead of tier when set (a tiering.Tier)
	w      *wal.WAL
	svc    *stream.Service
	durab  string
	seal   time.Duration // seal age; 0 = 20ms
	sealB  int64         // seal size; 0 = 1 MiB
	maxObj int64         // MaxFlushBytes; 0 = default
	// afterCommit, when set, runs right after each manifest commit
	// succeeds, before the committer goes on (a flush then applies it).
	afterCommit func(metadata.Manifest)
	cancel      context.CancelFunc
	done        chan struct{}
}

func newTierHarness(t *testing.T, durability string) *tierHarness {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/tt/")
	sess, err := reg.Join(context.Background(), metadata.Member{NodeID: "n1"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h := &tierHarness{t: t, dir: t.TempDir(), reg: reg, sess: sess, tier: &dirTier{dir: t.TempDir()}, durab: durability}
	h.open()
	t.Cleanup(func() { h.close() })
	return h
}

func (h *tierHarness) open() {
	h.t.Helper()
	w, _, err := wal.Open(wal.Options{Dir: h.dir, SegmentSize: 64 << 10})
	if err != nil {
		h.t.Fatal(err)
	}
	h.w = w
	seal, sealB := h.seal, h.sealB
	if seal == 0 {
		seal = 20 * time.Millisecond
	}
	if sealB == 0 {
		sealB = 1 << 20
	}
	var tier stream.Tier = h.tier
	if h.real != nil {
		tier = h.real
	}
	svc, err := stream.Open(context.Background(), stream.Config{
		NodeID:            "n1",
		DefaultDurability: h.durab,
		Tier: stream.TierConfig{
			Tier: tier, Manifests: hookedManifests{h.reg, h}, Session: func() metadata.Lease { return meta.LeaseOf(h.sess) },
			SealMaxAge: seal, SealMaxBytes: sealB, MaxFlushBytes: h.maxObj,
		},
	}, w, h.reg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.svc = svc
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan struct{})
	go func() { svc.RunFlusher(ctx); close(h.done) }()
}

// hookedManifests is the registry with the harness's afterCommit hook
// around CommitManifest.
type hookedManifests struct {
	*meta.Registry
	h *tierHarness
}

func (m hookedManifests) CommitManifest(ctx context.Context, sess metadata.Lease, mf metadata.Manifest, replaces []string) error {
	err := m.Registry.CommitManifest(ctx, sess, mf, replaces)
	if hook := m.h.afterCommit; err == nil && hook != nil {
		hook(mf)
	}
	return err
}

func (h *tierHarness) close() {
	if h.cancel != nil {
		h.cancel()
		h.cancel = nil
		<-h.done
		h.svc.Close()
		h.w.Close()
	}
}

func readAllRecords(t *testing.T, svc *stream.Service, name string) []record.Record {
	t.Helper()
	var all []record.Record
	for off := int64(0); ; {
		page, err := svc.Read(context.Background(), name, stream.ReadOptions{Offset: off, MaxRecords: 7})
		if err != nil {
			t.Fatalf("read %s at %d: %v", name, off, err)
		}
		all = append(all, page.Records...)
		off = page.NextOffset
		if page.UpToDate {
			return all
		}
	}
}

// TestFlushThenRecoverWithoutWAL: data flushed to objects comes back after a
// restart with the WAL directory deleted, and producer state and closure
// come back from the manifest snapshots.
func TestFlushThenRecoverWithoutWAL(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityObject)
	ctx := context.Background()
	for s := 0; s < 5; s++ {
		name := fmt.Sprintf("/s%d", s)
		if _, _, err := h.svc.Create(ctx, name, stream.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			_, err := h.svc.AppendBatch(ctx, name, stream.AppendRequest{
				Records:  []record.Record{{Value: []byte(fmt.Sprintf("%s-%d", name, i))}, {Value: []byte("pair")}},
				Producer: &stream.Producer{ID: "pico:p", Seq: uint64(i)},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := h.svc.AppendBatch(ctx, "/s0", stream.AppendRequest{Close: true}); err != nil {
		t.Fatal(err)
	}
	// With object durability every ack above waited for a committed flush.
	h.close()
	if err := os.RemoveAll(h.dir); err != nil {
		t.Fatal(err)
	}
	h.open()
	for s := 0; s < 5; s++ {
		name := fmt.Sprintf("/s%d", s)
		recs := readAllRecords(t, h.svc, name)
		if len(recs) != 40 {
			t.Fatalf("%s: %d records after restart without WAL, want 40", name, len(recs))
		}
		for i := 0; i < 20; i++ {
			if got := string(recs[2*i].Value); got != fmt.Sprintf("%s-%d", name, i) || recs[2*i].Offset != int64(2*i) {
				t.Fatalf("%s record %d = %q at %d", name, 2*i, got, recs[2*i].Offset)
			}
		}
		dup, err := h.svc.AppendBatch(ctx, name, stream.AppendRequest{
			Records: []record.Record{{Value: []byte("retry")}}, Producer: &stream.Producer{ID: "pico:p", Seq: 19},
		})
		if s == 0 {
			if err != nil || !dup.Closed {
				// Closed stream: a non-closing tuple is rejected.
				if !errors.Is(err, stream.ErrStreamClosed) {
					t.Fatalf("/s0 after restart: %+v %v", dup, err)
				}
			}
			continue
		}
		if err != nil || !dup.Duplicate || dup.FirstOffset != 38 {
			t.Fatalf("%s: retry of seq 19 after restart: %+v %v", name, dup, err)
		}
	}
	info, err := h.svc.Head(ctx, "/s0")
	if err != nil || !info.Closed {
		t.Fatalf("/s0 closure lost: %+v %v", info, err)
	}
}

// TestWALTruncatedAfterFlush: once flushed, old WAL segments are deleted.
func TestWALTruncatedAfterFlush(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityLocal)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/big", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 4096)
	for i := 0; i < 100; i++ { // ~400 KiB over 64 KiB segments
		if _, err := h.svc.Append(ctx, "/big", []record.Record{{Value: val}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.svc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ents, _ := filepath.Glob(filepath.Join(h.dir, "*.wal"))
		if len(ents) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("WAL still has segments %v after flush", ents)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if recs := readAllRecords(t, h.svc, "/big"); len(recs) != 100 {
		t.Fatalf("%d records readable after truncation", len(recs))
	}
}

// TestObjectStoreDownLocalAcksContinue: with durability local, appends keep
// succeeding while uploads fail, and everything is flushed once the store is
// back.
func TestObjectStoreDownLocalAcksContinue(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityLocal)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/d", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.tier.mu.Lock()
	h.tier.fail = true
	h.tier.mu.Unlock()
	for i := 0; i < 50; i++ {
		if _, err := h.svc.Append(ctx, "/d", []record.Record{{Value: []byte{byte(i)}}}); err != nil {
			t.Fatalf("append while store down: %v", err)
		}
	}
	if err := h.svc.Flush(ctx); err == nil {
		t.Fatal("flush succeeded with the store down")
	}
	h.tier.mu.Lock()
	h.tier.fail = false
	h.tier.mu.Unlock()
	if err := h.svc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.close()
	os.RemoveAll(h.dir)
	h.open()
	if recs := readAllRecords(t, h.svc, "/d"); len(recs) != 50 {
		t.Fatalf("%d records after the store came back and the WAL was removed", len(recs))
	}
}

// TestGCDeletesObjectsOfDeletedStreams: after a stream is deleted, the
// objects that held only its data are removed from storage, and the
// manifests with them; objects shared with a live stream stay.
func TestGCDeletesObjectsOfDeletedStreams(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityObject)
	ctx := context.Background()
	for _, n := range []string{"/keep", "/drop"} {
		if _, _, err := h.svc.Create(ctx, n, stream.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// One object holding only /drop, then one shared by both.
	if _, err := h.svc.Append(ctx, "/drop", []record.Record{{Value: []byte("d0")}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, n := range []string{"/keep", "/drop"} {
		wg.Add(1)
		go func(n string) {
			defer wg.Done()
			if _, err := h.svc.Append(ctx, n, []record.Record{{Value: []byte("x")}}); err != nil {
				t.Error(err)
			}
		}(n)
	}
	wg.Wait()
	before, err := h.reg.Manifests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Delete(ctx, "/drop"); err != nil {
		t.Fatal(err)
	}
	n, err := h.svc.CollectGarbage(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	after, err := h.reg.Manifests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || len(after) >= len(before) {
		t.Fatalf("gc deleted %d objects; manifests %d → %d", n, len(before), len(after))
	}
	for _, m := range after {
		if _, err := os.Stat(filepath.Join(h.tier.dir, filepath.FromSlash(m.Object))); err != nil {
			t.Fatalf("object %s of a remaining manifest is gone: %v", m.Object, err)
		}
	}
	if recs := readAllRecords(t, h.svc, "/keep"); len(recs) != 1 {
		t.Fatalf("/keep lost data to gc: %d records", len(recs))
	}
}

// TestCompactionMergesFlushObjects: many small flush objects become one,
// the manifests with them; reads (also after a restart without the WAL)
// see the same records, and the replaced objects are deleted.
func TestCompactionMergesFlushObjects(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityObject)
	ctx := context.Background()
	for _, n := range []string{"/a", "/b", "/gone"} {
		if _, _, err := h.svc.Create(ctx, n, stream.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 30; i++ {
		for _, n := range []string{"/a", "/b", "/gone"} {
			if _, err := h.svc.AppendBatch(ctx, n, stream.AppendRequest{
				Records:  []record.Record{{Value: []byte(fmt.Sprintf("%s-%d", n, i))}},
				Producer: &stream.Producer{ID: "pico:x", Seq: uint64(i)},
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := h.svc.Delete(ctx, "/gone"); err != nil {
		t.Fatal(err)
	}
	before, _ := h.reg.Manifests(ctx)
	total := 0
	for {
		n, err := h.svc.Compact(ctx, stream.CompactConfig{MaxManifests: 2, DeleteDelay: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	after, _ := h.reg.Manifests(ctx)
	if total == 0 || len(after) > 2 {
		t.Fatalf("compaction replaced %d manifests: %d before, %d after", total, len(before), len(after))
	}
	check := func() {
		for _, n := range []string{"/a", "/b"} {
			recs := readAllRecords(t, h.svc, n)
			if len(recs) != 30 {
				t.Fatalf("%s: %d records after compaction", n, len(recs))
			}
			for i, r := range recs {
				if string(r.Value) != fmt.Sprintf("%s-%d", n, i) {
					t.Fatalf("%s offset %d = %q", n, i, r.Value)
				}
			}
		}
	}
	check()
	// Replaced objects disappear after the delay.
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.tier.mu.Lock()
		live := len(h.tier.index)
		h.tier.mu.Unlock()
		if live <= len(after) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d objects remain for %d manifests", live, len(after))
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.close()
	os.RemoveAll(h.dir)
	h.open()
	check()
	dup, err := h.svc.AppendBatch(ctx, "/a", stream.AppendRequest{
		Records: []record.Record{{Value: []byte("again")}}, Producer: &stream.Producer{ID: "pico:x", Seq: 29},
	})
	if err != nil || !dup.Duplicate || dup.FirstOffset != 29 {
		t.Fatalf("producer state after compaction and restart: %+v %v", dup, err)
	}
}

// TestCompactionBesideAFlushNotYetApplied: a compaction that lists the
// manifest a flush has just committed, before the flush has applied it to
// the stream's chunk index, must not merge that range: its index still
// holds the range as WAL chunks, and the merged chunk laid over them was
// dropped again when the flush applied, leaving the node's index with a
// hole over everything the compaction merged (readers on the owner were
// moved past records object storage holds: the soak's gap violations).
func TestCompactionBesideAFlushNotYetApplied(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityObject)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/a", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	appendOne := func(i int) {
		t.Helper()
		if _, err := h.svc.AppendBatch(ctx, "/a", stream.AppendRequest{
			Records: []record.Record{{Value: []byte(fmt.Sprintf("r%d", i))}}, Producer: &stream.Producer{ID: "pico:x", Seq: uint64(i)},
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 { // `object`: each append is its own flush
		appendOne(i)
	}
	compacted := 0
	h.afterCommit = func(m metadata.Manifest) {
		if m.Level != 0 || compacted != 0 {
			return // the compaction's own commit, or a later flush
		}
		n, err := h.svc.Compact(ctx, stream.CompactConfig{MaxManifests: 1, DeleteDelay: time.Hour})
		if err != nil {
			t.Errorf("compaction between the flush's commit and its apply: %v", err)
		}
		compacted = max(n, 1)
	}
	appendOne(10)
	h.afterCommit = nil
	if compacted == 0 {
		t.Fatal("the compaction did not run between a flush's commit and its apply")
	}
	recs := readAllRecords(t, h.svc, "/a")
	if len(recs) != 11 {
		t.Fatalf("the owner reads %d records after the compaction, want 11: %v", len(recs), recs)
	}
	for i, r := range recs {
		if r.Offset != int64(i) || string(r.Value) != fmt.Sprintf("r%d", i) {
			t.Fatalf("record %d: offset %d %q", i, r.Offset, r.Value)
		}
	}
	// And the next pass merges it once applied.
	if n, err := h.svc.Compact(ctx, stream.CompactConfig{MaxManifests: 1, DeleteDelay: time.Hour}); err != nil || n == 0 {
		t.Fatalf("compaction after the flush applied: %d, %v", n, err)
	}
	if recs := readAllRecords(t, h.svc, "/a"); len(recs) != 11 {
		t.Fatalf("%d records after the second compaction", len(recs))
	}
}

// TestCompactionReadsObjectsWhole: with a tiering.Tier, compaction reads
// each input object with one request around the read cache (no cache
// request, so no read-ahead past the objects' ends), and the merged
// object holds every record.
func TestCompactionReadsObjectsWhole(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityObject)
	h.close()
	real, err := tiering.NewTier(objstoretest.FileStore(t), tiering.TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	h.real = real
	h.open()
	ctx := context.Background()
	names := []string{"/a", "/b", "/c"}
	for _, n := range names {
		if _, _, err := h.svc.Create(ctx, n, stream.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		for _, n := range names {
			if _, err := h.svc.AppendBatch(ctx, n, stream.AppendRequest{Records: []record.Record{{Value: []byte(fmt.Sprintf("%s-%d", n, i))}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := real.CacheStats().Requests
	n, err := h.svc.Compact(ctx, stream.CompactConfig{MaxManifests: 2, DeleteDelay: time.Hour})
	if err != nil || n < 2 {
		t.Fatalf("compaction replaced %d manifests: %v", n, err)
	}
	if got := real.CacheStats().Requests - before; got != 0 {
		t.Errorf("compaction made %d read-cache requests, want none", got)
	}
	for _, name := range names {
		recs := readAllRecords(t, h.svc, name)
		if len(recs) != 20 {
			t.Fatalf("%s: %d records after compaction", name, len(recs))
		}
		for i, r := range recs {
			if string(r.Value) != fmt.Sprintf("%s-%d", name, i) {
				t.Fatalf("%s offset %d = %q", name, i, r.Value)
			}
		}
	}
}

// TestGCDeletesTrimmedObjects: objects holding only offsets below a stream's
// start offset (after a trim) are deleted; reads above it are unaffected.
func TestGCDeletesTrimmedObjects(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityObject)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/t", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ { // object durability: one flush object each
		if _, err := h.svc.Append(ctx, "/t", []record.Record{{Value: []byte(fmt.Sprint(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := h.reg.Manifests(ctx)
	trim := int64(2)
	if _, err := h.svc.Configure(ctx, "/t", stream.ConfigChange{TrimBefore: &trim}); err != nil {
		t.Fatal(err)
	}
	n, err := h.svc.CollectGarbage(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := h.reg.Manifests(ctx)
	if n != 2 || len(after) != len(before)-2 {
		t.Fatalf("gc after trim to 2: deleted %d objects, manifests %d → %d", n, len(before), len(after))
	}
	page, err := h.svc.Read(ctx, "/t", stream.ReadOptions{Offset: 2})
	if err != nil || len(page.Records) != 2 || string(page.Records[0].Value) != "2" {
		t.Fatalf("read above the trim point: %+v %v", page.Records, err)
	}
}

// TestReadSpansLargeObjectChunks: after a restart every chunk of a stream
// is a whole object range, much larger than one read. A read whose record
// limit is not the binding one must continue inside the chunk it stopped
// in, never jump to the next chunk and skip records.
func TestReadSpansLargeObjectChunks(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityLocal)
	h.close()
	h.seal = time.Hour // flushes happen when the test says so
	h.open()
	ctx := context.Background()
	const name = "/big"
	if _, _, err := h.svc.Create(ctx, name, stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("v"), 1000)
	const flushes, batches, perBatch = 3, 12, 50
	for f := 0; f < flushes; f++ {
		for b := 0; b < batches; b++ {
			recs := make([]record.Record, perBatch)
			for i := range recs {
				recs[i] = record.Record{Value: value}
			}
			if _, err := h.svc.AppendBatch(ctx, name, stream.AppendRequest{Records: recs}); err != nil {
				t.Fatal(err)
			}
		}
		// One object range of many batches per flush.
		if err := h.svc.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h.close()
	if err := os.RemoveAll(h.dir); err != nil {
		t.Fatal(err)
	}
	h.open()
	const total = flushes * batches * perBatch
	// Objects far smaller than the read-ahead window (about 600 KB each
	// here) are read faster than a GET's round trip: the first page
	// already has every following object within reach prefetched, not
	// only the next one once the reader is deep into the current one.
	if _, err := h.svc.Read(ctx, name, stream.ReadOptions{Offset: 0, MaxBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	h.tier.mu.Lock()
	keys, first := h.tier.keys, slices.Clone(h.tier.pref)
	var atFirstRead []string
	if len(h.tier.prefAtRead) > 0 {
		atFirstRead = h.tier.prefAtRead[0]
	}
	h.tier.mu.Unlock()
	if len(keys) != flushes || !slices.Contains(first, keys[1]) || !slices.Contains(first, keys[2]) || slices.Contains(first, keys[0]) {
		t.Errorf("after the first page prefetched %v; want the 2nd and 3rd of %v", first, keys)
	}
	// And they were asked for before the first object's own read, which
	// on a cold node waits a GET's round trip: the following objects'
	// GETs run during it rather than after it.
	if len(keys) == flushes && (!slices.Contains(atFirstRead, keys[1]) || !slices.Contains(atFirstRead, keys[2])) {
		t.Errorf("before the first object read prefetched %v; want the 2nd and 3rd of %v", atFirstRead, keys)
	}
	for _, maxBytes := range []int{64 << 10, 1 << 20} {
		next, reads := int64(0), 0
		for {
			page, err := h.svc.Read(ctx, name, stream.ReadOptions{Offset: next, MaxRecords: 10000, MaxBytes: maxBytes})
			if err != nil {
				t.Fatal(err)
			}
			reads++
			for _, r := range page.Records {
				if r.Offset != next {
					t.Fatalf("max bytes %d: record at offset %d, want %d (records skipped)", maxBytes, r.Offset, next)
				}
				next++
			}
			if page.NextOffset != next {
				t.Fatalf("max bytes %d: next offset %d after record %d", maxBytes, page.NextOffset, next-1)
			}
			if page.UpToDate {
				break
			}
			if reads > total {
				t.Fatalf("max bytes %d: no progress at %d", maxBytes, next)
			}
		}
		if next != total {
			t.Fatalf("max bytes %d: read %d records, want %d", maxBytes, next, total)
		}
	}
	// The sequential reader got each following object prefetched before
	// crossing into it, and never the first one.
	h.tier.mu.Lock()
	pref := h.tier.pref
	h.tier.mu.Unlock()
	if len(keys) != flushes {
		t.Fatalf("%d objects uploaded, want %d", len(keys), flushes)
	}
	seen := map[string]bool{}
	for _, k := range pref {
		seen[k] = true
	}
	if seen[keys[0]] || !seen[keys[1]] || !seen[keys[2]] {
		t.Errorf("prefetched %v; want the 2nd and 3rd of %v", pref, keys)
	}
}

// TestSealBySizeMakesFullObjects: under steady appends with the age out of
// the way, every object but the last holds at least --seal-max-bytes:
// appends arriving during a flush must not trigger a small follow-up
// flush, and the age counts from the oldest unflushed append.
func TestSealBySizeMakesFullObjects(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityLocal)
	h.close()
	h.seal, h.sealB = time.Hour, 64<<10
	h.open()
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/seal", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	value := bytes.Repeat([]byte("s"), 1000)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := 0; i < 60; i++ {
				recs := make([]record.Record, 4)
				for k := range recs {
					recs[k] = record.Record{Value: value}
				}
				if _, err := h.svc.AppendBatch(ctx, "/seal", stream.AppendRequest{Records: recs}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	h.close() // the final flush takes the rest
	h.tier.mu.Lock()
	sizes := h.tier.sizes
	h.tier.mu.Unlock()
	if len(sizes) < 5 {
		t.Fatalf("%d objects for ~1 MiB with a 64 KiB seal size", len(sizes))
	}
	for i, n := range sizes[:len(sizes)-1] {
		if n < 60<<10 {
			t.Errorf("object %d of %d holds %d bytes, below the seal size: %v", i, len(sizes), n, sizes)
			break
		}
	}
}

// TestBacklogFlushesInBoundedObjects: after an object-store outage the
// backlog of many streams goes up as several objects of about
// MaxFlushBytes (cut between streams), not as one huge object, and every
// record comes back from them after a restart without the WAL.
func TestBacklogFlushesInBoundedObjects(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityLocal)
	h.close()
	h.maxObj = 32 << 10
	h.open()
	ctx := context.Background()
	h.tier.mu.Lock()
	h.tier.fail = true // object storage down
	h.tier.mu.Unlock()
	const streams, perStream = 12, 10
	value := bytes.Repeat([]byte("b"), 1000)
	for s := 0; s < streams; s++ {
		name := fmt.Sprintf("/backlog/%d", s)
		if _, _, err := h.svc.Create(ctx, name, stream.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < perStream; i++ {
			if _, err := h.svc.AppendBatch(ctx, name, stream.AppendRequest{Records: []record.Record{{Value: value}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.tier.mu.Lock()
	h.tier.fail = false
	h.tier.mu.Unlock()
	h.close() // the final flushes upload the whole backlog
	h.tier.mu.Lock()
	sizes := h.tier.sizes
	h.tier.mu.Unlock()
	total := 0
	for _, n := range sizes {
		total += n
		if n > 32<<10+perStream*1100 {
			t.Errorf("object of %d bytes: more than the cap plus one stream", n)
		}
	}
	if len(sizes) < 3 || total < streams*perStream*1000 {
		t.Fatalf("backlog of %d streams went up as %d objects of %v", streams, len(sizes), sizes)
	}
	if err := os.RemoveAll(h.dir); err != nil {
		t.Fatal(err)
	}
	h.open()
	for s := 0; s < streams; s++ {
		if recs := readAllRecords(t, h.svc, fmt.Sprintf("/backlog/%d", s)); len(recs) != perStream {
			t.Fatalf("stream %d: %d records after restart without WAL, want %d", s, len(recs), perStream)
		}
	}
}

// TestRecoveredDataIsFlushedWithoutNewAppends: entries replayed from the
// WAL that never reached object storage count as pending from recovery on,
// so they are flushed within a seal age even if no append ever follows.
func TestRecoveredDataIsFlushedWithoutNewAppends(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityLocal)
	ctx := context.Background()
	h.tier.mu.Lock()
	h.tier.fail = true
	h.tier.mu.Unlock()
	if _, _, err := h.svc.Create(ctx, "/recovered", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := h.svc.AppendBatch(ctx, "/recovered", stream.AppendRequest{Records: []record.Record{{Value: []byte("r")}}}); err != nil {
			t.Fatal(err)
		}
	}
	h.close() // its final flush fails: the data stays in the WAL
	h.tier.mu.Lock()
	h.tier.fail = false
	puts := h.tier.puts
	h.tier.mu.Unlock()
	if puts != 0 {
		t.Fatalf("%d objects uploaded while the store was down", puts)
	}
	h.open()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.tier.mu.Lock()
		puts = h.tier.puts
		h.tier.mu.Unlock()
		if puts > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("recovered data not flushed 10s after restart (seal age 20ms)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.close()
	if err := os.RemoveAll(h.dir); err != nil {
		t.Fatal(err)
	}
	h.open()
	if recs := readAllRecords(t, h.svc, "/recovered"); len(recs) != 5 {
		t.Fatalf("%d records from object storage, want 5", len(recs))
	}
}
