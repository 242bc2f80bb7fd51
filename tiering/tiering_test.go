package tiering

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/tiering/cache"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	"github.com/PicoMQ/picomq/tiering/segment"
	"github.com/PicoMQ/picomq/tiering/segment/segmenttest"
)

func stores() map[string]objstoretest.NewStore {
	return map[string]objstoretest.NewStore{
		"file":  objstoretest.FileStore,
		"minio": func(t *testing.T) objstore.Store { return objstoretest.S3FromEnv(t)(t) },
	}
}

func TestNames(t *testing.T) {
	k := L0Key("node-1", 42, "00ff")
	if k != "l0/node-1/00000000000000000042-00ff" {
		t.Errorf("L0Key = %q", k)
	}
	if err := objstore.ValidateKey(k); err != nil {
		t.Error(err)
	}
	node, seq, nonce, ok := ParseL0Key(k)
	if !ok || node != "node-1" || seq != 42 || nonce != "00ff" {
		t.Errorf("ParseL0Key = %q %d %q %v", node, seq, nonce, ok)
	}
	k1 := L1Key(7, 1_000_000)
	if k1 != "streams/00000000000000000007/00000000000001000000" || !bytes.HasPrefix([]byte(k1), []byte(StreamPrefix(7))) {
		t.Errorf("L1Key = %q", k1)
	}
	if s, b, ok := ParseL1Key(k1); !ok || s != 7 || b != 1_000_000 {
		t.Errorf("ParseL1Key = %d %d %v", s, b, ok)
	}
	// Lexical order is numeric order.
	var keys []string
	for _, seq := range []uint64{10, 9, 1 << 40, 0, 100} {
		keys = append(keys, L0Key("n", seq, "x"))
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		_, a, _, _ := ParseL0Key(sorted[i-1])
		_, b, _, _ := ParseL0Key(sorted[i])
		if a >= b {
			t.Errorf("lexical order %v is not numeric", sorted)
		}
	}
	for _, bad := range []string{"l0/n/12-x", "l0//00000000000000000001-x", "l0/n/00000000000000000001", "streams/1/2", "x/y"} {
		if _, _, _, ok := ParseL0Key(bad); ok {
			t.Errorf("ParseL0Key(%q) ok", bad)
		}
		if _, _, ok := ParseL1Key(bad); ok {
			t.Errorf("ParseL1Key(%q) ok", bad)
		}
	}
	if _, err := NewUploader(objstoretest.FileStore(t), UploaderOptions{}).UploadL0(t.Context(), "a/b", 1, nil); err == nil {
		t.Errorf("node id with a slash accepted")
	}
}

// manyStreams returns n streams with a few batches each, in a scrambled
// order (Build must sort them).
func manyStreams(n int) []StreamBatches {
	out := make([]StreamBatches, n)
	for i := range out {
		id := uint64((i*7919)%n + 1)
		out[i] = StreamBatches{Stream: id, Batches: segmenttest.Stream(int64(id)*10, int(id%4)+1, 3, 64, int64(id))}
	}
	return out
}

func TestUploadL0RoundTrip(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			store := newStore(t)
			u := NewUploader(store, UploaderOptions{})
			streams := manyStreams(100)
			up, err := u.UploadL0(t.Context(), "node-a", 3, streams)
			if err != nil {
				t.Fatal(err)
			}
			if up.Attempts != 1 || len(up.Streams) != 100 {
				t.Fatalf("upload %+v", up)
			}
			if _, seq, _, ok := ParseL0Key(up.Key); !ok || seq != 3 {
				t.Errorf("key %q", up.Key)
			}
			a, err := store.Stat(t.Context(), up.Key)
			if err != nil || a.Size != up.Size {
				t.Fatalf("stat: %+v %v (want size %d)", a, err, up.Size)
			}
			r, err := segment.Open(t.Context(), store, up.Key, up.Size)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(r.Streams()) != fmt.Sprint(up.Streams) {
				t.Errorf("footer differs from the returned entries")
			}
			byID := map[uint64][][]byte{}
			for _, s := range streams {
				byID[s.Stream] = s.Batches
			}
			for _, e := range up.Streams {
				got, err := segment.ReadStream(t.Context(), store, up.Key, e, e.First, 0)
				if err != nil || !bytes.Equal(got.Data, bytes.Join(byID[e.StreamID], nil)) {
					t.Fatalf("stream %d: %v", e.StreamID, err)
				}
			}
		})
	}
}

func TestBuildRejects(t *testing.T) {
	if _, _, err := Build(nil, segment.WriterOptions{}); !errors.Is(err, ErrNothingToUpload) {
		t.Errorf("empty: %v", err)
	}
	if _, _, err := Build([]StreamBatches{{Stream: 1}, {Stream: 2}}, segment.WriterOptions{}); !errors.Is(err, ErrNothingToUpload) {
		t.Errorf("no batches: %v", err)
	}
	b := segmenttest.Batch(0, 1, 1, 1)
	if _, _, err := Build([]StreamBatches{{Stream: 1, Batches: [][]byte{b}}, {Stream: 1, Batches: [][]byte{b}}}, segment.WriterOptions{}); err == nil {
		t.Errorf("duplicate stream accepted")
	}
	if _, _, err := Build([]StreamBatches{{Stream: 1, Batches: [][]byte{b, b}}}, segment.WriterOptions{}); !errors.Is(err, segment.ErrInvalidBatch) {
		t.Errorf("non-contiguous batches: %v", err)
	}
}

// faulty decorates a real store and injects failures into commits: a fake
// only for the failure, the store underneath is real.
type faulty struct {
	objstore.Store
	mu sync.Mutex
	// failures are consumed in order, one per commit; nil = behave.
	failures []error
	// commitThenFail: commit for real but report this error (a lost response).
	commitThenFail error
	commits        atomic.Int64
}

func (f *faulty) Create(ctx context.Context, key string, opts objstore.CreateOptions) (objstore.Writer, error) {
	w, err := f.Store.Create(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return &faultyWriter{Writer: w, f: f}, nil
}

type faultyWriter struct {
	objstore.Writer
	f *faulty
}

func (w *faultyWriter) Close() error {
	w.f.mu.Lock()
	var inject error
	if len(w.f.failures) > 0 {
		inject, w.f.failures = w.f.failures[0], w.f.failures[1:]
	}
	lost := w.f.commitThenFail
	w.f.commitThenFail = nil
	w.f.mu.Unlock()
	w.f.commits.Add(1)
	if inject != nil {
		_ = w.Writer.Abort()
		return inject
	}
	if err := w.Writer.Close(); err != nil {
		return err
	}
	return lost
}

// recordSleeps replaces the uploader's sleep with a recorder.
func recordSleeps(u *Uploader) *[]time.Duration {
	var waits []time.Duration
	u.opts.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return ctx.Err()
	}
	return &waits
}

var errTransient = errors.New("connection reset by peer")

func TestUploadRetriesWithBackoff(t *testing.T) {
	store := &faulty{Store: objstoretest.FileStore(t), failures: []error{errTransient, errTransient, errTransient, errTransient}}
	var retries int
	u := NewUploader(store, UploaderOptions{
		InitialBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond,
		OnRetry: func(string, int, error, time.Duration) { retries++ },
	})
	waits := recordSleeps(u)
	up, err := u.Upload(t.Context(), L1Key(1, 0), manyStreams(3))
	if err != nil {
		t.Fatal(err)
	}
	if up.Attempts != 5 || retries != 4 {
		t.Errorf("attempts %d, retries %d; want 5, 4", up.Attempts, retries)
	}
	// Nominal 100, 200, 300 (capped), 300 ms; drawn from [d/2, d].
	want := []time.Duration{100, 200, 300, 300}
	for i, w := range *waits {
		nominal := want[i] * time.Millisecond
		if w < nominal/2 || w > nominal {
			t.Errorf("wait %d = %v, want in [%v, %v]", i, w, nominal/2, nominal)
		}
	}
	if _, err := store.Stat(t.Context(), up.Key); err != nil {
		t.Errorf("object not committed: %v", err)
	}
}

func TestUploadJitterSpreads(t *testing.T) {
	u := NewUploader(objstoretest.FileStore(t), UploaderOptions{InitialBackoff: time.Second})
	seen := map[time.Duration]bool{}
	for range 50 {
		d := u.backoff(1)
		if d < 500*time.Millisecond || d > time.Second {
			t.Fatalf("backoff(1) = %v", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("jitter produced only %d distinct waits", len(seen))
	}
}

// TestUploadLostResponse: the first PUT commits but its response is lost;
// the retry meets ErrExists, finds its own bytes there, and succeeds.
func TestUploadLostResponse(t *testing.T) {
	store := &faulty{Store: objstoretest.FileStore(t), commitThenFail: errTransient}
	u := NewUploader(store, UploaderOptions{})
	recordSleeps(u)
	up, err := u.Upload(t.Context(), L1Key(9, 100), manyStreams(2))
	if err != nil {
		t.Fatalf("lost response not resolved: %v", err)
	}
	if up.Attempts != 2 {
		t.Errorf("attempts %d, want 2", up.Attempts)
	}
}

// TestUploadConflict: a key held by another writer's different object is
// a permanent ErrExists, and that object is untouched.
func TestUploadConflict(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			store := newStore(t)
			key := L1Key(5, 0)
			if err := objstore.Put(t.Context(), store, key, []byte("the other owner's segment"), objstore.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			u := NewUploader(store, UploaderOptions{})
			waits := recordSleeps(u)
			_, err := u.Upload(t.Context(), key, manyStreams(2))
			if !errors.Is(err, objstore.ErrExists) || len(*waits) != 0 {
				t.Fatalf("Upload onto a foreign object: %v after %d retries; want ErrExists, no retry", err, len(*waits))
			}
			buf := make([]byte, 25)
			if _, err := store.ReadAt(t.Context(), key, buf, 0); err != nil || string(buf) != "the other owner's segment" {
				t.Errorf("foreign object changed: %q %v", buf, err)
			}
		})
	}
}

// TestZombieAndSuccessorRace: two owners compact the same range into the
// same L1 key at once with different bytes; exactly one commits.
func TestZombieAndSuccessorRace(t *testing.T) {
	for name, newStore := range stores() {
		t.Run(name, func(t *testing.T) {
			store := newStore(t)
			key := L1Key(77, 0)
			a := []StreamBatches{{Stream: 77, Batches: segmenttest.Stream(0, 5, 2, 10, 1)}}
			b := []StreamBatches{{Stream: 77, Batches: segmenttest.Stream(0, 5, 2, 11, 1)}}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, s := range [][]StreamBatches{a, b} {
				wg.Go(func() {
					_, errs[i] = NewUploader(store, UploaderOptions{}).Upload(t.Context(), key, s)
				})
			}
			wg.Wait()
			ok := 0
			for _, err := range errs {
				if err == nil {
					ok++
				} else if !errors.Is(err, objstore.ErrExists) {
					t.Errorf("loser: %v, want ErrExists", err)
				}
			}
			if ok != 1 {
				t.Fatalf("%d owners committed: %v", ok, errs)
			}
		})
	}
}

func TestUploadPermanentErrorNoRetry(t *testing.T) {
	store := &faulty{Store: objstoretest.FileStore(t), failures: []error{fmt.Errorf("denied: %w", objstore.ErrPermission)}}
	u := NewUploader(store, UploaderOptions{})
	waits := recordSleeps(u)
	if _, err := u.Upload(t.Context(), "k", manyStreams(1)); !errors.Is(err, objstore.ErrPermission) || len(*waits) != 0 {
		t.Errorf("permission error: %v after %d retries", err, len(*waits))
	}
}

func TestUploadStopsWithContext(t *testing.T) {
	fails := make([]error, 1000)
	for i := range fails {
		fails[i] = errTransient
	}
	store := &faulty{Store: objstoretest.FileStore(t), failures: fails}
	u := NewUploader(store, UploaderOptions{InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	// The context dies during the third backoff, however slow the machine:
	// the real sleep must notice and Upload must give up at once (a sleep
	// that ignored the context would run the remaining ~1000 attempts).
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	errDying := errors.New("context dies after 3 attempts")
	realSleep := u.opts.sleep
	u.opts.sleep = func(sctx context.Context, d time.Duration) error {
		if store.commits.Load() >= 3 {
			cancel(errDying)
		}
		return realSleep(sctx, d)
	}
	start := time.Now()
	_, err := u.Upload(ctx, "k", manyStreams(1))
	if !errors.Is(err, context.Canceled) || time.Since(start) > 10*time.Second {
		t.Errorf("Upload under a dying context: %v after %v", err, time.Since(start))
	}
	if n := store.commits.Load(); n != 3 {
		t.Errorf("%d attempts, want 3: the third backoff should have stopped the upload", n)
	}
	if _, err := store.Stat(context.Background(), "k"); !objstore.IsNotExist(err) {
		t.Errorf("failed upload left an object: %v", err)
	}
	u2 := NewUploader(store, UploaderOptions{MaxAttempts: 2})
	recordSleeps(u2)
	if _, err := u2.Upload(t.Context(), "k", manyStreams(1)); err == nil || store.commits.Load() == 0 {
		t.Errorf("MaxAttempts: %v", err)
	}
}

// TestColdFirstRecordFetchesLittle: through the block cache, the first
// record of a cold 8 MiB object arrives after fetching one block, not the
// object; reading on then triggers read-ahead within the stream's range.
func TestColdFirstRecordFetchesLittle(t *testing.T) {
	store := objstoretest.FileStore(t)
	batches := segmenttest.Stream(0, 512, 16, 1000, 1) // ~8 MiB
	up, err := NewUploader(store, UploaderOptions{}).Upload(t.Context(), L1Key(1, 0), []StreamBatches{{Stream: 1, Batches: batches}})
	if err != nil {
		t.Fatal(err)
	}
	e := up.Streams[0]
	c, err := cache.New(store, cache.Options{ReadAhead: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := segment.ReadStream(t.Context(), c, up.Key, e, 0, 1)
	if err != nil || !bytes.Equal(got.Data, batches[0]) {
		t.Fatalf("first batch: %v", err)
	}
	if s := c.Stats(); s.Requests != 1 || s.FetchedBytes > c.BlockSize() {
		t.Errorf("cold first record fetched %d bytes in %d GETs; want one block", s.FetchedBytes, s.Requests)
	}

	// With read-ahead, a full catch-up of the range needs few demand misses.
	c2, _ := cache.New(store, cache.Options{})
	defer c2.Close()
	cur, err := segment.NewCursor(c2, up.Key, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for {
		b, err := cur.Next(t.Context(), 256<<10)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b.Data...)
	}
	if !bytes.Equal(all, bytes.Join(batches, nil)) {
		t.Fatalf("catch-up read differs")
	}
	if s := c2.Stats(); s.Prefetches == 0 || s.FetchedBytes > up.Size {
		t.Errorf("catch-up: %+v (object %d bytes)", s, up.Size)
	}
}

// TestUploaderKeepsObjectMemory: an Uploader builds each object in the
// memory of the previous one, and when it must allocate it leaves room
// for a somewhat larger next object, so a run of flushes that each grow
// a little reuses one buffer instead of allocating (and zeroing) one
// per flush.
func TestUploaderKeepsObjectMemory(t *testing.T) {
	u := NewUploader(objstoretest.FileStore(t), UploaderOptions{})
	var first *byte
	for i := range 4 {
		// Each object is about 5% larger than the one before.
		streams := []StreamBatches{{Stream: 1, Batches: segmenttest.Stream(0, 20, 10, 1000+50*i, 1)}}
		if _, err := u.Upload(t.Context(), L0Key("n", uint64(i+1), "00"), streams); err != nil {
			t.Fatal(err)
		}
		u.spareMu.Lock()
		spare := u.spare
		u.spareMu.Unlock()
		if cap(spare) == 0 {
			t.Fatalf("upload %d: no object memory kept", i)
		}
		p := &spare[:1][0]
		if i == 0 {
			first = p
		} else if p != first {
			t.Fatalf("upload %d (a slightly larger object) allocated new object memory", i)
		}
	}
}
