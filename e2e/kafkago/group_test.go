package kafkago

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

// TestKafkaGoGroup: two group readers share a 4-partition topic, one
// leaves and the other takes all partitions, commits survive a restart of
// the reader, and the admin keys answer.
func TestKafkaGoGroup(t *testing.T) {
	b := broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := &kafka.Client{Addr: kafka.TCP(b), Timeout: 20 * time.Second}
	const topic, group = "kgo-grp", "kgo-billing"
	createTopic(t, ctx, cl, topic, 4)
	w := &kafka.Writer{Addr: kafka.TCP(b), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond, Balancer: &kafka.RoundRobin{}}
	defer w.Close()
	produce := func(prefix string, n int) {
		var msgs []kafka.Message
		for i := range n {
			msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("%s%d", prefix, i))})
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatalf("produce %s: %v", prefix, err)
		}
	}
	newReader := func() *kafka.Reader {
		return kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b}, GroupID: group, Topic: topic,
			StartOffset: kafka.FirstOffset, MaxWait: 300 * time.Millisecond,
			SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second, RebalanceTimeout: 10 * time.Second,
			JoinGroupBackoff: 200 * time.Millisecond})
	}
	var mu sync.Mutex
	seen := map[string]int{}
	by := map[string]map[string]bool{}
	// Where each record sits, and per partition the offset the group's
	// successful commits reached: only a record below it counts as
	// committed. kafka-go retries a commit a few times; one refused
	// throughout a rebalance (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
	// as Kafka answers too) leaves its record to be read again, which
	// at-least-once allows.
	at := map[string]kafka.Message{}
	committed := map[int]int64{}
	consume := func(name string, r *kafka.Reader, rctx context.Context) {
		for {
			m, err := r.FetchMessage(rctx)
			if err != nil {
				return
			}
			mu.Lock()
			seen[string(m.Value)]++
			if by[name] == nil {
				by[name] = map[string]bool{}
			}
			by[name][string(m.Value)] = true
			at[string(m.Value)] = m
			mu.Unlock()
			if err := r.CommitMessages(rctx, m); err != nil {
				if rctx.Err() == nil {
					t.Logf("%s commit of %s: %v", name, m.Value, err)
				}
				continue
			}
			mu.Lock()
			committed[m.Partition] = max(committed[m.Partition], m.Offset+1)
			mu.Unlock()
		}
	}
	waitFor := func(prefix string, n int) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			mu.Lock()
			c := 0
			for i := range n {
				if seen[fmt.Sprintf("%s%d", prefix, i)] > 0 {
					c++
				}
			}
			mu.Unlock()
			if c == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %s0..%d consumed", c, prefix, n-1)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	r1, r2 := newReader(), newReader()
	c1ctx, c1cancel := context.WithCancel(ctx)
	c2ctx, c2cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); consume("r1", r1, c1ctx) }()
	go func() { defer wg.Done(); consume("r2", r2, c2ctx) }()
	produce("a", 40)
	waitFor("a", 40)
	mu.Lock()
	t.Logf("a: r1 %d, r2 %d", len(by["r1"]), len(by["r2"]))
	mu.Unlock()

	// r2 leaves: r1 gets its partitions.
	c2cancel()
	if err := r2.Close(); err != nil {
		t.Logf("close r2: %v", err)
	}
	produce("b", 20)
	waitFor("b", 20)

	// r1 stops after committing; a new reader resumes after the commits.
	c1cancel()
	wg.Wait()
	if err := r1.Close(); err != nil {
		t.Logf("close r1: %v", err)
	}
	produce("c", 8)
	mu.Lock()
	before := maps.Clone(committed) // what the restarted reader must resume after
	mu.Unlock()
	r3 := newReader()
	defer r3.Close()
	c3ctx, c3cancel := context.WithCancel(ctx)
	wg.Add(1)
	go func() { defer wg.Done(); consume("r3", r3, c3ctx) }()
	waitFor("c", 8)
	c3cancel()
	wg.Wait()
	mu.Lock()
	for v := range by["r3"] {
		if m := at[v]; v[0] != 'c' && m.Offset < before[m.Partition] {
			t.Errorf("restarted reader re-read %s (partition %d offset %d), though commits before the restart reached offset %d", v, m.Partition, m.Offset, before[m.Partition])
		}
	}
	mu.Unlock()

	og, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {0, 1, 2, 3}}})
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	var total int64
	for _, p := range og.Topics[topic] {
		total += p.CommittedOffset
	}
	if total != 68 {
		t.Errorf("committed offsets sum %d, want 68: %+v", total, og.Topics[topic])
	}
	lg, err := cl.ListGroups(ctx, &kafka.ListGroupsRequest{})
	if err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
	found := false
	for _, g := range lg.Groups {
		found = found || g.GroupID == group
	}
	if !found {
		t.Errorf("ListGroups %+v lacks %s", lg.Groups, group)
	}
	dg, err := cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil || len(dg.Groups) != 1 || dg.Groups[0].Error != nil {
		t.Fatalf("DescribeGroups: %+v %v", dg, err)
	}
	dt, err := cl.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{topic}})
	if err != nil || dt.Errors[topic] != nil {
		t.Fatalf("DeleteTopics: %+v %v", dt, err)
	}
}
