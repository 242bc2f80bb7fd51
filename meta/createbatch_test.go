package meta_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
)

// TestConcurrentCreatesShareTransactions: many concurrent creates of
// distinct names all succeed with distinct IDs, the counter (the end of the
// last ID block reserved) is at or above the largest, and they took far
// fewer etcd transactions than creates.
func TestConcurrentCreatesShareTransactions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, cli := newRegistry(t)
	meta.SetMaxTxnOps(reg, 32) // batches of up to 15 creates with a topic
	mustCreate(t, reg, metadata.Stream{Name: "/first"})
	rev0 := currentRevision(t, cli)

	const n = 300
	ids := createAtOnce(ctx, t, reg, n, func(i int) metadata.Stream {
		return metadata.Stream{Name: fmt.Sprintf("/b/%d", i), KafkaTopic: fmt.Sprintf("b.%d", i)}
	})
	sorted := slices.Sorted(slices.Values(ids))
	if len(slices.Compact(sorted)) != n || sorted[0] <= 1 {
		t.Fatalf("IDs are not distinct and above the first stream's: %v", sorted)
	}
	ctr, err := cli.Get(ctx, testPrefix+"counters/stream-id")
	if err != nil || len(ctr.Kvs) != 1 {
		t.Fatalf("id counter = %v, %v", ctr, err)
	}
	if c, err := strconv.ParseUint(string(ctr.Kvs[0].Value), 10, 64); err != nil || c < sorted[n-1] {
		t.Fatalf("id counter = %q, %v; want a number >= %d", ctr.Kvs[0].Value, err, sorted[n-1])
	}
	// Every successful transaction is one revision; one per create would
	// be n. Batches of 15 need at least 20.
	if txns := currentRevision(t, cli) - rev0; txns > n/3 {
		t.Fatalf("%d creates took %d transactions, want them batched", n, txns)
	}
	for i := range n {
		name := fmt.Sprintf("/b/%d", i)
		if s, err := reg.LookupTopic(ctx, fmt.Sprintf("b.%d", i)); err != nil || s.Name != name || s.ID != ids[i] {
			t.Fatalf("topic of %s: %+v, %v", name, s, err)
		}
	}
}

// TestBatchedCreateConflictsFailAlone: in one burst of creates, the ones
// that meet an existing stream, a taken topic or each other are answered
// as a lone create would be, and the others are created; with one
// transaction in flight at a time and with four.
func TestBatchedCreateConflictsFailAlone(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		txns      int
		inProcess bool
	}{{1, false}, {4, false}, {1, true}} {
		t.Run(fmt.Sprintf("%d in flight, in-process %v", v.txns, v.inProcess), func(t *testing.T) {
			t.Parallel()
			testBatchedCreateConflictsFailAlone(t, v.txns, v.inProcess)
		})
	}
}

func testBatchedCreateConflictsFailAlone(t *testing.T, txns int, inProcess bool) {
	ctx := testCtx(t)
	e, cli := metatest.StartEmbedded(t)
	reg := meta.NewRegistry(cli, testPrefix)
	if inProcess {
		reg.UseKV(e.KV())
	}
	meta.SetMaxCreateTxns(reg, txns)
	meta.SetMaxTxnOps(reg, 16) // several batches, in flight together when txns > 1
	existing := mustCreate(t, reg, metadata.Stream{Name: "/taken", ContentType: "text/plain"})
	mustCreate(t, reg, metadata.Stream{Name: "/holder", KafkaTopic: "hot"})

	type outcome struct {
		s       metadata.Stream
		created bool
		err     error
	}
	reqs := []metadata.Stream{
		{Name: "/taken", ContentType: "application/json"},
		{Name: "/wants-hot", KafkaTopic: "hot"},
		{Name: "/dup", ContentType: "a/1"},
		{Name: "/dup", ContentType: "a/2"},
		{Name: "/shared-1", KafkaTopic: "shared"},
		{Name: "/shared-2", KafkaTopic: "shared"},
	}
	for i := range 40 {
		reqs = append(reqs, metadata.Stream{Name: fmt.Sprintf("/ok/%d", i)})
	}
	out := make([]outcome, len(reqs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range reqs {
		wg.Go(func() {
			<-start
			got, created, err := reg.CreateStream(ctx, s)
			out[i] = outcome{got, created, err}
		})
	}
	close(start)
	wg.Wait()

	if o := out[0]; o.err != nil || o.created || o.s != existing {
		t.Errorf("create of an existing name: %+v, want the existing record", o)
	}
	if o := out[1]; !errors.Is(o.err, metadata.ErrTopicTaken) {
		t.Errorf("create claiming a held topic: %+v, want ErrTopicTaken", o)
	}
	if _, err := reg.GetStream(ctx, "/wants-hot"); !errors.Is(err, metadata.ErrNotFound) {
		t.Errorf("a create refused for its topic left a record: %v", err)
	}
	if a, b := out[2], out[3]; a.err != nil || b.err != nil || a.created == b.created || a.s != b.s {
		t.Errorf("two creates of one new name: %+v and %+v, want one created and both the same record", a, b)
	}
	if a, b := out[4], out[5]; (a.err == nil) == (b.err == nil) {
		t.Errorf("two creates claiming one new topic: %+v and %+v, want exactly one to succeed", a, b)
	} else if loser := map[bool]outcome{true: b, false: a}[a.err == nil]; !errors.Is(loser.err, metadata.ErrTopicTaken) {
		t.Errorf("losing topic claim: %v, want ErrTopicTaken", loser.err)
	}
	for i := 6; i < len(reqs); i++ {
		if o := out[i]; o.err != nil || !o.created {
			t.Errorf("create %s beside the conflicts: %+v", reqs[i].Name, o)
		}
	}
}

// TestCreateHonoursContextWhileQueued: a create whose context has ended
// is answered with its error and creates nothing.
func TestCreateHonoursContextWhileQueued(t *testing.T) {
	t.Parallel()
	reg, _ := newRegistry(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	if _, _, err := reg.CreateStream(ctx, metadata.Stream{Name: "/late"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := reg.GetStream(testCtx(t), "/late"); !errors.Is(err, metadata.ErrNotFound) {
		t.Fatalf("a cancelled create left a record: %v", err)
	}
	mustCreate(t, reg, metadata.Stream{Name: "/after"}) // the queue still works
}

// TestRecordsOfEarlierVersionsStillRead: JSON records and topic entries
// written by earlier versions are read by every call, and an update
// rewrites the record in the compact format.
func TestRecordsOfEarlierVersionsStillRead(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	reg, cli := newRegistry(t)
	key := testPrefix + "streams//old/1"
	old := `{"name":"/old/1","id":5,"contentType":"application/json","createdAt":"2026-11-01T10:00:00.5Z","owner":"n1","epoch":2,"kafkaTopic":"legacy"}`
	if _, err := cli.Put(ctx, key, old); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, testPrefix+"topics/legacy", `{"stream":"/old/1","id":5}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, testPrefix+"counters/stream-id", "5"); err != nil {
		t.Fatal(err)
	}
	s, err := reg.GetStream(ctx, "/old/1")
	if err != nil || s.ID != 5 || s.ContentType != "application/json" || s.Owner != "n1" || s.Epoch != 2 ||
		s.KafkaTopic != "legacy" || s.CreatedAt.UnixMilli() != 1793527200500 {
		t.Fatalf("GetStream of a JSON record = %+v, %v", s, err)
	}
	if got, err := reg.LookupTopic(ctx, "legacy"); err != nil || got != s {
		t.Fatalf("LookupTopic through a JSON entry = %+v, %v", got, err)
	}
	if list, _, err := reg.ListStreams(ctx, "/old/", "", 10); err != nil || len(list) != 1 || list[0] != s {
		t.Fatalf("ListStreams = %+v, %v", list, err)
	}
	if _, created, err := reg.CreateStream(ctx, metadata.Stream{Name: "/old/1"}); err != nil || created {
		t.Fatalf("create over a JSON record: created=%v err=%v", created, err)
	}
	if _, _, err := reg.CreateStream(ctx, metadata.Stream{Name: "/new", KafkaTopic: "legacy"}); !errors.Is(err, metadata.ErrTopicTaken) {
		t.Fatalf("a JSON topic entry does not hold its alias: %v", err)
	}
	// IDs taken by the two refused creates above are not reused, but every
	// ID is above the counter an earlier version left.
	if n := mustCreate(t, reg, metadata.Stream{Name: "/new"}); n.ID <= 5 {
		t.Fatalf("new stream after the JSON counter got ID %d, want > 5", n.ID)
	}
	up, err := reg.UpdateStream(ctx, "/old/1", func(m *metadata.Stream) error { m.Epoch = 3; return nil })
	if err != nil || up.Epoch != 3 {
		t.Fatalf("update: %+v, %v", up, err)
	}
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Value[0] == '{' {
		t.Fatalf("updated record not rewritten compactly: %v, %v", resp, err)
	}
	if again, err := reg.GetStream(ctx, "/old/1"); err != nil || again != up {
		t.Fatalf("after rewrite: %+v, %v; want %+v", again, err, up)
	}
	if err := reg.DeleteStream(ctx, "/old/1", 5); err != nil {
		t.Fatal(err)
	}
}

func currentRevision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(testCtx(t), "/revision-probe")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}
