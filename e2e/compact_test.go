package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// startCompactNode runs a node on MinIO (through store, an object store
// URL; "" = MinIO directly) with quick flushes, its Kafka listener on,
// and returns it with the Kafka address.
func startCompactNode(t *testing.T, m *minioServer, dir, store string) (*proc, string) {
	t.Helper()
	if store == "" {
		store = m.ObjectStoreURL()
	}
	addr := freeAddr(t)
	n := startNodeEnv(t, dir, m.Env(), "--object-store", store, "--kafka-addr", addr,
		"--seal-max-age", "50ms", "--key-compaction-interval", "1s")
	return n, addr
}

// kafkaRecord is what a consumer saw at one offset.
type kafkaRecord struct {
	offset     int64
	key, value string
	tombstone  bool
}

// consumeCompacted reads partition 0 of topic from the start up to its end
// (the caller keeps the last record a key's latest, so it stays).
func consumeCompacted(t *testing.T, addr, topic string) []kafkaRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kafkaClient(t, kgo.SeedBrokers(addr))
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	resp, err := lo.RequestWith(ctx, adm)
	adm.Close()
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("list offsets: %v %+v", err, resp)
	}
	end := resp.Topics[0].Partitions[0].Offset
	cl := kafkaClient(t, kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	defer cl.Close()
	var out []kafkaRecord
	next := int64(0)
	for next < end {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %s: up to %d of %d: %v", topic, next, end, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("consume %s: %v", topic, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, kafkaRecord{offset: r.Offset, key: string(r.Key), value: string(r.Value), tombstone: r.Value == nil})
		})
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				next = max(next, p.Records[len(p.Records)-1].Offset+1)
			}
		})
	}
	return out
}

// checkLatest holds records to "the latest record of every key, at the
// offset it was acknowledged at, offsets increasing": latest maps each key
// to its last acknowledged offset and value ("" for a tombstone).
func checkLatest(records []kafkaRecord, latest map[string]kafkaRecord, tombstones bool) error {
	prev := int64(-1)
	seen := map[string]bool{}
	for _, r := range records {
		if r.offset <= prev {
			return fmt.Errorf("offset %d after %d", r.offset, prev)
		}
		prev = r.offset
		want, ok := latest[r.key]
		if !ok || want.offset != r.offset || want.value != r.value || want.tombstone != r.tombstone {
			return fmt.Errorf("key %q at offset %d (%q), want only its latest record %+v", r.key, r.offset, r.value, want)
		}
		seen[r.key] = true
	}
	for k, r := range latest {
		if !seen[k] && (!r.tombstone || tombstones) {
			return fmt.Errorf("key %q (latest %+v) is missing", k, r)
		}
	}
	return nil
}

// TestKafkaCompactedTopic: a topic created with cleanup.policy=compact
// (franz-go) is compacted on MinIO within seconds: a consumer from offset
// 0 sees only the latest record per key, at the offsets they were produced
// at (holes between), the tombstone until delete.retention.ms and not
// after; kcat (librdkafka) reads the same; a record without a key is
// refused with INVALID_RECORD; DescribeConfigs reports the policy.
func TestKafkaCompactedTopic(t *testing.T) {
	m := startMinio(t)
	n, addr := startCompactNode(t, m, t.TempDir(), "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "compacted"
	cl := kafkaClient(t, kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	defer cl.Close()
	str := func(s string) *string { return &s }
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
	rt.Configs = []kmsg.CreateTopicsRequestTopicConfig{
		{Name: "cleanup.policy", Value: str("compact")},
		{Name: "min.cleanable.dirty.ratio", Value: str("0.01")},
		{Name: "delete.retention.ms", Value: str("8000")},
		{Name: "segment.ms", Value: str("100")},
	}
	req.Topics = append(req.Topics, rt)
	if resp, err := req.RequestWith(ctx, cl); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic: %v %+v", err, resp)
	}

	latest := map[string]kafkaRecord{}
	produce := func(key string, value []byte) {
		t.Helper()
		r, err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(key), Value: value}).First()
		if err != nil {
			t.Fatalf("produce %s: %v", key, err)
		}
		latest[key] = kafkaRecord{offset: r.Offset, key: key, value: string(value), tombstone: value == nil}
	}
	for round := 0; round < 5; round++ {
		for k := 0; k < 6; k++ {
			produce(fmt.Sprintf("key-%d", k), []byte(fmt.Sprintf("value-%d-%d", k, round)))
		}
	}
	produce("key-1", nil) // tombstone
	tombstoneAt := time.Now()
	produce("zz-last", []byte("last")) // the end offset stays a record for consumeCompacted
	if _, err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("no key")}).First(); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("keyless record on a compacted topic: %v, want INVALID_RECORD", err)
	}

	// Compaction is awaited, not slept for: the runs counter and what a
	// consumer sees.
	var last error
	if !pollUntil(60*time.Second, 200*time.Millisecond, func() bool {
		if metric(t, n.URL, "picomq_compaction_runs_total") < 1 {
			return false
		}
		// The tombstone stays for delete.retention.ms (8 s) after it was
		// written; a slow machine may see the first compaction after that.
		last = checkLatest(consumeCompacted(t, addr, topic), latest, time.Since(tombstoneAt) < 7*time.Second)
		return last == nil
	}) {
		t.Fatalf("not compacted to the latest value per key: %v", last)
	}
	if metric(t, n.URL, "picomq_compaction_keys_removed_total") < 24 {
		t.Fatalf("keys removed: %v, want at least 24", metric(t, n.URL, "picomq_compaction_keys_removed_total"))
	}

	// delete.retention.ms after the tombstone, it is gone.
	if !pollUntil(60*time.Second, 250*time.Millisecond, func() bool {
		recs := consumeCompacted(t, addr, topic)
		last = checkLatest(recs, latest, false)
		for _, r := range recs {
			if r.tombstone {
				last = fmt.Errorf("tombstone of %s at %d still there", r.key, r.offset)
			}
		}
		return last == nil
	}) {
		t.Fatalf("tombstone not removed after delete.retention.ms: %v", last)
	}

	// librdkafka reads the compacted partition too: the same offsets.
	bin := needTool(t, "kcat")
	out := kcat(t, bin, "", "-b", addr, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o %k %s\n")
	got := strings.Split(strings.TrimSpace(out), "\n")
	var want []string
	for _, r := range consumeCompacted(t, addr, topic) {
		want = append(want, fmt.Sprintf("%d %s %s", r.offset, r.key, r.value))
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("kcat read\n%s\nfranz-go read\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	dc := kmsg.NewPtrDescribeConfigsRequest()
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName, dr.ConfigNames = kmsg.ConfigResourceTypeTopic, topic, []string{"cleanup.policy"}
	dc.Resources = append(dc.Resources, dr)
	if resp, err := dc.RequestWith(ctx, cl); err != nil || len(resp.Resources[0].Configs) != 1 || *resp.Resources[0].Configs[0].Value != "compact" {
		t.Fatalf("describe configs: %v %+v", err, resp)
	}
}

// TestHTTPCompactedStream: the same through the Pico API: a stream
// created with Pico-Compaction keeps the latest record per Pico-Key; an
// append without a key is a 400.
func TestHTTPCompactedStream(t *testing.T) {
	m := startMinio(t)
	n, _ := startCompactNode(t, m, t.TempDir(), "")
	r := do(t, "PUT", n.URL+"/kv/http", nil, "Content-Type", "text/plain",
		"Pico-Compaction", "cleanup.policy=compact, min.cleanable.dirty.ratio=0.01, delete.retention.ms=0")
	wantStatus(t, r, 201, "create")
	latest := map[string]int64{}
	for round := 0; round < 4; round++ {
		for k := 0; k < 5; k++ {
			key := fmt.Sprintf("k%d", k)
			r := do(t, "POST", n.URL+"/kv/http", []byte(fmt.Sprintf("%s-%d", key, round)), "Content-Type", "text/plain", "Pico-Key", key)
			wantStatus(t, r, 200, "append")
			latest[key], _ = strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
		}
	}
	r = do(t, "POST", n.URL+"/kv/http", []byte("no key"), "Content-Type", "text/plain")
	wantStatus(t, r, 400, "append without a key")
	var last error
	if !pollUntil(60*time.Second, 200*time.Millisecond, func() bool {
		recs := readAll(t, n.URL, "/kv/http")
		if len(recs) != len(latest) {
			last = fmt.Errorf("%d records, want %d", len(recs), len(latest))
			return false
		}
		for _, rec := range recs {
			if rec.Key == nil || latest[*rec.Key] != rec.Offset || rec.Value == nil || *rec.Value != fmt.Sprintf("%s-3", *rec.Key) {
				last = fmt.Errorf("record %+v is not its key's latest", rec)
				return false
			}
		}
		return true
	}) {
		t.Fatalf("HTTP stream not compacted: %v", last)
	}
	r = do(t, "GET", n.URL+"/_streams/kv/http", nil)
	if !strings.Contains(string(r.Body), `"cleanup.policy":"compact"`) {
		t.Fatalf("description: %s", r.Body)
	}
}

// TestCompactionKill9: a node compacting a stream every second while
// producers overwrite a few keys is killed with SIGKILL and restarted:
// every key still holds its latest acknowledged value (or a later one
// whose ack the kill lost), offsets only increase. Before each kill object
// storage is made slow (a proxy holds every request 100 ms), so a
// compaction run, which reads every input object and writes one, lasts
// long enough that the kill lands inside one: between its reads, its
// upload and its manifest swap.
func TestCompactionKill9(t *testing.T) {
	m := startMinio(t)
	proxy := startFaultProxy(t, m.URL())
	dir := t.TempDir()
	n, _ := startCompactNode(t, m, dir, m.objectStoreURLVia(proxy.URL()))
	r := do(t, "PUT", n.URL+"/kv/crash", nil, "Content-Type", "text/plain",
		"Pico-Compaction", "cleanup.policy=compact, min.cleanable.dirty.ratio=0")
	wantStatus(t, r, 201, "create")
	const keys = 8
	var mu sync.Mutex
	acked := map[string]int64{} // key -> highest acknowledged offset
	values := map[int64]string{}
	for round := 0; round < 4; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for i := 0; ctx.Err() == nil; i++ {
					key := fmt.Sprintf("k%d", rng.IntN(keys))
					val := fmt.Sprintf("r%d-w%d-i%d-%s", round, w, i, strings.Repeat("v", rng.IntN(2000)))
					r, err := tryDo(ctx, "POST", n.URL+"/kv/crash", []byte(val), "Content-Type", "text/plain", "Pico-Key", key)
					if err != nil || r.Status != 200 {
						continue
					}
					off, _ := strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
					mu.Lock()
					if off > acked[key] || acked[key] == 0 {
						acked[key] = off
					}
					values[off] = val
					mu.Unlock()
				}
			})
		}
		// Let a compaction run commit (the counter restarts with the
		// node), then slow object storage down so the next runs take
		// seconds; the kill moment is random within them.
		before := metric(t, n.URL, "picomq_compaction_runs_total")
		if !pollUntil(30*time.Second, 50*time.Millisecond, func() bool {
			return metric(t, n.URL, "picomq_compaction_runs_total") >= before+1
		}) {
			t.Fatalf("round %d: no compaction run within 30 s", round)
		}
		proxy.Set(proxySlow, 100*time.Millisecond)
		time.Sleep(time.Duration(1000+rand.IntN(2000)) * time.Millisecond) // where in the slowed runs the kill lands, not a wait for a condition
		n.Kill()
		cancel()
		wg.Wait()
		proxy.Set(proxyPass, 0)
		n.restart()
		recs := readAll(t, n.URL, "/kv/crash")
		byKey := map[string]jsonRecord{}
		prev := int64(-1)
		for _, rec := range recs {
			if rec.Offset <= prev {
				t.Fatalf("round %d: offset %d after %d", round, rec.Offset, prev)
			}
			prev = rec.Offset
			if rec.Key == nil {
				t.Fatalf("round %d: a record without a key at %d", round, rec.Offset)
			}
			byKey[*rec.Key] = rec
		}
		mu.Lock()
		for key, off := range acked {
			got, ok := byKey[key]
			if !ok || got.Offset < off {
				mu.Unlock()
				t.Fatalf("round %d: key %s: latest acknowledged offset %d (%q) lost; read %+v", round, key, off, values[off], got)
			}
			if got.Offset == off && (got.Value == nil || *got.Value != values[off]) {
				mu.Unlock()
				t.Fatalf("round %d: key %s at %d holds another value than acknowledged", round, key, off)
			}
		}
		mu.Unlock()
		t.Logf("round %d: %d keys checked after kill -9, %d records read", round, len(acked), len(recs))
	}
}

// TestCompactionTakeover: a compacted stream whose owner is killed (kill
// -9) after compacting it is taken over by another node, which serves
// the compacted history from the manifests, takes new values and
// compacts again across both nodes' objects; the first node, restarted,
// reads the same.
func TestCompactionTakeover(t *testing.T) {
	c := startCluster(t, 2, clusterOpts{Extra: []string{"--key-compaction-interval", "1s"}})
	a, b := c.nodes[0], c.nodes[1]
	const name = "/kv/takeover"
	r := mustSend(t, noRedirect, "PUT", a.URL+name, nil, "Content-Type", "text/plain", hdrDurability, "object",
		"Pico-Compaction", "cleanup.policy=compact, min.cleanable.dirty.ratio=0")
	wantStatus(t, r.response, 201, "create on A")
	latest := map[string]record{} // key -> its latest acknowledged record
	put := func(base, key, v string) {
		t.Helper()
		val := key + "=" + v
		r := mustSend(t, follow, "POST", base+name, []byte(val), "Content-Type", "text/plain", "Pico-Key", key)
		wantStatus(t, r.response, 200, "append "+val)
		off, _ := strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
		latest[key] = record{off, val}
	}
	compacted := func(base string) error {
		recs, _, err := readStreamFrom(context.Background(), follow, base, name, true)
		if err != nil {
			return err
		}
		if len(recs) != len(latest) {
			return fmt.Errorf("%d records, want %d (one per key): %v", len(recs), len(latest), recs)
		}
		for _, rec := range recs {
			key, _, _ := strings.Cut(rec.Value, "=")
			if latest[key] != rec {
				return fmt.Errorf("%+v is not the latest of %s (%+v)", rec, key, latest[key])
			}
		}
		return nil
	}
	for round := 0; round < 4; round++ {
		for k := 0; k < 5; k++ {
			put(a.URL, fmt.Sprintf("k%d", k), fmt.Sprint(round))
		}
	}
	var last error
	if !pollUntil(60*time.Second, 200*time.Millisecond, func() bool { last = compacted(a.URL); return last == nil }) {
		t.Fatalf("A did not compact: %v", last)
	}
	a.Kill()
	// B takes the stream over once A's lease expires, from the manifests.
	if !pollUntil(60*time.Second, 200*time.Millisecond, func() bool { last = compacted(b.URL); return last == nil }) {
		t.Fatalf("B does not serve the compacted stream after the takeover: %v", last)
	}
	put(b.URL, "k1", "after-takeover")
	put(b.URL, "k4", "after-takeover")
	before := metric(t, b.URL, "picomq_compaction_runs_total")
	if !pollUntil(60*time.Second, 200*time.Millisecond, func() bool {
		last = compacted(b.URL)
		return last == nil && metric(t, b.URL, "picomq_compaction_runs_total") > before
	}) {
		t.Fatalf("B did not compact after the takeover: %v", last)
	}
	a.restart()
	if !pollUntil(60*time.Second, 200*time.Millisecond, func() bool { last = compacted(a.URL); return last == nil }) {
		t.Fatalf("A after its restart: %v", last)
	}
}
