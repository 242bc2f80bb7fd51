package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/PicoMQ/picomq/internal/testproc"
)

// densityClients is the number of concurrent PUT clients of the creation
// row (the figure issue 18 was measured with).
const densityClients = 32

// densityStreams is the stream count of BenchmarkStreamDensity:
// PICOMQ_DENSITY_STREAMS, default 100,000.
func densityStreams() int {
	return testproc.EnvCount("PICOMQ_DENSITY_STREAMS", 100_000)
}

// BenchmarkStreamDensity measures the four stream-density rows of one
// `picomq serve` node with its embedded etcd, in one run:
//
//   - creation rate: N streams created by 32 concurrent clients, one PUT
//     each (keep-alive connections), acknowledged 201, and the node's CPU
//     time per create (etcd's included), which load does not inflate;
//   - resident memory per idle stream: the process's RSS (node and its
//     embedded etcd) after the creates and a quiet moment, minus the RSS
//     before them, divided by N; and the same after a restart, when
//     everything was loaded from etcd rather than created;
//   - etcd data per idle stream: the pages in use in etcd's database
//     (bbolt, <data-dir>/etcd/member/snap/db: what etcd's space quota
//     limits, and what its file holds once defragmented) divided by N;
//     the file's size and the whole etcd directory (its raft WAL files,
//     which etcd preallocates 64 MiB at a time and keeps 5 of, and
//     snapshots) are printed beside it;
//   - restart to ready: SIGTERM, then from exec of the new process to its
//     first 200 on /readyz (and the CPU time the process used to get
//     there, which a busy machine does not inflate), after which every one
//     of the N streams must be listed.
//
// PICOMQ_DENSITY_STREAMS sets N (default 100,000); PICOMQ_DENSITY_KEEP
// names a data dir to use and keep; PICOMQ_BENCH_PPROF=127.0.0.1:PORT
// serves the node's Go profiles (go tool pprof
// http://…/debug/pprof/heap), the restarted node's on the same address.
func BenchmarkStreamDensity(b *testing.B) {
	n := densityStreams()
	dir := benchDir(b)
	if d := os.Getenv("PICOMQ_DENSITY_KEEP"); d != "" {
		dir = d // kept afterwards, to look at or restart by hand
	}
	flags := []string{"--pprof-addr", os.Getenv("PICOMQ_BENCH_PPROF")}
	nd := startNodeIn(b, dir, flags...)
	prefix := "/density/"
	time.Sleep(2 * time.Second) // let start-up allocations settle before the baseline
	rss0, db0, du0 := rssBytes(nd.pid), etcdDBBytes(b, dir), dirBytes(filepath.Join(dir, "etcd"))

	start, cpu0 := time.Now(), testproc.CPUSeconds(nd.pid)
	if err := createStreams(nd.url, prefix, n, densityClients); err != nil {
		b.Fatal(err)
	}
	createDur := time.Since(start)
	createCPU := (testproc.CPUSeconds(nd.pid) - cpu0) / float64(n) * 1e6 // node CPU per create, µs

	// Idle: nothing is appended; give the runtime's scavenger a moment to
	// hand freed memory back, as it would on an idle node.
	time.Sleep(5 * time.Second)
	rss1, db1, du1 := rssBytes(nd.pid), etcdDBBytes(b, dir), dirBytes(filepath.Join(dir, "etcd"))
	mem1 := memBreakdown(nd)

	nd.stop(b)
	inUse := etcdInUseBytes(b, dir)
	restartStart := time.Now()
	nd2 := startNodeIn(b, dir, flags...)
	restart := time.Since(restartStart)
	restartCPU := testproc.CPUSeconds(nd2.pid) // what the start cost, whatever else runs on the machine
	listed, err := countStreams(nd2.url, prefix)
	if err != nil {
		b.Fatal(err)
	}
	if listed != n {
		b.Fatalf("after restart %d of %d streams are listed", listed, n)
	}
	time.Sleep(5 * time.Second)
	rss2, mem2 := rssBytes(nd2.pid), memBreakdown(nd2)

	rate := float64(n) / createDur.Seconds()
	memPer := float64(rss1-rss0) / float64(n)
	memPerRestart := float64(rss2-rss0) / float64(n)
	etcdPer := float64(inUse) / float64(n)
	fmt.Printf("\nStream density: %d streams on one node (embedded etcd), %d concurrent PUT clients\n", n, densityClients)
	fmt.Printf("%-38s %14s %s\n", "row", "value", "target")
	fmt.Printf("%-38s %12.0f/s %s (%.0f µs of node CPU per create, etcd's included)\n", "stream creation", rate, ">= 5,000/s", createCPU)
	fmt.Printf("%-38s %11.0f B %s (RSS %d -> %d MiB: %s)\n", "resident memory per idle stream", memPer, "<= 1 KiB", rss0>>20, rss1>>20, mem1)
	fmt.Printf("%-38s %11.0f B %s (RSS %d MiB: %s)\n", "  same, after restart", memPerRestart, "<= 1 KiB", rss2>>20, mem2)
	fmt.Printf("%-38s %11.0f B %s (pages in use %.1f MiB; db file %d -> %d MiB; etcd dir %d -> %d MiB)\n", "etcd data per idle stream", etcdPer, "<= 512 B",
		float64(inUse)/(1<<20), db0>>20, db1>>20, du0>>20, du1>>20)
	fmt.Printf("%-38s %12.2fs %s (%.2f CPU-s; %d streams listed after it)\n", "restart to ready", restart.Seconds(), "<= 2 s", restartCPU, listed)
	b.ReportMetric(rate, "creates/s")
	b.ReportMetric(createCPU, "create-cpu-µs")
	b.ReportMetric(memPer, "rss-B/stream")
	b.ReportMetric(memPerRestart, "rss-B/stream-restarted")
	b.ReportMetric(etcdPer, "etcd-B/stream")
	b.ReportMetric(restart.Seconds(), "restart-s")
	b.ReportMetric(restartCPU, "restart-cpu-s")
}

// createStreams PUTs prefix+i for i in [0, n) from c concurrent clients and
// fails on the first answer that is not 201.
func createStreams(base, prefix string, n, c int) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}}
	defer client.CloseIdleConnections()
	return testproc.Parallel(n, c, func(i int) error {
		name := fmt.Sprintf("%ss-%07d", prefix, i)
		resp, err := client.Do(mustReq("PUT", base+name, nil, "Content-Type", "application/octet-stream"))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("create %s: status %d", name, resp.StatusCode)
		}
		return nil
	})
}

// countStreams pages through GET /_streams?prefix= and counts the streams.
func countStreams(base, prefix string) (int, error) {
	total, cursor := 0, ""
	for {
		u := base + "/_streams?limit=1000&prefix=" + url.QueryEscape(prefix)
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		resp, err := http.Get(u)
		if err != nil {
			return total, err
		}
		var page struct {
			Streams    []json.RawMessage `json:"streams"`
			NextCursor string            `json:"nextCursor"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return total, fmt.Errorf("list: status %d: %v", resp.StatusCode, err)
		}
		total += len(page.Streams)
		if page.NextCursor == "" {
			return total, nil
		}
		cursor = page.NextCursor
	}
}

// rssBytes is a process's resident set size, from /proc.
func rssBytes(pid int) int64 { return procStatus(pid, "VmRSS") }

// procStatus is one " kB" field of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// memBreakdown says where a node's resident memory is: anonymous (the Go
// heap, etcd's included) and file-backed (etcd's memory-mapped database),
// and the live Go heap from the node's metrics.
func memBreakdown(n *node) string {
	heap := int64(-1)
	if resp, err := http.Get(n.url + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "go_memstats_heap_alloc_bytes "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				heap = int64(f)
			}
		}
	}
	return fmt.Sprintf("anon %d MiB, file %d MiB, Go heap in use %d MiB",
		procStatus(n.pid, "RssAnon")>>20, procStatus(n.pid, "RssFile")>>20, heap>>20)
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// etcdInUseBytes is the size of the pages etcd's buckets use in its
// database, read from the file while etcd is stopped.
func etcdInUseBytes(b *testing.B, dir string) int64 {
	db, err := bolt.Open(filepath.Join(dir, "etcd", "member", "snap", "db"), 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var pages int
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, bk *bolt.Bucket) error {
			st := bk.Stats()
			pages += st.BranchPageN + st.BranchOverflowN + st.LeafPageN + st.LeafOverflowN
			return nil
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	return int64(pages) * int64(db.Info().PageSize)
}

// etcdDBBytes is the size of the embedded etcd's database file.
func etcdDBBytes(b *testing.B, dir string) int64 {
	fi, err := os.Stat(filepath.Join(dir, "etcd", "member", "snap", "db"))
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}
