package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/testproc"
)

// densityRows: stream creation rate (PUT, 32 clients), then with those
// streams idle: resident memory and etcd data per stream (extrapolated to
// a million, labelled so), and restart-to-ready time, each next to the same
// node measured empty (or, for creation, its append rate at the same
// concurrency) in the same run.
func (m *matrix) densityRows(ctx context.Context, run int) error {
	n, err := m.startNode("pico-density")
	if err != nil {
		return err
	}
	defer func() { n.stop() }()
	emptyRestart, err := n.timedRestart(m.cfg.picomq)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // let the fresh process settle before its RSS is read
	rss0 := testproc.RSSBytes(n.pid)
	etcd0, err := etcdInUse(n.pid, n.url)
	if err != nil {
		m.fail("etcd size", err)
	}

	created, rate, lat, err := createStreams(ctx, n.url, fmt.Sprintf("/mb/r%d/idle/", run), 32, m.cfg.streams, m.cfg.createFor)
	if err != nil {
		return fmt.Errorf("create streams: %w", err)
	}
	const crID = "create-c32"
	m.row(benchreport.Row{ID: crID, What: "stream creation (PUT), 32 clients", Unit: "creates/s",
		Peer: "single-record appends on the same node, 32 clients, 100 B"})
	m.res.Add(crID, run, benchreport.SidePico, rate, lat)
	m.row(benchreport.Row{ID: "idle-streams", What: fmt.Sprintf("idle streams created for the rows below (at most %d; creation stops after %s)", m.cfg.streams, m.cfg.createFor), Unit: "streams"})
	m.res.Add("idle-streams", run, benchreport.SidePico, float64(created), nil)
	logf("  created %d streams at %.0f/s", created, rate)

	time.Sleep(2 * time.Second)
	rss1 := testproc.RSSBytes(n.pid)
	m.row(benchreport.Row{ID: "rss-idle", What: "node RSS with the idle streams", Unit: "MiB", Peer: "the same node, empty", LowerBetter: true})
	m.res.Add("rss-idle", run, benchreport.SidePico, rss1/(1<<20), nil)
	m.res.Add("rss-idle", run, benchreport.SidePeer, rss0/(1<<20), nil)
	perStream := (rss1 - rss0) / float64(created)
	m.row(benchreport.Row{ID: "mem-per-stream", What: "resident memory per idle stream (RSS growth / streams)", Unit: "KiB", LowerBetter: true})
	m.res.Add("mem-per-stream", run, benchreport.SidePico, perStream/1024, nil)
	m.row(benchreport.Row{ID: "mem-1m", What: "node RSS for 1 M idle streams, extrapolated linearly from the row above", Unit: "GiB", LowerBetter: true})
	m.res.Add("mem-1m", run, benchreport.SidePico, (rss0+perStream*1e6)/(1<<30), nil)
	if etcd1, err := etcdInUse(n.pid, n.url); err == nil && etcd0 > 0 {
		per := (etcd1 - etcd0) / float64(created)
		m.row(benchreport.Row{ID: "etcd-per-stream", What: "etcd data per idle stream (growth of etcd's db size in use / streams)", Unit: "bytes", LowerBetter: true})
		m.res.Add("etcd-per-stream", run, benchreport.SidePico, per, nil)
		m.row(benchreport.Row{ID: "etcd-1m", What: "etcd db for 1 M streams, extrapolated linearly", Unit: "GiB",
			Peer: "etcd's default quota (2 GiB)", LowerBetter: true})
		m.res.Add("etcd-1m", run, benchreport.SidePico, (etcd0+per*1e6)/(1<<30), nil)
		m.res.Add("etcd-1m", run, benchreport.SidePeer, 2, nil)
	} else if err != nil {
		m.fail("etcd size", err)
	}

	full, err := n.timedRestart(m.cfg.picomq)
	if err != nil {
		return err
	}
	m.row(benchreport.Row{ID: "restart", What: "restart to ready (SIGTERM, start, /readyz 200) with the idle streams", Unit: "s",
		Peer: "the same node restarted empty", LowerBetter: true})
	m.res.Add("restart", run, benchreport.SidePico, full.Seconds(), nil)
	m.res.Add("restart", run, benchreport.SidePeer, emptyRestart.Seconds(), nil)
	last := fmt.Sprintf("%s/mb/r%d/idle/%d", n.url, run, created-1)
	if resp, err := http.Head(last); err != nil || resp.StatusCode != 200 {
		m.fail("restart", fmt.Errorf("stream %s after restart: %v %v", last, resp, err))
	}
	logf("  restart: %.2f s with %d streams, %.2f s empty", full.Seconds(), created, emptyRestart.Seconds())

	r, err := m.picoBench(ctx, n.url, "pico", fmt.Sprintf("/mb/r%d/c32", run), 32, 100)
	if err != nil {
		m.fail(crID+" appends", err)
	} else {
		m.res.Add(crID, run, benchreport.SidePeer, r.RecordsPerSec, &r.Lat)
	}
	return nil
}

// timedRestart stops the node (SIGTERM) and measures the time from
// starting it again to /readyz answering 200.
func (n *node) timedRestart(bin string) (time.Duration, error) {
	n.stop()
	t0 := time.Now()
	if err := n.restart("picomq", bin); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// createStreams PUTs streams prefix0, prefix1, ... from c clients until
// max exist or createFor has passed (a slow node creates fewer streams
// rather than stretching the matrix); it returns how many it created and
// the rate.
func createStreams(ctx context.Context, base, prefix string, c, max int, createFor time.Duration) (int, float64, *benchreport.Latency, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var next atomic.Int64
	var created atomic.Int64
	deadline := time.Now().Add(createFor)
	var firstErr error
	var once sync.Once
	_, lat, err := closedLoop(ctx, c, 0, createFor, func(int) error {
		i := next.Add(1) - 1
		if i >= int64(max) || time.Now().After(deadline) {
			return errDone
		}
		req, _ := http.NewRequestWithContext(ctx, "PUT", fmt.Sprintf("%s%s%d", base, prefix, i), nil)
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := client.Do(req)
		if err == nil {
			// Read the answer to its end: net/http closes a connection
			// whose body is closed unread, so every create paid a TCP
			// connect and the node a new connection (docs/benchmarks.md,
			// 2026-12-02: 1.3k against 3.1-4.3k creates/s, 280-370
			// against 133 us of node CPU per create).
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 201 {
				err = fmt.Errorf("PUT %s%d: %s", prefix, i, resp.Status)
			}
		}
		if err != nil {
			once.Do(func() { firstErr = err })
			return err
		}
		created.Add(1)
		return nil
	})
	start := deadline.Add(-createFor)
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, 0, nil, firstErr
	}
	if err != nil && err != errDone {
		return 0, 0, nil, err
	}
	// Streams are numbered without gaps only if every PUT up to the
	// last succeeded, which firstErr guarantees.
	return int(created.Load()), float64(created.Load()) / elapsed.Seconds(), lat, nil
}

// errDone ends a closedLoop worker without counting as a failure.
var errDone = fmt.Errorf("done")

// etcdInUse finds the embedded etcd's client listener among the node
// process's listening sockets (its /metrics answers with etcd's metrics)
// and returns etcd_mvcc_db_total_size_in_use_in_bytes.
func etcdInUse(pid int, nodeURL string) (float64, error) {
	ports, err := listeningPorts(pid)
	if err != nil {
		return 0, err
	}
	for _, p := range ports {
		u := fmt.Sprintf("http://127.0.0.1:%d/metrics", p)
		if strings.HasSuffix(nodeURL, fmt.Sprintf(":%d", p)) {
			continue
		}
		b, err := httpGet(u)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "etcd_mvcc_db_total_size_in_use_in_bytes "); ok {
				return strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
	}
	return 0, fmt.Errorf("no etcd metrics on the listening ports %v of process %d", ports, pid)
}

// listeningPorts lists the TCP ports process pid listens on, from its
// socket inodes and /proc/<pid>/net/tcp.
func listeningPorts(pid int) ([]int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ports []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 || fl[3] != "0A" || !inodes[fl[9]] {
			continue
		}
		_, hexPort, _ := strings.Cut(fl[1], ":")
		if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil {
			ports = append(ports, int(p))
		}
	}
	return ports, sc.Err()
}
