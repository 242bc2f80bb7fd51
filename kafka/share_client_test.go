package kafka

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// setGroupConfigs sets share group configs with IncrementalAlterConfigs on
// the GROUP resource, as admin clients do.
func setGroupConfigs(t *testing.T, cl *kgo.Client, group string, kv ...string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i < len(kv); i += 2 {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value = kv[i], kmsg.StringPtr(kv[i+1])
		res.Configs = append(res.Configs, c)
	}
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("alter group configs: %v", err)
	}
}

// shareConsume polls a share consumer of group until it got want records
// and then two polls came back empty, accepting each record; it returns
// the values sorted.
func shareConsume(t *testing.T, ts *testServer, group, topic string, want int) []string {
	t.Helper()
	cl := ts.client(kgo.ConsumeTopics(topic), kgo.ShareGroup(group), kgo.FetchMaxWait(300*time.Millisecond))
	defer cl.Close()
	var got []string
	empty := 0
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && (len(got) < want || empty < 2) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			got = append(got, string(r.Value))
			r.Ack(kgo.AckAccept)
			n++
		})
		if n == 0 {
			empty++
			continue
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		if err := cl.FlushAcks(ctx); err != nil {
			t.Errorf("flush acks: %v", err)
		}
		cancel()
	}
	sort.Strings(got)
	return got
}

// TestShareGroupReadCommitted: with share.isolation.level=read_committed a
// share consumer gets the committed transactions' records and never the
// aborted ones (nor the markers); with the default read_uncommitted it
// gets both, as in Kafka.
func TestShareGroupReadCommitted(t *testing.T) {
	ts := startServer(t, Config{})
	admin := ts.client()
	createTopic(t, admin, "stx", 1)
	ctx := context.Background()
	p := ts.client(kgo.TransactionalID("stx-producer"), kgo.DefaultProduceTopic("stx"), kgo.TransactionTimeout(30*time.Second))
	for _, tx := range []struct {
		prefix string
		commit bool
	}{{"c", true}, {"a", false}, {"d", true}} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := p.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%s%d", tx.prefix, i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(tx.commit)); err != nil {
			t.Fatal(err)
		}
	}
	setGroupConfigs(t, admin, "sg-rc", "share.auto.offset.reset", "earliest", "share.isolation.level", "read_committed")
	if got := shareConsume(t, ts, "sg-rc", "stx", 6); fmt.Sprint(got) != "[c0 c1 c2 d0 d1 d2]" {
		t.Fatalf("read_committed share group got %v", got)
	}
	setGroupConfigs(t, admin, "sg-ru", "share.auto.offset.reset", "earliest")
	if got := shareConsume(t, ts, "sg-ru", "stx", 9); fmt.Sprint(got) != "[a0 a1 a2 c0 c1 c2 d0 d1 d2]" {
		t.Fatalf("read_uncommitted share group got %v", got)
	}
}

// TestShareStartOffsetSurvivesRestart: what a share group accepted is not
// delivered again after the node restarts (the start offset is stored in
// the group's offsets stream); what was produced since is.
func TestShareStartOffsetSurvivesRestart(t *testing.T) {
	ts := startServer(t, Config{})
	admin := ts.client(kgo.DefaultProduceTopic("srs"))
	createTopic(t, admin, "srs", 1)
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			if err := admin.ProduceSync(context.Background(), kgo.StringRecord(fmt.Sprintf("r%02d", i))).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 10)
	setGroupConfigs(t, admin, "sg-restart", "share.auto.offset.reset", "earliest")
	if got := shareConsume(t, ts, "sg-restart", "srs", 10); len(got) != 10 {
		t.Fatalf("before the restart got %v, want r00-r09", got)
	}
	// The start offset is stored in the background: await it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		offs, err := ts.srv.groups.ShareOffsets(context.Background(), "sg-restart")
		if err == nil && offs["srs"][0] == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored start offset: %v %v, want srs/0 = 10", offs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ts.restart()
	admin = ts.client(kgo.DefaultProduceTopic("srs"))
	produce(10, 13)
	// No configs after the restart (they are memory): the stored start
	// offset, not share.auto.offset.reset, decides.
	if got := shareConsume(t, ts, "sg-restart", "srs", 3); !slices.Equal(got, []string{"r10", "r11", "r12"}) {
		t.Fatalf("after the restart got %v, want r10-r12 only", got)
	}
}

// TestShareGroupAdminWithMembers: a share group with a member is listed as
// a share group and refuses DeleteGroups and AlterShareGroupOffsets
// (NON_EMPTY_GROUP); once the member left, DeleteGroups deletes it.
func TestShareGroupAdminWithMembers(t *testing.T) {
	ts := startServer(t, Config{})
	cl := ts.client()
	createTopic(t, cl, "sadm", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.MemberEpoch, hb.SubscribedTopicNames = "sg-adm", "m1", 0, []string{"sadm"}
	hresp, err := hb.RequestWith(ctx, cl)
	if err != nil || hresp.ErrorCode != 0 || hresp.Assignment == nil || len(hresp.Assignment.TopicPartitions) != 1 ||
		len(hresp.Assignment.TopicPartitions[0].Partitions) != 2 {
		t.Fatalf("join: %v %+v", err, hresp)
	}

	lg := kmsg.NewPtrListGroupsRequest()
	lg.TypesFilter = []string{"share"}
	lresp, err := lg.RequestWith(ctx, cl)
	if err != nil || len(lresp.Groups) != 1 || lresp.Groups[0].Group != "sg-adm" || lresp.Groups[0].GroupType != "share" || lresp.Groups[0].GroupState != "Stable" {
		t.Fatalf("ListGroups(type share): %v %+v", err, lresp)
	}

	alter := kmsg.NewPtrAlterShareGroupOffsetsRequest()
	alter.GroupID = "sg-adm"
	alter.Topics = []kmsg.AlterShareGroupOffsetsRequestTopic{{Topic: "sadm", Partitions: []kmsg.AlterShareGroupOffsetsRequestTopicPartition{{Partition: 0, StartOffset: 0}}}}
	if aresp, err := alter.RequestWith(ctx, cl); err != nil || aresp.ErrorCode != kerr.NonEmptyGroup.Code {
		t.Fatalf("AlterShareGroupOffsets with a member: %v %+v, want NON_EMPTY_GROUP", err, aresp)
	}
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"sg-adm"}
	if dresp, err := del.RequestWith(ctx, cl); err != nil || len(dresp.Groups) != 1 || dresp.Groups[0].ErrorCode != kerr.NonEmptyGroup.Code {
		t.Fatalf("DeleteGroups with a member: %v %+v, want NON_EMPTY_GROUP", err, dresp)
	}

	hb.MemberEpoch = -1
	if hresp, err := hb.RequestWith(ctx, cl); err != nil || hresp.ErrorCode != 0 {
		t.Fatalf("leave: %v %+v", err, hresp)
	}
	if dresp, err := del.RequestWith(ctx, cl); err != nil || len(dresp.Groups) != 1 || dresp.Groups[0].ErrorCode != 0 {
		t.Fatalf("DeleteGroups after the leave: %v %+v", err, dresp)
	}
	if lresp, err := lg.RequestWith(ctx, cl); err != nil || len(lresp.Groups) != 0 {
		t.Fatalf("ListGroups after the delete: %v %+v", err, lresp)
	}
}
