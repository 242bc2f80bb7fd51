package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// TestProduceConsumeFranzGo: an unmodified franz-go client produces (its
// default idempotent producer, compressed batches) to a multi-partition
// topic and consumes every record back with key, value, headers and
// per-partition offsets intact.
func TestProduceConsumeFranzGo(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("orders", 3)
	prod := ts.client(kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.DefaultProduceTopic("orders"))
	const n = 300
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		r := &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "v%d", i),
			Headers: []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "%d", i)}}}
		prod.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cons := ts.client(kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	seen := map[string]bool{}
	next := map[int32]int64{}
	for len(seen) < n {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d: %v", len(seen), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next[r.Partition] {
				t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition]++
			var i int
			fmt.Sscanf(string(r.Value), "v%d", &i)
			if string(r.Key) != fmt.Sprintf("k%d", i%7) || len(r.Headers) != 1 || string(r.Headers[0].Value) != fmt.Sprint(i) {
				t.Fatalf("record %q: key %q headers %v", r.Value, r.Key, r.Headers)
			}
			seen[string(r.Value)] = true
		})
	}
	if len(next) != 3 {
		t.Fatalf("records landed in %d partitions, want 3 (keys hash over all)", len(next))
	}
	// Partition 1 is the stream /orders/1, readable as such.
	br, err := ts.env.Svc.ReadBatches(ctx, "/orders/1", 0, 1<<20)
	if err != nil || br.HighWatermark != next[1] {
		t.Fatalf("stream /orders/1: hwm %d, err %v; want %d", br.HighWatermark, err, next[1])
	}
}

// produceRaw sends one batch of n records for an idempotent producer.
func produceRaw(t *testing.T, rc *rawConn, corr int32, topic string, pid int64, epoch int16, seq int32, n int) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	return rc.roundTrip(produceRequest(topic, pid, epoch, seq, n), corr).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
}

// produceRequest is an acks=-1 produce v9 of one batch of n records of
// producer pid to partition 0 of topic.
func produceRequest(topic string, pid int64, epoch int16, seq int32, n int) *kmsg.ProduceRequest {
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i].Value = fmt.Appendf(nil, "s%d", int(seq)+i)
	}
	batch := record.AppendBatch(nil, record.BatchOptions{Timestamp: time.Now().UnixMilli(),
		ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq}, recs)
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// TestPipelinedProduces: produces a client pipelines on one connection are
// submitted while the ones before them await durability, and still come
// back in request order with exactly the offsets and sequence verdicts of
// one-at-a-time handling: consecutive batches of an idempotent producer, a
// gap refused mid-pipeline without disturbing the batches around it, a
// retry of an earlier batch answered with its original offset, and a
// Metadata request in between answered in its place.
func TestPipelinedProduces(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("pipeprod", 1)
	rc := ts.raw()
	const pid, n = 777, 3
	type want struct {
		code int16
		base int64
	}
	var wants []want
	var kinds []bool // true: produce
	corr := int32(1)
	seq, next := int32(0), int64(0)
	for i := 0; i < 12; i++ {
		switch i {
		case 5: // a sequence gap: refused, nothing written
			rc.send(produceRequest("pipeprod", pid, 0, seq+1, n), corr)
			wants, kinds = append(wants, want{kerr.OutOfOrderSequenceNumber.Code, -1}), append(kinds, true)
		case 8: // a retry of the first batch: its original offset
			rc.send(produceRequest("pipeprod", pid, 0, 0, n), corr)
			wants, kinds = append(wants, want{0, 0}), append(kinds, true)
		case 9:
			m := kmsg.NewPtrMetadataRequest()
			m.SetVersion(9)
			rc.send(m, corr)
			wants, kinds = append(wants, want{}), append(kinds, false)
		default:
			rc.send(produceRequest("pipeprod", pid, 0, seq, n), corr)
			wants, kinds = append(wants, want{0, next}), append(kinds, true)
			seq, next = seq+n, next+n
		}
		corr++
	}
	for i, w := range wants {
		got, body, err := rc.recv(true, 20*time.Second)
		if err != nil || got != int32(i+1) {
			t.Fatalf("response %d: correlation id %d, err %v", i+1, got, err)
		}
		if !kinds[i] {
			continue
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(9)
		if err := resp.ReadFrom(body); err != nil {
			t.Fatalf("response %d: %v", i+1, err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != w.code || (w.code == 0 && p.BaseOffset != w.base) {
			t.Fatalf("response %d: error %d base %d, want error %d base %d", i+1, p.ErrorCode, p.BaseOffset, w.code, w.base)
		}
	}
	info, err := ts.env.Svc.Head(context.Background(), "/pipeprod")
	if err != nil || info.NextOffset != next {
		t.Fatalf("stream has %d records (err %v), want %d", info.NextOffset, err, next)
	}
}

// TestIdempotentSequences: Kafka's per-record sequence rules on the
// stream's producer state: a retried batch answers its original offset
// without writing, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch is
// INVALID_PRODUCER_EPOCH, and all of it survives a restart (WAL replay).
func TestIdempotentSequences(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("idem", 1)
	rc := ts.raw()
	const pid = 4242
	const anyBase = -2 // an error answer's base offset is not checked
	for i, step := range []struct {
		what          string
		restartBefore bool
		epoch         int16
		seq           int32
		n             int
		wantErr       int16
		wantBase      int64
	}{
		{what: "first batch of an unknown producer (any sequence, KIP-360)", epoch: 3, seq: 100, n: 5, wantBase: 0},
		{what: "next batch", epoch: 3, seq: 105, n: 2, wantBase: 5},
		{what: "retry of the first batch (its original offset)", epoch: 3, seq: 100, n: 5, wantBase: 0},
		{what: "gap (107 expected, 109 sent)", epoch: 3, seq: 109, n: 1, wantErr: kerr.OutOfOrderSequenceNumber.Code, wantBase: anyBase},
		{what: "older epoch", epoch: 2, seq: 0, n: 1, wantErr: kerr.InvalidProducerEpoch.Code, wantBase: anyBase},
		{what: "retry after restart (dedup state replayed)", restartBefore: true, epoch: 3, seq: 105, n: 2, wantBase: 5},
		{what: "continuation after restart", epoch: 3, seq: 107, n: 1, wantBase: 7},
		{what: "bumped epoch from 0", epoch: 4, seq: 0, n: 1, wantBase: 8},
	} {
		if step.restartBefore {
			ts.restart()
			rc = ts.raw()
		}
		r := produceRaw(t, rc, int32(i+1), "idem", pid, step.epoch, step.seq, step.n)
		if r.ErrorCode != step.wantErr || (step.wantBase != anyBase && r.BaseOffset != step.wantBase) {
			t.Fatalf("%s: error %d, base %d; want error %d, base %d", step.what, r.ErrorCode, r.BaseOffset, step.wantErr, step.wantBase)
		}
	}
	info, err := ts.env.Svc.Head(context.Background(), "/idem")
	if err != nil || info.NextOffset != 9 {
		t.Fatalf("stream has %d records (err %v), want 9: no duplicate was written", info.NextOffset, err)
	}
}

// TestApiVersionsNewerThanOurs: KIP-511: a version we do not know gets a
// v0 body with UNSUPPORTED_VERSION and our ApiVersions range only (as
// Kafka answers: the client asks again at that version and so learns the
// features, which a v0 body cannot carry), never a closed connection.
func TestApiVersionsNewerThanOurs(t *testing.T) {
	ts := startServer(t, Config{})
	rc := ts.raw()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(99)
	rc.send(req, 7)
	corr, body, err := rc.recv(false, 10*time.Second)
	if err != nil || corr != 7 {
		t.Fatalf("corr %d err %v", corr, err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) != 1 ||
		resp.ApiKeys[0].ApiKey != kmsg.ApiVersions.Int16() || resp.ApiKeys[0].MaxVersion != handlers[kmsg.ApiVersions.Int16()].max {
		t.Fatalf("error %d, keys %+v; want UNSUPPORTED_VERSION and only our ApiVersions range", resp.ErrorCode, resp.ApiKeys)
	}
	// The same connection goes on working at a version we have.
	req.SetVersion(3)
	if r := rc.roundTrip(req, 8).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
		t.Fatalf("v3: error %d", r.ErrorCode)
	}
}

// TestOversizedFrameRefused: a length prefix over the limit (here 2 GiB-1)
// closes that connection before anything is allocated; the server keeps
// serving others.
func TestOversizedFrameRefused(t *testing.T) {
	ts := startServer(t, Config{MaxFrameBytes: 1 << 20})
	rc := ts.raw()
	if _, err := rc.c.Write(binary.BigEndian.AppendUint32(nil, 0x7fffffff)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rc.recv(false, 10*time.Second); err == nil {
		t.Fatal("connection still open after a 2 GiB frame prefix")
	}
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	if r := ts.raw().roundTrip(req, 1).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
		t.Fatalf("other connection: error %d", r.ErrorCode)
	}
}

// TestLongPollFetch: a fetch waiting for data holds only its own
// connection: another connection is served meanwhile, and the fetch
// returns as soon as a produce lands, well before MaxWait.
func TestLongPollFetch(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("lp", 1)
	waiter := ts.raw()
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(11)
	fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes = 20000, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "lp"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	start := time.Now()
	waiter.send(fetch, 1)

	other := ts.raw()
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	other.roundTrip(av, 1)
	if r := produceRaw(t, other, 2, "lp", -1, -1, -1, 3); r.ErrorCode != 0 {
		t.Fatalf("produce: %d", r.ErrorCode)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("other connection waited %v behind a long-poll", d)
	}
	corr, body, err := waiter.recv(false, 15*time.Second) // v11 is not flexible
	if err != nil || corr != 1 {
		t.Fatalf("long-poll: corr %d err %v", corr, err)
	}
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(11)
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 || p.HighWatermark != 3 || p.LastStableOffset != 3 || len(p.RecordBatches) == 0 {
		t.Fatalf("fetch: error %d hwm %d lso %d %d bytes", p.ErrorCode, p.HighWatermark, p.LastStableOffset, len(p.RecordBatches))
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("long-poll answered after %v, not when data arrived", d)
	}
}

// TestPipelinedResponsesInOrder: requests written back to back on one
// connection are answered in the order sent.
func TestPipelinedResponsesInOrder(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("pipe", 1)
	rc := ts.raw()
	for i := range int32(20) {
		var req kmsg.Request
		if i%2 == 0 {
			m := kmsg.NewPtrMetadataRequest()
			m.SetVersion(9)
			req = m
		} else {
			a := kmsg.NewPtrApiVersionsRequest()
			a.SetVersion(3)
			req = a
		}
		rc.send(req, 100+i)
	}
	for i := range int32(20) {
		corr, _, err := rc.recv(i%2 == 0, 10*time.Second)
		if err != nil || corr != 100+i {
			t.Fatalf("response %d: corr %d err %v", i, corr, err)
		}
	}
}

// TestFetchKIP74AndOutOfRange: a batch larger than the fetch limits still
// comes back whole (or the consumer would stall), and an offset past the
// high watermark is OFFSET_OUT_OF_RANGE.
func TestFetchKIP74AndOutOfRange(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("big", 1)
	cl := ts.client(kgo.DefaultProduceTopic("big"), kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx := context.Background()
	big := bytes.Repeat([]byte("x"), 200<<10)
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: big}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rc := ts.raw()
	fetch := func(offset int64, corr int32) kmsg.FetchResponseTopicPartition {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(12)
		req.MaxBytes = 1024
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "big"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.FetchOffset, fp.PartitionMaxBytes = offset, 1024
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		return rc.roundTrip(req, corr).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	p := fetch(0, 1)
	if p.ErrorCode != 0 || len(p.RecordBatches) < len(big) {
		t.Fatalf("KIP-74: error %d, %d bytes; want the whole %d-byte batch", p.ErrorCode, len(p.RecordBatches), len(big))
	}
	if p := fetch(1, 3); p.ErrorCode != 0 || p.RecordBatches == nil || len(p.RecordBatches) != 0 {
		t.Fatalf("at the high watermark: error %d, batches %v; want an empty, non-null record set (librdkafka rejects null)", p.ErrorCode, p.RecordBatches)
	}
	if p := fetch(5, 2); p.ErrorCode != kerr.OffsetOutOfRange.Code {
		t.Fatalf("offset 5 of 1: error %d, want OFFSET_OUT_OF_RANGE", p.ErrorCode)
	}
}

// TestMetadataAndTopicLifecycle: CreateTopics makes N streams readable by
// name, Metadata reports a stable topic id and this node as leader with the
// stream's epoch, CreatePartitions adds streams, DeleteTopics removes all,
// and a stream created over HTTP with an alias is a one-partition topic.
func TestMetadataAndTopicLifecycle(t *testing.T) {
	ts := startServer(t, Config{})
	ctx := context.Background()
	ts.createTopic("life", 2)
	cl := ts.client()
	meta := func() *kmsg.MetadataResponse {
		req := kmsg.NewPtrMetadataRequest()
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	m := meta()
	if len(m.Brokers) != 1 || m.ClusterID == nil || *m.ClusterID != "test-cluster" {
		t.Fatalf("brokers %v cluster %v", m.Brokers, m.ClusterID)
	}
	var id [16]byte
	for _, mt := range m.Topics {
		if *mt.Topic == "life" {
			id = mt.TopicID
			if len(mt.Partitions) != 2 || mt.Partitions[1].Leader != m.Brokers[0].NodeID || mt.Partitions[1].LeaderEpoch != 1 {
				t.Fatalf("partitions %+v", mt.Partitions)
			}
		}
	}
	if id == ([16]byte{}) {
		t.Fatal("topic life not in metadata")
	}
	cp := kmsg.NewPtrCreatePartitionsRequest()
	cpt := kmsg.NewCreatePartitionsRequestTopic()
	cpt.Topic, cpt.Count = "life", 4
	cp.Topics = append(cp.Topics, cpt)
	if r, err := cp.RequestWith(ctx, cl); err != nil || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create partitions: %v %+v", err, r)
	}
	for _, mt := range meta().Topics {
		if *mt.Topic == "life" && (len(mt.Partitions) != 4 || mt.TopicID != id) {
			t.Fatalf("after CreatePartitions: %d partitions, id %x (was %x)", len(mt.Partitions), mt.TopicID, id)
		}
	}
	if _, err := ts.env.Svc.Head(ctx, "/life/3"); err != nil {
		t.Fatalf("partition 3 stream: %v", err)
	}
	if _, _, err := ts.env.Svc.Create(ctx, "/http/made", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mt := range meta().Topics {
		found = found || (*mt.Topic == "http.made" && len(mt.Partitions) == 1)
	}
	if !found {
		t.Fatal("stream /http/made is not the one-partition topic http.made")
	}
	dt := kmsg.NewPtrDeleteTopicsRequest()
	life := "life"
	dt.TopicNames = []string{life}
	dt.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: &life}}
	if r, err := dt.RequestWith(ctx, cl); err != nil || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("delete: %v %+v", err, r)
	}
	for _, name := range []string{"/life", "/life/1", "/life/3"} {
		if _, err := ts.env.Svc.Head(ctx, name); err == nil {
			t.Fatalf("%s still exists after DeleteTopics", name)
		}
	}
}

// TestListOffsetsByTime: earliest, latest and the first record at or after
// a timestamp (CreateTime kept from the client).
func TestListOffsetsByTime(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("times", 1)
	cl := ts.client(kgo.DefaultProduceTopic("times"))
	ctx := context.Background()
	base := time.UnixMilli(1_700_000_000_000)
	for i := range 10 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x"), Timestamp: base.Add(time.Duration(i) * time.Second)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	list := func(ts int64) kmsg.ListOffsetsResponseTopicPartition {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "times"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	if p := list(-2); p.Offset != 0 {
		t.Fatalf("earliest %d", p.Offset)
	}
	if p := list(-1); p.Offset != 10 {
		t.Fatalf("latest %d", p.Offset)
	}
	if p := list(base.Add(3500 * time.Millisecond).UnixMilli()); p.Offset != 4 || p.Timestamp != base.Add(4*time.Second).UnixMilli() {
		t.Fatalf("by time: offset %d ts %d; want 4", p.Offset, p.Timestamp)
	}
	if p := list(base.Add(time.Hour).UnixMilli()); p.Offset != -1 {
		t.Fatalf("after the last record: offset %d, want -1", p.Offset)
	}
}

// TestTopicMaxMessageBytes: a topic's max.message.bytes (CreateTopics
// config, stored with its streams) bounds produced batches:
// MESSAGE_TOO_LARGE above it, and DescribeConfigs reports it.
func TestTopicMaxMessageBytes(t *testing.T) {
	ts := startServer(t, Config{})
	cl := ts.client()
	ctx := context.Background()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "small", 1, 1
	v := "2000"
	rt.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "max.message.bytes", Value: &v}}
	req.Topics = append(req.Topics, rt)
	if resp, err := req.RequestWith(ctx, cl); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %+v", err, resp)
	}
	p := ts.client(kgo.DefaultProduceTopic("small"), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.RecordRetries(0))
	if err := p.ProduceSync(ctx, &kgo.Record{Value: bytes.Repeat([]byte("a"), 500)}).FirstErr(); err != nil {
		t.Fatalf("small record: %v", err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Value: bytes.Repeat([]byte("a"), 5000)}).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("5000-byte record: %v, want MESSAGE_TOO_LARGE", err)
	}
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "small", ConfigNames: []string{"max.message.bytes"}}}
	resp, err := dc.RequestWith(ctx, cl)
	if err != nil || len(resp.Resources[0].Configs) != 1 || *resp.Resources[0].Configs[0].Value != "2000" {
		t.Fatalf("describe configs: %v %+v", err, resp)
	}
}

// TestCompactedTopicConfigsRoundTrip: cleanup.policy=compact and its
// tuning configs given at create are stored with the topic and read back
// by DescribeConfigs (what Kafka Connect checks of its internal topics).
func TestCompactedTopicConfigsRoundTrip(t *testing.T) {
	ts := startServer(t, Config{})
	cl := ts.client()
	ctx := context.Background()
	str := func(s string) *string { return &s }
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "compacted-cfg", 2, 1
	rt.Configs = []kmsg.CreateTopicsRequestTopicConfig{
		{Name: "cleanup.policy", Value: str("compact")},
		{Name: "min.compaction.lag.ms", Value: str("250")},
		{Name: "delete.retention.ms", Value: str("1000")},
		{Name: "min.cleanable.dirty.ratio", Value: str("0.01")},
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %+v", err, resp)
	}
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeTopic, "compacted-cfg"
	dc.Resources = append(dc.Resources, dr)
	dresp, err := dc.RequestWith(ctx, cl)
	if err != nil || dresp.Resources[0].ErrorCode != 0 {
		t.Fatalf("describe: %v %+v", err, dresp)
	}
	got := map[string]string{}
	for _, c := range dresp.Resources[0].Configs {
		got[c.Name] = *c.Value
	}
	want := map[string]string{"cleanup.policy": "compact", "min.compaction.lag.ms": "250", "delete.retention.ms": "1000",
		"min.cleanable.dirty.ratio": "0.01", "segment.ms": "604800000", "max.compaction.lag.ms": "9223372036854775807"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

// TestCreateTopicsRefusesUnhonouredConfigs: a config PicoMQ would not apply
// (a broker-side compression, an unknown key, a compaction setting out of
// Kafka's range) fails the create
// with INVALID_CONFIG and creates nothing; PicoMQ's own fixed values and the
// kept configs are accepted.
func TestCreateTopicsRefusesUnhonouredConfigs(t *testing.T) {
	ts := startServer(t, Config{})
	cl := ts.client()
	ctx := context.Background()
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name, key string
		value     *string
		code      int16
	}{
		{"compact", "cleanup.policy", str("compact"), 0},
		{"compact-delete", "cleanup.policy", str("compact,delete"), 0},
		{"delete-compact", "cleanup.policy", str("delete, compact"), 0},
		{"bad-policy", "cleanup.policy", str("shred"), kerr.InvalidConfig.Code},
		{"dirty-ratio", "min.cleanable.dirty.ratio", str("0.01"), 0},
		{"bad-dirty-ratio", "min.cleanable.dirty.ratio", str("1.5"), kerr.InvalidConfig.Code},
		{"bad-max-lag", "max.compaction.lag.ms", str("0"), kerr.InvalidConfig.Code},
		{"segment-ms", "segment.ms", str("1000"), 0},
		{"gzip", "compression.type", str("gzip"), kerr.InvalidConfig.Code},
		{"unknown", "segment.bytes", str("1048576"), kerr.InvalidConfig.Code},
		{"made-up", "no.such.config", str("x"), kerr.InvalidConfig.Code},
		{"unclean", "unclean.leader.election.enable", str("true"), kerr.InvalidConfig.Code},
		{"bad-retention", "retention.ms", str("soon"), kerr.InvalidConfig.Code},
		{"delete", "cleanup.policy", str("delete"), 0},
		{"producer", "compression.type", str("producer"), 0},
		{"flush", "flush.messages", str("1"), 0},
		{"retention", "retention.ms", str("60000"), 0},
		{"null", "cleanup.policy", nil, 0},
	} {
		for _, validate := range []bool{true, false} {
			req := kmsg.NewPtrCreateTopicsRequest()
			req.ValidateOnly = validate
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "cfg-"+tc.name, 1, 1
			rt.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: tc.key, Value: tc.value}}
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if got := resp.Topics[0].ErrorCode; got != tc.code {
				t.Errorf("%s (validate only %v): error code %d, want %d (%v)", tc.name, validate, got, tc.code, resp.Topics[0].ErrorMessage)
			}
		}
		md := kmsg.NewPtrMetadataRequest()
		md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("cfg-" + tc.name)}}
		resp, err := md.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		exists := resp.Topics[0].ErrorCode == 0
		if exists != (tc.code == 0) {
			t.Errorf("%s: topic exists = %v after a create answered %d", tc.name, exists, tc.code)
		}
	}
}

// TestProduceRefusesCompactedShapes: a produced batch must hold one record
// per offset of its span (the shape compaction leaves is not a client's
// to send): INVALID_RECORD, nothing stored.
func TestProduceRefusesCompactedShapes(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("dense", 1)
	cl := ts.client()
	ctx := context.Background()
	full := record.AppendBatch(nil, record.BatchOptions{Timestamp: time.Now().UnixMilli(), ProducerID: -1},
		[]record.Record{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}})
	gapped, _, err := record.FilterBatch(nil, full, func(r *record.Record) bool { return r.Offset == 1 })
	if err != nil {
		t.Fatal(err)
	}
	for name, batch := range map[string][]byte{"gapped": gapped, "empty": record.AppendEmptyBatch(nil, 0, 3, 1)} {
		req := produceRequest("dense", -1, -1, -1, 1)
		req.Topics[0].Partitions[0].Records = batch
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Topics[0].Partitions[0].ErrorCode; got != kerr.InvalidRecord.Code {
			t.Errorf("%s batch: error code %d, want INVALID_RECORD", name, got)
		}
	}
}
