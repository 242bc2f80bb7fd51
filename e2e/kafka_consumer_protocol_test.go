package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumer848 is a franz-go consumer of the KIP-848 consumer protocol
// (server-side assignment), committing by hand.
func consumer848(t testing.TB, addr, group, topic string) *kgo.Client {
	return kafkaClient(t, kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ServerSideBalancer(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond))
}

// describe848 is the ConsumerGroupDescribe answer for group.
func describe848(ctx context.Context, cl *kgo.Client, group string) (kmsg.ConsumerGroupDescribeResponseGroup, error) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return kmsg.ConsumerGroupDescribeResponseGroup{}, err
	}
	return resp.Groups[0], nil
}

// TestKafkaConsumerProtocolGroup: two franz-go consumers of the KIP-848
// protocol share a 4-partition topic. The first consumes and commits
// everything; when the second joins, the coordinator moves two partitions
// to it (revoked from the first before being assigned), and the records
// produced then are consumed exactly once between them, each partition by
// one of them. After a kill -9 and restart of the node, a new consumer of
// the group starts at the committed offsets.
func TestKafkaConsumerProtocolGroup(t *testing.T) {
	dir := t.TempDir()
	node, addr := startKafkaNode(t, filepath.Join(dir, "data"))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic, group = "cp-orders", "cp-billing"
	createTopic(t, ctx, addr, topic, 4)
	produceN(t, ctx, addr, topic, "a", 80)

	a := consumer848(t, addr, group, topic)
	defer a.Close()
	want := valueSet("a", 80)
	for n := 0; n < 80; {
		fs := a.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumer A: %d of 80: %v", n, ctx.Err())
		}
		for _, r := range fs.Records() {
			if !want[string(r.Value)] {
				t.Fatalf("consumer A got %q twice or unexpected", r.Value)
			}
			want[string(r.Value)] = false
			n++
		}
	}
	if err := a.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("A commit: %v", err)
	}

	admin := kafkaClient(t, kgo.SeedBrokers(addr))
	defer admin.Close()
	b := consumer848(t, addr, group, topic)
	defer b.Close()
	// B polls (it must, to move through its assignment) until the group
	// is stable with two partitions each.
	var mu sync.Mutex
	got := map[string]string{}  // value → consumer
	owner := map[int32]string{} // partition → consumer
	var dup error
	poll := func(name string, cl *kgo.Client, stop <-chan struct{}, done *sync.WaitGroup) {
		defer done.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			fs := cl.PollFetches(pctx)
			pcancel()
			mu.Lock()
			for _, r := range fs.Records() {
				v := string(r.Value)
				if prev, ok := got[v]; ok && dup == nil {
					dup = fmt.Errorf("%q consumed by %s and %s", v, prev, name)
				}
				if o, ok := owner[r.Partition]; ok && o != name && dup == nil {
					dup = fmt.Errorf("partition %d consumed by %s and %s", r.Partition, o, name)
				}
				got[v], owner[r.Partition] = name, name
			}
			mu.Unlock()
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go poll("A", a, stop, &wg)
	go poll("B", b, stop, &wg)
	stopped := false
	stopPolls := func() {
		if !stopped {
			close(stop)
			wg.Wait()
			stopped = true
		}
	}
	defer stopPolls()
	for {
		d, err := describe848(ctx, admin, group)
		if err == nil && d.ErrorCode == 0 && d.State == "Stable" && len(d.Members) == 2 {
			n0, n1 := 0, 0
			for _, tp := range d.Members[0].Assignment.TopicPartitions {
				n0 += len(tp.Partitions)
			}
			for _, tp := range d.Members[1].Assignment.TopicPartitions {
				n1 += len(tp.Partitions)
			}
			if n0 == 2 && n1 == 2 && d.Members[0].MemberEpoch == d.Epoch && d.Members[1].MemberEpoch == d.Epoch {
				t.Logf("group stable at epoch %d, assignor %s, 2+2 partitions", d.Epoch, d.AssignorName)
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the group never became stable with 2+2 partitions: %+v %v", d, err)
		}
		time.Sleep(200 * time.Millisecond) // polling a condition, not synchronising
	}
	mu.Lock()
	if len(got) > 0 {
		t.Fatalf("records consumed again after A committed them: %v", got)
	}
	mu.Unlock()

	produceN(t, ctx, addr, topic, "b", 80)
	for {
		mu.Lock()
		n, err := len(got), dup
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if n == 80 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of 80 records consumed by A and B", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopPolls()
	for v := range valueSet("b", 80) {
		if got[v] == "" {
			t.Fatalf("%q not consumed", v)
		}
	}
	if len(owner) != 4 {
		t.Fatalf("partitions consumed: %v", owner)
	}
	for name, cl := range map[string]*kgo.Client{"A": a, "B": b} {
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("%s commit: %v", name, err)
		}
	}
	lg := kmsg.NewPtrListGroupsRequest()
	lg.TypesFilter = []string{"consumer"}
	lresp, err := lg.RequestWith(ctx, admin)
	if err != nil || len(lresp.Groups) != 1 || lresp.Groups[0].Group != group || lresp.Groups[0].GroupType != "consumer" {
		t.Fatalf("ListGroups of type consumer: %v %+v", err, lresp)
	}
	a.Close()
	b.Close()

	node.Kill()
	node.restart()
	produceN(t, ctx, addr, topic, "c", 40)
	c := consumer848(t, addr, group, topic)
	defer c.Close()
	want = valueSet("c", 40)
	for n := 0; n < 40; {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumer C after the restart: %d of 40: %v", n, ctx.Err())
		}
		for _, r := range fs.Records() {
			if !want[string(r.Value)] {
				t.Fatalf("consumer C after the restart got %q: committed before, or twice", r.Value)
			}
			want[string(r.Value)] = false
			n++
		}
	}
}
