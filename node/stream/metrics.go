package stream

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Durability levels of a stream.
const (
	// DurabilityLocal acknowledges after the owner's WAL fsync.
	DurabilityLocal = "local"
	// DurabilityObject acknowledges after the flush holding the append is
	// committed in object storage and etcd.
	DurabilityObject = "object"
)

// replicationMetrics are the owner's and the follower's replication
// counters (replicate.go, replica.go).
type replicationMetrics struct {
	replWaitSeconds prometheus.Histogram
	replSeconds     prometheus.Histogram
	replErrors      prometheus.Counter
	replResends     prometheus.Counter
	isrChanges      prometheus.Counter
	replicaFrames   prometheus.Counter
	replicaSetReads prometheus.Counter
	// replicaAck is 1 for the mode this node answers replication
	// requests in (ReplicationConfig.Ack), so a dashboard shows which
	// durability contract the cluster's followers give.
	replicaAck *prometheus.GaugeVec
}

func newReplicationMetrics() replicationMetrics {
	return replicationMetrics{
		replWaitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "picomq_replication_wait_seconds",
			Help:    "Time a replicated append waited for its followers after its own WAL write.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18), // 50 µs .. 6.5 s: a loopback round trip is well under 1 ms
		}),
		replSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "picomq_replication_request_seconds",
			Help:    "Duration of one replication request to a follower, sent to answered (its WAL fsync included).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18),
		}),
		replErrors:    prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_replication_errors_total", Help: "Replication requests to followers that failed."}),
		replResends:   prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_replication_resends_total", Help: "Streams resent to a follower from the owner's WAL (catch-up)."}),
		isrChanges:    prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_replication_isr_changes_total", Help: "Replica set writes in etcd (in-sync set shrunk or grown, followers replaced)."}),
		replicaFrames: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_replica_frames_total", Help: "Stream frames this node stored as a follower."}),
		replicaSetReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_replica_set_reads_total",
			Help: "Replica sets of streams other nodes own read from etcd to report replicas (Kafka Metadata); cached for a second."}),
		replicaAck: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "picomq_replica_ack_mode",
			Help: "1 for the mode (--replica-ack) in which this node answers as a follower: fsync (after its WAL fdatasync) or write (after its WAL write, before the fdatasync)."},
			[]string{"mode"}),
	}
}

func (m replicationMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.replWaitSeconds, m.replSeconds, m.replErrors, m.replResends, m.isrChanges, m.replicaFrames, m.replicaSetReads, m.replicaAck}
}

func (st *streamState) durability(def string) string {
	if st.info.Durability != "" {
		return st.info.Durability
	}
	return def
}

type metrics struct {
	flushes      prometheus.Counter
	flushErrors  prometheus.Counter
	flushBytes   prometheus.Counter
	flushSeconds prometheus.Histogram
	claims       prometheus.Counter
	claimSeconds prometheus.Histogram
	handoffs     prometheus.Counter
	compactions  prometheus.Counter
	// Garbage collection (gc.go): passes completed, objects deleted.
	gcRuns    prometheus.Counter
	gcDeleted prometheus.Counter
	gcErrors  prometheus.Counter
	// Offset reservations (reserve.go): etcd transactions written, and
	// appends that had to wait for one (and for how long) before they
	// could be acknowledged.
	reserveTxns        prometheus.Counter
	reserveWaits       prometheus.Counter
	reserveWaitSeconds prometheus.Counter
	// walChunkReads: batches read from the WAL tail, by where their
	// bytes came from (tailcache.go).
	walChunkReads               *prometheus.CounterVec
	tailFromMemory, tailFromWAL prometheus.Counter
	replicationMetrics
	// keys: key compaction (keycompact.go).
	keys keyCompactMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		flushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "picomq_flushes_total", Help: "Flushes committed to object storage (one object + one etcd transaction each).",
		}),
		flushErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "picomq_flush_errors_total", Help: "Flushes that failed and will be retried.",
		}),
		flushBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "picomq_flushed_bytes_total", Help: "Record batch bytes uploaded by flushes.",
		}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "picomq_flush_duration_seconds", Help: "Time to upload and commit one flush.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		walChunkReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "picomq_wal_tail_reads_total",
			Help: "Reads of a batch not yet in object storage, by source: memory (the stream's latest append, held for live readers) or wal (read back from the write-ahead log).",
		}, []string{"source"}),
		replicationMetrics: newReplicationMetrics(),
		keys:               newKeyCompactMetrics(),
	}
	m.tailFromMemory = m.walChunkReads.WithLabelValues("memory")
	m.tailFromWAL = m.walChunkReads.WithLabelValues("wal")
	m.claims = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "picomq_stream_claims_total", Help: "Streams this node took over or adopted.",
	})
	m.claimSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "picomq_stream_claim_duration_seconds", Help: "Time to claim a stream and rebuild it from object storage.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	m.handoffs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "picomq_stream_handoffs_total", Help: "Streams this node handed to another node (drain).",
	})
	m.compactions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "picomq_compactions_total", Help: "Runs of flush objects merged into one object and one manifest.",
	})
	m.gcRuns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "picomq_gc_runs_total", Help: "Object garbage collection passes completed.",
	})
	m.gcDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "picomq_gc_deleted_objects_total", Help: "Objects deleted by garbage collection (dead ranges and orphaned uploads).",
	})
	m.gcErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "picomq_gc_errors_total", Help: "Object garbage collection passes that failed and will be retried.",
	})
	m.reserveTxns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "picomq_offset_reservation_txns_total", Help: "etcd transactions extending or releasing offset reservations of local-durability streams.",
	})
	m.reserveWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "picomq_offset_reservation_waits_total", Help: "Appends that waited for an offset reservation in etcd before being acknowledged.",
	})
	m.reserveWaitSeconds = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "picomq_offset_reservation_wait_seconds_total", Help: "Time appends spent waiting for offset reservations.",
	})
	if reg != nil {
		reg.MustRegister(m.flushes, m.flushErrors, m.flushBytes, m.flushSeconds, m.claims, m.claimSeconds, m.handoffs, m.compactions,
			m.gcRuns, m.gcDeleted, m.gcErrors, m.reserveTxns, m.reserveWaits, m.reserveWaitSeconds, m.walChunkReads)
		reg.MustRegister(m.replicationMetrics.collectors()...)
		reg.MustRegister(m.keys.collectors()...)
	}
	return m
}

// registerGauges exports state read at scrape time.
func (s *Service) registerGauges(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "picomq_unflushed_bytes",
		Help: "Bytes appended and not yet committed to object storage (the local-durability loss window).",
	}, func() float64 { return float64(s.pending.Load()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "picomq_flush_lag_seconds",
		Help: "Age of the oldest append not yet committed to object storage (0 when nothing waits).",
	}, func() float64 {
		if t := s.oldestUnflushed(); !t.IsZero() {
			return time.Since(t).Seconds()
		}
		return 0
	}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "picomq_object_bytes",
		Help: "Bytes in object storage of the ranges the streams this node owns read their history from.",
	}, func() float64 { return float64(s.Figures().ObjectBytes) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "picomq_streams", Help: "Streams this node owns and holds (idle ones included).",
	}, func() float64 {
		return float64(s.streamCount())
	}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "picomq_streams_idle", Help: "Of picomq_streams, those held as their registry record only (not used since start or create).",
	}, func() float64 {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return float64(len(s.idle))
	}))
}
