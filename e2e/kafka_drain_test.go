package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaProduceThroughDrain: a franz-go producer (defaults: idempotent,
// 5 s MetadataMinAge) keeps producing while the node leading some of its
// partitions is drained (POST /_sys/drain, the node stays up). Its
// metadata was refreshed just before the drain, so a NOT_LEADER for a
// moved partition would make it wait out the rest of the 5 s before it
// could learn the new leader; the drained node forwards those produces to
// the new leaders instead. Checked: the producer never goes maxKafkaPause without an
// acknowledgement; the drained node counts forwarded produces
// (picomq_kafka_produce_forwarded_total{result="ok"}), i.e. the client
// really sent moved partitions to it; every acknowledged record is read
// back. Without the forwarding the pause is 4-5 s.
func TestKafkaProduceThroughDrain(t *testing.T) {
	produceThroughDrain(t, clusterOpts{Kafka: true}, "")
}

// TestKafkaProduceThroughDrainWithAuth: the same with --auth-tokens on
// every node and a producer authenticated with SASL PLAIN: the drained
// node forwards as the nodes' internal SCRAM identity (the client's
// token is not the owner's business: the forwarding node authorised the
// write). Without forwarding on authenticated listeners the drained node
// forwards nothing and the pause is about 5 s.
func TestKafkaProduceThroughDrainWithAuth(t *testing.T) {
	tokens := writeTokenFile(t, filepath.Join(t.TempDir(), "tokens.yaml"), matrixTokens...)
	produceThroughDrain(t, clusterOpts{Kafka: true, Token: rootToken, Extra: []string{"--auth-tokens", tokens}}, rootToken)
}

// produceThroughDrain runs the drain test on a cluster started with opts;
// token, if any, is the Kafka clients' SASL PLAIN password and the bearer
// token of the drain and metrics requests.
func produceThroughDrain(t *testing.T, opts clusterOpts, token string) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	var sasl []kgo.Opt
	if token != "" {
		sasl = append(sasl, plainSASL(token))
	}
	c := startCluster(t, 3, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, parts = "drain", 6
	createTopic(t, ctx, c.nodes[0].KafkaAddr, topic, parts, sasl...)

	prod := kafkaClient(t, append([]kgo.Opt{kgo.SeedBrokers(c.kafkaSeeds()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordDeliveryTimeout(60 * time.Second)}, sasl...)...)
	defer prod.Close()
	var (
		mu       sync.Mutex
		acked    []string
		ackTimes []time.Time
		stop     atomic.Bool
		prodErr  error
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			v := fmt.Sprintf("d#%d", i)
			if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
				mu.Lock()
				prodErr = fmt.Errorf("produce %s: %w", v, err)
				mu.Unlock()
				return
			}
			mu.Lock()
			acked, ackTimes = append(acked, v), append(ackTimes, time.Now())
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	if !pollUntil(time.Minute, 20*time.Millisecond, func() bool { return count() >= 4*parts }) {
		t.Fatalf("before the drain: %d records acknowledged", count())
	}

	// Drain the node leading partition 0 (not the one the topic was
	// created on, so the metadata below comes from a node that stays).
	md := metadataAt(t, ctx, c.nodes[0].KafkaAddr, topic, sasl...)
	brokers := map[int32]string{}
	for _, b := range md.Brokers {
		brokers[b.NodeID] = fmt.Sprintf("%s:%d", b.Host, b.Port)
	}
	var victim *clusterNode
	for _, p := range md.Topics[0].Partitions {
		for _, n := range c.nodes[1:] {
			if brokers[p.Leader] == n.KafkaAddr && victim == nil {
				victim = n
			}
		}
	}
	if victim == nil {
		t.Fatalf("no partition led by %s or %s: %+v", c.nodes[1].ID, c.nodes[2].ID, md.Topics[0].Partitions)
	}
	prod.ForceMetadataRefresh() // the client's next refresh is now 5 s away
	if !pollUntil(10*time.Second, 10*time.Millisecond, func() bool { n := count(); time.Sleep(100 * time.Millisecond); return count() > n }) {
		t.Fatal("the producer stopped before the drain")
	}
	from := time.Now()
	r, err := send(ctx, &http.Client{Transport: transport, Timeout: 2 * time.Minute}, "POST", victim.URL+"/_sys/drain", nil, bearerHdr(token)...)
	if err != nil {
		t.Fatalf("POST /_sys/drain to %s: %v", victim.ID, err)
	}
	wantStatus(t, r.response, 200, "drain")
	t.Logf("drained %s in %v: %s", victim.ID, time.Since(from).Round(time.Millisecond), r.Body)
	// Keep producing past the client's next metadata refresh.
	n0 := count()
	if !pollUntil(time.Minute, 20*time.Millisecond, func() bool { return time.Since(from) > 6*time.Second && count() >= n0+4*parts }) {
		t.Fatalf("after the drain: %d records acknowledged, %d at its end", count(), n0)
	}
	to := time.Now()
	stop.Store(true)
	<-done
	if prodErr != nil {
		t.Fatal(prodErr)
	}

	mu.Lock()
	longest, last := time.Duration(0), from
	for _, at := range append(ackTimes, to) {
		if at.Before(from) {
			continue
		}
		longest, last = max(longest, at.Sub(last)), at
	}
	total := len(acked)
	mu.Unlock()
	t.Logf("%d records acknowledged; longest pause from the drain on: %v", total, longest.Round(time.Millisecond))
	if longest > maxDrainPause {
		t.Errorf("the producer went %v without an acknowledgement across the drain of %s (bound %v)", longest.Round(time.Millisecond), victim.ID, maxDrainPause)
	}

	resp, err := send(ctx, noRedirect, "GET", victim.URL+"/metrics", nil, bearerHdr(token)...)
	if err != nil || resp.Status != 200 {
		t.Fatalf("metrics of %s: %v", victim.ID, err)
	}
	m := parseExposition(string(resp.Body))
	forwarded := m[`picomq_kafka_produce_forwarded_total{result="ok"}`]
	t.Logf("%s forwarded %v produce partitions (failed: %v)", victim.ID, forwarded, m[`picomq_kafka_produce_forwarded_total{result="failed"}`])
	if forwarded == 0 {
		t.Errorf("%s forwarded no produce after its drain: the producer never sent it a moved partition, or it refused them", victim.ID)
	}

	got := consumeAll(t, ctx, c.kafkaSeeds(), topic, parts, sasl...)
	for _, v := range acked {
		if !got[v] {
			t.Fatalf("acknowledged record %s not read back (%d acknowledged, %d read)", v, len(acked), len(got))
		}
	}
}
