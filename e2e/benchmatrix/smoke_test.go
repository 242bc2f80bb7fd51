package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/testproc"
)

// TestMatrixSmoke checks the make bench harness itself, briefly, in
// make test: the matrix runs its WAL, HTTP, consumer (with the live
// tail's bare floor) and density rows (40
// streams) against a real node, without the peers (make bench builds them, CI does
// not), writes a report whose rows carry real measurements, and
// picomq bench --report rebuilds the same table from that output.
// Points last 2 s after a 500 ms warm-up: with 1 s after 200 ms, 64
// clients on a machine loaded by four CPU hogs sometimes had no append
// acknowledged inside the window.
func TestMatrixSmoke(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "picomq")
	if err := testproc.Build(bin, testproc.Picomq); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var stdout bytes.Buffer
	err := run([]string{"-picomq", bin, "-out", out, "-work", t.TempDir(), "-runs", "1", "-secs", "2s", "-warmup", "500ms",
		"-only", "wal,http,consumers,density", "-streams", "40"}, &stdout)
	if err != nil {
		t.Fatalf("matrix: %v\n%s", err, stdout.String())
	}
	res, err := benchreport.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failures) > 0 {
		t.Fatalf("failures: %v", res.Failures)
	}
	got := map[string]benchreport.Sample{}
	for _, s := range res.Samples {
		got[s.Row+"/"+s.Side] = s
	}
	for _, want := range []string{"wal-c1/pico", "wal-c1/peer", "wal-c64/pico", "http-c1-s100/pico", "http-c64-s1024/pico", "http-ceiling-c1-s100/peer", "http-ceiling-c64-s100/peer", "cpu-append/pico", "rss-after-appends/pico",
		"catchup/pico", "tail-p50/pico", "tail-p99/pico",
		"tail-floor-p50/pico", "tail-floor-p99/pico", "tail-vs-floor/pico", "tail-vs-floor/peer", "tail-floor-1conn-p50/pico", "tail-floor-1conn-p50/peer",
		"create-c32/pico", "create-c32/peer", "rss-idle/pico", "rss-idle/peer", "etcd-per-stream/pico", "restart/pico", "restart/peer"} {
		s, ok := got[want]
		// etcd's db in use grows by whole pages, and 40 streams' keys
		// (~11 KB) can land in pages bbolt already had free: 0 is a
		// true reading for this smoke's stream count, a negative one is
		// not.
		if want == "etcd-per-stream/pico" && ok && s.Value == 0 {
			continue
		}
		if !ok || s.Value <= 0 {
			t.Errorf("%s: missing or not positive: %+v", want, s)
		}
	}
	if len(res.LoadAverages) < 2 || res.MatrixSeconds <= 0 {
		t.Errorf("load average samples %v, matrix time %v s: want samples from the start and the end", res.LoadAverages, res.MatrixSeconds)
	}
	if s := got["http-c64-s100/pico"]; s.Lat == nil || !(s.Lat.P50 > 0 && s.Lat.P50 <= s.Lat.P99 && s.Lat.P99 <= s.Lat.Max) {
		t.Errorf("latency of http-c64-s100: %+v", s.Lat)
	}
	table, err := os.ReadFile(filepath.Join(out, "table.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| WAL append, 1 writer, 100 B | appends/s |", "single-record HTTP appends, 64 clients, 1 KiB", "latency-http-c64-s100.svg", "throughput-single-record-appends--100-b.svg"} {
		if !strings.Contains(string(table), want) {
			t.Errorf("table.md lacks %q:\n%s", want, table)
		}
	}
	if !strings.Contains(stdout.String(), "| single-record HTTP appends, 1 client, 100 B | appends/s |") {
		t.Errorf("printed table:\n%s", stdout.String())
	}
	svg, err := os.ReadFile(filepath.Join(out, "latency-http-c64-s100.svg"))
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("<polyline")) {
		t.Errorf("latency chart: %v\n%.300s", err, svg)
	}

	// picomq bench --report rebuilds the report from results.json alone.
	if err := os.Remove(filepath.Join(out, "table.md")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "bench", "--report", out)
	printed, err := cmd.Output()
	if err != nil {
		t.Fatalf("picomq bench --report: %v", err)
	}
	again, err := os.ReadFile(filepath.Join(out, "table.md"))
	if err != nil || !bytes.Contains(again, printed) {
		t.Fatalf("--report table.md (%v) does not hold the printed table:\n%s\n---\n%s", err, printed, again)
	}
	if !bytes.Equal(again, table) {
		t.Errorf("--report wrote a different table.md:\n%s\n---\n%s", again, table)
	}
}

// TestTimedBody: the send time a fan-out record carries survives the
// round trip on JSON and byte streams, at the record size asked for.
func TestTimedBody(t *testing.T) {
	for _, ct := range []string{"application/json", "application/octet-stream"} {
		const nanos = 1764633600123456789
		b := timedBody(nanos, 100, ct)
		if len(b) != 100 {
			t.Errorf("%s: %d bytes, want 100", ct, len(b))
		}
		if got := sentAt(b); got != nanos {
			t.Errorf("%s: sentAt(%q) = %d", ct, b, got)
		}
		if ct == "application/json" && (b[0] != '"' || b[99] != '"') {
			t.Errorf("not a JSON string: %q", b)
		}
	}
	if got := sentAt(timedBody(0, 100, "application/json")); got != 0 {
		t.Errorf("unmeasured record: sentAt = %d", got)
	}
}
