package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/cache"
	"github.com/PicoMQ/picomq/wal"
)

// registerWALMetrics exposes the WAL's counters. They are read at scrape time
// from wal.Stats, so the append path pays nothing for them.
func registerWALMetrics(reg prometheus.Registerer, w *wal.WAL) {
	gauge, counter := statMetrics(reg, w.Stats)
	gauge("picomq_wal_segments", "WAL segment files on disk.", func(s wal.Stats) float64 { return float64(s.Segments) })
	gauge("picomq_wal_disk_bytes", "Bytes of WAL segment files, preallocation included.", func(s wal.Stats) float64 { return float64(s.DiskBytes) })
	gauge("picomq_wal_queued_bytes", "Bytes enqueued and not yet written.", func(s wal.Stats) float64 { return float64(s.QueuedBytes) })
	counter("picomq_wal_entries_total", "WAL entries made durable.", func(s wal.Stats) float64 { return float64(s.Entries) })
	counter("picomq_wal_payload_bytes_total", "Payload bytes made durable.", func(s wal.Stats) float64 { return float64(s.PayloadBytes) })
	counter("picomq_wal_commit_groups_total", "Group commits (one write + one fdatasync each).", func(s wal.Stats) float64 { return float64(s.Groups) })
	counter("picomq_wal_waiter_commits_total", "Group commits done by the request waiting for them instead of the writer goroutine (a lone append on an idle WAL).", func(s wal.Stats) float64 { return float64(s.WaiterGroups) })
	counter("picomq_wal_syncs_total", "fdatasync calls.", func(s wal.Stats) float64 { return float64(s.Syncs) })
	counter("picomq_wal_sync_seconds_total", "Time spent in fdatasync.", func(s wal.Stats) float64 { return s.SyncTime.Seconds() })
}

// registerTierMetrics exposes the object-read block cache's counters, read
// at scrape time from cache.Stats, and corrupt objects met by reads.
func registerTierMetrics(reg prometheus.Registerer, t *tiering.Tier) {
	registerCounter(reg, "picomq_corrupt_objects_total", "Distinct objects whose bytes failed their CRC on read (reads of them fail with 503).",
		func() float64 { return float64(t.CorruptObjects()) })
	gauge, counter := statMetrics(reg, t.CacheStats)
	counter("picomq_cache_hit_blocks_total", "Object blocks served from the cache.", func(s cache.Stats) float64 { return float64(s.Hits) })
	counter("picomq_cache_miss_blocks_total", "Object blocks a reader had to fetch.", func(s cache.Stats) float64 { return float64(s.Misses) })
	counter("picomq_cache_joined_blocks_total", "Object blocks a reader waited for while a fetch (often read-ahead) was in flight.", func(s cache.Stats) float64 { return float64(s.Joined) })
	counter("picomq_cache_prefetch_blocks_total", "Object blocks fetched by read-ahead.", func(s cache.Stats) float64 { return float64(s.Prefetches) })
	counter("picomq_cache_requests_total", "Ranged GETs sent to object storage by the cache.", func(s cache.Stats) float64 { return float64(s.Requests) })
	counter("picomq_cache_fetched_bytes_total", "Bytes received from object storage by the cache.", func(s cache.Stats) float64 { return float64(s.FetchedBytes) })
	gauge("picomq_cache_read_ahead_bytes", "Read-ahead budget in use: object bytes in flight or fetched ahead of readers and not yet read (at most --read-ahead-bytes).", func(s cache.Stats) float64 { return float64(s.ReadAheadBytes) })
	counter("picomq_cache_read_ahead_skipped_blocks_total", "Blocks of read-ahead not sent because the node-wide --read-ahead-bytes budget was spent.", func(s cache.Stats) float64 { return float64(s.ReadAheadSkipped) })
	counter("picomq_cache_fetch_waits_total", "Demand GETs that waited for room under the node-wide budget of demand bytes in flight.", func(s cache.Stats) float64 { return float64(s.FetchWaits) })
}

// statMetrics returns functions that register a gauge or a counter whose
// value f reads from a fresh stats() at scrape time.
func statMetrics[S any](reg prometheus.Registerer, stats func() S) (gauge, counter func(name, help string, f func(S) float64)) {
	gauge = func(name, help string, f func(S) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(stats()) }))
	}
	counter = func(name, help string, f func(S) float64) {
		registerCounter(reg, name, help, func() float64 { return f(stats()) })
	}
	return gauge, counter
}

// registerCounter registers a counter read at scrape time from f.
func registerCounter(reg prometheus.Registerer, name, help string, f func() float64) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}
