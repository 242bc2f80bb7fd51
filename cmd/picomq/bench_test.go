package main

import (
	"encoding/json"
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

// TestBenchOpenLoop: with --rate the run is open loop and reports it.
func TestBenchOpenLoop(t *testing.T) {
	res := benchJSON(t, "pico", "--duration", "2s", "--rate", "100", "--producers", "4", "--record-size", "100")
	if res.Mode != "open" || res.RateRecordsPerS != 100 {
		t.Fatalf("run description: %+v", res)
	}
	checkBench(t, res, 1, 100)
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{{"--batch", "0"}, {"--rate", "-1"}, {"--warmup", "-1s"}, {"--prefix", "x"}, {"extra"}} {
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
