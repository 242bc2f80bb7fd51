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
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestKafkaProduceThroughDrain: a franz-go producer (defaults: idempotent,
// 5 s MetadataMinAge, Produce v11) keeps producing while the node leading
// some of its partitions is drained (POST /_sys/drain, the node stays up).
// Its metadata was refreshed just before the drain, so a bare NOT_LEADER
// for a moved partition would make it wait out the rest of the 5 s before
// it could learn the new leader; the drained node answers NOT_LEADER
// naming the new leader instead (KIP-951, Produce v10+), and the client
// moves there at once. Checked: the producer never goes maxDrainPause
// without an acknowledgement; the drained node counts the hinted answers
// (picomq_kafka_produce_forwarded_total{result="hinted"}), i.e. the client
// really sent moved partitions to it; every acknowledged record is read
// back. Without the hint and the forwarding the pause is 4-5 s.
func TestKafkaProduceThroughDrain(t *testing.T) {
	produceThroughDrain(t, clusterOpts{Kafka: true}, "", nil, "hinted")
}

// TestKafkaProduceThroughDrainForwarded: the same with the producer
// limited to Produce v9, whose response has no place for the new leader:
// the drained node forwards those produces to the new leaders
// (picomq_kafka_produce_forwarded_total{result="ok"}).
func TestKafkaProduceThroughDrainForwarded(t *testing.T) {
	produceThroughDrain(t, clusterOpts{Kafka: true}, "", []kgo.Opt{produceV9()}, "ok")
}

// TestKafkaProduceThroughDrainWithAuth: forwarding (Produce v9) with
// --auth-tokens on every node and a producer authenticated with SASL
// PLAIN: the drained node forwards as the nodes' internal SCRAM identity
// (the client's token is not the owner's business: the forwarding node
// authorised the write). Without forwarding on authenticated listeners
// the drained node forwards nothing and the pause is about 5 s.
func TestKafkaProduceThroughDrainWithAuth(t *testing.T) {
	tokens := writeTokenFile(t, filepath.Join(t.TempDir(), "tokens.yaml"), matrixTokens...)
	produceThroughDrain(t, clusterOpts{Kafka: true, Token: rootToken, Extra: []string{"--auth-tokens", tokens}}, rootToken, []kgo.Opt{produceV9()}, "ok")
}

// produceV9 limits a franz-go client to Produce v9 (Kafka 3.6's), the
// last version without KIP-951's leader hints.
func produceV9() kgo.Opt {
	v := kversion.Stable()
	v.SetMaxKeyVersion(0, 9)
	return kgo.MaxVersions(v)
}

// produceThroughDrain runs the drain test on a cluster started with opts;
// token, if any, is the Kafka clients' SASL PLAIN password and the bearer
// token of the drain and metrics requests; popts are more producer
// options; answered is the picomq_kafka_produce_forwarded_total result
// the drained node must count (hinted, or ok for forwarded).
func produceThroughDrain(t *testing.T, opts clusterOpts, token string, popts []kgo.Opt, answered string) {
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
		kgo.RecordDeliveryTimeout(60 * time.Second)}, append(sasl, popts...)...)...)
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
	counted := m[`picomq_kafka_produce_forwarded_total{result="`+answered+`"}`]
	t.Logf("%s: moved produce partitions forwarded %v, hinted %v, failed %v", victim.ID, m[`picomq_kafka_produce_forwarded_total{result="ok"}`],
		m[`picomq_kafka_produce_forwarded_total{result="hinted"}`], m[`picomq_kafka_produce_forwarded_total{result="failed"}`])
	if counted == 0 {
		t.Errorf("%s answered no produce after its drain with result %q: the producer never sent it a moved partition, or it answered them otherwise", victim.ID, answered)
	}

	got := consumeAll(t, ctx, c.kafkaSeeds(), topic, parts, sasl...)
	for _, v := range acked {
		if !got[v] {
			t.Fatalf("acknowledged record %s not read back (%d acknowledged, %d read)", v, len(acked), len(got))
		}
	}
}
