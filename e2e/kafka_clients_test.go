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
	n, addr := startKafkaNode(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-run", "TestSaramaGroup", ".")
	cmd.Dir = "sarama"
	cmd.Env = append(os.Environ(), "KAFKA_BROKER="+addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sarama test: %v\n%s\nnode log:\n%s", err, tail(string(out), 6000), tail(n.logs.String(), 4000))
	}
	t.Logf("sarama: %s", tail(string(out), 400))
}
