package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaAdminRoundTrip: what admin tools (kadm, Kafka UI, Connect,
// MirrorMaker) do against a real node: incremental and whole-set config
// alters round-trip through DescribeConfigs and apply (a lowered
// max.message.bytes refuses a larger batch), unsupported configs and
// list operations are INVALID_CONFIG, DescribeLogDirs reports the
// partitions with their sizes, OffsetForLeaderEpoch answers the current
// epoch's end, and ListOffsets -3 finds the record with the largest
// timestamp.
func TestKafkaAdminRoundTrip(t *testing.T) {
	_, addr := startKafkaNode(t, filepath.Join(t.TempDir(), "data"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := kafkaClient(t, kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	adm := kadm.NewClient(cl)
	const topic = "admin-rt"
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}

	describe := func() map[string]string {
		t.Helper()
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			t.Fatalf("DescribeTopicConfigs: %v", err)
		}
		rc, err := rcs.On(topic, nil)
		if err != nil || rc.Err != nil {
			t.Fatalf("DescribeTopicConfigs(%s): %v %v", topic, err, rc.Err)
		}
		out := map[string]string{}
		for _, c := range rc.Configs {
			out[c.Key] = c.MaybeValue()
		}
		return out
	}
	alter := func(state bool, cs ...kadm.AlterConfig) error {
		t.Helper()
		f := adm.AlterTopicConfigs
		if state {
			f = adm.AlterTopicConfigsState
		}
		res, err := f(ctx, cs, topic)
		if err != nil {
			return err
		}
		r, err := res.On(topic, nil)
		if err != nil {
			return err
		}
		return r.Err
	}
	sv := func(s string) *string { return &s }

	// Incremental SET, then DELETE back to the default.
	if err := alter(false, kadm.AlterConfig{Name: "retention.ms", Value: sv("3600000")},
		kadm.AlterConfig{Name: "max.message.bytes", Value: sv("2048")}); err != nil {
		t.Fatalf("IncrementalAlterConfigs: %v", err)
	}
	if c := describe(); c["retention.ms"] != "3600000" || c["max.message.bytes"] != "2048" || c["retention.bytes"] != "-1" {
		t.Fatalf("after incremental alter: %v", c)
	}
	// Applied: a batch above the new max.message.bytes is refused.
	noise := make([]byte, 4096) // incompressible: the client compresses
	_, _ = rand.Read(noise)
	big := &kgo.Record{Topic: topic, Partition: 1, Value: noise}
	if err := cl.ProduceSync(ctx, big).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("4 KiB record after max.message.bytes=2048: %v, want MESSAGE_TOO_LARGE", err)
	}
	if err := alter(false, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.ms"}); err != nil {
		t.Fatalf("IncrementalAlterConfigs DELETE: %v", err)
	}
	if c := describe(); c["retention.ms"] != "-1" || c["max.message.bytes"] != "2048" {
		t.Fatalf("after DELETE retention.ms: %v", c)
	}
	// AlterConfigs replaces the whole set: what is not named returns to
	// its default.
	if err := alter(true, kadm.AlterConfig{Name: "retention.bytes", Value: sv("1048576")}); err != nil {
		t.Fatalf("AlterConfigs: %v", err)
	}
	if c := describe(); c["retention.bytes"] != "1048576" || c["retention.ms"] != "-1" || c["max.message.bytes"] != "1048588" {
		t.Fatalf("after AlterConfigs: %v", c)
	}
	if err := cl.ProduceSync(ctx, big).FirstErr(); err != nil {
		t.Fatalf("4 KiB record after max.message.bytes returned to its default: %v", err)
	}
	// Refused, and nothing changed.
	for _, bad := range []kadm.AlterConfig{
		{Name: "unclean.leader.election.enable", Value: sv("true")},
		{Name: "no.such.config", Value: sv("1")},
		{Op: kadm.AppendConfig, Name: "retention.ms", Value: sv("1")},
		{Name: "retention.ms", Value: sv("soon")},
	} {
		if err := alter(false, bad); !errors.Is(err, kerr.InvalidConfig) {
			t.Fatalf("alter %+v: %v, want INVALID_CONFIG", bad, err)
		}
	}
	if c := describe(); c["retention.bytes"] != "1048576" {
		t.Fatalf("a refused alter changed the configs: %v", c)
	}

	// Records with chosen timestamps: the largest is in the middle.
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i, d := range []time.Duration{0, 3 * time.Second, time.Second} {
		r := &kgo.Record{Topic: topic, Partition: 0, Value: []byte{byte('a' + i)}, Timestamp: base.Add(d)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 7
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = 0, -3, -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	lresp, err := lo.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("ListOffsets v7: %v", err)
	}
	if p := lresp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 1 || p.Timestamp != base.Add(3*time.Second).UnixMilli() {
		t.Fatalf("ListOffsets -3: offset %d timestamp %d error %d, want offset 1 at %d", p.Offset, p.Timestamp, p.ErrorCode, base.Add(3*time.Second).UnixMilli())
	}

	// message.timestamp.type=LogAppendTime: the node stamps each batch with
	// its append time (header max timestamp and timestamp-type bit), so a
	// record produced with an old timestamp reads back at the append time.
	if err := alter(false, kadm.AlterConfig{Name: "message.timestamp.type", Value: sv("LogAppendTime")}); err != nil {
		t.Fatalf("alter message.timestamp.type: %v", err)
	}
	if c := describe(); c["message.timestamp.type"] != "LogAppendTime" {
		t.Fatalf("after alter: message.timestamp.type=%q", c["message.timestamp.type"])
	}
	before := time.Now().Add(-time.Second).UnixMilli() // the node's clock, with slack
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("late"), Timestamp: base}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	after := time.Now().Add(time.Second).UnixMilli()
	cons := kafkaClient(t, kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(3)}}))
	defer cons.Close()
	fs := cons.PollRecords(ctx, 1)
	if errs := fs.Errors(); len(errs) > 0 {
		t.Fatalf("fetch: %v", errs[0].Err)
	}
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Value) != "late" || recs[0].Attrs.TimestampType() != 1 ||
		recs[0].Timestamp.UnixMilli() < before || recs[0].Timestamp.UnixMilli() > after {
		t.Fatalf("LogAppendTime record: %+v (want timestamp type 1 within [%d, %d])", recs, before, after)
	}
	if err := alter(false, kadm.AlterConfig{Name: "message.timestamp.type", Value: sv("NoSuchTime")}); !errors.Is(err, kerr.InvalidConfig) {
		t.Fatalf("message.timestamp.type=NoSuchTime: %v, want INVALID_CONFIG", err)
	}

	// Log dirs: one per node, both partitions, sizes of what they hold.
	dirs, err := adm.DescribeAllLogDirs(ctx, nil)
	if err != nil {
		t.Fatalf("DescribeAllLogDirs: %v", err)
	}
	var p0, p1 int64 = -1, -1
	n := 0
	dirs.Each(func(d kadm.DescribedLogDir) {
		n++
		if d.Err != nil {
			t.Errorf("log dir %s: %v", d.Dir, d.Err)
		}
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			if p.Topic == topic && p.Partition == 0 {
				p0 = p.Size
			}
			if p.Topic == topic && p.Partition == 1 {
				p1 = p.Size
			}
		})
	})
	if n != 1 || p0 <= 0 || p1 < 4096 {
		t.Fatalf("DescribeAllLogDirs: %d dirs, partition sizes %d and %d (want 1 dir, > 0 and >= 4096)", n, p0, p1)
	}

	// Leader epochs: the stream's epoch; the current one ends at the high
	// watermark, a newer one is unknown.
	meta, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	epoch := meta.Topics[topic].Partitions[0].LeaderEpoch
	var req kadm.OffsetForLeaderEpochRequest
	req.Add(topic, 0, epoch)
	req.Add(topic, 1, epoch+1)
	eps, err := adm.OffsetForLeaderEpoch(ctx, req)
	if err != nil {
		t.Fatalf("OffsetForLeaderEpoch: %v", err)
	}
	if e := eps[topic][0]; e.Err != nil || e.LeaderEpoch != epoch || e.EndOffset != 4 {
		t.Fatalf("OffsetForLeaderEpoch(p0, current epoch %d) = %+v, want epoch %d end 4", epoch, e, epoch)
	}
	if e := eps[topic][1]; e.Err != nil || e.LeaderEpoch != -1 || e.EndOffset != -1 {
		t.Fatalf("OffsetForLeaderEpoch(p1, epoch %d) = %+v, want -1, -1", epoch+1, e)
	}
}
