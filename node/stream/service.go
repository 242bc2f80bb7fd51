// Package stream is the stream service: the one place that turns a
// protocol-neutral create/append/read/head/delete into calls on the node's
// write-ahead log and the etcd registry. The HTTP and Kafka frontends call it
// and never touch storage or metadata themselves.
//
// Durability and visibility: an append is written to the node-wide WAL as one
// entry holding a Kafka RecordBatch v2, and acknowledged only after the WAL's
// group-committed fdatasync covered it. Offsets are assigned under the
// stream's lock in WAL enqueue order, so the WAL order of one stream's entries
// is its offset order. Readers see a record only once it is durable (the
// stream's high watermark), exactly like a Kafka consumer sees only committed
// records.
//
// Each append is one WAL entry (layout in entry.go): the stream id, the
// producer/close facts that must be atomic with the batch, and the batch.
// On start the service replays the WAL: entries whose stream id is not in the
// registry belong to deleted streams and are skipped.
package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/PicoMQ/picomq/internal/defaults"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/wal"
)

// Log is what the service needs from the write-ahead log.
type Log interface {
	Replay(fn func(pos wal.Pos, data []byte) error) error
	// EnqueueForWait, not Enqueue: every entry is awaited (Submitted.Wait),
	// so a lone append on an idle log is committed by the goroutine that
	// waits for it, without waking the WAL's writer goroutine.
	EnqueueForWait(data []byte) (*wal.Pending, error)
	// EnqueueLazy is EnqueueForWait for a follower's copy answered on
	// its write (ReplicaAckWrite): the log may put its fdatasync off
	// (wal.Options.LazySync, set by the node's --replica-sync-interval).
	EnqueueLazy(data []byte) (*wal.Pending, error)
	ReadAt(pos wal.Pos, dst []byte) ([]byte, error)
	// ReadMany reads a flush's entries with one pread per run of
	// neighbouring records, each verified (wal.WAL.ReadMany).
	ReadMany(ps []wal.Pos, buf []byte, fn func(i int, payload []byte) error) ([]byte, error)
	// RemoveSegmentsBefore and ActiveSegment let flushes truncate what
	// object storage now holds.
	RemoveSegmentsBefore(seg uint64) error
	ActiveSegment() uint64
}

// Registry is what the service needs from the etcd registry.
type Registry interface {
	CreateStream(ctx context.Context, s metadata.Stream) (metadata.Stream, bool, error)
	GetStream(ctx context.Context, name string) (metadata.Stream, error)
	DeleteStream(ctx context.Context, name string, id uint64) error
	// EachStream calls fn with every record as of one revision, one page
	// in memory at a time; start is called first and again whenever the
	// scan starts over.
	EachStream(ctx context.Context, start func(), fn func(metadata.Stream) error) error
	// StreamState and PutStreamState keep a stream's state record
	// (state.go).
	StreamState(ctx context.Context, id uint64) ([]byte, error)
	PutStreamState(ctx context.Context, name string, id uint64, owner string, epoch int64, rev int64, value []byte) (int64, error)
}

// Config tunes the service. Zero values get defaults.
type Config struct {
	NodeID string
	// Protocol is this node's HTTP stream protocol; a stream served by a
	// node of another one is ErrProtocolMismatch rather than a redirect.
	Protocol string
	// Now is the clock used for LogAppendTime; tests inject a fake one.
	Now    func() time.Time
	Logger *slog.Logger
	// DefaultReadRecords / MaxReadRecords bound the records of one read.
	DefaultReadRecords int
	MaxReadRecords     int
	// Tier enables sealing to object storage; zero = WAL only.
	Tier TierConfig
	// DefaultDurability is "local" (ack after WAL fsync) or "object" (ack
	// after the flush holding the append is committed); streams may
	// override it at create.
	DefaultDurability string
	// Cluster enables ownership routing (claims, redirects, drain).
	Cluster Cluster
	// Registerer receives the service's metrics (nil = not exported).
	Registerer prometheus.Registerer
	// DefaultReadBytes / MaxReadBytes bound the value bytes of one read
	// (a read always returns at least one record if one is available).
	DefaultReadBytes int
	MaxReadBytes     int
	// Replication configures `replicated` streams (replicate.go).
	Replication ReplicationConfig
	// FreshLog: the WAL was created empty at this start (a new node, or
	// one whose disk was lost). Offsets its earlier incarnation reserved
	// in the same epoch are then a gap, not its own to continue: the
	// records it acknowledged there are gone with the disk, and handing
	// the offsets out again would name other records (reserve.go).
	FreshLog bool
	// Jobs sets the periods of the background passes Jobs starts (zero =
	// each pass's default).
	Jobs JobIntervals
}

// JobIntervals are the periods of the background passes that reclaim
// storage. Operators shorten them to see deletion take effect sooner, and
// tests and the soak to exercise it at all; each pass is idempotent, so
// only their cost grows.
type JobIntervals struct {
	GC         time.Duration // object garbage collection (default 1m)
	Compaction time.Duration // merging flush objects (default 10s)
	// KeyCompaction: how often compacted streams are checked for a key
	// compaction run (default 1s; a check that finds nothing due reads
	// memory only).
	KeyCompaction time.Duration
	Retention     time.Duration // retention by age and size (default 10s)
}

func (c *Config) setDefaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	defaults.Set(&c.DefaultReadRecords, 1000)
	defaults.Set(&c.MaxReadRecords, 10000)
	defaults.Set(&c.DefaultReadBytes, 1<<20)
	defaults.Set(&c.MaxReadBytes, 16<<20)
	if c.DefaultDurability == "" {
		c.DefaultDurability = DurabilityLocal
	}
	defaults.Set(&c.Tier.SealMaxAge, time.Second)
	defaults.Set(&c.Tier.SealMaxBytes, 8<<20)
	defaults.Set(&c.Replication.Replicas, 3)
	defaults.Set(&c.Replication.MinInSync, 2)
	defaults.Set(&c.Replication.LagTimeout, time.Second)
	defaults.Set(&c.Replication.RequestTimeout, 5*time.Second)
	if c.Replication.Ack == "" {
		c.Replication.Ack = ReplicaAckFsync
	}
}

// Service implements create/append/read/head/delete over the WAL and the
// registry. It is safe for concurrent use.
type Service struct {
	cfg Config
	log Log
	reg Registry

	mu     sync.RWMutex
	byName map[string]*streamState
	byID   map[uint64]*streamState
	// idle holds the streams kept as their record only (idle.go);
	// idleIDs names them by id while Open replays the WAL (nil after).
	idle    idleSet
	idleIDs map[uint64]string
	// interned holds one copy of strings many streams share (insertLocked).
	interned map[string]string
	// openForks counts the forks of each source as Open read them, so the
	// start-up repair (reconcile) needs no second scan of the registry;
	// refChanges counts fork references taken or released since, which
	// makes that count stale.
	openForks  map[uint64]int64
	refChanges atomic.Int64
	failed     error // sticky: set when the WAL failed; every later append fails
	fenced     error // set while the node has no live etcd lease
	// fencedNow mirrors fenced != nil for readers that hold a stream's
	// lock (s.mu is never taken under st.mu): readableEnd.
	fencedNow atomic.Bool
	closed    bool
	bufPool   sync.Pool
	life      lifeSet // streams that can expire (lifecycle.go)

	tier      Tier
	tcfg      TierConfig
	flushMu   sync.Mutex // one flush at a time
	flushBuf  []byte     // WAL read-back memory of flushes, reused (under flushMu)
	seqMu     sync.Mutex
	flushSeq  uint64     // last manifest sequence number of this node (flushes and compactions)
	compactMu sync.Mutex // one compaction at a time
	// keyStates: key compaction's memory of each stream (keycompact.go),
	// under compactMu.
	keyStates map[uint64]*keyCompactState
	flushNow  chan struct{}
	pending   atomic.Int64 // bytes appended since the last flush
	// pendingSince is when the oldest append not yet taken by a flush
	// arrived (unix ns; 0 = none): the seal age counts from it.
	pendingSince atomic.Int64
	flushUrgent  atomic.Bool // an object-durability append waits for a flush
	metrics      *metrics
	// tail holds each stream's latest appended batch for live readers
	// (tailcache.go).
	tail tailCache

	cluster Cluster // nil = single node without routing
	routing routing

	// resv keeps offset reservations (reserve.go); nil without a cluster.
	resv    Reservations
	resKick chan struct{}

	// bg owns the goroutines the service starts itself (supervise.go).
	bg *supervisor

	// lookups counts stream lookups (one per request is the rule; a test
	// holds the Pico frontend to it).
	lookups atomic.Int64

	// Replication (replicate.go, replica.go): this node's copies of other
	// owners' streams, and one shipper per follower node.
	replicas   replicaStore
	peersMu    sync.Mutex
	peers      map[string]*peer
	replCtx    context.Context
	replCancel context.CancelFunc
	deferred   []string // replicated streams Open left to adopt (repltakeover.go)
	setCacheMu sync.Mutex
	setCache   map[uint64]cachedSet // ReplicaNodes' replica sets of other owners' streams
}

// streamState is the in-memory state of one stream owned by this node.
type streamState struct {
	info metadata.Stream
	// stateRev is the registry revision of the stream's record as the
	// last PutState saw it (state.go), so the next costs one etcd write.
	stateRev int64

	mu     sync.Mutex
	next   int64 // next offset to assign
	hwm    int64 // one past the last durable offset; readers stop here
	lastTS int64 // last LogAppendTime, to keep timestamps monotonic
	// chunks index the stream's durable history in offset order: one per
	// WAL batch for the un-uploaded tail, one per object range below
	// uploaded. They are contiguous: chunks[i].next == chunks[i+1].base.
	chunks []chunk
	// uploaded: offsets below are committed in object storage.
	uploaded int64
	// upWake is closed when uploaded advances, for appends with object
	// durability; nil while nobody waits (uploadedChangedLocked).
	upWake chan struct{}
	// walLow is the WAL segment of the oldest entry of this stream not yet
	// covered by a committed flush (0 = none); the WAL is truncated below
	// the minimum over all streams.
	walLow uint64
	// lastPending is the most recent WAL write, so a flush can wait until
	// everything it snapshots is durable.
	lastPending *wal.Pending
	// unflushed is the WAL bytes of this stream not yet in a committed
	// flush: updated with st.next, so a flush knows exactly how much of
	// Service.pending its snapshot takes away.
	unflushed int64
	// wake is closed whenever hwm advances, so long-polls of exactly this
	// stream wake up without polling; nil until a waiter asks for it
	// (wakeChanLocked), so appends nobody waits for make no channel.
	wake chan struct{}
	// waiters is how many WaitFor calls are parked on wake (live reads).
	waiters int

	// Idempotent producers, writer sequence and closure: rebuilt from WAL
	// entries on replay (see entry.go).
	producers map[string]*producerState
	writerSeq string
	closedBy  *Producer // the producer batch that closed the stream, for dedup of its retries
	closed    bool      // no append may be enqueued any more
	// closedVisible: the close is durable, so readers may be told.
	closedVisible bool
	// moving: ownership is being handed to another node; appends get 503
	// until the handoff is done, then a redirect.
	moving bool
	// deleted: retired; waiters wake and see it gone. (The flags sit
	// together so an idle stream's struct stays in a smaller size class.)
	deleted bool
	life    lifecycle   // expiry, soft delete, fork references (lifecycle.go)
	res     reservation // offset reservation (reserve.go)
	repl    *replState  // `replicated` streams (replicate.go); nil until the first append
	// txn: Kafka transactions on this stream (txn.go); nil until the
	// first transactional batch.
	txn *txnState
}

// chunk locates offsets [base, next) of a stream: either one batch in the
// WAL (pos is its whole entry) or a range in a committed object.
type chunk struct {
	base, next int64
	pos        wal.Pos
	obj        *ObjectRef // nil = in the WAL at pos
	// gap: offsets nobody may read or write any more (handed out by an
	// owner lost with them, see reserve.go); reads move past it.
	gap bool
}

// Info describes a stream at one moment. It is the frontends' view of the
// registry record, so they never depend on the registry's types.
type Info struct {
	Name        string
	ID          uint64
	ContentType string
	CreatedAt   time.Time
	Owner       string
	// Epoch is the ownership epoch: 1 at create, +1 at every change of
	// owner (Kafka presents it as the partition's leader epoch).
	Epoch       int64
	StartOffset int64
	NextOffset  int64
	Closed      bool
	// TTL (sliding) and ExpiresAt (absolute): see lifecycle.go.
	TTL       time.Duration
	ExpiresAt time.Time
	// KafkaTopic, RetentionMs, RetentionBytes: see topics.go, retention.go.
	KafkaTopic     string
	RetentionMs    int64
	RetentionBytes int64
	// MaxBatchBytes: the Kafka max.message.bytes of the stream (0 = the
	// frontend's default); kept for the Kafka frontend, not enforced here.
	MaxBatchBytes int64
	// LogAppendTime: Kafka-produced batches get the owner's append time
	// (the topic's message.timestamp.type=LogAppendTime).
	LogAppendTime bool
	// Durability is the stream's ack level as created ("" = the node
	// default); Replicas and MinInSync its R and M when replicated (0 =
	// the node's defaults). ReplicaNodes says where the copies are.
	Durability          string
	Replicas, MinInSync int
	// Compaction: the stream is compacted by key (compaction_config.go);
	// nil: it is not.
	Compaction *Compaction
}

// CreateOptions is the configuration a client asks for at create.
type CreateOptions struct {
	ContentType string
	// Durability overrides the node default ("local" or "object"); ""
	// keeps the default and is not part of the identical-config check.
	Durability string
	// Lifecycle (lifecycle.go, fork.go): a sliding TTL or an absolute
	// expiry (at most one), a fork source, records to write at create,
	// and whether to create the stream closed. All but Initial are part
	// of the identical-config check (closure as the stream is now).
	TTL       time.Duration
	ExpiresAt time.Time
	Fork      *ForkOptions
	Initial   []record.Record
	Closed    bool
	// KafkaTopic: nil derives the alias from the name, "" means none, else
	// that alias (topics.go). RetentionMs/RetentionBytes: 0 = unlimited.
	// Given values are part of the identical-config check.
	KafkaTopic     *string
	RetentionMs    int64
	RetentionBytes int64
	// MaxBatchBytes: see Info.MaxBatchBytes (not part of the
	// identical-config check).
	MaxBatchBytes int64
	// LogAppendTime: see Info.LogAppendTime (not part of the
	// identical-config check).
	LogAppendTime bool
	// Replicas (R, owner included) and MinInSync (M) of a `replicated`
	// stream; 0 = the node's defaults (not part of the identical-config
	// check).
	Replicas, MinInSync int
	// Compaction makes the stream compacted by key (ParseCompaction
	// builds it); a given value is part of the identical-config check.
	Compaction *Compaction
}

// ReadOptions selects what a read returns.
type ReadOptions struct {
	Offset     int64
	MaxRecords int // 0 = default
	MaxBytes   int // 0 = default
	// FromStart reads from the stream's first readable offset instead of
	// Offset: a reader that named no offset needs no separate Head.
	FromStart bool
	// LocalOnly answers a stream owned by another node with its redirect,
	// even where this node could serve the history from object storage
	// (live reads and reads from the start follow the owner).
	LocalOnly bool
	// Batches asks for the page as stored batches (ReadResult.Batches)
	// rather than decoded records, for a frontend that writes them out as
	// they are. A page whose first batch cannot be handed on as stored
	// (compressed, or reaching past the readable end) comes as records
	// all the same, so the caller must look at which one it got.
	Batches bool
}

// ReadResult is one page of records.
type ReadResult struct {
	Records []record.Record
	// Batches (ReadOptions.Batches) are whole stored RecordBatch v2
	// batches, uncompressed, with their stream offsets as base offsets,
	// in order, each aliasing the memory it was read from (the cache's or
	// the WAL read's; never to be modified). They are pieces of one byte
	// string: a batch that straddles two of the cache's GETs comes as two
	// consecutive entries, not copied together (record.WalkPieces reads
	// them). The first may begin before
	// the read's offset (a reader skips those records); batches of aborted
	// transactions and markers are left out. BatchRecords counts their
	// records from the read's offset on.
	Batches      [][]byte
	BatchRecords int
	// From is the offset the page starts at (the read's offset, or the
	// start offset for FromStart): a reader of Batches skips the records
	// of the first batch below it.
	From        int64
	NextOffset  int64
	UpToDate    bool
	StartOffset int64
	// Closed is true when the stream is closed and this read reached its end.
	Closed bool
	// ServedRemotely: the stream is owned by another node and this read was
	// answered from object storage here (history needs no redirect).
	ServedRemotely bool
	Stream         Info

	// releases end the loans of cache memory Batches lie in (Release).
	releases []func()
}

// Release ends the loan of the block cache's memory that Batches lie in:
// a frontend calls it once the page is written out (its Write returned)
// and nothing of Batches, or of records decoded from them, is used any
// more; the cache may then reuse that memory. Not calling it is safe
// (the memory is then never reused); calling it twice is harmless.
func (r ReadResult) Release() { releaseAll(r.releases) }

// releaseAll calls every non-nil release of rs.
func releaseAll(rs []func()) {
	for _, release := range rs {
		if release != nil {
			release()
		}
	}
}

// Open loads every stream from the registry and replays the WAL into memory.
func Open(ctx context.Context, cfg Config, log Log, reg Registry) (*Service, error) {
	cfg.setDefaults()
	if a := cfg.Replication.Ack; a != ReplicaAckFsync && a != ReplicaAckWrite {
		return nil, fmt.Errorf("replica ack %q: want %s or %s", a, ReplicaAckFsync, ReplicaAckWrite)
	}
	s := &Service{
		bg:       newSupervisor(),
		cfg:      cfg,
		log:      log,
		reg:      reg,
		byName:   make(map[string]*streamState),
		byID:     make(map[uint64]*streamState),
		tier:     cfg.Tier.Tier,
		tcfg:     cfg.Tier,
		flushNow: make(chan struct{}, 1),
		metrics:  newMetrics(cfg.Registerer),
		cluster:  cfg.Cluster,
	}
	s.replCtx, s.replCancel = context.WithCancel(context.Background())
	for _, mode := range []string{ReplicaAckFsync, ReplicaAckWrite} {
		v := 0.0
		if mode == cfg.Replication.Ack {
			v = 1
		}
		s.metrics.replicaAck.WithLabelValues(mode).Set(v)
	}
	s.registerGauges(cfg.Registerer)
	if r, ok := cfg.Cluster.(Reservations); ok && cfg.Tier.Session != nil {
		s.resv, s.resKick = r, make(chan struct{}, 1)
	}
	var owned int
	err := reg.EachStream(ctx, func() {
		owned = 0
		s.byName, s.byID, s.idle = make(map[string]*streamState), make(map[uint64]*streamState), nil
		s.openForks, s.idleIDs = make(map[uint64]int64), make(map[uint64]string)
		s.life.expiring = nil
	}, func(m metadata.Stream) error {
		if m.Fork != nil {
			s.openForks[m.Fork.SourceID]++
		}
		// Only streams this node owns are served from local state; the
		// rest are routed (see routing.go). Plain ones stay idle until
		// their manifests, reservation or WAL entries say otherwise.
		switch {
		case m.Owner != cfg.NodeID && m.Owner != "":
			return nil
		case s.plain(m):
			s.putIdleLocked(m)
			s.idleIDs[m.ID] = m.Name
		default:
			s.insertLocked(m)
		}
		owned++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stream: load registry: %w", err)
	}
	// A source whose record does not count its forks yet (a crash between
	// a fork's create and the count, repaired by reconcile) is built.
	for id := range s.openForks {
		s.openState(id)
	}
	if s.tier != nil {
		if err := s.loadManifests(ctx); err != nil {
			return nil, err
		}
	}
	if s.resv != nil {
		resvs, err := s.resv.Reservations(ctx)
		if err != nil {
			return nil, fmt.Errorf("stream: load offset reservations: %w", err)
		}
		for id := range resvs {
			s.openState(id)
		}
		for id, st := range s.byID {
			st.startReservation(s.lostDisk(resvs[id]))
			if st.gapTailLocked() {
				s.requestFlush(true) // record the gap in object storage (snapshotFlush)
			}
		}
	}
	var replayed, skipped int
	written := map[uint64]bool{} // streams with entries of their own in the WAL
	err = log.Replay(func(pos wal.Pos, data []byte) error {
		if len(data) > 0 && data[0] == replicaEntryVersion {
			replayed++
			if err := s.replayReplica(pos, data); err != nil {
				return fmt.Errorf("replica entry at %+v: %w", pos, err)
			}
			return nil
		}
		e, err := decodeEntry(data)
		if err != nil {
			return fmt.Errorf("entry at %+v: %w", pos, err)
		}
		st := s.byID[e.streamID]
		if st == nil && s.idleIDs[e.streamID] != "" {
			// Reservations are started: an idle stream had none.
			st = s.localLocked(s.idleIDs[e.streamID])
			delete(s.idleIDs, e.streamID)
		}
		if st == nil {
			skipped++ // the stream was deleted after this entry was written
			return nil
		}
		applied, err := st.replay(pos, &e)
		if err != nil {
			return fmt.Errorf("entry at %+v of stream %q: %w", pos, st.info.Name, err)
		}
		if applied {
			st.unflushed += int64(len(data))
			written[e.streamID] = true
		}
		replayed++
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stream: replay WAL: %w", err)
	}
	s.deferReplicated(written)
	// Recovered entries not yet in object storage are pending from now:
	// they are flushed within one seal age even if no append follows.
	for _, st := range s.byID {
		s.pending.Add(st.unflushed)
	}
	if s.pending.Load() > 0 {
		s.pendingSince.Store(time.Now().UnixNano())
	}
	for _, st := range s.byID {
		if s.objectDurable(st) || s.replicated(st) {
			// The rest when its flush commits, or (replicated) when an
			// append's copies cover it.
			st.hwm = max(st.uploaded, logStart(st.info))
		}
		st.floorAtStartLocked()
	}
	if s.resv != nil {
		if err := s.reserveLoaded(ctx); err != nil {
			return nil, fmt.Errorf("stream: reserve the recovered offsets: %w", err)
		}
		s.bg.Go(s.runReserver)
	}
	s.idleIDs = nil
	cfg.Logger.Info("stream service recovered", "streams", owned, "idle_streams", len(s.idle), "batches", replayed, "skipped_deleted", skipped)
	return s, nil
}

// openState is s.byID[id] while Open loads: an idle stream is built (with
// no reservation yet) when its manifests or reservation turn up.
func (s *Service) openState(id uint64) *streamState {
	if st := s.byID[id]; st != nil {
		return st
	}
	name, ok := s.idleIDs[id]
	if !ok {
		return nil
	}
	delete(s.idleIDs, id)
	return s.buildLocked(name)
}

// replay applies one recovered entry to the stream's in-memory state; it
// reports false for an entry already in object storage.
func (st *streamState) replay(pos wal.Pos, e *entry) (bool, error) {
	first, next, ts, n := st.next, st.next, int64(0), 0
	if e.hasBatch() {
		h, err := record.ParseHeader(e.batch)
		if err != nil {
			return false, err
		}
		if h.BaseOffset < st.uploaded {
			// Already in object storage, and its facts are in the
			// manifest's state snapshot; the WAL was not truncated yet.
			return false, nil
		}
		if st.res.on && h.BaseOffset < st.res.base {
			// Written in an earlier ownership of this stream and never
			// uploaded: lost when another node took the stream over,
			// which left its offsets a gap (reserve.go).
			return false, nil
		}
		if h.BaseOffset != st.next {
			return false, fmt.Errorf("base offset %d, want %d", h.BaseOffset, st.next)
		}
		count := h.LastOffsetDelta + 1
		n = int(count)
		st.chunks = append(st.chunks, chunk{base: h.BaseOffset, next: h.BaseOffset + int64(count), pos: pos})
		next = h.BaseOffset + int64(count)
		ts = h.MaxTimestamp
		st.next, st.hwm = next, next
		st.lastTS = max(st.lastTS, h.MaxTimestamp)
		if h.Transactional() {
			st.noteBatchLocked(h, e.batch, h.BaseOffset, next, h.MaxTimestamp)
			if h.Control() {
				st.markerEpochLocked(kafkaProducerID(h.ProducerID), uint64(h.ProducerEpoch))
			}
		}
	}
	if st.walLow == 0 {
		st.walLow = pos.Segment
	}
	if e.flags&flagProducer != 0 {
		ps := st.producers[e.producer.ID]
		// A state-only entry may predate the snapshot it was flushed
		// into; never let it move a producer backwards.
		last := e.producer.Seq + e.producer.span(n) - 1
		if ps == nil || e.producer.Epoch > ps.epoch || (e.producer.Epoch == ps.epoch && last > ps.lastSeq) {
			st.applyProducer(e.producer, n, sentBatch{first: first, next: next, ts: ts})
		}
	}
	if e.flags&flagWriterSeq != 0 {
		st.writerSeq = e.writerSeq
	}
	if e.flags&flagClose != 0 {
		st.closed, st.closedVisible = true, true
		if e.flags&flagProducer != 0 {
			p := e.producer
			st.closedBy = &p
		}
	}
	return true, nil
}

// every calls fn every interval until ctx is done: the shape of the
// service's periodic passes (GC, compaction, retention, TTL reaping).
func every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// Job is one background loop of the service. Every job has the same
// shape: Run works until ctx is cancelled and then returns (nil, or an
// error when it cannot go on). The node starts each under one supervisor
// that cancels and waits for them all at shutdown.
type Job struct {
	Name string
	Run  func(ctx context.Context) error
}

// Jobs lists the service's background loops with the periods of
// Config.Jobs: the flusher (its last flush runs after cancellation),
// garbage collection and compaction of objects, the expiry reaper and
// retention. Call Reconcile first.
func (s *Service) Jobs() []Job {
	iv := s.cfg.Jobs
	return []Job{
		{"flusher", s.RunFlusher},
		{"object garbage collector", func(ctx context.Context) error { return s.RunGC(ctx, GCConfig{Interval: iv.GC}) }},
		{"compactor", func(ctx context.Context) error { return s.RunCompactor(ctx, CompactConfig{Interval: iv.Compaction}) }},
		{"key compactor", func(ctx context.Context) error { return s.RunKeyCompactor(ctx, iv.KeyCompaction) }},
		{"expiry reaper", func(ctx context.Context) error { return s.RunReaper(ctx, LifecycleOptions{}) }},
		{"retention", func(ctx context.Context) error { return s.RunRetention(ctx, RetentionOptions{Interval: iv.Retention}) }},
		{"replication", s.RunReplication},
	}
}

// loaded returns the streams this node holds in memory now, so callers
// can work on each without holding s.mu.
func (s *Service) loaded() []*streamState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.loadedLocked()
}

func (s *Service) loadedLocked() []*streamState {
	streams := make([]*streamState, 0, len(s.byID))
	for _, st := range s.byID {
		streams = append(streams, st)
	}
	return streams
}

func (s *Service) insertLocked(m metadata.Stream) *streamState {
	m.ContentType = s.internLocked(m.ContentType)
	m.Owner = s.internLocked(m.Owner)
	m.Durability = s.internLocked(m.Durability)
	st := &streamState{info: m}
	s.initLifecycle(st)
	s.byName[m.Name] = st
	s.byID[m.ID] = st
	return st
}

// maxInterned bounds the table of shared strings: content types are
// chosen by clients, so their variety is not.
const maxInterned = 4096

// internLocked returns the service's one copy of v: nearly every stream
// repeats a few content types and owner ids, and a million idle streams
// should not hold a million copies of "application/octet-stream".
func (s *Service) internLocked(v string) string {
	if c, ok := s.interned[v]; ok {
		return c
	}
	if len(s.interned) < maxInterned {
		if s.interned == nil {
			s.interned = make(map[string]string)
		}
		s.interned[v] = v
	}
	return v
}

// Ready reports whether the service accepts appends.
func (s *Service) Ready() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%w: shutting down", ErrUnavailable)
	}
	if s.failed != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, s.failed)
	}
	if s.fenced != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, s.fenced)
	}
	if err := s.leaseHeld(); err != nil {
		return err
	}
	if s.tier != nil && s.tcfg.MaxWALBytes > 0 && s.pending.Load() > s.tcfg.MaxWALBytes {
		return fmt.Errorf("%w: %d bytes wait for upload to object storage (limit %d); retry later", ErrUnavailable, s.pending.Load(), s.tcfg.MaxWALBytes)
	}
	return nil
}

// Close stops accepting appends and stops the goroutines the service
// started itself, waiting for them. Appends already enqueued still
// complete; the caller closes the WAL afterwards, which syncs them.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.replCancel()
	s.bg.stop()
}

// SameContentType reports whether two content types name the same media
// type, ignoring case and parameters such as charset.
func SameContentType(a, b string) bool {
	return wire.MediaType(a) == wire.MediaType(b)
}

// Create creates the stream, or returns the existing one if its configuration
// is identical (created=false). A different existing configuration is
// ErrConflict.
func (s *Service) Create(ctx context.Context, name string, opts CreateOptions) (Info, bool, error) {
	wait := 5 * time.Millisecond
	for deadline := time.Now().Add(5 * time.Second); ; {
		info, created, err := s.create(ctx, name, opts)
		if !errors.Is(err, errBeingDeleted) || time.Now().After(deadline) {
			return info, created, err
		}
		select {
		case <-ctx.Done():
			return Info{}, false, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

func (s *Service) create(ctx context.Context, name string, opts CreateOptions) (Info, bool, error) {
	if err := validateFor(ctx, name); err != nil {
		return Info{}, false, err
	}
	plan, err := s.prepareCreate(ctx, name, &opts)
	if err != nil {
		return Info{}, false, err
	}
	ct := strings.TrimSpace(opts.ContentType)
	if ct == "" {
		ct = "application/octet-stream"
	}
	if _, _, err := mime.ParseMediaType(ct); err != nil {
		return Info{}, false, fmt.Errorf("%w: content type %q: %v", ErrInvalidArgument, ct, err)
	}
	switch opts.Durability {
	case "", DurabilityLocal, DurabilityObject:
	case DurabilityReplicated:
		if !s.replicatedRecord(metadata.Stream{Durability: DurabilityReplicated}) {
			return Info{}, false, fmt.Errorf("%w: durability replicated needs a cluster with object storage", ErrInvalidArgument)
		}
	default:
		return Info{}, false, fmt.Errorf("%w: durability %q: want local, replicated or object", ErrInvalidArgument, opts.Durability)
	}
	if opts.Replicas < 0 || opts.MinInSync < 0 || (opts.Replicas > 0 && opts.MinInSync > opts.Replicas) || opts.Replicas > 16 {
		return Info{}, false, fmt.Errorf("%w: %d replicas with a minimum of %d in sync", ErrInvalidArgument, opts.Replicas, opts.MinInSync)
	}
	if opts.Durability == DurabilityReplicated || (opts.Durability == "" && s.cfg.DefaultDurability == DurabilityReplicated) {
		// The record keeps the effective R and M, so every node (and
		// Kafka's DescribeConfigs) reads the same values.
		r, m := s.replFactors(metadata.Stream{Replicas: int64(opts.Replicas), MinInSync: int64(opts.MinInSync)})
		opts.Replicas, opts.MinInSync = r, min(m, r)
	} else {
		opts.Replicas, opts.MinInSync = 0, 0
	}
	if err := s.Ready(); err != nil {
		return Info{}, false, err
	}
	if err := plan.begin(ctx, s); err != nil {
		return Info{}, false, err
	}
	stored, created, err := s.createRecord(ctx, plan.apply(metadata.Stream{
		Name:        name,
		ContentType: ct,
		CreatedAt:   s.cfg.Now().UTC(),
		Owner:       s.cfg.NodeID,
		Epoch:       1,
		Durability:  opts.Durability,
		Replicas:    int64(opts.Replicas),
		MinInSync:   int64(opts.MinInSync),
	}), opts)
	if err != nil {
		plan.undo(ctx, s)
		return Info{}, false, err
	}
	if !created {
		plan.undo(ctx, s)
		if err := s.sameConfig(stored, ct, opts, plan); err != nil {
			return Info{}, false, err
		}
		if err := sameTopicConfig(stored, opts); err != nil {
			return Info{}, false, err
		}
	}
	if !created && !SameContentType(stored.ContentType, ct) {
		return Info{}, false, fmt.Errorf("%w: %q has content type %q, not %q", ErrConflict, name, stored.ContentType, ct)
	}
	if !created && opts.Durability != "" && opts.Durability != stored.Durability {
		return Info{}, false, fmt.Errorf("%w: %q has durability %q, not %q", ErrConflict, name, stored.Durability, opts.Durability)
	}
	if !created && stored.Owner != s.cfg.NodeID {
		// Identical config, owned elsewhere: answered here, no local state.
		return infoFromMeta(stored), false, nil
	}
	s.mu.Lock()
	st := s.byName[name]
	if st == nil {
		if m, ok := s.idleLocked(name); ok && m.ID == stored.ID {
			s.mu.Unlock()
			return idleInfo(m), false, nil // identical, and still idle
		}
		if created && s.plain(stored) && len(opts.Initial) == 0 && !opts.Closed {
			s.putIdleLocked(stored)
			s.mu.Unlock()
			return idleInfo(stored), true, nil
		}
	}
	if st == nil || st.info.ID != stored.ID {
		delete(s.idle, name) // an older incarnation, if any
		st = s.insertLocked(stored)
		if s.resv != nil && created {
			st.startReservation(metadata.Reservation{}) // a new stream: no offsets handed out yet
		}
	}
	s.mu.Unlock()
	if created {
		if err := s.finishCreate(ctx, name, opts); err != nil {
			return Info{}, false, err
		}
	}
	return st.snapshot(), created, nil
}

func (st *streamState) snapshot() Info {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.infoLocked()
}

func (st *streamState) infoLocked() Info {
	return Info{
		Name:        st.info.Name,
		ID:          st.info.ID,
		ContentType: st.info.ContentType,
		CreatedAt:   st.info.CreatedAt,
		Owner:       st.info.Owner,
		Epoch:       st.info.Epoch,
		NextOffset:  st.hwm,
		Closed:      st.closedVisible,
		TTL:         st.life.ttl,
		ExpiresAt:   st.life.expiry(),

		StartOffset:    st.info.StartOffset,
		KafkaTopic:     st.info.KafkaTopic,
		RetentionMs:    st.info.RetentionMs,
		RetentionBytes: st.info.RetentionBytes,
		MaxBatchBytes:  st.info.MaxBatchBytes,
		LogAppendTime:  st.info.LogAppendTime,
		Durability:     st.info.Durability,
		Replicas:       int(st.info.Replicas),
		MinInSync:      int(st.info.MinInSync),
		Compaction:     compactionFromMeta(st.info.Compaction),
	}
}

// lookup is the routing step: the stream's local state if this node owns
// it (claiming or adopting it first if the registry says so), else a
// *RedirectError naming the owner, ErrNotFound, or ErrUnavailable when the
// registry cannot be asked.
func (s *Service) lookup(ctx context.Context, name string) (*streamState, error) {
	s.lookups.Add(1)
	if err := checkAccess(ctx, name); err != nil {
		return nil, err
	}
	st := s.local(name)
	if st == nil {
		if err := validateFor(ctx, name); err != nil {
			return nil, err
		}
		var err error
		if st, err = s.route(ctx, name); err != nil {
			return nil, err
		}
	}
	if err := s.gate(st); err != nil {
		return nil, err
	}
	return st, nil
}

// Lookups is how many times the service has looked a stream up by name
// (ownership, gate, routing): the per-request cost a frontend pays for
// every service call it makes. Tests hold frontends to one per request.
func (s *Service) Lookups() int64 { return s.lookups.Load() }

// Head returns the stream's metadata and offsets.
func (s *Service) Head(ctx context.Context, name string) (Info, error) {
	st, err := s.lookup(ctx, name)
	if err != nil {
		return Info{}, err
	}
	return st.snapshot(), nil
}

// Delete removes the stream from the registry and from this node. Its WAL
// entries become garbage that replay skips and truncation reclaims.
func (s *Service) Delete(ctx context.Context, name string) error {
	st, err := s.lookup(ctx, name)
	if err != nil {
		return err
	}
	if soft, err := s.beginDelete(ctx, st); err != nil || soft {
		return err // soft: forks still read it, so it is only soft-deleted
	}
	if err := s.reg.DeleteStream(ctx, name, st.info.ID); err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		if errors.Is(err, metadata.ErrConflict) {
			return fmt.Errorf("%w: %s was replaced by a newer stream of the same name", ErrConflict, name)
		}
		return fmt.Errorf("%w: registry delete %q: %v", ErrUnavailable, name, err)
	}
	s.retire(st)
	s.afterDelete(ctx, st)
	return nil
}

// Append writes recs as one batch with consecutive offsets and returns once
// the batch is durable in the WAL.
func (s *Service) Append(ctx context.Context, name string, recs []record.Record) (AppendResult, error) {
	return s.AppendBatch(ctx, name, AppendRequest{Records: recs})
}

// AppendRequest is one append: a batch of records, optionally from an
// idempotent producer, optionally closing the stream.
type AppendRequest struct {
	Records []record.Record // may be empty only when Close is set
	// Batch is instead one client RecordBatch v2 (a Kafka produce) that the
	// caller validated (record.Validate): it is stored verbatim, compression
	// and timestamps included, with only its base offset assigned (outside
	// the CRC). Records must then be empty.
	Batch    []byte
	Producer *Producer // nil = not idempotent
	// Close closes the stream atomically with this append: durable and
	// monotonic; later appends fail with ErrStreamClosed.
	Close bool
	// Control: Batch is a Kafka transaction marker (a control batch) that
	// the transaction coordinator writes; Producer names its producer and
	// epoch. Only such a request may carry a control batch. A marker is
	// fenced by a newer epoch of its producer like data, skips the
	// sequence rules, and a newer epoch fences the producer's older one.
	Control bool
	// VerifyTxn (a Kafka produce, KIP-890): a transactional batch that
	// would open its producer's transaction on this stream is not
	// written; Submitted.Unverified says so, and the caller asks the
	// transaction coordinator whether the partition belongs to the
	// producer's open transaction before submitting it again without
	// VerifyTxn. Batches of a transaction already open here pass at once.
	VerifyTxn bool
	// WriterSeq is the Durable Streams Stream-Seq: if set it must be
	// bytewise greater than the last one accepted on this stream.
	WriterSeq string
	// ContentType is the media type the records were sent as. It must be
	// the stream's (SameContentType), else ErrContentTypeMismatch. Empty:
	// the protocol's envelope names no stream content type (Pico batches,
	// Kafka), so there is nothing to compare.
	ContentType string
}

// AppendResult is the acknowledgement of a durable append.
type AppendResult struct {
	FirstOffset int64
	NextOffset  int64
	Timestamp   int64 // LogAppendTime, ms since epoch
	// LogAppendTime: the Kafka batch was stamped with Timestamp (the
	// stream's LogAppendTime setting); its producer gets it back.
	LogAppendTime bool
	// Duplicate: a producer retry; nothing was written. Offsets are the
	// original batch's when still remembered, else -1.
	Duplicate bool
	// Closed: the stream is closed after this call.
	Closed bool
	// ProducerEpoch / ProducerSeq: the producer's current epoch and highest
	// accepted sequence (what a Durable Streams duplicate ack reports).
	ProducerEpoch uint64
	ProducerSeq   uint64
}

// AppendBatch appends req and returns once it is durable: SubmitBatch
// followed by Submitted.Wait.
func (s *Service) AppendBatch(ctx context.Context, name string, req AppendRequest) (AppendResult, error) {
	sub, err := s.SubmitBatch(ctx, name, req)
	if err != nil {
		return AppendResult{}, err
	}
	return sub.Wait(ctx)
}

// Submitted is an append that SubmitBatch placed in the write-ahead log and
// in the stream's state (offsets, producer sequence) but that is not
// acknowledged yet: Wait returns its result once it is durable at the
// stream's durability level. Separating the two lets one caller submit many
// appends (a Kafka produce to many partitions, several batches of one
// partition) and wait once for the commit group that holds them all.
type Submitted struct {
	s       *Service
	st      *streamState
	name    string
	res     AppendResult
	pending *wal.Pending // nil: res is final (a duplicate already durable)
	// wrote: this call wrote pending (else pending is the original of a
	// duplicate, or nil, and st is set when the duplicate must wait for
	// its original); then end, closes and bytes describe what it wrote
	// (a duplicate: end is its original's).
	wrote         bool
	unverified    bool // VerifyTxn: nothing written, the transaction is not open here
	closes        bool
	objectDurable bool
	replicated    bool // wait for the followers' copies (replicate.go)
	mustReserve   bool // `local`: wait for the offset reservation (reserve.go)
	end           int64
	bytes         int
}

// SubmitBatch checks req and enqueues it in the write-ahead log, in the
// order of calls; it does not wait for durability. Checks run in the order
// closed → producer → writer sequence, so a retried duplicate is
// acknowledged even if it also carries a stale writer sequence. A later
// SubmitBatch of the same producer sees this one's sequence at once, so a
// caller may submit consecutive batches of one producer back to back. The
// result must be passed to Wait before it is acknowledged to anyone.
func (s *Service) SubmitBatch(ctx context.Context, name string, req AppendRequest) (Submitted, error) {
	sub, err := s.submit(ctx, name, req)
	sub.s, sub.name = s, name
	return sub, err
}

func (s *Service) submit(ctx context.Context, name string, req AppendRequest) (Submitted, error) {
	count := len(req.Records)
	var bh record.BatchHeader
	if req.Batch != nil {
		h, err := record.ParseHeader(req.Batch)
		if err != nil || len(req.Records) > 0 || h.Size() != len(req.Batch) || !h.Dense() {
			return Submitted{}, fmt.Errorf("%w: a raw batch must be one whole, valid batch without records beside it", ErrInvalidArgument)
		}
		if h.Control() != req.Control || (req.Control && (req.Producer == nil || req.Close || !h.Transactional())) {
			return Submitted{}, fmt.Errorf("%w: a control batch only as a transaction marker (AppendRequest.Control)", ErrInvalidArgument)
		}
		count, bh = int(h.LastOffsetDelta)+1, h
	} else if req.Control {
		return Submitted{}, fmt.Errorf("%w: a transaction marker needs its control batch", ErrInvalidArgument)
	}
	if count == 0 && !req.Close {
		return Submitted{}, fmt.Errorf("%w: an append needs at least one record", ErrInvalidArgument)
	}
	if req.Producer != nil && req.Producer.ID == "" {
		return Submitted{}, fmt.Errorf("%w: empty producer id", ErrInvalidArgument)
	}
	if len(req.WriterSeq) > maxEntryString || (req.Producer != nil && len(req.Producer.ID) > maxEntryString) {
		return Submitted{}, fmt.Errorf("%w: producer id or writer sequence longer than %d bytes", ErrInvalidArgument, maxEntryString)
	}
	st, err := s.lookup(ctx, name)
	if err != nil {
		return Submitted{}, err
	}
	st.life.touch(s.cfg.Now()) // a write (close-only too) resets a sliding TTL
	if err := s.Ready(); err != nil {
		return Submitted{}, err
	}
	if err := st.checkRecords(req); err != nil {
		return Submitted{}, err
	}
	replicated := s.replicated(st)
	if replicated {
		if err := s.ensureRepl(ctx, st); err != nil {
			return Submitted{}, err
		}
	}

	bufp, _ := s.bufPool.Get().(*[]byte)
	if bufp == nil {
		b := make([]byte, 0, 4096)
		bufp = &b
	}
	defer s.bufPool.Put(bufp)

	st.mu.Lock()
	if st.deleted {
		st.mu.Unlock()
		return Submitted{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if st.moving {
		st.mu.Unlock()
		return Submitted{}, &MovingError{Name: name}
	}
	var ps *producerState
	if req.Producer != nil {
		ps = st.producers[req.Producer.ID]
	}
	if st.closed {
		if req.Producer != nil && st.closedBy != nil && *st.closedBy == *req.Producer {
			res := AppendResult{Duplicate: true, Closed: true, FirstOffset: -1, NextOffset: st.next,
				ProducerEpoch: ps.epoch, ProducerSeq: ps.lastSeq}
			if b, ok := ps.find(req.Producer.Seq); ok {
				res.FirstOffset, res.NextOffset, res.Timestamp = b.first, b.next, b.ts
			}
			st.mu.Unlock()
			return Submitted{res: res}, nil
		}
		if req.Producer != nil && ps != nil && req.Producer.Epoch < ps.epoch {
			st.mu.Unlock()
			return Submitted{}, &ProducerError{Err: ErrProducerFenced, CurrentEpoch: ps.epoch}
		}
		if len(req.Records) == 0 && req.Producer == nil {
			// Closing a closed stream is idempotent.
			res := AppendResult{FirstOffset: st.next, NextOffset: st.next, Closed: true}
			st.mu.Unlock()
			return Submitted{res: res}, nil
		}
		next := st.next
		st.mu.Unlock()
		return Submitted{}, &ClosedError{Name: name, NextOffset: next}
	}
	if req.Control {
		if ps != nil && req.Producer.Epoch < ps.epoch {
			st.mu.Unlock()
			return Submitted{}, &ProducerError{Err: ErrProducerFenced, CurrentEpoch: ps.epoch}
		}
	} else if req.Producer != nil {
		verdict, err := checkProducer(ps, req.Producer)
		if err != nil {
			st.mu.Unlock()
			return Submitted{}, err
		}
		if verdict == produceDuplicate {
			res := AppendResult{Duplicate: true, FirstOffset: -1, NextOffset: -1, Closed: st.closed,
				ProducerEpoch: ps.epoch, ProducerSeq: ps.lastSeq}
			b, ok := ps.find(req.Producer.Seq)
			st.mu.Unlock()
			sub := Submitted{res: res}
			if ok {
				// The original may still be in flight: Wait acknowledges
				// the retry only once the original is durable (WAL, then
				// its upload or its offset reservation).
				sub.st, sub.pending, sub.end, sub.objectDurable, sub.replicated = st, b.pending, b.next, s.objectDurable(st), replicated
				sub.res.FirstOffset, sub.res.NextOffset, sub.res.Timestamp = b.first, b.next, b.ts
			}
			return sub, nil
		}
	}
	if req.VerifyTxn && bh.Transactional() && !bh.Control() && !st.txnOpenLocked(bh.ProducerID) {
		st.mu.Unlock()
		return Submitted{unverified: true}, nil
	}
	if req.WriterSeq != "" && req.WriterSeq <= st.writerSeq {
		last := st.writerSeq
		st.mu.Unlock()
		return Submitted{}, fmt.Errorf("%w: %q is not greater than %q", ErrWriterSeq, req.WriterSeq, last)
	}

	if replicated {
		if err := s.checkReplicasLocked(st); err != nil {
			st.mu.Unlock()
			return Submitted{}, err
		}
	}
	ts := max(s.cfg.Now().UnixMilli(), st.lastTS)
	base := st.next
	noBatch := count == 0
	entryProducer := req.Producer
	if req.Control {
		entryProducer = nil // a marker's producer and epoch are in its batch header (replay)
	}
	buf := appendEntryHeader((*bufp)[:0], st.info.ID, entryProducer, req.WriterSeq, req.Close, noBatch)
	n := len(buf)
	if req.Batch != nil {
		buf = append(buf, req.Batch...)
		record.SetBaseOffset(buf[n:], base)
	} else if !noBatch {
		buf = record.AppendBatch(buf, record.BatchOptions{
			BaseOffset: base, Timestamp: ts, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		}, req.Records)
	}
	if req.Batch != nil && !req.Control && st.info.LogAppendTime {
		// message.timestamp.type=LogAppendTime: the header's timestamp
		// type and max timestamp, rewritten as a Kafka broker does.
		record.SetLogAppendTime(buf[n:], ts)
	}
	if len(buf) > n {
		// The two header fields a Kafka broker writes into every batch,
		// both outside the CRC: the base offset (above) and the
		// partition leader epoch, the stream's fencing epoch, from which
		// OffsetForLeaderEpoch answers where each epoch ended.
		record.SetPartitionLeaderEpoch(buf[n:], int32(st.info.Epoch))
	}
	*bufp = buf
	pending, err := s.log.EnqueueForWait(buf)
	if err != nil {
		st.mu.Unlock()
		s.fail(err)
		return Submitted{}, fmt.Errorf("%w: write-ahead log: %v", ErrUnavailable, err)
	}
	end := base + int64(count)
	var followers []string
	if replicated {
		// The same entry bytes go to the followers, in parallel with
		// the local fsync (buf goes back to its pool: copy it once).
		followers = s.shipLocked(st, base, end, append([]byte(nil), buf...))
	}
	if !noBatch {
		st.chunks = append(st.chunks, chunk{base: base, next: end, pos: pending.Pos()})
		st.lastTS = ts
		s.tail.put(st.info.ID, pending.Pos(), buf[n:])
	}
	if st.walLow == 0 {
		st.walLow = pending.Pos().Segment
	}
	st.unflushed += int64(len(buf))
	st.lastPending = pending
	objectDurable := s.objectDurable(st)
	st.next = end
	st.checkInvariantsLocked()
	var mustReserve, kick bool
	if !objectDurable {
		mustReserve, kick = s.reserveNeed(st, end)
	}
	switch {
	case req.Control:
		st.markerEpochLocked(req.Producer.ID, req.Producer.Epoch)
		ps = st.producers[req.Producer.ID]
	case req.Producer != nil:
		st.applyProducer(*req.Producer, count, sentBatch{first: base, next: end, ts: ts, pending: pending})
		ps = st.producers[req.Producer.ID]
	}
	if bh.Transactional() {
		st.noteBatchLocked(bh, req.Batch, base, end, ts)
	}
	if req.WriterSeq != "" {
		st.writerSeq = req.WriterSeq
	}
	if req.Close {
		st.closed = true
		if req.Producer != nil {
			p := *req.Producer
			st.closedBy = &p
		}
	}
	res := AppendResult{FirstOffset: base, NextOffset: end, Timestamp: ts, Closed: st.closed,
		LogAppendTime: req.Batch != nil && !req.Control && st.info.LogAppendTime}
	if ps != nil {
		res.ProducerEpoch, res.ProducerSeq = ps.epoch, ps.lastSeq
	}
	st.mu.Unlock()
	if kick {
		s.kickReserver()
	}
	if followers != nil {
		s.sendNow(followers)
	}
	return Submitted{st: st, res: res, pending: pending, wrote: true, closes: req.Close,
		objectDurable: objectDurable, replicated: replicated, mustReserve: mustReserve, end: end, bytes: len(buf)}, nil
}

// Unverified reports that nothing was written because the request asked
// to verify the transaction its batch would open (AppendRequest.VerifyTxn);
// such a result must not be awaited.
func (sub Submitted) Unverified() bool { return sub.unverified }

// Wait returns the result of the submitted append once it is durable at
// the stream's durability level (after the WAL fdatasync, and for
// `object` also after the upload is committed). When ctx ends first the
// append is not acknowledged, but it is still written and published to
// readers when it is.
func (a *Submitted) Wait(ctx context.Context) (AppendResult, error) {
	s, st, name := a.s, a.st, a.name
	if !a.wrote {
		if st == nil {
			return a.res, nil // final: nothing to wait for
		}
		// A duplicate: acknowledged only once its original is durable
		// at the stream's level (and its offsets reserved).
		if a.pending != nil {
			if err := a.pending.Wait(ctx); err != nil {
				return AppendResult{}, s.waitError(name, err, ctx)
			}
		}
		switch {
		case a.objectDurable && !ackBeforeCommit:
			if err := s.waitUploaded(ctx, st, a.end); err != nil {
				return AppendResult{}, fmt.Errorf("append to %s: %w", name, err)
			}
		case s.resv != nil:
			if err := s.waitReserved(ctx, st, a.end); err != nil {
				return AppendResult{}, fmt.Errorf("append to %s: %w", name, err)
			}
		}
		if a.replicated && !a.objectDurable {
			if err := s.waitReplicated(ctx, st, a.end); err != nil {
				return AppendResult{}, fmt.Errorf("append to %s: %w", name, err)
			}
		}
		return a.res, nil
	}
	pending, end, closes := a.pending, a.end, a.closes
	if err := pending.Wait(ctx); err != nil {
		if ctx.Err() != nil && !a.objectDurable {
			// The write still happens; publish it when it does so readers
			// are not stuck behind a batch whose appender gave up.
			mustReserve, replicated := a.mustReserve, a.replicated
			s.bg.Go(func(ctx context.Context) { s.publishLater(ctx, st, pending, end, closes, mustReserve, replicated) })
		}
		return AppendResult{}, s.waitError(name, err, ctx)
	}
	if a.mustReserve {
		// Nobody may read or be told of an offset before it is reserved.
		if err := s.waitReserved(ctx, st, end); err != nil {
			if ctx.Err() != nil {
				replicated := a.replicated
				s.bg.Go(func(ctx context.Context) { s.publishLater(ctx, st, pending, end, closes, true, replicated) })
			}
			return AppendResult{}, fmt.Errorf("append to %s: written but not acknowledged: %w", name, err)
		}
	}
	if a.replicated {
		// hwm moves past the append only once M copies hold it: nothing
		// a reader sees is lost with fewer than M machines.
		if err := s.waitReplicated(ctx, st, end); err != nil {
			return AppendResult{}, fmt.Errorf("append to %s: written here but not acknowledged: %w", name, err)
		}
	}
	if !a.objectDurable {
		// `object` records become readable when their flush commits
		// (Flush), not before: what readers see is never lost with the
		// owner, and its offsets need no reservation.
		yieldToReaders(st.advance(end, closes))
	}
	if s.tier != nil {
		s.noteUnflushed(a.bytes)
	}
	// A pause between the readiness check in SubmitBatch and here (a stop
	// signal, a long GC, a stalled disk while etcd is unreachable) may have
	// outlived the lease, and another node may own the stream by now:
	// acknowledge only while the lease is certainly still held. The record
	// is written; like any unacknowledged append it may or may not survive.
	if err := s.leaseHeld(); err != nil {
		return AppendResult{}, fmt.Errorf("append to %s: written but not acknowledged: %w", name, err)
	}
	if a.objectDurable && !ackBeforeCommit {
		if err := s.waitUploaded(ctx, st, end); err != nil {
			return AppendResult{}, fmt.Errorf("append to %s: durable in the WAL but not yet in object storage: %w", name, err)
		}
	}
	if a.objectDurable {
		st.advance(end, closes) // Flush did, but for a close
	}
	return a.res, nil
}

// WaitLeader is Wait for Kafka's acks=1 ("the leader has written it"): on
// a replicated stream it returns once the owner's own WAL fsync covers the
// append (and its offsets are reserved), without waiting for the
// followers. The append still becomes readable only once enough copies
// hold it (a background wait moves the high watermark, as Wait would), so
// what readers see is never lost with fewer than M machines; what acks=1
// acknowledged may be, like Kafka's. On any other stream it is Wait.
func (a *Submitted) WaitLeader(ctx context.Context) (AppendResult, error) {
	if !a.wrote || !a.replicated || a.objectDurable {
		return a.Wait(ctx)
	}
	s, st, name := a.s, a.st, a.name
	pending, end, closes := a.pending, a.end, a.closes
	if err := pending.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			mustReserve := a.mustReserve
			s.bg.Go(func(ctx context.Context) { s.publishLater(ctx, st, pending, end, closes, mustReserve, true) })
		}
		return AppendResult{}, s.waitError(name, err, ctx)
	}
	if a.mustReserve {
		if err := s.waitReserved(ctx, st, end); err != nil {
			if ctx.Err() != nil {
				s.bg.Go(func(ctx context.Context) { s.publishLater(ctx, st, pending, end, closes, true, true) })
			}
			return AppendResult{}, fmt.Errorf("append to %s: written but not acknowledged: %w", name, err)
		}
	}
	s.bg.Go(func(ctx context.Context) { s.publishLater(ctx, st, pending, end, closes, false, true) })
	if s.tier != nil {
		s.noteUnflushed(a.bytes)
	}
	st.mu.Lock()
	var fenced error
	if st.repl != nil {
		fenced = st.repl.fenced
	}
	st.mu.Unlock()
	if fenced != nil {
		return AppendResult{}, fmt.Errorf("append to %s: written here but not acknowledged: %w", name, fenced)
	}
	if err := s.leaseHeld(); err != nil {
		return AppendResult{}, fmt.Errorf("append to %s: written but not acknowledged: %w", name, err)
	}
	return a.res, nil
}

// noteUnflushed counts n bytes written to the WAL towards the next flush.
func (s *Service) noteUnflushed(n int) {
	if s.pending.Add(int64(n)) >= s.tcfg.SealMaxBytes {
		s.requestFlush(false)
	}
	if s.pendingSince.Load() == 0 { // read the clock once per flush, not per append
		s.pendingSince.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// leaseHeld fails unless this node's etcd lease is certainly still alive
// (see metadata.Lease.Valid); without a cluster session it always succeeds.
func (s *Service) leaseHeld() error {
	if s.tcfg.Session == nil {
		return nil
	}
	if sess := s.tcfg.Session(); sess == nil || !sess.Valid() {
		return fmt.Errorf("%w: this node's etcd lease may have expired; not acknowledging writes", ErrUnavailable)
	}
	if s.fencedNow.Load() {
		// A new session may already be Valid while Rejoined has not yet
		// dropped the streams taken over meanwhile: until it has, this
		// node's un-uploaded tails may be other owners' gaps.
		return fmt.Errorf("%w: this node lost its etcd lease and has not re-checked its streams yet", ErrUnavailable)
	}
	return nil
}

func (s *Service) waitError(name string, err error, ctx context.Context) error {
	if ctx.Err() != nil {
		return fmt.Errorf("append to %s: %w", name, ctx.Err())
	}
	s.fail(err)
	return fmt.Errorf("%w: write-ahead log: %v", ErrUnavailable, err)
}

// readableEnd is where reads of st stop: its high watermark, or, while this
// node's lease may have expired (a paused owner that just resumed, whose
// streams another node may have taken over) or it has not yet re-checked
// its streams after losing it (fenced until Rejoined), what object
// storage holds:
// the un-uploaded tail may be lost with this node, and a reader must not
// be shown records whose offsets the new owner leaves a gap. st.mu held.
func (s *Service) readableEnd(st *streamState) int64 {
	if st.uploaded < st.hwm && s.leaseHeld() != nil {
		return max(st.uploaded, min(st.hwm, logStart(st.info)))
	}
	return st.hwm
}

// awaitReadable waits, a bounded time, while offset names a record this
// owner has assigned but not yet published: an `object` append whose flush
// committed (so a non-owner already serves it from object storage, and a
// reader may come here for the next offset) before this node applied it,
// or a `local` append waiting for its reservation. Such an offset is not
// out of range, and answering 416 would make a reader that is keeping up
// give up. Past the wait it is a 503: retry. Other offsets return at once.
func (s *Service) awaitReadable(ctx context.Context, st *streamState, offset int64) error {
	var deadline <-chan time.Time
	for {
		st.mu.Lock()
		end, next := s.readableEnd(st), st.next
		if offset <= end || offset > next {
			st.mu.Unlock()
			return nil
		}
		// The wake channel is made only for a read that waits: taken on
		// every read, it cost each read (a live reader's included) an
		// allocation and each next append a close.
		wake := st.wakeChanLocked()
		st.mu.Unlock()
		if deadline == nil {
			t := time.NewTimer(routeTimeout)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-wake:
		case <-time.After(50 * time.Millisecond): // readableEnd also follows the lease
		case <-deadline:
			return fmt.Errorf("%w: offset %d of %s is assigned but not readable yet; retry", ErrUnavailable, offset, st.info.Name)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// objectDurable: st's appends are acknowledged (and readable) only once
// committed in object storage.
func (s *Service) objectDurable(st *streamState) bool {
	return s.tier != nil && st.durability(s.cfg.DefaultDurability) == DurabilityObject
}

// publishLater publishes an append whose appender gave up waiting, once it
// is durable (and reserved, and replicated), so readers are not stuck
// behind it. It runs under the service's supervisor: at Close, ctx ends and
// nothing is published (nobody reads from a closed service).
func (s *Service) publishLater(ctx context.Context, st *streamState, pending *wal.Pending, end int64, closes, reserve, replicated bool) {
	if pending.Wait(ctx) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if reserve {
		if s.waitReserved(ctx, st, end) != nil {
			return // a later append publishes it with its own
		}
	}
	if replicated && s.waitReplicated(ctx, st, end) != nil {
		return // a later append (or the flush) publishes it
	}
	st.advance(end, closes)
}

// advance publishes offsets below end to readers. WAL syncs complete in
// enqueue order, so a durable end implies every earlier batch is durable.
// It reports whether it woke a few live readers (see yieldToReaders).
func (st *streamState) advance(end int64, closes bool) (wokeFew bool) {
	st.mu.Lock()
	if end > st.hwm || closes {
		st.hwm = max(st.hwm, end)
		if closes {
			st.closedVisible = true
		}
		wokeFew = st.wake != nil && st.waiters > 0 && st.waiters <= maxYieldReaders
		st.wakeReadersLocked()
		st.checkInvariantsLocked()
	}
	st.mu.Unlock()
	return wokeFew
}

// maxYieldReaders bounds the live readers an appender yields to.
const maxYieldReaders = 2

// yieldToReaders lets the live readers an append just woke run before the
// appender writes its acknowledgement: a woken goroutine waits on the
// waker's P until the waker parks (measured at ~100 µs of a ~140 µs
// fsync-to-SSE-write path, docs/benchmarks.md), and the appender, put on
// the global queue, is picked up by another P meanwhile. Only for a few
// readers: with a fan-out the appender would queue behind all of them.
func yieldToReaders(wokeFew bool) {
	if wokeFew {
		runtime.Gosched()
	}
}

func (s *Service) fail(err error) {
	s.mu.Lock()
	if s.failed == nil {
		s.failed = err
		s.cfg.Logger.Error("write-ahead log failed; node stops accepting appends", "err", err)
	}
	s.mu.Unlock()
}

// Read returns durable records starting at opts.Offset. Reading at the next
// offset returns no records and UpToDate; beyond it is ErrOffsetOutOfRange.
func (s *Service) Read(ctx context.Context, name string, opts ReadOptions) (ReadResult, error) {
	st, err := s.lookup(ctx, name)
	if err != nil {
		var re *RedirectError
		if errors.As(err, &re) && !opts.LocalOnly {
			// History already in object storage is served by any node.
			if res, ok, rerr := s.readRemote(ctx, re.stream, opts); ok || rerr != nil {
				return res, rerr
			}
		}
		return ReadResult{}, err
	}
	st.life.touch(s.cfg.Now()) // a read resets a sliding TTL
	if opts.FromStart {
		st.mu.Lock()
		opts.Offset = st.info.StartOffset
		st.mu.Unlock()
	}
	if err := st.checkTrimmed(opts.Offset); err != nil {
		return ReadResult{}, err
	}
	if st.info.Fork != nil {
		return s.readView(ctx, st, opts) // stitches in the source's history
	}
	if err := s.awaitReadable(ctx, st, opts.Offset); err != nil {
		return ReadResult{}, err
	}
	return s.readState(ctx, st, opts)
}

// readState reads from a stream's chunk index (local or a remote view).
func (s *Service) readState(ctx context.Context, st *streamState, opts ReadOptions) (ReadResult, error) {
	res, err := s.readChunks(ctx, st, opts)
	if errors.Is(err, ErrObjectMissing) && st.hwm > 0 {
		// Compaction or the collector replaced the object after this
		// read picked it: refresh the index from the manifests, once.
		if rerr := s.refreshObjects(ctx, st); rerr == nil {
			res, err = s.readChunks(ctx, st, opts)
		}
	}
	return res, err
}

func (s *Service) readChunks(ctx context.Context, st *streamState, opts ReadOptions) (ReadResult, error) {
	name := st.info.Name
	limit, maxBytes := s.readLimits(opts)

	st.mu.Lock()
	hwm := s.readableEnd(st)
	info := st.infoLocked()
	if opts.Offset < 0 || opts.Offset > hwm {
		st.mu.Unlock()
		return ReadResult{}, fmt.Errorf("%w: offset %d of %s, readable range is [%d, %d]", ErrOffsetOutOfRange, opts.Offset, name, info.StartOffset, hwm)
	}
	// HTTP readers read committed: they stop at the last stable offset and
	// never see markers or aborted transactions' records (txn.go).
	hwm = st.lastStableLocked(hwm)
	aborted := st.abortedLocked(opts.Offset, hwm)
	i := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > opts.Offset })
	// Copy the chunks we may need so the lock is not held during I/O. The
	// slice grows at the end and is rewritten by flushes, so never alias it.
	var refs []chunk
	for j := i; j < len(st.chunks) && st.chunks[j].base < hwm; j++ {
		refs = append(refs, st.chunks[j])
		if len(refs) >= limit {
			break
		}
	}
	st.mu.Unlock()

	res := ReadResult{NextOffset: opts.Offset, From: opts.Offset, Stream: info, StartOffset: info.StartOffset}
	// The following objects first: on a cold node the first chunk read
	// waits a GET's round trip, and their GETs should run during it, not
	// after it (one round trip per object instead of one for all).
	s.prefetchNext(refs, opts.Offset)
	bytes := 0
	asBatches := opts.Batches
	// An object chunk can hold far more than one read: chunkBatches returns
	// about the bytes still wanted, and the chunk is read again from where
	// that stopped until it is exhausted or the read is full. Moving on to
	// the next chunk early would skip records.
	full := false
	var onePiece [1][]byte
	for ci := 0; ci < len(refs) && !full; {
		c := refs[ci]
		if res.NextOffset >= c.next {
			ci++ // already read through an earlier chunk's object range
			continue
		}
		if c.gap {
			res.NextOffset = min(c.next, hwm) // nothing there: move past it
			ci++
			continue
		}
		if err := ctx.Err(); err != nil {
			res.Release()
			return ReadResult{}, err
		}
		before := res.NextOffset
		pieces, release, err := s.chunkPieces(ctx, info.ID, c, res.NextOffset, maxBytes-bytes, asBatches, onePiece[:])
		if errors.Is(err, ErrObjectMissing) {
			res.Release()
			return ReadResult{}, err
		}
		if err != nil {
			res.Release()
			return ReadResult{}, fmt.Errorf("%w: read %s at offset %d: %v", ErrUnavailable, name, res.NextOffset, err)
		}
		// Records decoded straight from lent memory alias it: such a
		// loan is never ended (the memory is left to the GC), since a
		// caller may keep records past its Release.
		aliased := false
		take := func(batch [][]byte, h record.BatchHeader, _ int) error {
			if full || h.LastOffset() < res.NextOffset {
				return nil
			}
			if (h.Transactional() && hiddenFromCommitted(h, aborted)) || h.BaseOffset >= hwm {
				if h.BaseOffset < hwm {
					res.NextOffset = max(res.NextOffset, h.LastOffset()+1)
				}
				return nil
			}
			if asBatches {
				if h.Codec() == record.CodecNone && h.LastOffset() < hwm && h.Dense() {
					// Handed on as stored: no decode, no copy. Offsets
					// are contiguous in a dense batch; a compacted one
					// (holes, or no record) goes as records, so readers
					// of stored batches only ever see produced shapes.
					n := int(h.LastOffset() - max(h.BaseOffset, res.NextOffset) + 1)
					if len(res.Batches) > 0 && (res.BatchRecords+n > limit || bytes+h.Size() > maxBytes) {
						full = true
						return nil
					}
					// A batch straddling two GETs goes as its two pieces.
					res.Batches = append(res.Batches, batch...)
					res.BatchRecords += n
					bytes += h.Size()
					res.NextOffset = h.LastOffset() + 1
					return nil
				}
				if len(res.Batches) > 0 {
					full = true // the next page starts with it
					return nil
				}
				asBatches = false // this page is records
			}
			// Decode into a fresh slice: returned records alias data and
			// their header slices must not be shared with a reused buffer.
			// A batch in two pieces is joined for it (records only).
			whole := batch[0]
			if len(batch) > 1 {
				whole = record.Gather(make([]byte, 0, h.Size()), batch, 0, h.Size())
			} else {
				aliased = true
			}
			tmp, err := record.DecodeRecords(whole, nil)
			if err != nil {
				return err
			}
			for _, r := range tmp {
				if r.Offset < res.NextOffset || r.Offset >= hwm {
					continue
				}
				size := len(r.Value) + len(r.Key)
				if len(res.Records) > 0 && (len(res.Records) >= limit || bytes+size > maxBytes) {
					full = true
					return nil
				}
				res.Records = append(res.Records, r)
				bytes += size
				res.NextOffset = r.Offset + 1
			}
			// A batch may end past its last record (offsets removed by
			// Kafka compaction): the read has consumed it all the same.
			if next := min(h.LastOffset()+1, hwm); next > res.NextOffset {
				res.NextOffset = next
			}
			return nil
		}
		// Verified on their way in (the segment reader checks every
		// batch of an object, the WAL its entry's CRC): only the framing
		// is walked here, not a second CRC pass over every byte served.
		err = record.WalkPieces(pieces, take)
		if release != nil && !aliased {
			res.releases = append(res.releases, release)
		}
		if err != nil {
			res.Release()
			return ReadResult{}, fmt.Errorf("%w: decode %s at offset %d: %v", ErrUnavailable, name, res.NextOffset, err)
		}
		switch {
		case res.NextOffset >= min(c.next, hwm):
			ci++ // chunk exhausted (or the visible part of it)
		case res.NextOffset == before || bytes >= maxBytes:
			// No progress, or the byte budget is spent: stop here rather
			// than skip the rest of this chunk.
			full = true
		case c.obj != nil && asBatches:
			// A page of stored batches counts their bytes as the tier
			// does, so an object read ending inside its range means the
			// next batch does not fit (Tier.ReadBatches): asking again
			// would wait for its GET only to leave it to the next page.
			full = true
		}
	}
	s.prefetchNext(refs, res.NextOffset)
	res.UpToDate = res.NextOffset >= hwm
	res.Closed = res.UpToDate && info.Closed
	return res, nil
}

// prefetchAhead is how far ahead of a consumer reading through object
// chunks (in bytes of object ranges) prefetchNext starts on the objects
// that follow: about the block cache's per-reader read-ahead window, so
// the window runs on across object boundaries. Objects much smaller than
// that (L0 objects of a slow stream) are read faster than a GET's round
// trip, so several are prefetched at once. The node-wide read-ahead
// budget, not this distance, bounds what is fetched.
const prefetchAhead = 32 << 20

// prefetchNext starts fetching the objects after the one a consumer is
// reading, up to prefetchAhead bytes ahead of it, so the read that
// crosses an object boundary does not wait for a cold GET. Reads within
// one object already advise the rest of its range (the cache ignores
// advice it is already following).
func (s *Service) prefetchNext(refs []chunk, next int64) {
	pf, ok := s.tier.(Prefetcher)
	if !ok {
		return
	}
	i := sort.Search(len(refs), func(i int) bool { return refs[i].next > next })
	if i >= len(refs) || refs[i].obj == nil {
		return
	}
	cur := refs[i].obj
	// The bytes of the current range still to read, estimated from the
	// offsets (records are about evenly sized within a flush).
	ahead := int64(float64(cur.Next-next) / float64(max(cur.Next-cur.First, 1)) * float64(cur.Length))
	last := cur.Key
	for _, c := range refs[i+1:] {
		if ahead >= prefetchAhead || c.obj == nil {
			return // far enough, or the WAL tail follows
		}
		if c.obj.Key == last {
			continue
		}
		pf.Prefetch(c.obj)
		ahead += c.obj.Length
		last = c.obj.Key
	}
}

// chunkPieces returns chunkBatches's batches as pieces: for a reader of
// stored batches (asBatches) from an object, as they lie in the block
// cache (PieceReader), uncopied; otherwise one piece, in one[:1] when
// one has room (the caller's array: a live reader's read of the batch
// just appended then allocates no list for it). release, when not nil,
// ends the loan of the cache's memory the pieces lie in (PieceReader).
func (s *Service) chunkPieces(ctx context.Context, streamID uint64, c chunk, from int64, maxBytes int, asBatches bool, one [][]byte) (pieces [][]byte, release func(), err error) {
	if pr, ok := s.tier.(PieceReader); ok && asBatches && c.obj != nil && !c.gap {
		return pr.ReadBatchPieces(ctx, c.obj, max(from, c.base), max(maxBytes, 1))
	}
	data, err := s.chunkBatches(ctx, streamID, c, from, maxBytes)
	return append(one[:0], data), nil, err
}

// chunkBatches returns whole batches of chunk c, starting with the one that
// holds offset from, about maxBytes long (at least one batch).
func (s *Service) chunkBatches(ctx context.Context, streamID uint64, c chunk, from int64, maxBytes int) ([]byte, error) {
	if c.gap {
		return nil, nil
	}
	if c.obj != nil {
		if s.tier == nil {
			return nil, fmt.Errorf("object %s: no object store configured", c.obj.Key)
		}
		return s.tier.ReadBatches(ctx, c.obj, max(from, c.base), max(maxBytes, 1))
	}
	if b, ok := s.tail.get(streamID, c.pos); ok {
		s.metrics.tailFromMemory.Inc()
		return b, nil
	}
	s.metrics.tailFromWAL.Inc()
	data, err := s.log.ReadAt(c.pos, nil)
	if err != nil {
		return nil, err
	}
	e, err := decodeEntry(data)
	if err != nil {
		return nil, err
	}
	return e.batch, nil
}

// WaitFor blocks until the stream has a durable record at offset or beyond,
// the stream is closed or deleted, or ctx is done. It returns true if data is
// available. Waiters cost one parked goroutine and no polling.
func (s *Service) WaitFor(ctx context.Context, name string, offset int64) (bool, error) {
	st, err := s.lookup(ctx, name)
	if err != nil {
		return false, err
	}
	for {
		st.mu.Lock()
		hwm, deleted, closed := st.lastStableLocked(st.hwm), st.deleted, st.closedVisible
		// A closed stream never grows: waiting at its end is pointless.
		waits := !deleted && hwm <= offset && !closed
		var wake <-chan struct{}
		if waits {
			st.waiters++ // counted for the appender's yield (advance)
			// Made only by a reader that waits: one woken by an append
			// finds its data on the second pass and goes on to render
			// and write the event without making the next channel first.
			wake = st.wakeChanLocked()
		}
		st.mu.Unlock()
		if deleted {
			return false, fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		if !waits {
			return hwm > offset, nil
		}
		woke := false
		select {
		case <-wake:
			woke = true
		case <-ctx.Done():
		}
		st.mu.Lock()
		st.waiters--
		st.mu.Unlock()
		if !woke {
			return false, nil
		}
	}
}

// readLimits applies the server defaults and caps to a read's limits.
func (s *Service) readLimits(opts ReadOptions) (records, bytes int) {
	records = opts.MaxRecords
	defaults.Set(&records, s.cfg.DefaultReadRecords)
	bytes = opts.MaxBytes
	defaults.Set(&bytes, s.cfg.DefaultReadBytes)
	return min(records, s.cfg.MaxReadRecords), min(bytes, s.cfg.MaxReadBytes)
}
