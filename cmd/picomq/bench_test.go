package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchJSON runs picomq bench --json against the server of proto and decodes
// its result.
func benchJSON(t *testing.T, proto string, args ...string) benchResult {
	t.Helper()
	r := cli(t, proto, "", append([]string{"bench", "--json"}, args...)...).want(t, exitOK, "picomq bench")
	var res benchResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("bench output is not one JSON object: %v\n%s", err, r.stdout)
	}
	return res
}

// checkBench asserts what every successful run must report: acknowledged
// appends, throughput consistent with them, and ordered percentiles.
func checkBench(t *testing.T, res benchResult, batch, size int) {
	t.Helper()
	if res.Appends == 0 || res.Records != res.Appends*uint64(batch) || res.Bytes != res.Records*uint64(size) {
		t.Fatalf("counts: %+v", res)
	}
	if res.RecordsPerSec <= 0 || res.MBPerSec <= 0 || res.DurationSeconds <= 0 {
		t.Fatalf("throughput: %+v", res)
	}
	if res.Errors != 0 {
		t.Fatalf("%d errors, first: %s", res.Errors, res.FirstError)
	}
	l := res.AckLatencyMs
	if !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Fatalf("percentiles out of order: %+v", l)
	}
}

// TestBenchClosedLoop runs a short closed-loop bench over both protocols
// against a real node, then checks the bench deleted its streams.
func TestBenchClosedLoop(t *testing.T) {
	for _, proto := range []string{"pico", "durable-streams"} {
		t.Run(proto, func(t *testing.T) {
			prefix := streamName(t)
			res := benchJSON(t, proto, "--duration", "2s", "--warmup", "1s", "--producers", "2", "--streams", "2",
				"--batch", "4", "--record-size", "256", "--prefix", prefix)
			if res.Mode != "closed" || res.Protocol != proto || res.Producers != 2 || res.Streams != 2 {
				t.Fatalf("run description: %+v", res)
			}
			checkBench(t, res, 4, 256)
			checkServer(t, res)
			// The warm-up is not part of the measured time.
			if res.DurationSeconds < 2 || res.DurationSeconds > 2.9 {
				t.Fatalf("measured %.2f s, want the 2 s after the 1 s warm-up", res.DurationSeconds)
			}
			if proto == "pico" {
				ls := cli(t, proto, "", "ls", "--prefix", prefix).want(t, exitOK, "ls")
				if strings.TrimSpace(ls.stdout) != "" {
					t.Fatalf("bench left its streams behind:\n%s", ls.stdout)
				}
			}
		})
	}
}

// checkServer asserts the node's own figures from its /metrics: some CPU
// per million records and a plausible RSS.
func checkServer(t *testing.T, res benchResult) {
	t.Helper()
	if res.ServerCPUSecondsPerMillion <= 0 || res.ServerRSSMiB < 1 || res.ServerRSSMiB > 16<<10 || res.AllRecords < res.Records {
		t.Fatalf("server figures: CPU-s per million %v, RSS %v MiB, all records %d of %d measured",
			res.ServerCPUSecondsPerMillion, res.ServerRSSMiB, res.AllRecords, res.Records)
	}
}

// TestBenchCPUProfile: --cpuprofile writes a profile of the generator's
// own run (gzipped protobuf, the form go tool pprof reads).
func TestBenchCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.prof")
	res := benchJSON(t, "pico", "--duration", "1s", "--producers", "2", "--record-size", "100", "--metrics", "off",
		"--prefix", streamName(t), "--cpuprofile", path)
	checkBench(t, res, 1, 100)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("--cpuprofile wrote no gzipped profile: %v", err)
	}
	if raw, err := io.ReadAll(zr); err != nil || len(raw) == 0 {
		t.Fatalf("--cpuprofile: %d bytes of profile, %v", len(raw), err)
	}
}

// TestBenchOpenLoop: with --rate the run is open loop and reports it;
// --metrics off leaves out the node's figures.
func TestBenchOpenLoop(t *testing.T) {
	res := benchJSON(t, "pico", "--duration", "2s", "--rate", "100", "--producers", "4", "--record-size", "100", "--metrics", "off")
	if res.Mode != "open" || res.RateRecordsPerS != 100 {
		t.Fatalf("run description: %+v", res)
	}
	checkBench(t, res, 1, 100)
	if res.ServerRSSMiB != 0 || res.ServerCPUSecondsPerMillion != 0 {
		t.Fatalf("--metrics off measured the server: %+v", res)
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{{"--batch", "0"}, {"--rate", "-1"}, {"--warmup", "-1s"}, {"--prefix", "x"}, {"extra"},
		{"--consumers", "-1"}, {"--consume", "sideways", "--consumers", "1"}, {"--consumers", "1", "--record-size", "10"},
		{"--protocol", "kafka", "--server", "http://127.0.0.1:1"}, {"--protocol", "kafka", "--server", "127.0.0.1:1", "--content-type", "text/plain"}} {
		cli(t, "pico", "", append([]string{"bench"}, args...)...).want(t, exitUsage, strings.Join(args, " "))
	}
}

// TestBenchContentType: --content-type picks the streams' type; over
// Durable Streams a byte stream takes random-byte records.
func TestBenchContentType(t *testing.T) {
	prefix := streamName(t)
	res := benchJSON(t, "durable-streams", "--duration", "1s", "--producers", "2", "--record-size", "100",
		"--content-type", "text/plain", "--prefix", prefix, "--keep")
	checkBench(t, res, 1, 100)
	info := cli(t, "durable-streams", "", "describe", prefix+"/0").want(t, exitOK, "describe")
	if !strings.Contains(info.stdout, "text/plain") {
		t.Fatalf("stream is not text/plain:\n%s", info.stdout)
	}
}

// checkConsume asserts a consumer result: records delivered, rates
// consistent with them, and for live tails ordered delivery percentiles.
func checkConsume(t *testing.T, res benchResult, consumers int, mode string) {
	t.Helper()
	c := res.Consume
	if c == nil || c.Consumers != consumers || c.Mode != mode || c.Records == 0 || c.RecordsPerSec <= 0 || c.MBPerSec <= 0 {
		t.Fatalf("consume: %+v", c)
	}
	if mode == "catchup" {
		// Catch-up readers read everything, the warm-up and the appends
		// cut off at the end included: at least what was measured.
		if c.Records < res.Records || c.DeliveryLatencyMs != nil {
			t.Fatalf("catch-up read %d records, %d were acknowledged in the measured time: %+v", c.Records, res.Records, c)
		}
		return
	}
	l := c.DeliveryLatencyMs
	if l == nil || !(l.P50 > 0 && l.P50 <= l.P99 && l.P99 <= l.Max) {
		t.Fatalf("delivery latency: %+v", l)
	}
}

// TestBenchConsumers: live-tail consumers over Pico (two readers per
// stream: every measured record is delivered to both) and catch-up
// consumers over Durable Streams.
func TestBenchConsumers(t *testing.T) {
	res := benchJSON(t, "pico", "--duration", "2s", "--warmup", "500ms", "--producers", "2", "--streams", "2",
		"--consumers", "4", "--record-size", "100", "--batch", "3")
	checkBench(t, res, 3, 100)
	checkConsume(t, res, 4, "tail")
	// Appends cut off at the end are delivered but not acknowledged in
	// time, so deliveries may exceed twice the acknowledged records by a
	// batch per producer, never fall below.
	if c := res.Consume; c.Records < 2*res.Records || c.Records > 2*(res.Records+2*3) {
		t.Fatalf("tail delivered %d records, want 2 x %d", c.Records, res.Records)
	}
	res = benchJSON(t, "durable-streams", "--duration", "1s", "--producers", "2", "--streams", "2",
		"--consumers", "2", "--consume", "catchup", "--record-size", "100", "--batch", "2")
	checkBench(t, res, 2, 100)
	checkConsume(t, res, 2, "catchup")
}

// TestBenchKafka: picomq bench --protocol kafka produces with franz-go to
// a topic of --streams partitions on the node's Kafka listener, open loop
// with tail consumers, closed loop with catch-up consumers, and deletes
// its topic (the partitions' streams) afterwards.
func TestBenchKafka(t *testing.T) {
	run := func(args ...string) benchResult {
		t.Helper()
		r := cli(t, "kafka", "", append([]string{"bench", "--json"}, args...)...).want(t, exitOK, "picomq bench --protocol kafka")
		var res benchResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("bench output is not one JSON object: %v\n%s", err, r.stdout)
		}
		if res.Protocol != "kafka" {
			t.Fatalf("protocol %q", res.Protocol)
		}
		return res
	}
	prefix := streamName(t)
	res := run("--duration", "2s", "--rate", "400", "--producers", "2", "--streams", "2", "--batch", "4",
		"--record-size", "200", "--consumers", "2", "--prefix", prefix)
	if res.Mode != "open" {
		t.Fatalf("mode %q", res.Mode)
	}
	checkBench(t, res, 4, 200)
	checkConsume(t, res, 2, "tail")
	res = run("--duration", "1s", "--producers", "2", "--streams", "3", "--batch", "10", "--consumers", "3", "--consume", "catchup",
		"--metrics", servers["pico"]+"/metrics")
	checkBench(t, res, 10, 1024)
	checkServer(t, res)
	checkConsume(t, res, 3, "catchup")
	// The topic is named after the prefix; its partitions are the
	// streams /<topic>, /<topic>/1, ...
	ls := cli(t, "pico", "", "ls", "--prefix", "/"+kafkaTopic(prefix)).want(t, exitOK, "ls")
	if strings.TrimSpace(ls.stdout) != "" {
		t.Fatalf("bench left its topic's streams behind:\n%s", ls.stdout)
	}
}
