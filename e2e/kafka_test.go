package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// startKafkaNode runs a node with its Kafka listener on a free port and
// returns it with that address.
func startKafkaNode(t *testing.T, dataDir string, extra ...string) (*proc, string) {
	t.Helper()
	addr := freeAddr(t)
	return startNode(t, dataDir, append([]string{"--kafka-addr", addr}, extra...)...), addr
}

// needTool finds a black-box test tool: missing, the test fails under CI
// (which installs it) and is skipped elsewhere.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not installed (CI installs it in .ci/run)", name)
		}
		t.Skipf("%s not installed", name)
	}
	return p
}

// requireGroups fails the test unless the node advertises JoinGroup in
// ApiVersions: the group parts of the black-box suites must run, so a node
// that stopped serving groups is a failure, not a quieter suite.
func requireGroups(t *testing.T, addr string) {
	t.Helper()
	cl := kafkaClient(t, kgo.SeedBrokers(addr))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("ApiVersions: %v", err)
	}
	for _, k := range resp.ApiKeys {
		if k.ApiKey == kmsg.JoinGroup.Int16() {
			return
		}
	}
	t.Fatal("the node does not advertise JoinGroup: consumer groups are not served")
}

// TestKafkaKgoSuite runs franz-go's own kgo integration tests black-box
// against a real node (KGO_TEST_RF=1, 20000 records), transactions
// (TestTxnEtl) and the group tests included: nothing is skipped by this
// test, and none by the suite itself: its KIP-848 variants (and
// Test848RegexBrokerResolves) run on the consumer group protocol, its
// share-group tests (KIP-932: TestShareGroup, TestShareGroupETL,
// TestShareGroupAckOnClose, TestShareGroupOffsetsAdmin,
// TestConsumeRegexShareSkipsInternal) on ShareFetch/ShareAcknowledge v2.
// Any failure fails this test, and so does any test the suite skips. Its SCRAM tests run
// against the same node (KGO_TEST_SCRAM_SEEDS) with a SCRAM-SHA-256 user
// created first through AlterUserScramCredentials, and its OAUTHBEARER test
// (KGO_TEST_OAUTH_SEEDS: unsecured JWTs) too, the node running with
// --kafka-oauth-unsecured-jwt. TestOAuthAuth and
// TestIssueProduceBrokerTooOldFailsRecords (Produce below v3 not
// advertised) must run, not skip. PICOMQ_KGO_RUN, when set, is passed as
// -test.run (to run a part of the suite by hand).
func TestKafkaKgoSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the kgo suite takes minutes")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go toolchain to build the kgo tests: %v", err)
	}
	const mod = "github.com/twmb/franz-go@v1.22.3"
	out, err := exec.Command(goBin, "mod", "download", "-json", mod).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", mod, err)
	}
	var dl struct{ Dir string }
	if err := json.Unmarshal(out, &dl); err != nil || dl.Dir == "" {
		t.Fatalf("go mod download %s: %s", mod, out)
	}
	pkgDir := filepath.Join(dl.Dir, "pkg", "kgo")
	bin := filepath.Join(t.TempDir(), "kgo.test")
	build := exec.Command(goBin, "test", "-c", "-o", bin, ".")
	build.Dir = pkgDir
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the kgo tests: %v\n%s", err, b)
	}

	node, addr := startKafkaNode(t, t.TempDir(), "--kafka-oauth-unsecured-jwt")
	requireGroups(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	admCl := kafkaClient(t, kgo.SeedBrokers(addr))
	upsertScram(t, ctx, kadm.NewClient(admCl), "SCRAM-SHA-256", "kgo-suite", "kgo-suite-pw", 4096)
	admCl.Close()
	args := []string{"-test.v", "-test.timeout", "14m"}
	if r := os.Getenv("PICOMQ_KGO_RUN"); r != "" {
		args = append(args, "-test.run", r)
	}
	run := exec.CommandContext(ctx, bin, args...)
	run.Dir = pkgDir
	run.Env = append(os.Environ(), "KGO_SEEDS="+addr, "KGO_TEST_RF=1", "KGO_TEST_RECORDS=20000", "KGO_LOG_LEVEL=none",
		"KGO_TEST_SCRAM_SEEDS="+addr, "KGO_TEST_SCRAM=kgo-suite:kgo-suite-pw:256", "KGO_TEST_OAUTH_SEEDS="+addr)
	var buf bytes.Buffer
	run.Stdout, run.Stderr = &buf, &buf
	start := time.Now()
	runErr := run.Run()
	res := buf.String()
	count := func(word string) int {
		return len(regexp.MustCompile(`(?m)^\s*--- `+word+`: `).FindAllString(res, -1))
	}
	if os.Getenv("PICOMQ_KGO_RUN") != "" {
		// A part of the suite run by hand: show each test's result and logs.
		for _, l := range strings.Split(res, "\n") {
			if regexp.MustCompile(`^\s*(--- (PASS|SKIP|FAIL)|\S+_test\.go:\d+:)`).MatchString(l) {
				t.Log(l)
			}
		}
	}
	t.Logf("kgo suite: %d PASS, %d SKIP, %d FAIL (subtests included) in %v", count("PASS"), count("SKIP"), count("FAIL"), time.Since(start).Round(time.Second))
	// The suite skips what the broker does not advertise (KIP-848 groups,
	// share groups): name the skips and the reasons given, so a new one
	// is seen.
	var skipped []string
	reasons := map[string]bool{}
	for _, l := range strings.Split(res, "\n") {
		if m := regexp.MustCompile(`^\s*--- SKIP: (\S+)`).FindStringSubmatch(l); m != nil {
			skipped = append(skipped, m[1])
		}
		if strings.Contains(l, "does not support") {
			reasons[strings.TrimSpace(l[strings.Index(l, ":")+1:])] = true
		}
	}
	t.Logf("skipped by the suite itself: %s; reasons: %v", strings.Join(skipped, ", "), reasons)
	var ran848 []string
	for _, l := range strings.Split(res, "\n") {
		if m := regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S*848\S*)`).FindStringSubmatch(l); m != nil {
			ran848 = append(ran848, m[2]+" "+m[1])
		}
	}
	t.Logf("KIP-848 variants: %s", strings.Join(ran848, ", "))
	if len(ran848) > 0 {
		// The 848 variants used the consumer protocol (kgo falls back to
		// classic groups quietly when the broker refuses it).
		m := string(do(t, "GET", node.URL+"/metrics", nil).Body)
		for _, name := range []string{"picomq_kafka_consumer_group_heartbeats_total", "picomq_kafka_consumer_group_epochs_total"} {
			v := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(m)
			if v == nil || v[1] == "0" {
				t.Errorf("/metrics: %s is %v after the KIP-848 variants ran", name, v)
			} else {
				t.Logf("%s %s", name, v[1])
			}
		}
	}
	// The node serves everything the suite tests: a skip means a key or a
	// version it needs is no longer advertised (or a setting is missing).
	if len(skipped) > 0 {
		t.Errorf("the kgo suite skipped %d tests (%s); reasons: %v", len(skipped), strings.Join(skipped, ", "), reasons)
	}
	if runErr != nil || count("FAIL") > 0 {
		var fails []string
		for _, l := range strings.Split(res, "\n") {
			if strings.Contains(l, "--- FAIL") || strings.Contains(l, "_test.go:") || strings.Contains(l, "panic") {
				fails = append(fails, l)
			}
		}
		t.Fatalf("kgo suite failed (%v):\n%s\n--- tail:\n%s", runErr, strings.Join(fails[:min(len(fails), 80)], "\n"), res[max(0, len(res)-3000):])
	}
}

// kcat runs kcat with args and stdin, and returns stdout.
func kcat(t *testing.T, bin, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

func seqLines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintln(&b, i)
	}
	return b.String()
}

// TestKafkaKcat: librdkafka (Debian kcat) against a real node: produce with
// topic auto-creation, consume, idempotent produce, metadata, ListOffsets
// by time, and a balanced group consumer.
func TestKafkaKcat(t *testing.T) {
	bin := needTool(t, "kcat")
	_, b := startKafkaNode(t, t.TempDir(), "--kafka-auto-create-topics")
	before := time.Now().Add(-time.Second).UnixMilli()
	kcat(t, bin, seqLines(1, 100), "-b", b, "-P", "-t", "t1", "-p", "0")
	consume := func() []string {
		return strings.Fields(kcat(t, bin, "", "-b", b, "-C", "-t", "t1", "-o", "beginning", "-e", "-q"))
	}
	if got := consume(); len(got) != 100 || got[0] != "1" || got[99] != "100" {
		t.Fatalf("consumed %d lines (%v...), want 1..100", len(got), got[:min(3, len(got))])
	}
	kcat(t, bin, seqLines(101, 150), "-b", b, "-P", "-t", "t1", "-X", "enable.idempotence=true")
	if got := consume(); len(got) != 150 || got[149] != "150" {
		t.Fatalf("after the idempotent produce: %d lines, want 150", len(got))
	}
	if md := kcat(t, bin, "", "-b", b, "-L", "-t", "t1"); !strings.Contains(md, `topic "t1" with 1 partitions`) {
		t.Fatalf("metadata:\n%s", md)
	}
	q := kcat(t, bin, "", "-b", b, "-Q", "-t", "t1:0:"+strconv.FormatInt(before, 10))
	if !strings.Contains(q, "offset 0") {
		t.Fatalf("ListOffsets by time %d: %q, want offset 0", before, q)
	}
	q = kcat(t, bin, "", "-b", b, "-Q", "-t", "t1:0:-1")
	if !strings.Contains(q, "offset 150") {
		t.Fatalf("ListOffsets latest: %q, want offset 150", q)
	}
	requireGroups(t, b)
	out := kcat(t, bin, "", "-b", b, "-G", "kcat-group", "t1", "-o", "beginning", "-e", "-q")
	if got := strings.Fields(out); len(got) != 150 {
		t.Fatalf("balanced consumer read %d lines, want 150", len(got))
	}
}

// TestKafkaCrossProtocol: records appended over Pico HTTP (keys, headers)
// are consumed by franz-go identically at the same offsets; records
// produced by franz-go (lz4 and zstd batches, with headers) read back over
// Pico HTTP, and as Durable Streams values after a restart with that
// protocol, intact.
func TestKafkaCrossProtocol(t *testing.T) {
	dir := t.TempDir()
	n, addr := startKafkaNode(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Pico -> Kafka.
	wantStatus(t, do(t, "PUT", n.URL+"/x/http", nil, "Content-Type", "text/plain"), 201, "create")
	wantStatus(t, do(t, "POST", n.URL+"/x/http", []byte(`[{"key":"k0","value":"v0","headers":[{"key":"h","value":"a"},{"key":"h","value":"b"}]},{"value":"v1"},{"key":"k2","value":null}]`),
		"Content-Type", wire.MediaBatchJSON), 200, "append")
	cl := kafkaClient(t, kgo.SeedBrokers(addr), kgo.ConsumeTopics("x.http"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < 3 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 3 Pico records", len(got))
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		got = append(got, fs.Records()...)
	}
	r0, r1, r2 := got[0], got[1], got[2]
	if r0.Offset != 0 || string(r0.Key) != "k0" || string(r0.Value) != "v0" || len(r0.Headers) != 2 ||
		r0.Headers[0].Key != "h" || string(r0.Headers[0].Value) != "a" || string(r0.Headers[1].Value) != "b" {
		t.Fatalf("record 0: %+v", r0)
	}
	if r1.Offset != 1 || r1.Key != nil || string(r1.Value) != "v1" || r2.Offset != 2 || string(r2.Key) != "k2" || r2.Value != nil {
		t.Fatalf("records 1, 2: %+v %+v", r1, r2)
	}

	// Kafka (lz4, zstd) -> Pico.
	for _, c := range []struct {
		topic string
		codec kgo.CompressionCodec
	}{{"lz4t", kgo.Lz4Compression()}, {"zstdt", kgo.ZstdCompression()}} {
		createTopic(t, ctx, addr, c.topic, 1)
		p := kafkaClient(t, kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(c.topic), kgo.ProducerBatchCompression(c.codec), kgo.ProducerLinger(50*time.Millisecond))
		var recs []*kgo.Record
		for i := range 50 {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: bytes.Repeat(fmt.Appendf(nil, "%s-%d ", c.topic, i), 20),
				Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(strconv.Itoa(i))}}})
		}
		if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", c.topic, err)
		}
		p.Close()
		r := do(t, "GET", n.URL+"/"+c.topic+"?offset=0&limit=100", nil, "Accept", "application/json")
		wantStatus(t, r, 200, "read "+c.topic)
		var page []struct {
			Offset  int64   `json:"offset"`
			Key     *string `json:"key"`
			Value   *string `json:"value"`
			Headers []struct {
				Key   string `json:"key"`
				Value string `json:"value"`
			} `json:"headers"`
		}
		if err := json.Unmarshal(r.Body, &page); err != nil {
			t.Fatalf("read %s: %v: %s", c.topic, err, r.Body)
		}
		if len(page) != 50 {
			t.Fatalf("%s over Pico: %d records, want 50", c.topic, len(page))
		}
		for i, pr := range page {
			w := recs[i]
			if pr.Offset != int64(i) || pr.Key == nil || *pr.Key != string(w.Key) || pr.Value == nil || *pr.Value != string(w.Value) ||
				len(pr.Headers) != 1 || pr.Headers[0].Key != "n" || pr.Headers[0].Value != strconv.Itoa(i) {
				t.Fatalf("%s record %d over Pico: %+v", c.topic, i, pr)
			}
		}
	}

	// The same data as Durable Streams values.
	n.stop(t)
	ds := startNode(t, dir, "--protocol", "durable-streams")
	r := do(t, "GET", ds.URL+dsPrefix+"/zstdt?offset=-1", nil)
	wantStatus(t, r, 200, "DS read")
	var want bytes.Buffer
	for i := range 50 {
		want.Write(bytes.Repeat(fmt.Appendf(nil, "zstdt-%d ", i), 20))
	}
	if !bytes.Equal(r.Body, want.Bytes()) {
		t.Fatalf("DS read of zstd records: %d bytes, want %d", len(r.Body), want.Len())
	}
}
