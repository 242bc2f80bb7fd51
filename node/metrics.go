package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/PicoMQ/picomq/wal"
)

// registerWALMetrics exposes the WAL's counters. They are read at scrape time
// from wal.Stats, so the append path pays nothing for them.
func registerWALMetrics(reg prometheus.Registerer, w *wal.WAL) {
	gauge := func(name, help string, f func(wal.Stats) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(w.Stats()) }))
	}
	counter := func(name, help string, f func(wal.Stats) float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(w.Stats()) }))
	}
	gauge("picomq_wal_segments", "WAL segment files on disk.", func(s wal.Stats) float64 { return float64(s.Segments) })
	gauge("picomq_wal_disk_bytes", "Bytes of WAL segment files, preallocation included.", func(s wal.Stats) float64 { return float64(s.DiskBytes) })
	gauge("picomq_wal_queued_bytes", "Bytes enqueued and not yet written.", func(s wal.Stats) float64 { return float64(s.QueuedBytes) })
	counter("picomq_wal_entries_total", "WAL entries made durable.", func(s wal.Stats) float64 { return float64(s.Entries) })
	counter("picomq_wal_payload_bytes_total", "Payload bytes made durable.", func(s wal.Stats) float64 { return float64(s.PayloadBytes) })
	counter("picomq_wal_commit_groups_total", "Group commits (one write + one fdatasync each).", func(s wal.Stats) float64 { return float64(s.Groups) })
	counter("picomq_wal_syncs_total", "fdatasync calls.", func(s wal.Stats) float64 { return float64(s.Syncs) })
	counter("picomq_wal_sync_seconds_total", "Time spent in fdatasync.", func(s wal.Stats) float64 { return s.SyncTime.Seconds() })
}
