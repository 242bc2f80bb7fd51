package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// replicatedProducers appends numbered values to each stream through via
// (following redirects) until stop, recording every acknowledgement.
func replicatedProducers(streams []*killStream, via func(i, n int) *clusterNode, stop *atomic.Bool, errs *errorList) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				node := via(i, n)
				v := fmt.Sprintf("%s#%d", s.name, n)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := send(ctx, follow, "POST", node.URL+s.name, []byte(v), "Content-Type", "text/plain")
				cancel()
				switch {
				case err != nil || r.Status == 503:
					time.Sleep(retryBackoff) // outcome unknown: the next value is a new one
					continue
				case r.Status != 200:
					errs.add("%s via %s: status %d %s", s.name, node.ID, r.Status, bytes.TrimSpace(r.Body))
					time.Sleep(retryBackoff)
					continue
				}
				off, err := strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
				if err != nil {
					errs.add("%s: ack without Pico-Offset: %v", s.name, r.Header)
					continue
				}
				s.mu.Lock()
				s.acks = append(s.acks, ack{Offset: off, Value: v, At: time.Now(), ServedBy: r.servedBy()})
				s.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	return &wg
}

// checkAllAcked reports acknowledged records of s missing from recs (or
// at another offset), and checks recs hold each value at most once.
func checkAllAcked(s *killStream, recs []record) (lost int, firstErr error) {
	at := map[int64]string{}
	seen := map[string]bool{}
	for _, r := range recs {
		at[r.Offset] = r.Value
		if seen[r.Value] {
			return 0, fmt.Errorf("value %q read twice", r.Value)
		}
		seen[r.Value] = true
	}
	for _, a := range s.snapshot() {
		if at[a.Offset] != a.Value {
			lost++
			if firstErr == nil {
				firstErr = fmt.Errorf("acknowledged %q at offset %d (by %s, %s), read back %q", a.Value, a.Offset, a.ServedBy, a.At.Format("15:04:05.000"), at[a.Offset])
			}
		}
	}
	return lost, firstErr
}

// TestReplicatedMachineLost: a 3-node cluster (real etcd, real MinIO);
// `replicated` streams (R=3, M=2) and, for contrast, `local` streams, all
// owned by node A, under producer load. A is killed with SIGKILL and its
// data directory deleted ("machine lost") while most of what it
// acknowledged is not in object storage yet (--seal-max-age 10s). Every
// acknowledged record of every replicated stream reads back, in order, at
// its acknowledged offset, from the new owner; the local streams lose
// their un-uploaded tail, as documented. A then comes back with an empty
// disk, and reads through it return the same records.
func TestReplicatedMachineLost(t *testing.T) {
	opts := clusterOpts{LeaseTTL: 3 * time.Second, SealMaxAge: 10 * time.Second}
	c := startCluster(t, 3, opts)
	a := c.nodes[0]
	survivors := c.nodes[1:]
	var streams []*killStream
	for i := 0; i < 6; i++ {
		s := &killStream{name: fmt.Sprintf("/lost/r%d", i), durability: "replicated"}
		if i >= 4 {
			s.durability = "local"
		}
		streams = append(streams, s)
		r := mustSend(t, noRedirect, "PUT", a.URL+s.name, nil, "Content-Type", "text/plain", hdrDurability, s.durability)
		wantStatus(t, r.response, 201, "create "+s.name+" on A")
	}
	var stop atomic.Bool
	var errs errorList
	var killed atomic.Bool
	wg := replicatedProducers(streams, func(i, n int) *clusterNode {
		if !killed.Load() {
			return a
		}
		return survivors[(i+n)%len(survivors)]
	}, &stop, &errs)
	stopProducers := func() { stop.Store(true); wg.Wait() }
	defer stopProducers()

	if !pollUntil(60*time.Second, 20*time.Millisecond, func() bool {
		for _, s := range streams {
			if s.count(func(ack) bool { return true }) < 30 {
				return false
			}
		}
		return true
	}) {
		stopProducers()
		errs.check(t, "producers before the kill")
		t.Fatal("streams did not reach 30 acknowledged appends each within 60s")
	}
	errs.check(t, "producers before the kill")

	killAt := time.Now()
	killed.Store(true)
	a.Kill()
	if err := os.RemoveAll(a.dataDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s (SIGKILL) and deleted its data dir at %s", a.ID, killAt.Format("15:04:05.000"))
	onSurvivor := func(x ack) bool { return x.ServedBy != a.ID }
	if !pollUntil(15*opts.LeaseTTL, 50*time.Millisecond, func() bool {
		for _, s := range streams {
			if s.count(onSurvivor) < 5 {
				return false
			}
		}
		return true
	}) {
		stopProducers()
		errs.check(t, "producers after the kill")
		for _, s := range streams {
			t.Logf("%s: %d acks on survivors", s.name, s.count(onSurvivor))
		}
		t.Fatalf("streams not writable on a survivor within %v of the kill", 15*opts.LeaseTTL)
	}
	stopProducers()
	errs.check(t, "producers")

	check := func(via *clusterNode, what string) {
		localLost := 0
		for _, s := range streams {
			recs := mustReadStreamFrom(t, via.URL, s.name, true)
			lost, err := checkAllAcked(s, recs)
			before := s.count(func(x ack) bool { return x.At.Before(killAt) })
			if s.durability == "local" {
				localLost += lost
				continue
			}
			if err != nil {
				t.Errorf("%s: %s (replicated): %d of %d acknowledged records lost: %v", what, s.name, lost, len(s.snapshot()), err)
			} else {
				t.Logf("%s: %s (replicated): all %d acknowledged records read back (%d acknowledged by the lost owner)", what, s.name, len(s.snapshot()), before)
			}
		}
		t.Logf("%s: the local streams lost %d acknowledged records with their owner's disk (their documented window)", what, localLost)
	}
	check(survivors[0], "after the machine loss")

	// The machine is replaced: same node id, empty disk.
	a.restart()
	c.waitMembers(c.nodes, 30*time.Second)
	check(a, "through the replaced node")
}

// TestKafkaReplicatedLeaderLost: a replication-factor-3 topic
// (min.insync.replicas=2) on a 3-node cluster, franz-go producing with
// acks=all; the partition leader's node is killed with SIGKILL and its data
// directory deleted mid-stream (--seal-max-age 10s: what it acknowledged
// is not in object storage yet). A consumer reads every acknowledged
// record, in order, at its acknowledged offset, from the new leader;
// Metadata reports 3 replicas and the in-sync set before, and the lost
// node outside the ISR after.
func TestKafkaReplicatedLeaderLost(t *testing.T) {
	opts := clusterOpts{LeaseTTL: 3 * time.Second, SealMaxAge: 10 * time.Second, Kafka: true, KafkaHost: "localhost"}
	c := startCluster(t, 3, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic = "replicated"
	admin := kafkaClient(t, kgo.SeedBrokers(c.nodes[0].KafkaAddr))
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 3
	v := "2"
	rt.Configs = []kmsg.CreateTopicsRequestTopicConfig{{Name: "min.insync.replicas", Value: &v}}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, admin)
	admin.Close()
	if err != nil || resp.Topics[0].ErrorCode != 0 || resp.Topics[0].ReplicationFactor != 3 {
		t.Fatalf("create topic: %v %+v", err, resp)
	}

	type acked struct {
		value  string
		offset int64
	}
	var mu sync.Mutex
	var acks []acked
	var killed atomic.Bool
	var afterKill atomic.Int64
	stopped := make(chan struct{})
	var stop atomic.Bool
	go func() {
		defer close(stopped)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafkaSeeds()...), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.RecordDeliveryTimeout(20*time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Error(err)
			return
		}
		defer cl.Close()
		for i := 0; !stop.Load() && ctx.Err() == nil; i++ {
			val := fmt.Sprintf("v%d", i)
			res := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(val)})
			r, err := res.First()
			if err != nil {
				time.Sleep(retryBackoff)
				continue
			}
			mu.Lock()
			acks = append(acks, acked{val, r.Offset})
			mu.Unlock()
			if killed.Load() {
				afterKill.Add(1)
			}
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acks) }
	if !pollUntil(time.Minute, 20*time.Millisecond, func() bool { return count() >= 100 }) {
		stop.Store(true)
		<-stopped
		t.Fatalf("only %d records acknowledged within a minute", count())
	}

	md := metadataAt(t, ctx, c.nodes[0].KafkaAddr, topic)
	p := md.Topics[0].Partitions[0]
	if len(p.Replicas) != 3 || len(p.ISR) != 3 {
		t.Errorf("before the kill: replicas %v, ISR %v; want 3 of each", p.Replicas, p.ISR)
	}
	brokers := map[int32]string{}
	for _, b := range md.Brokers {
		brokers[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
	}
	var leader *clusterNode
	for _, n := range c.nodes {
		if brokerIDOf(brokers, n) == p.Leader {
			leader = n
		}
	}
	if leader == nil {
		t.Fatalf("leader broker %d is no node", p.Leader)
	}
	before := count()
	killed.Store(true)
	leader.Kill()
	if err := os.RemoveAll(leader.dataDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the leader %s (SIGKILL) and deleted its data dir after %d acknowledged records", leader.ID, before)
	if !pollUntil(20*opts.LeaseTTL, 50*time.Millisecond, func() bool { return afterKill.Load() >= 50 }) {
		stop.Store(true)
		<-stopped
		t.Fatalf("only %d records acknowledged after the kill within %v", afterKill.Load(), 20*opts.LeaseTTL)
	}
	stop.Store(true)
	<-stopped

	var survivor *clusterNode
	for _, n := range c.nodes {
		if n != leader {
			survivor = n
			break
		}
	}
	md = metadataAt(t, ctx, survivor.KafkaAddr, topic)
	p = md.Topics[0].Partitions[0]
	if slices.Contains(p.ISR, brokerIDOf(brokers, leader)) || len(p.ISR) < 2 {
		t.Errorf("after the kill: ISR %v holds the lost node %d or fewer than 2", p.ISR, brokerIDOf(brokers, leader))
	}
	t.Logf("after the kill: leader %d, replicas %v, ISR %v, offline %v", p.Leader, p.Replicas, p.ISR, p.OfflineReplicas)

	// Consume everything from the start through the survivors.
	var seeds []string
	for _, n := range c.nodes {
		if n != leader {
			seeds = append(seeds, n.KafkaAddr)
		}
	}
	mu.Lock()
	want := slices.Clone(acks)
	mu.Unlock()
	last := want[len(want)-1].offset
	cl := kafkaClient(t, kgo.SeedBrokers(seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(500*time.Millisecond))
	defer cl.Close()
	got := map[int64]string{}
	var order []int64
	for len(order) == 0 || order[len(order)-1] < last {
		if ctx.Err() != nil {
			t.Fatalf("consumed up to %v of %d: %v", order[max(0, len(order)-1):], last, ctx.Err())
		}
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if len(order) > 0 && r.Offset <= order[len(order)-1] {
				t.Errorf("offset %d after %d: out of order", r.Offset, order[len(order)-1])
			}
			got[r.Offset] = string(r.Value)
			order = append(order, r.Offset)
		})
	}
	lost := 0
	for _, a := range want {
		if got[a.offset] != a.value {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged %q at offset %d, consumed %q", a.value, a.offset, got[a.offset])
			}
		}
	}
	if lost == 0 {
		t.Logf("all %d acknowledged records consumed in order (%d acknowledged by the lost leader)", len(want), before)
	} else {
		t.Errorf("%d of %d acknowledged records lost", lost, len(want))
	}
}
