package meta_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
)

const testPrefix = "/picomq-test/"

func newRegistry(t *testing.T) (*meta.Registry, *clientv3.Client) {
	t.Helper()
	cli := metatest.StartEtcd(t)
	return meta.NewRegistry(cli, testPrefix), cli
}

func mustCreate(t *testing.T, reg *meta.Registry, s metadata.Stream) metadata.Stream {
	t.Helper()
	got, created, err := reg.CreateStream(testCtx(t), s)
	if err != nil {
		t.Fatalf("CreateStream(%q): %v", s.Name, err)
	}
	if !created {
		t.Fatalf("CreateStream(%q): created = false, want true", s.Name)
	}
	return got
}

func TestCreateThenGetStream(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)

	before := time.Now()
	in := metadata.Stream{
		Name:        "/orders/1042",
		ContentType: "application/json",
		Owner:       "node-1",
		ID:          999, // ignored: the registry assigns IDs
		Epoch:       7,   // ignored: epoch starts at 1
		KafkaTopic:  "orders.1042",
		RetentionMs: 3_600_000,
		Durability:  "object",
	}
	got := mustCreate(t, reg, in)
	if got.ID == 0 || got.ID == 999 {
		t.Errorf("ID = %d, want a registry-assigned nonzero ID", got.ID)
	}
	if got.Epoch != 1 {
		t.Errorf("Epoch = %d, want 1", got.Epoch)
	}
	if got.CreatedAt.Before(before.Add(-time.Second)) || got.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("CreatedAt = %v, want about now", got.CreatedAt)
	}
	want := in
	want.ID, want.Epoch, want.CreatedAt = got.ID, 1, got.CreatedAt
	if got != want {
		t.Errorf("CreateStream returned %+v, want %+v", got, want)
	}

	read, err := reg.GetStream(ctx, "/orders/1042")
	if err != nil {
		t.Fatal(err)
	}
	if read != got {
		t.Errorf("GetStream = %+v, want what CreateStream returned %+v", read, got)
	}
}

func TestCreateKeepsGivenCreatedAt(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	at := time.Date(2024, 5, 1, 12, 0, 0, 123, time.FixedZone("X", 3600))
	got := mustCreate(t, reg, metadata.Stream{Name: "/imported", CreatedAt: at})
	if !got.CreatedAt.Equal(at) || got.CreatedAt.Location() != time.UTC {
		t.Fatalf("CreatedAt = %v, want %v in UTC", got.CreatedAt, at)
	}
}

func TestCreateExistingReturnsExistingUnchanged(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)

	first := mustCreate(t, reg, metadata.Stream{Name: "/s", ContentType: "text/plain"})
	again, created, err := reg.CreateStream(ctx, metadata.Stream{Name: "/s", ContentType: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	if created {
		t.Fatal("second CreateStream reported created = true")
	}
	if again != first {
		t.Fatalf("second CreateStream returned %+v, want the existing %+v", again, first)
	}
	if got, _ := reg.GetStream(ctx, "/s"); got.ContentType != "text/plain" {
		t.Fatalf("stored content type = %q, the losing create overwrote it", got.ContentType)
	}
}

func TestGetMissingStreamIsNotFound(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	_, err := reg.GetStream(testCtx(t), "/nope")
	if !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
}

func TestStreamNamesMustBeAbsolute(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	for _, name := range []string{"", "orders"} {
		if _, _, err := reg.CreateStream(ctx, metadata.Stream{Name: name}); !errors.Is(err, metadata.ErrInvalid) {
			t.Errorf("CreateStream(%q): err = %v, want ErrInvalid", name, err)
		}
		if _, err := reg.GetStream(ctx, name); !errors.Is(err, metadata.ErrInvalid) {
			t.Errorf("GetStream(%q): err = %v, want ErrInvalid", name, err)
		}
	}
}

func TestIDsUniqueAndIncreasingAcrossDeleteAndRecreate(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)

	a1 := mustCreate(t, reg, metadata.Stream{Name: "/a"})
	b := mustCreate(t, reg, metadata.Stream{Name: "/b"})
	if b.ID <= a1.ID {
		t.Fatalf("IDs not increasing: /a=%d /b=%d", a1.ID, b.ID)
	}
	if err := reg.DeleteStream(ctx, "/a", a1.ID); err != nil {
		t.Fatal(err)
	}
	a2 := mustCreate(t, reg, metadata.Stream{Name: "/a"})
	if a2.ID <= b.ID {
		t.Fatalf("recreated /a got ID %d, want > %d (never reuse an ID)", a2.ID, b.ID)
	}
	// Deleting the newest stream must not let the counter fall back either.
	if err := reg.DeleteStream(ctx, "/a", a2.ID); err != nil {
		t.Fatal(err)
	}
	a3 := mustCreate(t, reg, metadata.Stream{Name: "/a"})
	if a3.ID <= a2.ID {
		t.Fatalf("third /a got ID %d, want > %d", a3.ID, a2.ID)
	}
}

func TestDeleteStreamChecksID(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	s := mustCreate(t, reg, metadata.Stream{Name: "/d"})

	if err := reg.DeleteStream(ctx, "/d", s.ID+1); !errors.Is(err, metadata.ErrConflict) {
		t.Fatalf("delete with wrong id: err = %v, want ErrConflict", err)
	}
	if _, err := reg.GetStream(ctx, "/d"); err != nil {
		t.Fatalf("stream gone after a conflicting delete: %v", err)
	}
	if err := reg.DeleteStream(ctx, "/d", 0); !errors.Is(err, metadata.ErrInvalid) {
		t.Fatalf("delete with id 0: err = %v, want ErrInvalid", err)
	}
	if err := reg.DeleteStream(ctx, "/d", s.ID); err != nil {
		t.Fatalf("delete with the right id: %v", err)
	}
	if _, err := reg.GetStream(ctx, "/d"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("GetStream after delete: err = %v, want ErrNotFound", err)
	}
	if err := reg.DeleteStream(ctx, "/d", s.ID); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("second delete: err = %v, want ErrNotFound", err)
	}
}

func TestDeleteStreamSurvivesConcurrentUpdate(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	s := mustCreate(t, reg, metadata.Stream{Name: "/busy"})

	// Updates racing with the delete change the key's ModRevision; the
	// delete must re-check and still succeed, and the updates must then see
	// the stream gone rather than resurrect it.
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			<-start
			for range 5 {
				_, err := reg.UpdateStream(ctx, "/busy", func(s *metadata.Stream) error { s.StartOffset++; return nil })
				if errors.Is(err, metadata.ErrNotFound) {
					return
				}
				if err != nil {
					t.Errorf("UpdateStream: %v", err)
					return
				}
			}
		})
	}
	close(start)
	if err := reg.DeleteStream(ctx, "/busy", s.ID); err != nil {
		t.Fatalf("DeleteStream during updates: %v", err)
	}
	wg.Wait()
	if _, err := reg.GetStream(ctx, "/busy"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("GetStream after delete: err = %v, want ErrNotFound", err)
	}
}

func TestConcurrentCreatesOfSameNameExactlyOneWins(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)

	const n = 8
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results [n]metadata.Stream
		created [n]bool
	)
	for i := range n {
		wg.Go(func() {
			<-start
			s, ok, err := reg.CreateStream(ctx, metadata.Stream{Name: "/race", ContentType: fmt.Sprintf("type/%d", i)})
			if err != nil {
				t.Errorf("goroutine %d: %v", i, err)
			}
			results[i], created[i] = s, ok
		})
	}
	close(start)
	wg.Wait()

	winners := 0
	var winner metadata.Stream
	for i := range n {
		if created[i] {
			winners++
			winner = results[i]
		}
	}
	if winners != 1 {
		t.Fatalf("%d creates reported created=true, want exactly 1", winners)
	}
	for i := range n {
		if results[i] != winner {
			t.Errorf("goroutine %d saw %+v, want the winner's record %+v", i, results[i], winner)
		}
	}
}

func TestConcurrentCreatesOfDistinctNamesGetDistinctIDs(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)

	// Every create contends on the ID counter; all must still succeed.
	const n = 8
	ids := createAtOnce(ctx, t, reg, n, func(i int) metadata.Stream { return metadata.Stream{Name: fmt.Sprintf("/p/%d", i)} })
	sorted := slices.Sorted(slices.Values(ids))
	if len(slices.Compact(sorted)) != n {
		t.Fatalf("IDs %v are not distinct", ids)
	}
	if sorted[0] == 0 {
		t.Fatalf("a create got ID 0: %v", ids)
	}
}

// createAtOnce creates stream(0..n-1) from n goroutines released together
// and returns their IDs by i. Every create must succeed.
func createAtOnce(ctx context.Context, t *testing.T, reg *meta.Registry, n int, stream func(i int) metadata.Stream) []uint64 {
	t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		ids   = make([]uint64, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			want := stream(i)
			s, ok, err := reg.CreateStream(ctx, want)
			if err != nil || !ok {
				t.Errorf("create %s: created=%v err=%v", want.Name, ok, err)
			}
			ids[i] = s.ID
		})
	}
	close(start)
	wg.Wait()
	return ids
}

func TestUpdateStreamCASUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	orig := mustCreate(t, reg, metadata.Stream{Name: "/counter"})

	const goroutines, perGoroutine = 8, 10
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		calls atomic.Int64
	)
	for range goroutines {
		wg.Go(func() {
			<-start
			for range perGoroutine {
				_, err := reg.UpdateStream(ctx, "/counter", func(s *metadata.Stream) error {
					calls.Add(1)
					s.StartOffset++
					return nil
				})
				if err != nil {
					t.Errorf("UpdateStream: %v", err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()

	got, err := reg.GetStream(ctx, "/counter")
	if err != nil {
		t.Fatal(err)
	}
	if got.StartOffset != goroutines*perGoroutine {
		t.Fatalf("counter = %d, want %d (lost updates)", got.StartOffset, goroutines*perGoroutine)
	}
	if got.ID != orig.ID || got.CreatedAt != orig.CreatedAt || got.Epoch != orig.Epoch {
		t.Fatalf("untouched fields changed: %+v vs %+v", got, orig)
	}
	t.Logf("%d fn calls for %d updates", calls.Load(), goroutines*perGoroutine)
}

func TestUpdateStreamReturnsStoredRecord(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	mustCreate(t, reg, metadata.Stream{Name: "/own"})

	// The shape of an ownership claim: conditioned on the epoch read.
	claim := func(node string, fromEpoch int64) (metadata.Stream, error) {
		return reg.UpdateStream(ctx, "/own", func(s *metadata.Stream) error {
			if s.Epoch != fromEpoch {
				return fmt.Errorf("epoch is %d, not %d: %w", s.Epoch, fromEpoch, metadata.ErrConflict)
			}
			s.Owner, s.Epoch = node, s.Epoch+1
			return nil
		})
	}
	updated, err := claim("node-2", 1)
	if err != nil {
		t.Fatal(err)
	}
	if updated.Owner != "node-2" || updated.Epoch != 2 {
		t.Fatalf("UpdateStream returned %+v, want owner node-2 epoch 2", updated)
	}
	if got, _ := reg.GetStream(ctx, "/own"); got != updated {
		t.Fatalf("GetStream = %+v, want what UpdateStream returned %+v", got, updated)
	}
	if _, err := claim("node-3", 1); !errors.Is(err, metadata.ErrConflict) {
		t.Fatalf("stale claim: err = %v, want the fn's ErrConflict", err)
	}
}

func TestUpdateStreamFnErrorWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, cli := newRegistry(t)
	mustCreate(t, reg, metadata.Stream{Name: "/u"})
	key := testPrefix + "streams//u"
	before := modRevision(t, cli, key)

	boom := errors.New("boom")
	_, err := reg.UpdateStream(ctx, "/u", func(s *metadata.Stream) error { s.Owner = "x"; return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want fn's error", err)
	}
	// A no-op fn writes nothing either.
	if _, err := reg.UpdateStream(ctx, "/u", func(*metadata.Stream) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if after := modRevision(t, cli, key); after != before {
		t.Fatalf("key rewritten (mod revision %d -> %d)", before, after)
	}
}

func TestUpdateStreamIdentityIsImmutable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	orig := mustCreate(t, reg, metadata.Stream{Name: "/fixed"})

	for what, fn := range map[string]func(*metadata.Stream) error{
		"name": func(s *metadata.Stream) error { s.Name = "/other"; return nil },
		"id":   func(s *metadata.Stream) error { s.ID++; return nil },
	} {
		if _, err := reg.UpdateStream(ctx, "/fixed", fn); !errors.Is(err, metadata.ErrInvalid) {
			t.Errorf("changing %s: err = %v, want ErrInvalid", what, err)
		}
	}
	if got, _ := reg.GetStream(ctx, "/fixed"); got != orig {
		t.Fatalf("stream changed to %+v", got)
	}
}

func TestUpdateMissingStreamIsNotFound(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	called := false
	_, err := reg.UpdateStream(testCtx(t), "/ghost", func(*metadata.Stream) error { called = true; return nil })
	if !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if called {
		t.Fatal("fn called for a missing stream")
	}
}

// listingFixture creates 25 streams: 15 under /a/, 5 under /ab/, 5 under /b/.
func listingFixture(t *testing.T, reg *meta.Registry) (a, ab, b []string) {
	t.Helper()
	for i := range 15 {
		a = append(a, fmt.Sprintf("/a/%02d", i))
	}
	for i := range 5 {
		ab = append(ab, fmt.Sprintf("/ab/%d", i))
		b = append(b, fmt.Sprintf("/b/%d", i))
	}
	// Create in an order unrelated to name order.
	all := slices.Concat(b, ab, a)
	slices.Reverse(all)
	for _, n := range all {
		mustCreate(t, reg, metadata.Stream{Name: n})
	}
	return a, ab, b
}

func names(ss []metadata.Stream) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

func TestListStreamsPagination(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	a, ab, b := listingFixture(t, reg)

	// Page through /a/ four at a time: 4, 4, 4, 3.
	var got []string
	after := ""
	wantSizes := []int{4, 4, 4, 3}
	for page, want := range wantSizes {
		ss, more, err := reg.ListStreams(ctx, "/a/", after, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(ss) != want {
			t.Fatalf("page %d: %d streams, want %d", page, len(ss), want)
		}
		if wantMore := page < len(wantSizes)-1; more != wantMore {
			t.Fatalf("page %d: more = %v, want %v", page, more, wantMore)
		}
		got = append(got, names(ss)...)
		after = ss[len(ss)-1].Name
	}
	if !slices.Equal(got, a) {
		t.Fatalf("paged /a/ = %v, want %v", got, a)
	}

	cases := []struct {
		name          string
		prefix, after string
		limit         int
		want          []string
		more          bool
	}{
		{"plain string prefix includes /ab", "/a", "", 100, slices.Concat(a, ab), false},
		{"everything in name order", "", "", 100, slices.Concat(a, ab, b), false},
		{"limit equal to count has no more", "/b/", "", 5, b, false},
		{"limit one short has more", "/b/", "", 4, b[:4], true},
		{"after inside the range", "/b/", "/b/2", 10, b[3:], false},
		{"after a name that does not exist", "", "/a/145", 3, []string{"/ab/0", "/ab/1", "/ab/2"}, true},
		{"after before the prefix starts at the prefix", "/b/", "/a/00", 2, b[:2], true},
		{"after past the prefix is empty", "/a/", "/b", 10, nil, false},
		{"after the last stream is empty", "", "/b/4", 10, nil, false},
		{"prefix matching nothing", "/c", "", 10, nil, false},
		{"relative prefix matches nothing", "a", "", 10, nil, false},
		{"exact name as prefix", "/b/3", "", 10, []string{"/b/3"}, false},
	}
	for _, tc := range cases {
		ss, more, err := reg.ListStreams(ctx, tc.prefix, tc.after, tc.limit)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !slices.Equal(names(ss), tc.want) || more != tc.more {
			t.Errorf("%s: ListStreams(%q, %q, %d) = %v more=%v, want %v more=%v",
				tc.name, tc.prefix, tc.after, tc.limit, names(ss), more, tc.want, tc.more)
		}
	}

	for _, limit := range []int{0, -1} {
		if _, _, err := reg.ListStreams(ctx, "", "", limit); !errors.Is(err, metadata.ErrInvalid) {
			t.Errorf("limit %d: err = %v, want ErrInvalid", limit, err)
		}
	}
}

func TestAllStreamsPagesThroughEverything(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, _ := newRegistry(t)
	a, ab, b := listingFixture(t, reg)
	meta.SetAllStreamsPageSize(reg, 4) // 25 streams: 7 pages

	all, err := reg.AllStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Concat(a, ab, b); !slices.Equal(names(all), want) {
		t.Fatalf("AllStreams = %v, want %v", names(all), want)
	}
	for _, s := range all {
		if s.ID == 0 || s.Epoch != 1 {
			t.Fatalf("incomplete record %+v", s)
		}
	}
}

// countingKV counts the Get requests sent through it.
type countingKV struct {
	clientv3.KV
	gets atomic.Int64
}

func (k *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	k.gets.Add(1)
	return k.KV.Get(ctx, key, opts...)
}

// TestAllStreamsPagesGrow: each page of a registry scan is twice the one
// before, up to eight times the first, so a large registry is read in a
// few requests rather than n/p, each of which etcd pays for with a visit
// of every key to the end of the range.
func TestAllStreamsPagesGrow(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, cli := newRegistry(t)
	a, ab, b := listingFixture(t, reg)
	want := slices.Concat(a, ab, b) // 25 streams
	kv := &countingKV{KV: cli.KV}
	cli.KV = kv
	for _, tc := range []struct{ page, gets int }{
		{page: 4, gets: 3},   // 4 + 8 + 16
		{page: 1, gets: 6},   // 1 + 2 + 4 + 8 + 8 + 8: pages stop growing at 8× the first
		{page: 100, gets: 1}, // one page holds them all
	} {
		meta.SetAllStreamsPageSize(reg, tc.page)
		kv.gets.Store(0)
		all, err := reg.AllStreams(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names(all), want) {
			t.Fatalf("page %d: AllStreams = %v, want %v", tc.page, names(all), want)
		}
		if got := kv.gets.Load(); got != int64(tc.gets) {
			t.Errorf("page %d: AllStreams sent %d requests, want %d", tc.page, got, tc.gets)
		}
	}
}

func TestAllStreamsOfEmptyRegistry(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	all, err := reg.AllStreams(testCtx(t))
	if err != nil || len(all) != 0 {
		t.Fatalf("AllStreams = %v, %v; want none", all, err)
	}
}

func TestRegistriesWithDifferentPrefixesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cli := metatest.StartEtcd(t)
	r1 := meta.NewRegistry(cli, "/one") // trailing "/" added
	r2 := meta.NewRegistry(cli, "/one-two/")
	if r1.Prefix() != "/one/" {
		t.Fatalf("Prefix = %q, want /one/", r1.Prefix())
	}

	s1 := mustCreate(t, r1, metadata.Stream{Name: "/x"})
	if _, err := r2.GetStream(ctx, "/x"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("r2 sees r1's stream: err = %v", err)
	}
	s2 := mustCreate(t, r2, metadata.Stream{Name: "/x"})
	if s1.ID != 1 || s2.ID != 1 {
		t.Fatalf("IDs = %d, %d; want each registry's own counter to start at 1", s1.ID, s2.ID)
	}
	for _, r := range []*meta.Registry{r1, r2} {
		all, err := r.AllStreams(ctx)
		if err != nil || len(all) != 1 {
			t.Fatalf("registry %s AllStreams = %v, %v; want exactly its own stream", r.Prefix(), names(all), err)
		}
	}
	if def := meta.NewRegistry(cli, ""); def.Prefix() != meta.DefaultPrefix {
		t.Fatalf("default Prefix = %q, want %q", def.Prefix(), meta.DefaultPrefix)
	}
}

func TestKeyLayoutAndCorruptRecords(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, cli := newRegistry(t)
	s := mustCreate(t, reg, metadata.Stream{Name: "/orders/1"})

	// The documented layout: <prefix>streams/<name>, name verbatim.
	resp, err := cli.Get(ctx, testPrefix+"streams//orders/1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("record not at the documented key: %v, %v", resp, err)
	}
	// The counter, a decimal number, is the end of the last ID block.
	ctr, err := cli.Get(ctx, testPrefix+"counters/stream-id")
	if err != nil || len(ctr.Kvs) != 1 {
		t.Fatalf("id counter = %v, %v", ctr, err)
	}
	if end, err := strconv.ParseUint(string(ctr.Kvs[0].Value), 10, 64); err != nil || end < s.ID {
		t.Fatalf("id counter = %q, %v; want a number >= %d", ctr.Kvs[0].Value, err, s.ID)
	}

	if _, err := cli.Put(ctx, testPrefix+"streams//orders/1", "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.GetStream(ctx, "/orders/1"); !errors.Is(err, metadata.ErrCorrupt) {
		t.Fatalf("GetStream of garbage: err = %v, want ErrCorrupt", err)
	}
	if _, _, err := reg.ListStreams(ctx, "", "", 10); !errors.Is(err, metadata.ErrCorrupt) {
		t.Fatalf("ListStreams over garbage: err = %v, want ErrCorrupt", err)
	}
	if _, err := cli.Put(ctx, testPrefix+"counters/stream-id", "x"); err != nil {
		t.Fatal(err)
	}
	// A registry reads the counter when it reserves a block: at its first
	// create.
	fresh := meta.NewRegistry(cli, testPrefix)
	if _, _, err := fresh.CreateStream(ctx, metadata.Stream{Name: "/new"}); !errors.Is(err, metadata.ErrCorrupt) {
		t.Fatalf("CreateStream with a garbage counter: err = %v, want ErrCorrupt", err)
	}
}

func modRevision(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Get(testCtx(t), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v, %v", key, resp, err)
	}
	return resp.Kvs[0].ModRevision
}

// TestTakeOverOnlyFromAnAbsentOwner: a stream is never taken from a node
// that holds a live membership, whatever the taker believed; once the
// owner's lease is gone it is taken with the next epoch, once.
func TestTakeOverOnlyFromAnAbsentOwner(t *testing.T) {
	t.Parallel()
	reg, cli := newRegistry(t)
	ctx := t.Context()
	mustCreate(t, reg, metadata.Stream{Name: "/t"})
	s, err := reg.UpdateStream(ctx, "/t", func(m *metadata.Stream) error { m.Owner = "a"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	sess, err := reg.Join(ctx, metadata.Member{NodeID: "a"}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.TakeOver(ctx, s, "b"); !errors.Is(err, metadata.ErrConflict) {
		t.Fatalf("take over from a live owner: %v, want ErrConflict", err)
	}
	if _, err := cli.Revoke(ctx, sess.LeaseID()); err != nil {
		t.Fatal(err)
	}
	got, err := reg.TakeOver(ctx, s, "b")
	if err != nil || got.Owner != "b" || got.Epoch != s.Epoch+1 {
		t.Fatalf("take over from a gone owner: %+v %v", got, err)
	}
	if _, err := reg.TakeOver(ctx, s, "c"); !errors.Is(err, metadata.ErrConflict) {
		t.Fatalf("second take over with the old record: %v, want ErrConflict", err)
	}
}

// TestEachStreamStartsOverAfterCompaction: a scan whose revision is
// compacted away mid-way starts over (calling start again) and yields
// every stream once, as of the new revision; an error of fn ends it.
func TestEachStreamStartsOverAfterCompaction(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, cli := newRegistry(t)
	a, ab, b := listingFixture(t, reg)
	meta.SetAllStreamsPageSize(reg, 4)

	var got []string
	starts, compacted := 0, false
	err := reg.EachStream(ctx, func() { starts++; got = got[:0] }, func(s metadata.Stream) error {
		got = append(got, s.Name)
		if len(got) == 4 && !compacted {
			compacted = true
			mustCreate(t, reg, metadata.Stream{Name: "/zz"})
			resp, err := cli.Get(ctx, "any")
			if err != nil {
				return err
			}
			if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Concat(a, ab, b, []string{"/zz"}); starts != 2 || !slices.Equal(got, want) {
		t.Fatalf("EachStream started %d times and gave %v, want 2 and %v", starts, got, want)
	}

	stop := errors.New("stop")
	n := 0
	err = reg.EachStream(ctx, func() {}, func(metadata.Stream) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("EachStream with a failing fn: %v after %d records", err, n)
	}
}
