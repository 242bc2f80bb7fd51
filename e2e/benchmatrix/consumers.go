package main

import (
	"context"
	"fmt"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/benchreport"
)

// Consumer load: a catch-up reader replays catchupRecords 1 KiB records
// from the start; a live-tail reader receives tailRate appends/s of 100 B.
const (
	catchupRecords = 10000
	tailRate       = 200
)

// consumerRows: a consumer catching up (reading a filled stream from the
// start, records/s) and a live tail (append-to-delivery latency at a fixed
// rate), PicoMQ over Pico HTTP (paged reads; SSE) next to NATS JetStream
// (an ordered consumer; a push consumer) with the same records; then the
// live tail's bare floor (tailFloor, tailFloorRows), next to both.
func (m *matrix) consumerRows(ctx context.Context, run int) error {
	pprofFlags, pprofAddr := pprofArgs()
	n, err := m.startNode("pico-consumers", pprofFlags...)
	if err != nil {
		return err
	}
	defer n.stop()
	nats, natsURL, err := m.startNATS()
	if err != nil {
		return err
	}
	defer nats.stop()
	c, err := picomq.NewPico(n.url)
	if err != nil {
		return err
	}
	defer c.Close()
	const peer = "NATS JetStream, sync_interval: always"

	cu := m.row(benchreport.Row{ID: "catchup", What: fmt.Sprintf("consumer catch-up: read %d x 1 KiB records from the start", catchupRecords),
		Unit: "records/s", Peer: peer + ", ordered consumer"})
	s := c.Stream(fmt.Sprintf("/mb/r%d/catchup", run))
	if _, err := s.Create(ctx, "application/octet-stream", 0); err != nil {
		return err
	}
	batch := make([]picomq.AppendRecord, 500)
	for i := range batch {
		batch[i].Body = make([]byte, 1024)
	}
	for i := 0; i < catchupRecords; i += len(batch) {
		if _, err := s.Append(ctx, batch...); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	stopProfile := profileRead("catch-up", pprofAddr)
	t0 := time.Now()
	it := s.Records(c.Beginning(), picomq.RecordsOptions{})
	got := 0
	for it.Next(ctx) {
		got++
	}
	el := time.Since(t0)
	stopProfile()
	if err := it.Err(); err != nil || got != catchupRecords {
		m.fail(cu+" PicoMQ", fmt.Errorf("read %d of %d records: %v", got, catchupRecords, err))
	} else {
		m.res.Add(cu, run, benchreport.SidePico, float64(got)/el.Seconds(), nil)
	}
	if nats != nil {
		subj := fmt.Sprintf("bench.r%d.catchup", run)
		if _, err := jsonCommand(ctx, m.cfg.natsload, "fill", "-url", natsURL, "-subject", subj, "-n", fmt.Sprint(catchupRecords), "-size", "1024"); err != nil {
			m.fail(cu+" JetStream fill", err)
		} else if q, err := jsonCommand(ctx, m.cfg.natsload, "catchup", "-url", natsURL, "-subject", subj); err != nil {
			m.fail(cu+" JetStream", err)
		} else {
			m.res.Add(cu, run, benchreport.SidePeer, q.RecordsPerSec, nil)
		}
	}

	p50 := m.row(benchreport.Row{ID: "tail-p50", What: fmt.Sprintf("live tail: append-to-delivery latency p50, %d appends/s of 100 B", tailRate),
		Unit: "ms", Peer: peer + ", push consumer", LowerBetter: true})
	p99 := m.row(benchreport.Row{ID: "tail-p99", What: "live tail: append-to-delivery latency p99, same run", Unit: "ms",
		Peer: peer + ", push consumer", LowerBetter: true})
	// The live tail's bare floor (floorrows.go), a fresh process each
	// run: first in even runs, last in odd ones, so that a load drifting
	// over the group weighs on both sides alike.
	var floor tailFloors
	if run%2 == 0 {
		floor = m.tailFloor(ctx)
	}
	stopProfile = profileRead("live-tail", pprofAddr)
	lat, err := fanout(ctx, c, fmt.Sprintf("/mb/r%d/tail", run),
		fanoutLoad{readers: 1, rate: tailRate, size: 100, contentType: "application/octet-stream", d: m.cfg.secs, onEvent: true})
	stopProfile()
	if err != nil {
		m.fail("tail PicoMQ", err)
		lat = nil
	} else {
		m.res.Add(p50, run, benchreport.SidePico, lat.P50, lat)
		m.res.Add(p99, run, benchreport.SidePico, lat.P99, nil)
	}
	var jsLat *benchreport.Latency
	if nats != nil {
		q, err := jsonCommand(ctx, m.cfg.natsload, "tail", "-url", natsURL, "-subject", fmt.Sprintf("bench.r%d.tail", run),
			"-rate", fmt.Sprint(tailRate), "-size", "100", "-d", m.cfg.secs.String())
		if err != nil {
			m.fail("tail JetStream", err)
		} else {
			m.res.Add(p50, run, benchreport.SidePeer, q.Lat.P50, &q.Lat)
			m.res.Add(p99, run, benchreport.SidePeer, q.Lat.P99, nil)
			jsLat = &q.Lat
		}
	}
	if run%2 != 0 {
		floor = m.tailFloor(ctx)
	}
	m.tailFloorRows(run, floor, lat, jsLat)
	return nil
}
