package node

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/PicoMQ/picomq/kafka"

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
	counter("picomq_wal_lazy_groups_total", "Of the commit groups, those written without an fdatasync of their own: a follower's confirmed copies with --replica-sync-interval, made durable by a later fdatasync.", func(s wal.Stats) float64 { return float64(s.LazyGroups) })
	counter("picomq_wal_overlapped_groups_total", "Of the commit groups, those written while an fdatasync of earlier ones was running (a --replica-ack write follower's copy that did not wait for the previous copy's fdatasync).", func(s wal.Stats) float64 { return float64(s.OverlappedGroups) })
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
	counter("picomq_cache_refetched_blocks_total", "Object blocks fetched again (at most two at the end of another GET) so that a scanned batch lies in one GET's memory instead of being copied out of two.", func(s cache.Stats) float64 { return float64(s.Refetched) })
	counter("picomq_cache_straddle_copy_bytes_total", "Bytes of object reads copied out of two GETs' memory into one buffer because the range read lay in both; reads of stored batches (Pico pages, Kafka fetch) take such a batch in two pieces instead and copy nothing.", func(s cache.Stats) float64 { return float64(s.StraddleCopyBytes) })
	counter("picomq_cache_huge_page_advised_bytes_total", "Bytes of GET buffers and of copies of batches split between two GETs (rounded out to 2 MiB) advised for transparent huge pages before their first write, so fresh memory faults once per 2 MiB instead of per 4 KiB (Linux).", func(s cache.Stats) float64 { return float64(s.HugePageAdvised) })
	counter("picomq_cache_recycled_bytes_total", "Bytes of GET buffers put back on the cache's free list: their run left the cache and every reader that borrowed it (Kafka fetch, Pico stored-batch page) had written its response.", func(s cache.Stats) float64 { return float64(s.RecycledBytes) })
	counter("picomq_cache_reused_bytes_total", "Bytes of GETs written into a buffer from the free list (recycled or pre-touched with --cache-pretouch) instead of fresh memory.", func(s cache.Stats) float64 { return float64(s.ReusedBytes) })
	gauge("picomq_cache_pooled_bytes", "Bytes of GET buffers on the cache's free list now (at most --read-ahead-bytes).", func(s cache.Stats) float64 { return float64(s.PooledBytes) })
	counter("picomq_cache_escaped_runs_total", "GET buffers lent without a reference (reads other than the Kafka fetch and Pico stored-batch pages): never recycled, left to the garbage collector.", func(s cache.Stats) float64 { return float64(s.EscapedRuns) })
	counter("picomq_cache_read_ahead_yields_total", "Times a read-ahead GET left its body unread while a reader waited for a GET of its own (demand first).", func(s cache.Stats) float64 { return float64(s.ReadAheadYields) })
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

// registerOpsMetrics exposes what the shipped alert rules
// (deploy/monitoring/alerts.yml) need beyond the service's own metrics:
// the membership lease, the data dir's filesystem, etcd's database against
// its quota and the TLS certificate's expiry. Everything is read at scrape
// time; the etcd status call is bounded by one second.
func (n *Node) registerOpsMetrics() {
	reg := n.metrics
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "picomq_membership_lease_lost",
		Help: "1 while the node has no live etcd membership lease and is fenced (refuses appends and commits), else 0.",
	}, func() float64 { return b2f(n.members.lost.Load()) }))
	registerCounter(reg, "picomq_membership_lease_losses_total", "Times the node lost its etcd membership lease (etcd unreachable or the lease expired).",
		func() float64 { return float64(n.members.losses.Load()) })
	reg.MustRegister(newFuncCollector(func(ch chan<- prometheus.Metric) {
		size, avail, err := fsSpace(n.cfg.DataDir)
		if err != nil {
			return
		}
		ch <- prometheus.MustNewConstMetric(dataDirSizeDesc, prometheus.GaugeValue, float64(size))
		ch <- prometheus.MustNewConstMetric(dataDirAvailDesc, prometheus.GaugeValue, float64(avail))
	}, dataDirSizeDesc, dataDirAvailDesc))
	reg.MustRegister(newFuncCollector(n.collectEtcdStatus, etcdDBDesc, etcdQuotaDesc))
	if n.certs != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "picomq_tls_cert_not_after_timestamp_seconds",
			Help: "Expiry (NotAfter, Unix seconds) of the TLS certificate the listeners serve now (--tls-cert; re-read on SIGHUP).",
		}, func() float64 { return float64(n.certs.notAfter().Unix()) }))
	}
}

var (
	dataDirSizeDesc = prometheus.NewDesc("picomq_data_dir_size_bytes",
		"Size of the filesystem holding --data-dir (the WAL and, when embedded, etcd).", nil, nil)
	dataDirAvailDesc = prometheus.NewDesc("picomq_data_dir_available_bytes",
		"Bytes of the filesystem holding --data-dir that the node may still use.", nil, nil)
	etcdDBDesc = prometheus.NewDesc("picomq_etcd_db_size_bytes",
		"Size of the etcd database file (the largest reported by the node's etcd endpoints).", nil, nil)
	etcdQuotaDesc = prometheus.NewDesc("picomq_etcd_db_quota_bytes",
		"etcd's backend quota (--quota-backend-bytes); past it etcd refuses writes (absent for etcd before 3.6).", nil, nil)
	groupLagDesc = prometheus.NewDesc("picomq_kafka_group_lag",
		"Messages a Kafka consumer group is behind on a topic (end offset minus committed offset, summed over the partitions this node can answer for), for the groups this node coordinates.",
		[]string{"group", "topic"}, nil)
	saslLoginsDesc = prometheus.NewDesc("picomq_kafka_sasl_logins_total",
		"Kafka SASL exchanges finished, by mechanism (PLAIN, OAUTHBEARER, SCRAM-SHA-256, SCRAM-SHA-512) and result (ok, failed).",
		[]string{"mechanism", "result"}, nil)
	produceForwardedDesc = prometheus.NewDesc("picomq_kafka_produce_forwarded_total",
		"Kafka produce partitions that arrived after their partition moved to another node and were forwarded to it (result ok), answered NOT_LEADER naming the new leader to a client of Produce v10+ (hinted, KIP-951), or answered NOT_LEADER because the forward failed (failed).",
		[]string{"result"}, nil)
)

// collectEtcdStatus asks each etcd endpoint for its status; an endpoint
// that does not answer within a second is left out.
func (n *Node) collectEtcdStatus(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var db, quota int64
	ok := false
	for _, ep := range n.etcd.Endpoints() {
		st, err := n.etcd.Status(ctx, ep)
		if err != nil {
			continue
		}
		ok = true
		db, quota = max(db, st.DbSize), max(quota, st.DbSizeQuota)
	}
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(etcdDBDesc, prometheus.GaugeValue, float64(db))
	if quota > 0 {
		ch <- prometheus.MustNewConstMetric(etcdQuotaDesc, prometheus.GaugeValue, float64(quota))
	}
}

// registerKafkaMetrics exposes consumer-group lag, computed at scrape time
// (bounded by two seconds) for the groups this node coordinates.
func (n *Node) registerKafkaMetrics(k *kafka.Server) {
	n.metrics.MustRegister(newFuncCollector(func(ch chan<- prometheus.Metric) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, l := range k.GroupLags(ctx) {
			ch <- prometheus.MustNewConstMetric(groupLagDesc, prometheus.GaugeValue, float64(l.Messages), l.Group, l.Topic)
		}
		ok, failed, hinted := k.ForwardedProduces()
		ch <- prometheus.MustNewConstMetric(produceForwardedDesc, prometheus.CounterValue, float64(ok), "ok")
		ch <- prometheus.MustNewConstMetric(produceForwardedDesc, prometheus.CounterValue, float64(failed), "failed")
		ch <- prometheus.MustNewConstMetric(produceForwardedDesc, prometheus.CounterValue, float64(hinted), "hinted")
	}, groupLagDesc, produceForwardedDesc))
	n.metrics.MustRegister(newFuncCollector(func(ch chan<- prometheus.Metric) {
		for k, v := range k.SASLLogins() {
			result := "failed"
			if k.OK {
				result = "ok"
			}
			ch <- prometheus.MustNewConstMetric(saslLoginsDesc, prometheus.CounterValue, float64(v), k.Mechanism, result)
		}
	}, saslLoginsDesc))
	n.metrics.MustRegister(newFuncCollector(func(ch chan<- prometheus.Metric) {
		st := k.TxnStats()
		for result, v := range map[string]int64{"ok": st.ChecksOK, "added": st.ChecksAdded, "refused": st.ChecksRefused, "unavailable": st.ChecksUnavailable} {
			ch <- prometheus.MustNewConstMetric(txnChecksDesc, prometheus.CounterValue, float64(v), result)
		}
		ch <- prometheus.MustNewConstMetric(txnWritesDesc, prometheus.CounterValue, float64(st.StateWrites))
		ch <- prometheus.MustNewConstMetric(txnReservedDesc, prometheus.CounterValue, float64(st.ReservedAdds))
	}, txnChecksDesc, txnWritesDesc, txnReservedDesc))
	n.metrics.MustRegister(newFuncCollector(func(ch chan<- prometheus.Metric) {
		st := k.ConsumerGroupStats()
		ch <- prometheus.MustNewConstMetric(cgHeartbeatsDesc, prometheus.CounterValue, float64(st.Heartbeats))
		ch <- prometheus.MustNewConstMetric(cgEpochsDesc, prometheus.CounterValue, float64(st.Epochs))
		ch <- prometheus.MustNewConstMetric(cgFencedDesc, prometheus.CounterValue, float64(st.Fenced))
		ch <- prometheus.MustNewConstMetric(cgMembersDesc, prometheus.GaugeValue, float64(st.Members))
	}, cgHeartbeatsDesc, cgEpochsDesc, cgFencedDesc, cgMembersDesc))
	n.metrics.MustRegister(newFuncCollector(func(ch chan<- prometheus.Metric) {
		st := k.ShareStats()
		ch <- prometheus.MustNewConstMetric(shareAcquiredDesc, prometheus.CounterValue, float64(st.Acquired))
		ch <- prometheus.MustNewConstMetric(shareReleasedDesc, prometheus.CounterValue, float64(st.Released))
		ch <- prometheus.MustNewConstMetric(shareUnpersistedDesc, prometheus.CounterValue, float64(st.Unpersisted))
		for typ, v := range st.Acks {
			ch <- prometheus.MustNewConstMetric(shareAcksDesc, prometheus.CounterValue, float64(v), typ)
		}
	}, shareAcquiredDesc, shareReleasedDesc, shareUnpersistedDesc, shareAcksDesc))
}

var (
	shareAcquiredDesc = prometheus.NewDesc("picomq_kafka_share_acquired_records_total",
		"Records this node handed to share group members in ShareFetch answers (redeliveries included).", nil, nil)
	shareAcksDesc = prometheus.NewDesc("picomq_kafka_share_acknowledged_records_total",
		"Share group records acknowledged on this node, by type: accept, release, reject, renew, gap (offsets without a record).",
		[]string{"type"}, nil)
	shareReleasedDesc = prometheus.NewDesc("picomq_kafka_share_released_records_total",
		"Acquired share group records this node returned for redelivery because their member's share session closed or the member left.", nil, nil)
	shareUnpersistedDesc = prometheus.NewDesc("picomq_kafka_share_start_offset_unstored_total",
		"Share-partition start offsets this node could not store in the group's offsets stream (the group is coordinated by another node, or the write failed); they are kept in memory and retried.", nil, nil)
)

var (
	cgHeartbeatsDesc = prometheus.NewDesc("picomq_kafka_consumer_group_heartbeats_total",
		"ConsumerGroupHeartbeat requests (KIP-848 consumer-protocol groups) answered by this node.", nil, nil)
	cgEpochsDesc = prometheus.NewDesc("picomq_kafka_consumer_group_epochs_total",
		"Group epochs started by consumer-protocol groups this node coordinates: each is a new target assignment (a member joined or left, a subscription or a subscribed topic changed).", nil, nil)
	cgFencedDesc = prometheus.NewDesc("picomq_kafka_consumer_group_fenced_total",
		"Consumer-protocol members this node's coordinator removed: session expired, or partitions not revoked within the rebalance timeout.", nil, nil)
	cgMembersDesc = prometheus.NewDesc("picomq_kafka_consumer_group_members",
		"Members of the consumer-protocol groups this node coordinates.", nil, nil)
	txnChecksDesc = prometheus.NewDesc("picomq_kafka_txn_checks_total",
		"Transactional produces verified with the transaction coordinator (KIP-890) by outcome: ok, added (a Produce v12+ added the partition to its transaction, KIP-890 part 2), refused (INVALID_TXN_STATE or a fenced epoch), unavailable (coordinator not reachable; retried by the client).",
		[]string{"result"}, nil)
	txnWritesDesc = prometheus.NewDesc("picomq_kafka_txn_state_writes_total",
		"Transaction state records this node's transaction coordinator wrote to etcd.", nil, nil)
	txnReservedDesc = prometheus.NewDesc("picomq_kafka_txn_reserved_adds_total",
		"AddPartitionsToTxn calls that needed no state write because their partitions were reserved by an earlier add of the transaction.", nil, nil)
)

// funcCollector is a collector whose samples a function produces at scrape
// time.
type funcCollector struct {
	descs   []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func newFuncCollector(collect func(chan<- prometheus.Metric), descs ...*prometheus.Desc) funcCollector {
	return funcCollector{descs: descs, collect: collect}
}

func (c funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c funcCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// fsSpace is the size of the filesystem holding dir and the bytes an
// unprivileged process may still write there.
func fsSpace(dir string) (size, avail uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
