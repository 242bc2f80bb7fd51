package kafka

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/node/stream/streamtest"
	"github.com/PicoMQ/picomq/record"
)

// TestProduceVerifiesTxnPartition (KIP-890 part 1): the leader refuses
// the first transactional batch of a transaction on a partition that was
// not added to the producer's open transaction (INVALID_TXN_STATE), and
// one from a fenced epoch (INVALID_PRODUCER_EPOCH); nothing of a refused
// batch is written, so no transaction is left open that no marker ends;
// batches of a partition that was added pass, and after the commit the
// next transaction must add the partition again.
func TestProduceVerifiesTxnPartition(t *testing.T) {
	ts := startServer(t, Config{})
	// transaction.version 1 requests: the partition-1 client adds its
	// partitions and ends without an epoch bump.
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.AddPartitionsToTxn.Int16(), 3)
	v.SetMaxKeyVersion(kmsg.EndTxn.Int16(), 4)
	admin := ts.client(kgo.MaxVersions(v))
	createTopic(t, admin, "k890", 2)
	ctx := context.Background()
	id := "k890-id"
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &id, 60_000
	ir, err := init.RequestWith(ctx, admin)
	if err != nil || ir.ErrorCode != 0 {
		t.Fatalf("init: %v %+v", err, ir)
	}
	// Again: epoch 1, so epoch 0 is a fenced one.
	if ir, err = init.RequestWith(ctx, admin); err != nil || ir.ErrorCode != 0 || ir.ProducerEpoch != 1 {
		t.Fatalf("second init: %v %+v", err, ir)
	}
	pid, epoch := ir.ProducerID, ir.ProducerEpoch
	add := kmsg.NewPtrAddPartitionsToTxnRequest()
	add.Version = 3
	add.TransactionalID, add.ProducerID, add.ProducerEpoch = id, pid, epoch
	at := kmsg.NewAddPartitionsToTxnRequestTopic()
	at.Topic, at.Partitions = "k890", []int32{0}
	add.Topics = []kmsg.AddPartitionsToTxnRequestTopic{at}
	ar, err := add.RequestWith(ctx, admin)
	if err != nil || ar.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("add partition 0: %v %+v", err, ar)
	}

	rc := ts.raw()
	corr := int32(0)
	produce := func(txnID *string, p int32, ep int16, seq int32) int16 {
		t.Helper()
		corr++
		req := txnProduce(9, txnID, "k890", p, pid, ep, seq, "v")
		return rc.roundTrip(req, corr).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}
	want := func(what string, got int16, want *kerr.Error) { t.Helper(); wantErr(t, what, got, want) }
	want("partition 1, never added", produce(&id, 1, epoch, 0), kerr.InvalidTxnState)
	want("partition 1 without transactional id", produce(nil, 1, epoch, 0), kerr.InvalidTxnState)
	want("partition 0, added", produce(&id, 0, epoch, 0), nil)
	want("partition 0, second batch", produce(&id, 0, epoch, 1), nil)
	want("partition 0, an older epoch", produce(&id, 1, epoch-1, 0), kerr.InvalidProducerEpoch)

	end := kmsg.NewPtrEndTxnRequest()
	end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, pid, epoch, true
	if er, err := end.RequestWith(ctx, admin); err != nil || er.ErrorCode != 0 {
		t.Fatalf("commit: %v %+v", err, er)
	}
	want("partition 0 after the commit, not added again", produce(&id, 0, epoch, 2), kerr.InvalidTxnState)
	// One check passed (partition 0's first batch; its second needed
	// none), four were refused.
	if st := ts.srv.TxnStats(); st.ChecksOK != 1 || st.ChecksRefused != 4 || st.ChecksUnavailable != 0 {
		t.Fatalf("check counters %+v, want 1 ok, 4 refused", st)
	}

	// Nothing of the refused batches is in partition 1: its end is 0 and
	// read_committed consumers are not held back.
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version, lo.IsolationLevel = 4, 1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "k890"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp = 1, -1
	lt.Partitions = []kmsg.ListOffsetsRequestTopicPartition{lp}
	lo.Topics = []kmsg.ListOffsetsRequestTopic{lt}
	lr, err := lo.RequestWith(ctx, admin)
	if err != nil || lr.Topics[0].Partitions[0].ErrorCode != 0 || lr.Topics[0].Partitions[0].Offset != 0 {
		t.Fatalf("partition 1's end: %v %+v, want 0", err, lr)
	}
}

// TestProduceV12AddsPartition (KIP-890 part 2, transaction.version 2):
// ApiVersions v4 offers and finalizes transaction.version 2 (v3 leaves
// the supported range starting at 0 out); a Produce v12 of a partition
// the producer never added adds it to the transaction before the batch
// is written; EndTxn v5 answers the bumped epoch and the marker carries
// it; the ended epoch is then fenced both where it wrote (the marker) and
// where it did not (the coordinator); the next transaction at the new
// epoch starts with sequence 0.
func TestProduceV12AddsPartition(t *testing.T) {
	ts := startServer(t, Config{})
	admin := ts.client()
	createTopic(t, admin, "k890p2", 2)
	rc := ts.raw()
	corr := int32(0)
	round := func(req kmsg.Request) kmsg.Response {
		corr++
		return rc.roundTrip(req, corr)
	}

	for _, v := range []int16{3, 4} {
		av := kmsg.NewPtrApiVersionsRequest()
		av.Version = v
		r := round(av).(*kmsg.ApiVersionsResponse)
		if len(r.FinalizedFeatures) != 1 || r.FinalizedFeatures[0].Name != "transaction.version" ||
			r.FinalizedFeatures[0].MaxVersionLevel != 2 || r.FinalizedFeaturesEpoch < 0 {
			t.Fatalf("ApiVersions v%d finalized features %+v epoch %d", v, r.FinalizedFeatures, r.FinalizedFeaturesEpoch)
		}
		if wantSupported := v >= 4; (len(r.SupportedFeatures) == 1) != wantSupported {
			t.Fatalf("ApiVersions v%d supported features %+v", v, r.SupportedFeatures)
		}
	}

	id := "k890p2-id"
	init := kmsg.NewPtrInitProducerIDRequest()
	init.Version = 5
	init.TransactionalID, init.TransactionTimeoutMillis = &id, 60_000
	ir := round(init).(*kmsg.InitProducerIDResponse)
	if ir.ErrorCode != 0 {
		t.Fatalf("init: %+v", ir)
	}
	pid, epoch := ir.ProducerID, ir.ProducerEpoch
	produce := func(p int32, ep int16, seq int32, value string) int16 {
		t.Helper()
		req := txnProduce(12, &id, "k890p2", p, pid, ep, seq, value)
		return round(req).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
	}
	want := func(what string, got int16, want *kerr.Error) { t.Helper(); wantErr(t, what, got, want) }
	endTxn := func(ep int16, commit bool) *kmsg.EndTxnResponse {
		req := kmsg.NewPtrEndTxnRequest()
		req.Version = 5
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, pid, ep, commit
		return round(req).(*kmsg.EndTxnResponse)
	}

	want("partition 0, never added", produce(0, epoch, 0, "a"), nil)
	want("partition 0, second batch", produce(0, epoch, 1, "b"), nil)
	dt := kmsg.NewPtrDescribeTransactionsRequest()
	dt.TransactionalIDs = []string{id}
	if d := round(dt).(*kmsg.DescribeTransactionsResponse).TransactionStates[0]; d.State != "Ongoing" ||
		len(d.Topics) != 1 || fmt.Sprint(d.Topics[0].Partitions) != "[0]" {
		t.Fatalf("after the produce: %+v, want Ongoing with k890p2/0", d)
	}
	er := endTxn(epoch, true)
	if er.ErrorCode != 0 || er.ProducerID != pid || er.ProducerEpoch != epoch+1 {
		t.Fatalf("EndTxn v5: %+v, want %d/%d", er, pid, epoch+1)
	}
	if r := endTxn(epoch, true); r.ErrorCode != 0 || r.ProducerEpoch != epoch+1 {
		t.Fatalf("EndTxn v5 retried: %+v", r)
	}
	want("partition 0 at the ended epoch", produce(0, epoch, 2, "late"), kerr.InvalidProducerEpoch)
	want("partition 1 at the ended epoch", produce(1, epoch, 0, "late"), kerr.InvalidProducerEpoch)
	want("partition 0 at the new epoch", produce(0, epoch+1, 0, "c"), nil)
	if r := endTxn(epoch+1, false); r.ErrorCode != 0 || r.ProducerEpoch != epoch+2 {
		t.Fatalf("abort: %+v", r)
	}
	if st := ts.srv.TxnStats(); st.ChecksAdded != 2 || st.ChecksOK != 0 || st.ChecksRefused != 1 {
		t.Fatalf("check counters %+v, want 2 added (one per transaction), 1 refused", st)
	}

	// Partition 0 holds a, b, the commit marker at epoch 1, c and the
	// abort marker at epoch 2; read_committed sees a and b.
	fr := kmsg.NewPtrFetchRequest()
	fr.Version, fr.MaxWaitMillis, fr.MaxBytes = 11, 100, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "k890p2"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = []kmsg.FetchRequestTopicPartition{fp}
	fr.Topics = []kmsg.FetchRequestTopic{ft}
	fres := round(fr).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	var got []string
	for b := fres.RecordBatches; len(b) > 0; {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		b = b[12+rb.Length:]
		if rb.Attributes&0x20 != 0 {
			got = append(got, fmt.Sprintf("marker@%d", rb.ProducerEpoch))
		} else {
			got = append(got, fmt.Sprintf("data@%d", rb.ProducerEpoch))
		}
	}
	if fmt.Sprint(got) != fmt.Sprintf("[data@%d data@%d marker@%d data@%d marker@%d]", epoch, epoch, epoch+1, epoch+1, epoch+2) {
		t.Fatalf("partition 0: %v", got)
	}
	if rc := consumeAll(t, ts, "k890p2", kgo.ReadCommitted(), 2); fmt.Sprint(rc) != "[a b]" {
		t.Fatalf("read_committed: %v", rc)
	}
}

// TestAddPartitionsBatchedNeedsAdmin: AddPartitionsToTxn v4+ (the
// node-to-node form a leader sends the coordinator) is refused to a
// producer that may only write (TOPIC_AUTHORIZATION_FAILED, nothing
// added), and served to an admin: VerifyOnly checks without adding
// (INVALID_TXN_STATE before the add), the add starts the transaction.
func TestAddPartitionsBatchedNeedsAdmin(t *testing.T) {
	store := tokenStore(t, "  - name: writer\n    sha256: "+auth.HashToken("pmq_writer-token-0123456789")+"\n    scopes: [\"write:/\"]\n")
	ts := startServer(t, Config{Auth: store})
	root := ts.client(kgo.SASL(plain.Auth{User: "u", Pass: "pmq_root-token-0123456789"}.AsMechanism()))
	writer := ts.client(kgo.SASL(plain.Auth{User: "u", Pass: "pmq_writer-token-0123456789"}.AsMechanism()))
	createTopic(t, root, "apb", 2)
	ctx := context.Background()
	id := "apb-id"
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID, init.TransactionTimeoutMillis = &id, 60_000
	ir, err := init.RequestWith(ctx, writer)
	if err != nil || ir.ErrorCode != 0 {
		t.Fatalf("init: %v %+v", err, ir)
	}
	add := func(cl *kgo.Client, verifyOnly bool) int16 {
		t.Helper()
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
		tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly = id, ir.ProducerID, ir.ProducerEpoch, verifyOnly
		tx.Topics = []kmsg.AddPartitionsToTxnRequestTransactionTopic{{Topic: "apb", Partitions: []int32{1}}}
		req.Transactions = []kmsg.AddPartitionsToTxnRequestTransaction{tx}
		// To the broker itself: the client would split a v4+ request
		// into v3 ones (kgo's sharding), as it does for producers.
		resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
		if err != nil || resp.Version < 4 || len(resp.Transactions) != 1 {
			t.Fatalf("AddPartitionsToTxn v4+: %v %+v", err, resp)
		}
		return resp.Transactions[0].Topics[0].Partitions[0].ErrorCode
	}
	describe := func() string {
		dt := kmsg.NewPtrDescribeTransactionsRequest()
		dt.TransactionalIDs = []string{id}
		r, err := dt.RequestWith(ctx, root)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(r.TransactionStates[0].State, r.TransactionStates[0].Topics)
	}
	if c := add(writer, false); c != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("a writer's batched add: %v, want TOPIC_AUTHORIZATION_FAILED", kerr.ErrorForCode(c))
	}
	if c := add(root, true); c != kerr.InvalidTxnState.Code {
		t.Fatalf("verify before the add: %v, want INVALID_TXN_STATE", kerr.ErrorForCode(c))
	}
	if got := describe(); got != "Empty[]" {
		t.Fatalf("after the refused add and the check: %s, want nothing added", got)
	}
	if c := add(root, false); c != 0 {
		t.Fatalf("an admin's batched add: %v", kerr.ErrorForCode(c))
	}
	if c := add(root, true); c != 0 {
		t.Fatalf("verify after the add: %v", kerr.ErrorForCode(c))
	}
	if got := describe(); !strings.HasPrefix(got, "Ongoing[{apb [1]") {
		t.Fatalf("after the add: %s", got)
	}
}

// txnProduce is a Produce of one transactional batch of one record to
// topic/p, at the given request version.
func txnProduce(version int16, txnID *string, topic string, p int32, pid int64, epoch int16, seq int32, value string) *kmsg.ProduceRequest {
	batch := record.AppendBatch(nil, record.BatchOptions{Timestamp: time.Now().UnixMilli(),
		ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, Transactional: true},
		[]record.Record{{Value: []byte(value)}})
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis, req.TransactionID = version, -1, 10_000, txnID
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, batch
	rt.Partitions = []kmsg.ProduceRequestTopicPartition{rp}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	return req
}

// wantErr fails the test unless got is want's code (0 for nil).
func wantErr(t *testing.T, what string, got int16, want *kerr.Error) {
	t.Helper()
	wantCode := int16(0)
	if want != nil {
		wantCode = want.Code
	}
	if got != wantCode {
		t.Fatalf("%s: error %v, want %v", what, kerr.ErrorForCode(got), want)
	}
}

// withOldMember makes the cluster look as it does during a rolling
// upgrade from a build before KIP-890 part 2 while old is set: one more
// live member whose record has no transaction.version.
type withOldMember struct {
	Streams
	old atomic.Bool
}

func (w *withOldMember) Members(ctx context.Context) ([]stream.Member, error) {
	ms, err := w.Streams.Members(ctx)
	if err != nil || !w.old.Load() {
		return ms, err
	}
	return append(ms, stream.Member{NodeID: "node-of-an-old-build"}), nil
}

// TestTxnVersionFinalizedOnceEveryNodeServesIt: while a live member of
// the cluster serves no transaction.version 2, ApiVersions finalizes
// nothing (epoch -1), so a franz-go transactional producer adds its
// partitions itself (the leader's KIP-890 checks come out "ok", none
// "added") and an old leader would accept its batches; once every member
// serves it, level 2 is finalized at epoch 1. Fails when the level is
// finalized unconditionally.
func TestTxnVersionFinalizedOnceEveryNodeServesIt(t *testing.T) {
	w := &withOldMember{}
	w.old.Store(true)
	ts := &testServer{t: t, env: streamtest.New(t, stream.Config{}), wrap: func(s Streams) Streams { w.Streams = s; return w }}
	ts.serve()
	apiVersions := func() *kmsg.ApiVersionsResponse {
		t.Helper()
		av := kmsg.NewPtrApiVersionsRequest()
		av.Version = 4
		return ts.raw().roundTrip(av, 1).(*kmsg.ApiVersionsResponse)
	}
	r := apiVersions()
	if r.FinalizedFeaturesEpoch != -1 || len(r.FinalizedFeatures) != 0 {
		t.Fatalf("with a member of an old build: finalized %+v epoch %d, want none, -1", r.FinalizedFeatures, r.FinalizedFeaturesEpoch)
	}
	if len(r.SupportedFeatures) != 1 || r.SupportedFeatures[0].MaxVersion != 2 {
		t.Fatalf("this node's supported features %+v, want transaction.version up to 2", r.SupportedFeatures)
	}

	createTopic(t, ts.client(), "tvgate", 2)
	ctx := context.Background()
	p := ts.client(kgo.TransactionalID("tvgate-id"), kgo.DefaultProduceTopic("tvgate"))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("v"), Partition: int32(i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if st := ts.srv.TxnStats(); st.ChecksAdded != 0 || st.ChecksOK == 0 {
		t.Fatalf("KIP-890 checks %+v: want checks that found the partitions added by the client, none added by Produce v12", st)
	}

	w.old.Store(false)
	r = apiVersions()
	if r.FinalizedFeaturesEpoch != 1 || len(r.FinalizedFeatures) != 1 || r.FinalizedFeatures[0].MaxVersionLevel != 2 {
		t.Fatalf("every member upgraded: finalized %+v epoch %d, want transaction.version 2 at epoch 1", r.FinalizedFeatures, r.FinalizedFeaturesEpoch)
	}
}
