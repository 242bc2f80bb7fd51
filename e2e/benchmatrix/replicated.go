package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// replicatedRows: `replicated` durability (R=3, M=2) next to `local` on
// the same 3-node cluster (one etcd daemon, the matrix's MinIO, loopback):
// single-record 100 B appends at 1 client (p50 latency) and 64 clients
// (throughput), and the replication bytes (the messages both ways) per
// appended payload byte. The streams are created with Pico-Durability
// before picomq bench appends to them.
//
// It runs three times per run, on a fresh cluster for each follower mode
// (what a follower's confirmation means: --replica-ack fsync, the
// default, or write; and write with the follower's fdatasyncs put off by
// --replica-sync-interval); the rows of the write modes carry a -write
// or -write-lazy suffix, each next to the local appends of its own
// cluster.
func (m *matrix) replicatedRows(ctx context.Context, run int) error {
	for _, mode := range []replMode{
		{ack: "fsync"},
		{ack: "write", suffix: "-write", label: ", follower ack on write"},
		{ack: "write", syncInterval: replLazySync, suffix: "-write-lazy",
			label: ", follower ack on write, follower fdatasync at most every " + replLazySync.String()},
	} {
		if err := m.replicatedCluster(ctx, run, mode); err != nil {
			return fmt.Errorf("--replica-ack %s%s: %w", mode.ack, mode.suffix, err)
		}
	}
	// The machine's floor for the same two targets, after the clusters
	// have stopped (floorrows.go).
	if err := m.replFloorRows(ctx, run); err != nil {
		m.fail("bare replication floor", err)
	}
	return nil
}

// replLazySync is the -write-lazy rows' --replica-sync-interval.
const replLazySync = 10 * time.Millisecond

// replMode is one follower configuration of the replicated rows.
type replMode struct {
	ack           string
	syncInterval  time.Duration
	suffix, label string
}

func (m *matrix) replicatedCluster(ctx context.Context, run int, mode replMode) error {
	suffix, label := mode.suffix, mode.label
	etcdBin := os.Getenv("PICOMQ_ETCD_BIN")
	if etcdBin == "" {
		if p, err := exec.LookPath("etcd"); err == nil {
			etcdBin = p
		}
	}
	if etcdBin == "" {
		return fmt.Errorf("no etcd binary: set PICOMQ_ETCD_BIN")
	}
	s3, err := m.minio()
	if err != nil {
		return err
	}
	etcdURL, stopEtcd, err := m.startEtcd(etcdBin, fmt.Sprintf("r%d%s", run, suffix))
	if err != nil {
		return err
	}
	defer stopEtcd()
	var nodes []*node
	var pprofAddrs []string
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for _, id := range []string{"a", "b", "c"} {
		pargs, paddr := pprofArgs()
		pprofAddrs = append(pprofAddrs, paddr)
		n, err := m.startNode("pico-repl"+suffix+"-"+id, append([]string{"--node-id", "repl-" + id, "--etcd-endpoints", etcdURL,
			"--object-store", s3.url(fmt.Sprintf("repl-r%d%s/", run, suffix)), "--lease-ttl", "5s", "--replica-ack", mode.ack,
			"--replica-sync-interval", mode.syncInterval.String()}, pargs...)...)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	a := nodes[0]
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := httpGet(a.url + "/_sys/cluster")
		if err == nil && strings.Count(string(b), `"nodeId"`) == 3 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the 3 nodes did not join within a minute: %s %v", b, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	const size = 100
	peer := "local durability, same cluster"
	for _, c := range []int{1, 64} {
		var res [2]loadResult
		var sent, appended [2]float64
		for k, dur := range []string{"replicated", "local"} {
			prefix := fmt.Sprintf("/mb/r%d/%s-c%d", run, dur, c)
			for i := 0; i < c; i++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("%s%s/%d", a.url, prefix, i), nil)
				req.Header.Set("Content-Type", "application/octet-stream")
				req.Header.Set("Pico-Durability", dur)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != 201 && resp.StatusCode != 200 {
					return fmt.Errorf("create %s/%d (%s): %s", prefix, i, dur, resp.Status)
				}
			}
			b0 := replBytes(nodes)
			// With PICOMQ_BENCH_PROFILE_DIR, the owner (a) and a follower
			// (b) are profiled over each run (what bounds the row).
			var stops []func()
			for i, addr := range pprofAddrs[:2] {
				stops = append(stops, profileRead(fmt.Sprintf("repl%s-r%d-%s-c%d-%c", suffix, run, dur, c, 'a'+i), addr))
			}
			r, err := m.picoBench(ctx, a.url, "pico", prefix, c, size, "--keep")
			for _, stop := range stops {
				stop()
			}
			if dir := os.Getenv(profileDirEnv); dir != "" {
				// The nodes' counters after the run: WAL fsyncs and groups,
				// replication requests, on owner and followers.
				for i, n := range nodes {
					if b, err := httpGet(n.url + "/metrics"); err == nil {
						_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("metrics-repl%s-r%d-%s-c%d-%c.txt", suffix, run, dur, c, 'a'+i)), b, 0o644)
					}
				}
			}
			if err != nil {
				return fmt.Errorf("%s, %d clients: %w", dur, c, err)
			}
			res[k], sent[k] = r, replBytes(nodes)-b0
			if k == 0 {
				// The replication bytes cover the warm-up too: divide by
				// every payload byte appended, warm-up included (the
				// streams' ends, read back).
				var recs int64
				for i := 0; i < c; i++ {
					end, err := nextOffset(ctx, fmt.Sprintf("%s%s/%d", a.url, prefix, i))
					if err != nil {
						return err
					}
					recs += end
				}
				appended[0] = float64(recs * size)
			}
		}
		if c == 1 {
			id := m.row(benchreport.Row{ID: "repl-p50-c1" + suffix, What: "replicated (R=3, M=2" + label + ") single-record append p50 latency, 1 client, 100 B",
				Unit: "ms", Peer: peer, Pico: "PicoMQ replicated", LowerBetter: true, Note: "target <= 1.5x local"})
			m.res.Add(id, run, benchreport.SidePico, res[0].Lat.P50, &res[0].Lat)
			m.res.Add(id, run, benchreport.SidePeer, res[1].Lat.P50, &res[1].Lat)
		} else {
			id := m.row(benchreport.Row{ID: "repl-c64" + suffix, What: "replicated (R=3, M=2" + label + ") single-record appends, 64 clients, 100 B",
				Unit: "appends/s", Peer: peer, Pico: "PicoMQ replicated", Note: "target >= 0.7x local"})
			m.res.Add(id, run, benchreport.SidePico, res[0].RecordsPerSec, &res[0].Lat)
			m.res.Add(id, run, benchreport.SidePeer, res[1].RecordsPerSec, &res[1].Lat)
			nb := m.row(benchreport.Row{ID: "repl-net-bytes" + suffix, What: "replication bytes (messages both ways, all nodes) per appended payload byte, 64 clients, 100 B" + label,
				Unit: "B/B", Pico: "PicoMQ replicated", LowerBetter: true, Note: "R-1 = 2 copies of each WAL entry (100 B record + batch and entry headers) plus framing"})
			if appended[0] > 0 {
				m.res.Add(nb, run, benchreport.SidePico, sent[0]/appended[0], nil)
			}
		}
		logf("  replicated (replica-ack %s, sync interval %s) c=%d: %.0f/s p50 %.2f ms; local %.0f/s p50 %.2f ms; replication bytes/appended byte %.2f",
			mode.ack, mode.syncInterval, c, res[0].RecordsPerSec, res[0].Lat.P50, res[1].RecordsPerSec, res[1].Lat.P50, sent[0]/max(appended[0], 1))
	}
	return nil
}

// nextOffset is a stream's next offset (HEAD).
func nextOffset(ctx context.Context, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	n, err := strconv.ParseInt(resp.Header.Get(wire.HeaderNextOffset), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("HEAD %s: %s, next offset %q", url, resp.Status, resp.Header.Get(wire.HeaderNextOffset))
	}
	return n, nil
}

// replBytes sums the replication bytes the nodes' /metrics report.
func replBytes(nodes []*node) float64 {
	var sum float64
	for _, n := range nodes {
		for _, name := range []string{"picomq_replication_sent_bytes_total", "picomq_replication_received_bytes_total"} {
			if v, err := metric(n.url, name); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// startEtcd starts an etcd daemon on loopback with its data under the work
// dir and returns its client URL.
func (m *matrix) startEtcd(bin, name string) (string, func(), error) {
	client, err := testproc.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	peerAddr, err := testproc.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(m.cfg.work, "etcd-"+name)
	p, err := start("etcd", bin, []string{"--data-dir", dir, "--name", "bench",
		"--listen-client-urls", "http://" + client, "--advertise-client-urls", "http://" + client,
		"--listen-peer-urls", "http://" + peerAddr, "--initial-advertise-peer-urls", "http://" + peerAddr,
		"--initial-cluster", "bench=http://" + peerAddr, "--log-level", "error"}, "", nil)
	if err != nil {
		return "", nil, err
	}
	url := "http://" + client
	if err := testproc.WaitReady(url+"/health", p.done, time.Minute); err != nil {
		p.stop()
		return "", nil, fmt.Errorf("etcd: %v\n%s", err, p.tail())
	}
	return url, p.stop, nil
}
