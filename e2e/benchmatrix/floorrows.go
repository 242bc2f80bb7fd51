package main

import (
	"context"
	"fmt"
	"math"
	"os"

	"time"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/tiering/objstore"
)

// coldReadFloors adds the cold read's floors to the run (objectRows calls
// it right after the sequential GETs, seqMBs, of the same got bytes): the
// parallel-GET floor of the stream's objects and the bare relay floor,
// each next to the sequential GETs (the ratio is the most a reader, or a
// node and its reader, could reach on this machine against the target's
// 1.5x), and PicoMQ's cold read next to the relay floor. A failure is
// noted and the object rows go on.
//
// On a loaded machine one pass of each, one after the other, compares
// moments more than readers (a first run had the parallel GETs at 1.5x
// and 20x the sequential ones), so they are interleaved: after an
// untimed pass of each floor (connections, buffers), two rounds of
// sequential, parallel and relay, the first round's sequential pass
// being seqMBs; each figure is bytes over time summed over both rounds.
func (m *matrix) coldReadFloors(ctx context.Context, run int, st objstore.Store, storeURL string, coldMBs, seqMBs float64, got int64) {
	const par, relay, relayFirst, relayTouched, vsRelay = "cold-read-floor-parallel", "cold-read-floor-relay", "cold-read-floor-relay-first", "cold-read-floor-relay-touched", "cold-read-vs-relay"
	seqPeer := "sequential whole-object GETs, interleaved with it (2 rounds), same run"
	m.row(benchreport.Row{ID: par, What: fmt.Sprintf("parallel-GET floor of that stream's objects (%d MiB ranged GETs, %d in flight, same MinIO, warm buffers): the most any reader could reach", floorRange>>20, floorGETs),
		Unit: "MB/s", Pico: "parallel GETs", Peer: seqPeer, Note: "the cold-read target is 1.5x this peer"})
	m.row(benchreport.Row{ID: relay, What: fmt.Sprintf("bare relay floor: a child process GETs %d ahead (%d MiB ranges), CRC-32C, serves over loopback HTTP to a reader that checks the CRC: a node and client with zero per-record work (warm: connections open, buffers in memory)", floorGETs, floorRange>>20),
		Unit: "MB/s", Pico: "bare relay", Peer: seqPeer, Note: "the cold-read target is 1.5x this peer"})
	m.row(benchreport.Row{ID: relayFirst, What: "the same bare relay's first pass: a fresh process, its connections to the store and its buffers new, as a restarted node's are (the cold-read row's node is restarted to empty its cache)",
		Unit: "MB/s", Pico: "bare relay, first pass", Peer: seqPeer, Note: "the cold-read target is 1.5x this peer"})
	m.row(benchreport.Row{ID: relayTouched, What: "the same bare relay's first pass in a fresh process that touched its read buffers before it listened (as a node started with --cache-pretouch has its read memory): what a fresh process's first pass costs besides page faults",
		Unit: "MB/s", Pico: "bare relay, first pass, buffers touched", Peer: seqPeer, Note: "the cold-read target is 1.5x this peer"})
	m.row(benchreport.Row{ID: vsRelay, What: "cold read of that stream (the row above) next to the bare relay floor",
		Unit: "MB/s", Peer: "bare relay floor, same run"})
	fail := func(err error) {
		m.fail(par, err)
		m.fail(relay, err)
	}
	mb := float64(got) / 1e6
	rc, err := startRelay(storeURL)
	if err != nil {
		fail(err)
		return
	}
	defer rc.stop()
	bufs := relayBuffers(false)
	first, err := rc.pass(ctx, got)
	if err == nil {
		_, err = parallelGETsWith(ctx, st, bufs)
	}
	if err != nil {
		fail(err)
		return
	}
	touched, err := touchedRelayPass(ctx, storeURL, got)
	if err != nil {
		m.fail(relayTouched, err)
	}
	var seqS, parS, relS, relayCPU, readerCPU float64
	for round := range 2 {
		s := seqMBs
		if round > 0 {
			if s, err = sequentialGETs(ctx, st); err != nil {
				fail(err)
				return
			}
		}
		p, err := parallelGETsWith(ctx, st, bufs)
		if err != nil {
			fail(err)
			return
		}
		r, err := rc.pass(ctx, got)
		if err != nil {
			fail(err)
			return
		}
		seqS, parS, relS = seqS+mb/s, parS+mb/p, relS+r.seconds
		relayCPU, readerCPU = relayCPU+r.relayCPU, readerCPU+r.readerCPU
		logf("  object floors, round %d: sequential GETs %.0f MB/s, parallel GETs %.0f MB/s, bare relay %.0f MB/s", round+1, s, p, r.mbs)
	}
	seqAll, parAll, relAll := 2*mb/seqS, 2*mb/parS, 2*mb/relS
	m.res.Add(par, run, benchreport.SidePico, parAll, nil)
	m.res.Add(par, run, benchreport.SidePeer, seqAll, nil)
	m.res.Add(relay, run, benchreport.SidePico, relAll, nil)
	m.res.Add(relay, run, benchreport.SidePeer, seqAll, nil)
	m.res.Add(relayFirst, run, benchreport.SidePico, first.mbs, nil)
	m.res.Add(relayFirst, run, benchreport.SidePeer, seqAll, nil)
	if touched.mbs > 0 {
		m.res.Add(relayTouched, run, benchreport.SidePico, touched.mbs, nil)
		m.res.Add(relayTouched, run, benchreport.SidePeer, seqAll, nil)
	}
	m.res.Add(vsRelay, run, benchreport.SidePico, coldMBs, nil)
	m.res.Add(vsRelay, run, benchreport.SidePeer, relAll, nil)
	logf("  object floors: sequential GETs %.0f MB/s, parallel GETs %.0f MB/s (%.2fx), bare relay %.0f MB/s (%.2fx; its first pass %.0f MB/s, %.0f MB/s with buffers touched; CPU per pass: relay %.0f ms, reader %.0f ms), PicoMQ cold read %.0f MB/s (%.2fx the relay)",
		seqAll, parAll, parAll/seqAll, relAll, relAll/seqAll, first.mbs, touched.mbs, relayCPU*500, readerCPU*500, coldMBs, coldMBs/relAll)
}

// The replication floor's points: short, since twelve of them run per
// run (the matrix's floors must add seconds, not minutes); the test
// shortens them further.
var (
	replFloorWarmup = 200 * time.Millisecond
	replFloorPoint  = 500 * time.Millisecond
)

// replFloorOrder is the order of the floor's points at each client
// count: local, fsync followers, write followers and back, so that a
// machine whose load drifts during the six points weighs on each mode
// alike (each figure sums its two points).
var replFloorOrder = []byte{'L', 'F', 'W', 'W', 'F', 'L'}

// replFloorRows measures the bare replication floor (replfloor.go) on the
// matrix's disk: p50 at 1 client and throughput at 64 clients of 100 B
// appends, local and replicated with fsync and write followers,
// alternating on the same three processes (replFloorOrder); each
// replicated figure next to the local one.
func (m *matrix) replFloorRows(ctx context.Context, run int) error {
	dir, err := os.MkdirTemp(m.cfg.work, "replfloor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := startReplFloor(dir)
	if err != nil {
		return err
	}
	defer c.stop()
	const size = 100
	modes := []struct {
		mode          byte
		suffix, label string
	}{
		{'F', "", "followers fdatasync before they answer"},
		{'W', "-write", "followers answer on write, no fdatasync"},
	}
	for _, clients := range []int{1, 64} {
		got := map[byte]floorLoad{}
		for _, mode := range replFloorOrder {
			r, err := c.load(ctx, mode, clients, size, replFloorWarmup, replFloorPoint)
			if err != nil {
				return fmt.Errorf("%d clients: %w", clients, err)
			}
			got[mode] = got[mode].add(r)
		}
		local := got['L']
		for _, md := range modes {
			r := got[md.mode]
			what := "bare replication floor (3 bare processes on the matrix's disk, length-prefixed TCP on loopback, group commit; owner pwrite + fdatasync, " +
				md.label + ", owner answers after its fdatasync and the first follower)"
			if clients == 1 {
				id := m.row(benchreport.Row{ID: "repl-floor-p50-c1" + md.suffix, What: what + ": append p50 latency, 1 client, 100 B", Unit: "ms",
					Pico: "bare replicated", Peer: "bare local (the same owner: pwrite + fdatasync), same run", LowerBetter: true,
					Note: "the machine's floor for target <= 1.5x local"})
				m.res.Add(id, run, benchreport.SidePico, r.p50(), nil)
				m.res.Add(id, run, benchreport.SidePeer, local.p50(), nil)
			} else {
				id := m.row(benchreport.Row{ID: "repl-floor-c64" + md.suffix, What: what + ": appends, 64 clients, 100 B", Unit: "appends/s",
					Pico: "bare replicated", Peer: "bare local (the same owner: pwrite + fdatasync), same run",
					Note: "the machine's floor for target >= 0.7x local"})
				m.res.Add(id, run, benchreport.SidePico, r.perSec(), nil)
				m.res.Add(id, run, benchreport.SidePeer, local.perSec(), nil)
			}
		}
		logf("  bare replication floor c=%d: local %.0f/s p50 %.3f ms; fsync followers %.0f/s p50 %.3f ms; write followers %.0f/s p50 %.3f ms",
			clients, local.perSec(), local.p50(), got['F'].perSec(), got['F'].p50(), got['W'].perSec(), got['W'].p50())
	}
	return nil
}

// manyReadersFloor measures the cold-many row's floors right after
// PicoMQ's read of the same objects (manyMBs, recordBytes of records):
// the bare relay's first pass (manyfloor.go), in a fresh child process as
// the row's node is restarted, then the parallel-GET floor, which it
// returns for the cold-many row; and adds the relay's rows, next to the
// parallel GETs and PicoMQ next to the relay. The relay's figure is the
// row's record bytes over the time to deliver every stream, so the two
// compare times (the relay moves the batches' headers too, a few percent
// more bytes). A relay failure is noted and the row goes on.
func (m *matrix) manyReadersFloor(ctx context.Context, run int, st objstore.Store, s3 minio, storeURL string, manyMBs, recordBytes float64) (float64, error) {
	const first, touchedRow, vsRelay = "cold-many-floor-relay-first", "cold-many-floor-relay-touched", "cold-many-vs-relay"
	m.row(benchreport.Row{ID: first, What: fmt.Sprintf("bare relay floor of the %d readers, first pass: a fresh child process GETs each object's wanted bytes once (%d MiB-aligned ranges, %d in flight), CRC-32C, serves each stream to its own reader over loopback HTTP (%d connections), each reader checks every frame's CRC; the row's record bytes over the time to the last stream's end", manyReaders, floorRange>>20, floorGETs, manyReaders),
		Unit: "MB/s", Pico: "bare relay, first pass", Peer: "parallel-GET floor of the same objects, same run", Note: "the cold-many target is 0.8x this peer"})
	m.row(benchreport.Row{ID: touchedRow, What: "the same bare relay's first pass in a fresh child that touched its read buffers before it listened (as a node started with --cache-pretouch has its read memory)",
		Unit: "MB/s", Pico: "bare relay, first pass, buffers touched", Peer: "parallel-GET floor of the same objects, same run", Note: "the cold-many target is 0.8x this peer"})
	m.row(benchreport.Row{ID: vsRelay, What: fmt.Sprintf("%d cold readers (the cold-many row) next to the bare relay floor's first pass", manyReaders),
		Unit: "MB/s", Peer: "bare relay, first pass, same run"})
	scpu0 := s3.cpu()
	r, relayErr := relayManyPass(ctx, st, storeURL, m.cfg.work)
	scpu1 := s3.cpu()
	par, err := parallelGETs(ctx, st)
	if err != nil {
		return 0, err
	}
	touched, terr := relayManyPass(ctx, st, storeURL, m.cfg.work, "-touched")
	if terr != nil {
		m.fail(touchedRow, terr)
	} else {
		m.res.Add(touchedRow, run, benchreport.SidePico, recordBytes/1e6/touched.seconds, nil)
		m.res.Add(touchedRow, run, benchreport.SidePeer, par, nil)
	}
	if relayErr != nil {
		m.fail(first, relayErr)
		return par, nil
	}
	relay := recordBytes / 1e6 / r.seconds
	m.res.Add(first, run, benchreport.SidePico, relay, nil)
	m.res.Add(first, run, benchreport.SidePeer, par, nil)
	m.res.Add(vsRelay, run, benchreport.SidePico, manyMBs, nil)
	m.res.Add(vsRelay, run, benchreport.SidePeer, relay, nil)
	if terr == nil {
		logf("  many floor: bare relay first pass with its buffers touched %.0f MB/s (%.2fx the parallel GETs)", recordBytes/1e6/touched.seconds, recordBytes/1e6/touched.seconds/par)
	}
	logf("  many floor: bare relay first pass %.0f MB/s (%d bytes relayed in %.2f s, %d spans, %d GETs; CPU: relay %.0f ms, readers %.0f ms, MinIO %.0f ms, with the plan's footer GETs), parallel GETs %.0f MB/s (%.2fx; MinIO CPU %.0f ms); PicoMQ %.0f MB/s (%.2fx the relay)",
		relay, r.bytes, r.seconds, r.spans, r.gets, r.relayCPU*1000, r.readerCPU*1000, (scpu1-scpu0)*1000, par, relay/par, (s3.cpu()-scpu1)*1000, manyMBs, manyMBs/relay)
	return par, nil
}

// tailFloors is the live-tail rows' floor measured once: the bare
// floor with appends and records on two connections (as the PicoMQ row's
// client has them) and on one (as NATS's has).
type tailFloors struct {
	two, one *benchreport.Latency
	err      error
}

// tailFloor runs the live-tail floor's load, the same rate, size and
// duration as the PicoMQ row, against a fresh `benchmatrix replfloor
// -owner` child on the matrix's disk: two connections, then one.
func (m *matrix) tailFloor(ctx context.Context) (f tailFloors) {
	dir, err := os.MkdirTemp(m.cfg.work, "tailfloor-")
	if err != nil {
		return tailFloors{err: err}
	}
	defer os.RemoveAll(dir)
	p, addr, err := startTailFloor(dir)
	if err != nil {
		return tailFloors{err: err}
	}
	defer p.stop()
	if f.two, f.err = tailFloorLoad(ctx, addr, false, tailRate, 100, m.cfg.secs); f.err != nil {
		return f
	}
	f.one, f.err = tailFloorLoad(ctx, addr, true, tailRate, 100, m.cfg.secs)
	return f
}

// tailFloorRows adds the live-tail floor's rows (consumerRows measures
// it next to the tail rows and passes their PicoMQ and JetStream
// latencies, nil where one failed): the floor next to JetStream (how far
// below the target the machine allows), PicoMQ's p50 next to the floor,
// and the one-connection floor next to the two-connection one (what the
// second connection costs). A failed floor is noted and the run goes on.
func (m *matrix) tailFloorRows(run int, fl tailFloors, pico, js *benchreport.Latency) {
	const what = "bare live-tail floor (a `benchmatrix replfloor -owner` child on the matrix's disk: length-prefixed TCP on loopback, group commit pwrite + fdatasync, then the durable records sent to the subscriber's connection; the appender waits for each answer, the subscriber is on another connection)"
	jsPeer := "NATS JetStream, sync_interval: always, push consumer, same run"
	p50 := m.row(benchreport.Row{ID: "tail-floor-p50", What: fmt.Sprintf("%s: append-to-delivery p50, %d appends/s of 100 B", what, tailRate),
		Unit: "ms", Pico: "bare live tail", Peer: jsPeer, LowerBetter: true, Note: "the machine's floor for the tail target <= JetStream"})
	p99 := m.row(benchreport.Row{ID: "tail-floor-p99", What: "the same bare live-tail floor: append-to-delivery p99, same run",
		Unit: "ms", Pico: "bare live tail", Peer: jsPeer, LowerBetter: true, Note: "the machine's floor for the tail target <= JetStream"})
	vs := m.row(benchreport.Row{ID: "tail-vs-floor", What: "live tail p50 (the tail-p50 row) next to the bare live-tail floor's p50",
		Unit: "ms", Peer: "bare live-tail floor, same run", LowerBetter: true})
	one := m.row(benchreport.Row{ID: "tail-floor-1conn-p50", What: "the same bare live-tail floor with appends, answers and records on one connection (as a NATS client has them): p50",
		Unit: "ms", Pico: "bare live tail, one connection", Peer: "the bare live-tail floor on two connections, same process, just before", LowerBetter: true})
	if fl.two == nil {
		m.fail("tail floor", fl.err)
		return
	}
	m.res.Add(p50, run, benchreport.SidePico, fl.two.P50, fl.two)
	m.res.Add(p99, run, benchreport.SidePico, fl.two.P99, nil)
	m.res.Add(vs, run, benchreport.SidePeer, fl.two.P50, nil)
	if js != nil {
		m.res.Add(p50, run, benchreport.SidePeer, js.P50, nil)
		m.res.Add(p99, run, benchreport.SidePeer, js.P99, nil)
	}
	if pico != nil {
		m.res.Add(vs, run, benchreport.SidePico, pico.P50, nil)
	}
	if fl.one != nil {
		m.res.Add(one, run, benchreport.SidePico, fl.one.P50, fl.one)
		m.res.Add(one, run, benchreport.SidePeer, fl.two.P50, nil)
	} else {
		m.fail("tail floor, one connection", fl.err)
	}
	// ms of a latency, or NaN where its side failed.
	ms := func(l *benchreport.Latency, p99 bool) float64 {
		switch {
		case l == nil:
			return math.NaN()
		case p99:
			return l.P99
		}
		return l.P50
	}
	logf("  live tail p50/p99: bare floor %.3f/%.3f ms (one connection %.3f/%.3f), PicoMQ %.3f/%.3f ms (%.2fx/%.2fx the floor), JetStream %.3f/%.3f ms (floor %.2fx/%.2fx it)",
		fl.two.P50, fl.two.P99, ms(fl.one, false), ms(fl.one, true), ms(pico, false), ms(pico, true), ms(pico, false)/fl.two.P50, ms(pico, true)/fl.two.P99,
		ms(js, false), ms(js, true), fl.two.P50/ms(js, false), fl.two.P99/ms(js, true))
}

// touchedRelayPass is one pass of a fresh relay child that touched its
// buffers before it listened: the fresh-process floor without the page
// faults of its first reads.
func touchedRelayPass(ctx context.Context, storeURL string, want int64) (relayResult, error) {
	rc, err := startRelay(storeURL, "-touched")
	if err != nil {
		return relayResult{}, err
	}
	defer rc.stop()
	return rc.pass(ctx, want)
}
