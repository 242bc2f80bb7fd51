package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKafkajsGroup runs kafkajs 2.2.4 (npm, pinned in
// e2e/kafkajs/package-lock.json; it speaks only non-flexible versions:
// JoinGroup v5, SyncGroup v3, OffsetCommit v5, OffsetFetch v4) against a
// real node: it creates a 3-partition topic, produces idempotently,
// consumes in a group committing every offset, and a second consumer of
// the group gets exactly the records produced after the first one's
// commits. Needs Node.js and npm: without them it fails, it does not skip.
func TestKafkajsGroup(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the kafkajs test needs Node.js and npm on PATH (%v)", tool, err)
		}
	}
	work := npmInstall(t, "kafkajs", "picomq-kafkajs", []string{"package.json", "package-lock.json", "groups.js"},
		filepath.Join("node_modules", "kafkajs", "package.json"))
	n, addr := startKafkaNode(t, t.TempDir())

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "groups.js")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "KAFKA_BROKER="+addr)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kafkajs script: %v\nstderr:\n%s\nnode log:\n%s", err, tail(stderr.String(), 4000), tail(n.logs.String(), 4000))
	}
	var out struct {
		First, Second []string
		Offsets       []struct {
			Topic      string
			Partitions []struct {
				Partition int
				Offset    string
			}
		}
		Groups []struct{ GroupID string }
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("kafkajs output %q: %v", stdout.String(), err)
	}
	checkValues(t, "first consumer", out.First, "a", 30)
	checkValues(t, "second consumer", out.Second, "b", 12)
	total := 0
	for _, tp := range out.Offsets {
		for _, p := range tp.Partitions {
			o, _ := strconv.Atoi(p.Offset)
			total += o
		}
	}
	if total != 42 {
		t.Errorf("committed offsets (fetchOffsets) sum to %d, want 42: %+v", total, out.Offsets)
	}
	if len(out.Groups) != 1 || out.Groups[0].GroupID != "kjs-billing" {
		t.Errorf("listGroups = %+v", out.Groups)
	}
}

// checkValues asserts got is exactly prefix0..prefix(n-1), once each.
func checkValues(t *testing.T, what string, got []string, prefix string, n int) {
	t.Helper()
	want := make([]string, n)
	for i := range want {
		want[i] = prefix + strconv.Itoa(i)
	}
	sorted := append([]string(nil), got...)
	sort.Strings(sorted)
	sort.Strings(want)
	if len(sorted) != len(want) {
		t.Errorf("%s got %d records, want %d: %v", what, len(got), n, got)
		return
	}
	for i := range want {
		if sorted[i] != want[i] {
			t.Errorf("%s got %v, want each of %s0..%s%d once", what, got, prefix, prefix, n-1)
			return
		}
	}
}

// TestSaramaGroup runs the Sarama test (e2e/sarama, a separate Go module
// so that Sarama stays out of PicoMQ's go.mod) against a real node:
// produce, consume in a group committing each message, resume after the
// commits, offsets and ListGroups through Sarama's admin client.
func TestSaramaGroup(t *testing.T) {
	runClientModule(t, "sarama", "-run", "TestSaramaGroup")
}

// TestSaramaTransactions runs Sarama's transactional producer (e2e/sarama
// TestSaramaTransactions): commit, abort, commit; read_committed and
// read_uncommitted consumers.
func TestSaramaTransactions(t *testing.T) {
	runClientModule(t, "sarama", "-run", "TestSaramaTransactions")
}

// runClientModule runs `go test` in dir, a separate Go module holding a
// Kafka client's tests (so the client stays out of PicoMQ's go.mod),
// against a fresh node it finds in KAFKA_BROKER.
func runClientModule(t *testing.T, dir string, args ...string) {
	t.Helper()
	n, addr := startKafkaNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"test", "-count=1", "-v"}, args...), ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KAFKA_BROKER="+addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s tests: %v\n%s\nnode log:\n%s", dir, err, tail(string(out), 6000), tail(n.logs.String(), 4000))
	}
	t.Logf("%s: %s", dir, tail(string(out), 600))
}

// TestKafkaGoClient runs the segmentio/kafka-go tests (e2e/kafkago, a
// separate Go module so kafka-go stays out of PicoMQ's go.mod) against a
// real node. kafka-go is its own implementation with its own version
// choices: produce with acks 0/1/all and every codec, keys and headers,
// read from the first and the last offset, ListOffsets by time, a missing
// topic, CreateTopics/DeleteTopics, a two-member group with a member
// leaving, commits surviving a reader restart, ListGroups/DescribeGroups.
func TestKafkaGoClient(t *testing.T) {
	runClientModule(t, "kafkago")
}

// kafkaPython finds a Python 3 that imports kafka-python (Debian package
// python3-kafka; PICOMQ_PYTHON overrides). Missing, the test fails under
// CI (.ci/run installs it) and is skipped elsewhere.
func kafkaPython(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("PICOMQ_PYTHON"), "python3", "/usr/bin/python3"}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if exec.Command(c, "-c", "import kafka, snappy, lz4, zstandard").Run() == nil {
			return c
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("no python3 with kafka-python and its codecs (Debian python3-kafka python3-snappy python3-lz4 python3-zstandard; .ci/run installs them)")
	}
	t.Skip("kafka-python not installed (python3-kafka)")
	return ""
}

// TestKafkaPython runs kafka-python 2.0.2 (e2e/kafkapython/clients.py)
// against a real node, once letting it probe the broker (ApiVersions) and
// once per api_version it is told instead, when it never sends
// ApiVersions and uses that broker's versions: 0.11.0 (Produce v3, the
// oldest a node serves, as Kafka 4.0: 0.9 and 0.10 mean Produce v1/v2 with
// magic 0/1 message sets), 1.0.0 and 2.0.0. Each run produces with acks 0/1/all and every codec the
// format has, consumes from the beginning and from the end, looks up
// offsets by time and a missing topic, runs a two-member group with a
// member leaving, resumes after commits, and creates and deletes topics.
func TestKafkaPython(t *testing.T) {
	py := kafkaPython(t)
	n, addr := startKafkaNode(t, t.TempDir())
	for _, api := range []string{"", "0.11.0", "1.0.0", "2.0.0"} {
		name := "probe"
		if api != "" {
			name = "api" + api
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			args := []string{"clients.py", addr, "py-" + strings.ReplaceAll(name, ".", "")}
			if api != "" {
				args = append(args, api)
			}
			cmd := exec.CommandContext(ctx, py, args...)
			cmd.Dir = "kafkapython"
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "OK") {
				t.Fatalf("kafka-python %s: %v\n%s\nnode log:\n%s", name, err, tail(string(out), 4000), tail(n.logs.String(), 3000))
			}
		})
	}
}

// TestKafkaConfluentGo runs confluent-kafka-go (e2e/confluentgo, a separate
// Go module; cgo with the librdkafka 2.11 it bundles, newer than kcat's)
// against a real node: acks 0/1/all (idempotent with all) and every codec
// with keys and headers, offsets by time, a missing topic, and a
// cooperative-sticky group (dynamic and static members) with a member
// leaving and a restart resuming after the commits, and transactions
// (TestConfluentTransactions: commit and abort, read_committed and
// read_uncommitted consumers, consume-transform-produce with the offsets
// in the transaction, a fenced zombie). Needs cgo and a C
// compiler: without them it fails under CI and is skipped elsewhere.
func TestKafkaConfluentGo(t *testing.T) {
	if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		if os.Getenv("CI") != "" {
			t.Fatalf("confluent-kafka-go needs cgo (go env CGO_ENABLED = %q, %v)", out, err)
		}
		t.Skip("cgo is off")
	}
	runClientModule(t, "confluentgo")
}

// TestKafkaPythonSASL: kafka-python authenticates with SaslHandshake v0
// and a raw PLAIN message whatever its api_version; against a node with
// --auth-tokens the right token creates, produces and consumes (probing,
// and told 0.11.0), a wrong one cannot connect.
func TestKafkaPythonSASL(t *testing.T) {
	py := kafkaPython(t)
	dir := t.TempDir()
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	n, addr := startKafkaNode(t, filepath.Join(dir, "data"), "--auth-tokens", tokens)
	const root = "tok-root-0123456789" // matrixTokens: admin:/
	for _, run := range [][]string{{root, "sasl-probe"}, {root, "sasl-0110", "0.11.0"}, {"wrong", "sasl-wrong"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, py, append([]string{"sasl.py", addr}, run...)...)
		cmd.Dir = "kafkapython"
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "OK") {
			t.Fatalf("kafka-python SASL %v: %v\n%s\nnode log:\n%s", run[1:], err, tail(string(out), 3000), tail(n.logs.String(), 3000))
		}
	}
}
