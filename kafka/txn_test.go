package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func createTopic(t *testing.T, cl *kgo.Client, name string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, 1
	req.Topics = append(req.Topics, rt)
	if resp, err := req.RequestWith(context.Background(), cl); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create %s: %v %+v", name, err, resp)
	}
}

// consumeAll reads topic from the start until it has n records or the
// high watermarks are reached with nothing new.
func consumeAll(t *testing.T, ts *testServer, topic string, isolation kgo.IsolationLevel, want int) []string {
	t.Helper()
	cl := ts.client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(isolation), kgo.FetchMaxWait(200*time.Millisecond))
	defer cl.Close()
	var got []string
	deadline := time.Now().Add(20 * time.Second)
	empty := 0
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)); n++ })
		if n == 0 {
			empty++
		}
		if len(got) >= want && empty >= 2 {
			break
		}
	}
	sort.Strings(got)
	return got
}

// TestTransactionsCommitAbort: a franz-go transactional producer commits
// one transaction and aborts the next; read_committed consumers see only
// the committed records, read_uncommitted ones see both; an open
// transaction holds read_committed consumers back at its first offset.
func TestTransactionsCommitAbort(t *testing.T) {
	ts := startServer(t, Config{})
	admin := ts.client()
	createTopic(t, admin, "tx", 2)
	ctx := context.Background()
	p := ts.client(kgo.TransactionalID("tx-producer"), kgo.DefaultProduceTopic("tx"), kgo.TransactionTimeout(30*time.Second))
	produce := func(prefix string, commit bool) {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprintf("%s%d", prefix, i)), Partition: int32(i % 2)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end transaction (commit %v): %v", commit, err)
		}
	}
	produce("c", true)
	produce("a", false)
	if got := consumeAll(t, ts, "tx", kgo.ReadCommitted(), 4); fmt.Sprint(got) != "[c0 c1 c2 c3]" {
		t.Fatalf("read_committed: %v", got)
	}
	if got := consumeAll(t, ts, "tx", kgo.ReadUncommitted(), 8); fmt.Sprint(got) != "[a0 a1 a2 a3 c0 c1 c2 c3]" {
		t.Fatalf("read_uncommitted: %v", got)
	}
	// An open transaction: read_committed stops before it, uncommitted
	// readers see it; the LSO in ListOffsets/Fetch is its first offset.
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if got := consumeAll(t, ts, "tx", kgo.ReadCommitted(), 4); fmt.Sprint(got) != "[c0 c1 c2 c3]" {
		t.Fatalf("read_committed with an open transaction: %v", got)
	}
	// ListOffsets latest: the last stable offset for read_committed, the
	// high watermark for read_uncommitted: one record ("open") apart.
	latest := func(iso int8) (sum int64) {
		lo := kmsg.NewPtrListOffsetsRequest()
		lo.IsolationLevel = iso
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "tx"
		for p := range int32(2) {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		lo.Topics = []kmsg.ListOffsetsRequestTopic{rt}
		resp, err := lo.RequestWith(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range resp.Topics[0].Partitions {
			if p.ErrorCode != 0 {
				t.Fatalf("list offsets: %+v", resp)
			}
			sum += p.Offset
		}
		return sum
	}
	if c, u := latest(1), latest(0); u-c != 1 {
		t.Fatalf("ListOffsets latest: read_committed %d, read_uncommitted %d (sums over partitions), want 1 apart", c, u)
	}
	// DescribeProducers: the partition that holds "open" names its
	// producer with the transaction's first offset.
	dp := kmsg.NewPtrDescribeProducersRequest()
	dpt := kmsg.NewDescribeProducersRequestTopic()
	dpt.Topic, dpt.Partitions = "tx", []int32{0, 1}
	dp.Topics = []kmsg.DescribeProducersRequestTopic{dpt}
	dpResp, err := dp.RequestWith(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	open := 0
	for _, part := range dpResp.Topics[0].Partitions {
		if part.ErrorCode != 0 || len(part.ActiveProducers) > 1 {
			t.Fatalf("describe producers: %+v", part)
		}
		for _, ap := range part.ActiveProducers {
			if ap.CurrentTxnStartOffset >= 0 {
				open++
			}
		}
	}
	if open != 1 {
		t.Fatalf("describe producers: %d partitions with an open transaction, want 1: %+v", open, dpResp.Topics[0].Partitions)
	}
	// DescribeTransactions / ListTransactions see it open.
	dt := kmsg.NewPtrDescribeTransactionsRequest()
	dt.TransactionalIDs = []string{"tx-producer"}
	dresp, err := dt.RequestWith(ctx, admin)
	if err != nil || dresp.TransactionStates[0].ErrorCode != 0 || dresp.TransactionStates[0].State != "Ongoing" {
		t.Fatalf("describe transactions: %v %+v", err, dresp)
	}
	lt := kmsg.NewPtrListTransactionsRequest()
	lt.StateFilters = []string{"Ongoing"}
	lresp, err := lt.RequestWith(ctx, admin)
	if err != nil || len(lresp.TransactionStates) != 1 || lresp.TransactionStates[0].TransactionalID != "tx-producer" {
		t.Fatalf("list transactions: %v %+v", err, lresp)
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if got := consumeAll(t, ts, "tx", kgo.ReadCommitted(), 5); fmt.Sprint(got) != "[c0 c1 c2 c3 open]" {
		t.Fatalf("read_committed after the commit: %v", got)
	}
}

// TestTransactionsFenceZombie: a second producer with the same
// transactional id fences the first: the first's open transaction is
// aborted and its later writes and commit are refused.
func TestTransactionsFenceZombie(t *testing.T) {
	ts := startServer(t, Config{})
	createTopic(t, ts.client(), "fz", 1)
	ctx := context.Background()
	zombie := ts.client(kgo.TransactionalID("fz-id"), kgo.DefaultProduceTopic("fz"), kgo.RecordRetries(2))
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fresh := ts.client(kgo.TransactionalID("fz-id"), kgo.DefaultProduceTopic("fz"))
	if err := fresh.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := fresh.ProduceSync(ctx, &kgo.Record{Value: []byte("fresh")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := fresh.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	err := zombie.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie2")}).FirstErr()
	if err == nil {
		err = zombie.EndTransaction(ctx, kgo.TryCommit)
	}
	if !errors.Is(err, kerr.InvalidProducerEpoch) && !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("zombie after fencing: %v, want fenced", err)
	}
	if got := consumeAll(t, ts, "fz", kgo.ReadCommitted(), 1); fmt.Sprint(got) != "[fresh]" {
		t.Fatalf("read_committed: %v", got)
	}
}

// TestTransactionTimeoutAborts: a transaction left open past its
// transaction.timeout.ms is aborted by the coordinator: read_committed
// consumers move past it and see none of it, the producer's late commit is
// refused (its epoch was fenced), and a new transaction of the same id
// works after InitProducerId.
func TestTransactionTimeoutAborts(t *testing.T) {
	ts := startServer(t, Config{})
	admin := ts.client()
	createTopic(t, admin, "tto", 1)
	ctx := context.Background()
	p := ts.client(kgo.TransactionalID("tto-id"), kgo.DefaultProduceTopic("tto"), kgo.TransactionTimeout(time.Second))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("late")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dt := kmsg.NewPtrDescribeTransactionsRequest()
	dt.TransactionalIDs = []string{"tto-id"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := dt.RequestWith(ctx, admin)
		if err == nil && resp.TransactionStates[0].State == "CompleteAbort" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not aborted within 30 s of a 1 s timeout: %v %+v", err, resp)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with a deadline
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("commit after the timeout succeeded")
	}
	q := ts.client(kgo.TransactionalID("tto-id"), kgo.DefaultProduceTopic("tto"))
	if err := q.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := q.ProduceSync(ctx, &kgo.Record{Value: []byte("next")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := q.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if got := consumeAll(t, ts, "tto", kgo.ReadCommitted(), 1); fmt.Sprint(got) != "[next]" {
		t.Fatalf("read_committed: %v", got)
	}
}
