package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
)

// coldRunningRows: a cold read by a running node (issue 31). The cold-read
// row of objectRows restarts its node to empty the cache, so it measures a
// fresh process too (its buffers page-faulted and zeroed as it reads,
// its connections to the store new). A node in production that reads
// history it has not cached has been running: here the node reads another
// stream of the same size first (through the same GETs and buffers), then
// the target stream, which its cache has never held. Every byte of the
// target read comes from GETs (checked on picomq_cache_fetched_bytes_total
// against the target's object bytes). Beside it, in the same run: the
// sequential whole-object GETs of the target's objects and the warm bare
// relay floor over the same objects (relayfloor.go).
//
// The node runs with compaction off in practice (--compaction-interval
// 24h): two 64 MiB streams make 16 flush manifests, at the compactor's
// threshold, and a merge during the read would both cost CPU the read did
// not cause and rename the objects the floors read.
func (m *matrix) coldRunningRows(ctx context.Context, run int) error {
	s3, err := m.minio()
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("r%d-running/", run)
	// The reader keeps no record past Next, as the bare reader keeps no
	// byte: it reads with ReuseBuffers unless PICOMQ_BENCH_FRESH_PAGES is
	// set (to compare the client's CPU both ways).
	fresh := freshPages()
	defer pretouchNodes()()
	pprofFlags, pprofAddr := pprofArgs()
	n, err := m.startNode("pico-running", append([]string{"--object-store", s3.url(prefix), "--compaction-interval", "24h"}, pprofFlags...)...)
	if err != nil {
		return err
	}
	defer func() { n.stop() }()
	st, err := storeurl.Open(ctx, s3.url(prefix))
	if err != nil {
		return err
	}
	defer st.Close()
	c, err := picomq.NewPico(n.url)
	if err != nil {
		return err
	}
	defer c.Close()
	const warm, target = "/mb/warm", "/mb/object"
	var before []objstore.Attributes
	for i, name := range []string{warm, target} {
		if i == 1 {
			if before, err = listObjects(ctx, st); err != nil {
				return err
			}
		}
		s := c.Stream(name)
		if _, err := s.Create(ctx, "application/octet-stream", 0); err != nil {
			return err
		}
		if err := ingestObject(ctx, n, s); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	after, err := listObjects(ctx, st)
	if err != nil {
		return err
	}
	// The target's objects: flushed after every object of the warm
	// stream was (ingestObject waits until nothing is unflushed).
	var keys []string
	var objBytes int64
	for _, a := range after {
		if !slices.ContainsFunc(before, func(b objstore.Attributes) bool { return b.Key == a.Key }) {
			keys = append(keys, a.Key)
			objBytes += a.Size
		}
	}
	if len(keys) == 0 || objBytes < objectMiB<<20 {
		return fmt.Errorf("target stream's objects: %d keys, %d bytes", len(keys), objBytes)
	}

	// A restart forgets whatever the writes left in memory; the read of
	// the warm stream then makes it a running node.
	n.stop()
	if err := n.restart("picomq", m.cfg.picomq); err != nil {
		return err
	}
	wcpu0 := testproc.CPUSeconds(n.pid)
	warmMBs, err := coldRead(ctx, c, warm, objectMiB<<20)
	if err != nil {
		return fmt.Errorf("warm-up read: %w", err)
	}
	warmCPU := testproc.CPUSeconds(n.pid) - wcpu0
	fetched0, err := metric(n.url, "picomq_cache_fetched_bytes_total")
	if err != nil {
		return err
	}
	gets0, _ := metric(n.url, "picomq_cache_requests_total")
	stopProfile := profileRead("cold-read-running", pprofAddr)
	cpu0, ccpu0 := testproc.CPUSeconds(n.pid), testproc.CPUSeconds(os.Getpid())
	// RSS growth over the read: memory the node and the client touched
	// for the first time (fresh pages are most of a read's CPU on a VM).
	rss0, crss0 := testproc.RSSBytes(n.pid), testproc.RSSBytes(os.Getpid())
	t0 := time.Now()
	it := c.Stream(target).Records(c.Beginning(), picomq.RecordsOptions{ReuseBuffers: !fresh})
	var bytes int64
	for it.Next(ctx) {
		bytes += int64(len(it.Record().Body))
	}
	el := time.Since(t0)
	nodeCPU, clientCPU := testproc.CPUSeconds(n.pid)-cpu0, testproc.CPUSeconds(os.Getpid())-ccpu0
	nodeRSS, clientRSS := (testproc.RSSBytes(n.pid)-rss0)/(1<<20), (testproc.RSSBytes(os.Getpid())-crss0)/(1<<20)
	stopProfile()
	if err := it.Err(); err != nil || bytes != objectMiB<<20 {
		return fmt.Errorf("running cold read: %d of %d bytes: %v", bytes, objectMiB<<20, err)
	}
	fetched1, err := metric(n.url, "picomq_cache_fetched_bytes_total")
	if err != nil {
		return err
	}
	gets1, _ := metric(n.url, "picomq_cache_requests_total")
	if fetched1-fetched0 < float64(objBytes) {
		return fmt.Errorf("running cold read: %.0f bytes fetched from the store, the target's objects are %d: part of it came from the cache", fetched1-fetched0, objBytes)
	}
	coldMBs := float64(bytes) / 1e6 / el.Seconds()

	// Floors over the target's objects, interleaved as coldReadFloors
	// does: an untimed relay pass (its connections and buffers), then two
	// rounds of sequential GETs and a warm relay pass.
	rc, err := startRelay(s3.url(prefix))
	if err != nil {
		return err
	}
	defer rc.stop()
	if _, err := rc.passKeys(ctx, objBytes, keys); err != nil {
		return err
	}
	mb := float64(objBytes) / 1e6
	var seqS, relS, relayCPU, readerCPU float64
	for range 2 {
		t := time.Now()
		if err := getWhole(ctx, st, keys); err != nil {
			return err
		}
		seqS += time.Since(t).Seconds()
		r, err := rc.passKeys(ctx, objBytes, keys)
		if err != nil {
			return err
		}
		relS += r.seconds
		relayCPU, readerCPU = relayCPU+r.relayCPU, readerCPU+r.readerCPU
	}
	seqMBs, relMBs := 2*mb/seqS, 2*mb/relS
	const row, vsRelay = "cold-read-running", "cold-read-running-vs-relay"
	m.row(benchreport.Row{ID: row, What: fmt.Sprintf("cold read of a %d MiB stream by a running node (it read another %d MiB stream from the store first; every byte of this one from GETs), record bytes", objectMiB, objectMiB),
		Unit: "MB/s", Peer: "sequential whole-object GETs of that stream's objects, interleaved with the relay (2 rounds), same run", Note: "issue 31's cold-read target is 1.5x this peer"})
	m.row(benchreport.Row{ID: vsRelay, What: "that running node's cold read next to the warm bare relay floor over the same objects",
		Unit: "MB/s", Peer: "bare relay floor, warm, same run"})
	m.res.Add(row, run, benchreport.SidePico, coldMBs, nil)
	m.res.Add(row, run, benchreport.SidePeer, seqMBs, nil)
	m.res.Add(vsRelay, run, benchreport.SidePico, coldMBs, nil)
	m.res.Add(vsRelay, run, benchreport.SidePeer, relMBs, nil)
	logf("  object running: warm-up read (fresh process) %.0f MB/s, node CPU %.0f ms; cold read %.0f MB/s (CPU: node %.0f ms, client %.0f ms; RSS growth: node %.0f MiB, client %.0f MiB; %.0f GETs, %.1f MiB fetched for %.1f MiB of objects), sequential GETs %.0f MB/s (%.2fx), warm relay %.0f MB/s (%.2fx; CPU per pass: relay %.0f ms, reader %.0f ms)",
		warmMBs, warmCPU*1000, coldMBs, nodeCPU*1000, clientCPU*1000, nodeRSS, clientRSS, gets1-gets0, (fetched1-fetched0)/(1<<20), float64(objBytes)/(1<<20),
		seqMBs, coldMBs/seqMBs, relMBs, coldMBs/relMBs, relayCPU*500, readerCPU*500)
	return nil
}

// listObjects lists every object of st.
func listObjects(ctx context.Context, st objstore.Store) ([]objstore.Attributes, error) {
	var all []objstore.Attributes
	for a, err := range st.List(ctx, "") {
		if err != nil {
			return nil, err
		}
		all = append(all, a)
	}
	return all, nil
}

// getWhole reads the objects keys of st whole, one at a time, into fresh
// buffers (as sequentialGETs does for every object).
func getWhole(ctx context.Context, st objstore.Store, keys []string) error {
	for a, err := range st.List(ctx, "") {
		if err != nil {
			return err
		}
		if !slices.Contains(keys, a.Key) {
			continue
		}
		buf := make([]byte, a.Size)
		if _, err := st.ReadAt(ctx, a.Key, buf, 0); err != nil {
			return fmt.Errorf("GET %s: %w", a.Key, err)
		}
	}
	return nil
}
