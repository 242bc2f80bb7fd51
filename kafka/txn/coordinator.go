package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/PicoMQ/picomq/kafka/clock"
	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// stateRoot is where the state streams live: one per transactional id.
// The node serving an id's stream coordinates the id, and the node that
// takes the stream over takes the coordination over with it. The state
// itself is the stream's state record (stream.Service.PutState: an etcd
// write conditioned on the stream's ownership, so a coordinator's decision
// survives the loss of its node and a deposed coordinator cannot overwrite
// its successor's), not a record appended to the stream: an append with
// object durability waits for a whole flush to object storage, which under
// produce load took most of a transaction's time. Records appended by
// earlier versions are still read when an id has no state record.
const stateRoot = stream.SystemRoot + "kafka/txn/"

// StreamName is the state stream of transactional id id.
func StreamName(id string) (string, bool) { return group.SystemStreamName(stateRoot, id) }

// Streams is what the coordinator needs of the stream service.
type Streams interface {
	Create(ctx context.Context, name string, opts stream.CreateOptions) (stream.Info, bool, error)
	Head(ctx context.Context, name string) (stream.Info, error)
	Read(ctx context.Context, name string, opts stream.ReadOptions) (stream.ReadResult, error)
	List(ctx context.Context, prefix, after string, limit int) ([]stream.Info, bool, error)
	// State and PutState keep a stream's state record, written only by
	// the stream's owner (stream.Service.PutState).
	State(ctx context.Context, name string) ([]byte, error)
	PutState(ctx context.Context, name string, value []byte) error
}

// Markers writes a transaction's outcome: the marker of producer pid at
// epoch to every partition of the transaction and to the offsets stream
// of every group whose offsets it carries. It must be idempotent (a
// coordinator that lost its node writes them again).
type Markers interface {
	WriteMarkers(ctx context.Context, pid int64, epoch int16, m record.Marker, parts []Partition, groups []string) error
}

// Config wires a coordinator. Zero values take the defaults.
type Config struct {
	Streams Streams
	Locator group.Locator
	Markers Markers
	Logger  *slog.Logger
	Clock   clock.Clock
	// MaxTimeout bounds a producer's transaction.timeout.ms (Kafka's
	// transaction.max.timeout.ms). Default 15 minutes.
	MaxTimeout time.Duration
	// ScanInterval: how often Run looks for state streams this node took
	// over (to time out or complete their transactions). Default 2 s.
	ScanInterval time.Duration
	// NewProducerID hands out a fresh producer id.
	NewProducerID func() int64
}

// Coordinator is one node's transaction coordinator: it serves the
// transactional ids whose state streams this node serves.
type Coordinator struct {
	cfg Config
	log *slog.Logger
	clk clock.Clock

	ctx    context.Context // cancelled by Close: ends timer work
	cancel context.CancelFunc

	mu     sync.Mutex
	txns   map[string]*entry
	closed bool

	// stats: state writes made, and partition adds that needed none
	// (reserved before); Stats.
	writes, reservedAdds atomic.Int64
}

// Stats counts the coordinator's state writes and the AddPartitionsToTxn
// calls that needed no write because their partitions were reserved
// (metrics: picomq_kafka_txn_state_writes_total,
// picomq_kafka_txn_reserved_adds_total).
func (c *Coordinator) Stats() (writes, reservedAdds int64) {
	return c.writes.Load(), c.reservedAdds.Load()
}

// entry is one transactional id this node coordinates. mu serialises
// every operation on it, marker writes included.
type entry struct {
	mu     sync.Mutex
	id     string
	stream string
	m      Meta
	exists bool // m was loaded from or saved to the state stream
	gone   bool // dropped (coordination moved): callers start again
	timer  clock.Timer
	armed  uint64 // sequence of the armed timer; stale firings are ignored
}

// New builds a coordinator.
func New(cfg Config) *Coordinator {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = 15 * time.Minute
	}
	if cfg.ScanInterval <= 0 {
		cfg.ScanInterval = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(stream.WithSystemAccess(context.Background()))
	return &Coordinator{cfg: cfg, log: cfg.Logger, clk: cfg.Clock, ctx: ctx, cancel: cancel, txns: map[string]*entry{}}
}

// Close stops every timer; state stays in the streams for the next owner.
func (c *Coordinator) Close() {
	c.mu.Lock()
	c.closed = true
	es := c.txns
	c.txns = map[string]*entry{}
	c.mu.Unlock()
	c.cancel()
	for _, e := range es {
		e.mu.Lock()
		e.drop()
		e.mu.Unlock()
	}
}

func (e *entry) drop() {
	e.gone = true
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
}

// errNotCoordinator: another node serves the id's state stream.
var errNotCoordinator = fmt.Errorf("%w: the transactional id is coordinated elsewhere", kerr.NotCoordinator)

// Code maps a coordinator error to a Kafka error code: kerr errors as
// they are; the stream service's "elsewhere" errors NOT_COORDINATOR;
// anything else COORDINATOR_NOT_AVAILABLE (clients retry).
func Code(err error) int16 {
	var ke *kerr.Error
	var re *stream.RedirectError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ke):
		return ke.Code
	case errors.As(err, &re):
		return kerr.NotCoordinator.Code
	default:
		return kerr.CoordinatorNotAvailable.Code
	}
}

// Locate is the broker coordinating transactional id id (FindCoordinator).
func (c *Coordinator) Locate(ctx context.Context, id string) (group.Broker, error) {
	ctx = stream.WithSystemAccess(ctx)
	name, ok := StreamName(id)
	if !ok {
		return group.Broker{}, fmt.Errorf("%w: transactional id %q", kerr.InvalidRequest, id)
	}
	b, _, err := c.cfg.Locator.Locate(ctx, name)
	return b, err
}

// lockedEntry returns id's entry, loaded, with its lock held.
func (c *Coordinator) lockedEntry(ctx context.Context, id string) (*entry, error) {
	ctx = stream.WithSystemAccess(ctx) // the state streams are system streams
	for range 3 {
		e, err := c.entry(ctx, id)
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		if e.gone {
			e.mu.Unlock()
			continue
		}
		return e, nil
	}
	return nil, errNotCoordinator
}

// entry finds or loads id's entry if this node coordinates it.
func (c *Coordinator) entry(ctx context.Context, id string) (*entry, error) {
	name, ok := StreamName(id)
	if !ok {
		return nil, fmt.Errorf("%w: transactional id %q", kerr.InvalidRequest, id)
	}
	_, self, err := c.cfg.Locator.Locate(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("txn %q: locate coordinator: %w", id, err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errNotCoordinator
	}
	e := c.txns[id]
	if !self {
		delete(c.txns, id)
		c.mu.Unlock()
		if e != nil {
			e.mu.Lock()
			e.drop()
			e.mu.Unlock()
		}
		return nil, errNotCoordinator
	}
	if e != nil {
		c.mu.Unlock()
		return e, nil
	}
	e = &entry{id: id, stream: name}
	c.txns[id] = e
	e.mu.Lock() // before c.mu is released: nobody sees it unloaded
	c.mu.Unlock()
	defer e.mu.Unlock()
	if err := c.load(ctx, e); err != nil {
		e.drop()
		c.mu.Lock()
		if c.txns[id] == e {
			delete(c.txns, id)
		}
		c.mu.Unlock()
		return nil, err
	}
	return e, nil
}

// load reads the id's state and resumes what it left open: an open
// transaction's timeout (from its start), markers of a decided one.
func (c *Coordinator) load(ctx context.Context, e *entry) error {
	b, err := c.cfg.Streams.State(ctx, e.stream)
	if errors.Is(err, stream.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("txn %q: state: %w", e.id, err)
	}
	if b == nil {
		if b, err = c.legacyState(ctx, e); err != nil || b == nil {
			return err
		}
	}
	m, err := decodeMeta(b)
	if err != nil {
		return err
	}
	m = m.loaded()
	e.m, e.exists = m, true
	switch {
	case m.State == Ongoing:
		c.arm(e)
	case m.State.preparing():
		if err := c.complete(ctx, e); err != nil {
			c.log.Warn("kafka txn: markers not written yet; retried", "txn", e.id, "err", err)
		}
	}
	return nil
}

// legacyState is the last record of e's state stream, where versions
// before the state record kept the state (nil when it has none).
func (c *Coordinator) legacyState(ctx context.Context, e *entry) ([]byte, error) {
	info, err := c.cfg.Streams.Head(ctx, e.stream)
	if err != nil {
		return nil, fmt.Errorf("txn %q: state stream: %w", e.id, err)
	}
	if info.NextOffset <= info.StartOffset {
		return nil, nil
	}
	res, err := c.cfg.Streams.Read(ctx, e.stream, stream.ReadOptions{Offset: info.NextOffset - 1, MaxRecords: 1})
	if err != nil {
		return nil, fmt.Errorf("txn %q: read state: %w", e.id, err)
	}
	if len(res.Records) == 0 {
		return nil, fmt.Errorf("txn %q: state stream ends at %d but its last record is not readable", e.id, info.NextOffset)
	}
	return res.Records[len(res.Records)-1].Value, nil
}

// save makes m the durable state of e: the node that takes the state
// stream over must know every partition a producer may have written to,
// or a commit it completes would miss some. A failed save forgets e (the
// next request loads the state again), since the failure may be a
// takeover this node has not noticed yet.
func (c *Coordinator) save(ctx context.Context, e *entry, m Meta) error {
	m.UpdateMs = c.clk.Now().UnixMilli()
	b := m.encode()
	c.writes.Add(1)
	err := c.cfg.Streams.PutState(ctx, e.stream, b)
	if errors.Is(err, stream.ErrNotFound) {
		none := ""
		_, _, err = c.cfg.Streams.Create(ctx, e.stream, stream.CreateOptions{
			ContentType: "application/json", Durability: stream.DurabilityObject, KafkaTopic: &none})
		if err == nil || errors.Is(err, stream.ErrConflict) {
			err = c.cfg.Streams.PutState(ctx, e.stream, b)
		}
	}
	if err != nil {
		c.forget(e)
		return fmt.Errorf("txn %q: save state %s: %w", e.id, m.State, err)
	}
	e.m, e.exists = m, true
	return nil
}

// forget drops e (locked by the caller) from the coordinator.
func (c *Coordinator) forget(e *entry) {
	e.drop()
	c.mu.Lock()
	if c.txns[e.id] == e {
		delete(c.txns, e.id)
	}
	c.mu.Unlock()
}

// checkProducer applies the fencing rules of every request after
// InitProducerId.
func (e *entry) checkProducer(pid int64, epoch int16) error {
	switch {
	case !e.exists || pid != e.m.ProducerID:
		return fmt.Errorf("%w: transactional id %q has producer id %d, not %d", kerr.InvalidProducerIDMapping, e.id, e.m.ProducerID, pid)
	case epoch < e.m.Epoch:
		return fmt.Errorf("%w: epoch %d of producer %d is older than %d", kerr.ProducerFenced, epoch, pid, e.m.Epoch)
	case epoch > e.m.Epoch:
		return fmt.Errorf("%w: epoch %d of producer %d is newer than %d", kerr.InvalidProducerEpoch, epoch, pid, e.m.Epoch)
	}
	return nil
}

// InitProducerID gives transactional id its producer id and a new epoch,
// fencing every older one: an open transaction of an older epoch is
// aborted first (with the new epoch, so a zombie's later writes are
// refused by every partition), a decided one completed. pid/epoch >= 0 is a
// producer re-initialising itself (KIP-360): it must be the current one
// (or the one before, if the coordinator bumped it to time out its
// transaction).
func (c *Coordinator) InitProducerID(ctx context.Context, id string, timeoutMs int32, pid int64, epoch int16) (int64, int16, error) {
	ctx = stream.WithSystemAccess(ctx)
	if timeoutMs <= 0 || time.Duration(timeoutMs)*time.Millisecond > c.cfg.MaxTimeout {
		return -1, -1, fmt.Errorf("%w: %d ms (max %v)", kerr.InvalidTransactionTimeout, timeoutMs, c.cfg.MaxTimeout)
	}
	e, err := c.lockedEntry(ctx, id)
	if err != nil {
		return -1, -1, err
	}
	defer e.mu.Unlock()
	if !e.exists {
		m := Meta{ID: id, ProducerID: c.cfg.NewProducerID(), TimeoutMs: timeoutMs, State: Empty}
		if err := c.save(ctx, e, m); err != nil {
			return -1, -1, err
		}
		return m.ProducerID, m.Epoch, nil
	}
	if pid >= 0 && (pid != e.m.ProducerID || (epoch != e.m.Epoch && epoch != e.m.Epoch-1)) && !e.m.isPrev(pid, epoch) {
		return -1, -1, fmt.Errorf("%w: producer %d epoch %d is not transactional id %q's current producer", kerr.ProducerFenced, pid, epoch, id)
	}
	if e.m.State.preparing() {
		if err := c.complete(ctx, e); err != nil {
			return -1, -1, err
		}
	}
	if e.m.State == Ongoing {
		if err := c.abortFenced(ctx, e); err != nil {
			return -1, -1, err
		}
	}
	m := e.m
	if m.Epoch >= math.MaxInt16-1 {
		m.ProducerID, m.Epoch = c.cfg.NewProducerID(), 0
	} else {
		m.Epoch++
	}
	m.State, m.Partitions, m.Reserved, m.Groups, m.StartMs, m.TimeoutMs = Empty, nil, nil, nil, 0, timeoutMs
	// The producer that ended the last transaction is re-initialised
	// (or fenced): its old id and epoch are accepted no more.
	m.Bumped, m.PrevProducerID, m.PrevEpoch = false, 0, 0
	if err := c.save(ctx, e, m); err != nil {
		return -1, -1, err
	}
	return m.ProducerID, m.Epoch, nil
}

// begin moves e to Ongoing (a new transaction) if it is not already.
func (c *Coordinator) begin(m *Meta) bool {
	if m.State == Ongoing {
		return false
	}
	m.State, m.Partitions, m.Reserved, m.Groups, m.StartMs = Ongoing, nil, nil, nil, c.clk.Now().UnixMilli()
	m.Bumped, m.PrevProducerID, m.PrevEpoch = false, 0, 0
	return true
}

// AddPartitions adds partitions to the producer's transaction, starting
// one if none is open. reserve (may be nil) are partitions the producer
// is likely to add later in the same transaction (the Kafka frontend
// passes the other partitions of the topics added, up to a bound): they
// are recorded with the same write, and adding one of them later needs
// none, since the record already names it. A producer spreading records
// over a topic's partitions adds them a few at a time, one
// AddPartitionsToTxn per produce: this makes that one durable write per
// topic rather than one per request. The cost is paid only after a
// takeover: the next coordinator writes markers to every reserved
// partition, since it cannot tell which were added.
func (c *Coordinator) AddPartitions(ctx context.Context, id string, pid int64, epoch int16, parts, reserve []Partition) error {
	return c.addToTxn(ctx, id, pid, epoch, nil, func(m *Meta) (bool, bool) {
		m.Partitions = append([]Partition(nil), m.Partitions...)
		if !m.addPartitions(parts) {
			return false, false
		}
		if m.reserves(parts) {
			return true, false // added, and durably recorded already
		}
		m.Reserved = append([]Partition(nil), m.Reserved...)
		m.reserve(parts)
		m.reserve(reserve)
		return true, true
	})
}

// AddOffsets adds group's offsets stream to the producer's transaction.
func (c *Coordinator) AddOffsets(ctx context.Context, id string, pid int64, epoch int16, groupID string) error {
	valid := func() error {
		if _, err := group.StreamName(groupID); err != nil {
			return fmt.Errorf("%w: %v", kerr.InvalidGroupID, err)
		}
		return nil
	}
	return c.addToTxn(ctx, id, pid, epoch, valid, func(m *Meta) (bool, bool) {
		m.Groups = append([]string(nil), m.Groups...)
		added := m.addGroup(groupID)
		return added, added
	})
}

// addToTxn is AddPartitions and AddOffsets: after the producer and state
// checks and the caller's own (valid, may be nil), add changes a copy of
// the transaction's state (copying what it appends to, since e.m is only
// replaced once saved) and reports whether it changed anything and
// whether the change must be saved (a reserved partition need not be);
// the state is saved when it must be or when a transaction began, and a
// new transaction's timeout is armed.
func (c *Coordinator) addToTxn(ctx context.Context, id string, pid int64, epoch int16, valid func() error, add func(m *Meta) (changed, save bool)) error {
	ctx = stream.WithSystemAccess(ctx)
	e, err := c.lockedEntry(ctx, id)
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	if err := e.checkProducer(pid, epoch); err != nil {
		return err
	}
	if e.m.State.preparing() {
		return fmt.Errorf("%w: transaction of %q is %s", kerr.ConcurrentTransactions, id, e.m.State)
	}
	if valid != nil {
		if err := valid(); err != nil {
			return err
		}
	}
	m := e.m
	started := c.begin(&m)
	changed, mustSave := add(&m)
	if !started && !mustSave {
		if changed {
			e.m = m // durably reserved before: nothing to write
			c.reservedAdds.Add(1)
		}
		return nil
	}
	if err := c.save(ctx, e, m); err != nil {
		return err
	}
	if started {
		c.arm(e)
	}
	return nil
}

// Verify reports whether producer pid/epoch of id has an open transaction
// holding group (TxnOffsetCommit).
func (c *Coordinator) Verify(ctx context.Context, id string, pid int64, epoch int16) error {
	ctx = stream.WithSystemAccess(ctx)
	e, err := c.lockedEntry(ctx, id)
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	return e.checkProducer(pid, epoch)
}

// Includes answers a partition leader verifying a transactional produce
// (KIP-890 part 1): nil when producer pid/epoch of id has an open
// transaction that p was added to; INVALID_PRODUCER_EPOCH for an older
// epoch (a fenced zombie); INVALID_TXN_STATE otherwise.
func (c *Coordinator) Includes(ctx context.Context, id string, pid int64, epoch int16, p Partition) error {
	ctx = stream.WithSystemAccess(ctx)
	e, err := c.lockedEntry(ctx, id)
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	return e.m.includes(pid, epoch, p)
}

// includes is Includes on a known state (also a peer's, DescribeTransactions).
func (m *Meta) includes(pid int64, epoch int16, p Partition) error {
	switch {
	case m.ProducerID == pid && epoch < m.Epoch:
		return fmt.Errorf("%w: epoch %d of producer %d is older than %d", kerr.InvalidProducerEpoch, epoch, pid, m.Epoch)
	case m.ProducerID != pid || epoch != m.Epoch || m.State != Ongoing:
		return fmt.Errorf("%w: producer %d epoch %d of %q has no open transaction (state %s, producer %d epoch %d)",
			kerr.InvalidTxnState, pid, epoch, m.ID, m.State, m.ProducerID, m.Epoch)
	}
	if _, found := slices.BinarySearchFunc(m.Partitions, p, comparePartitions); !found {
		return fmt.Errorf("%w: %s/%d was not added to the transaction of %q", kerr.InvalidTxnState, p.Topic, p.Partition, m.ID)
	}
	return nil
}

// Includes is Coordinator.Includes on a state described by its
// coordinator (DescribeTransactions from another node).
func Includes(m Meta, pid int64, epoch int16, p Partition) error {
	slices.SortFunc(m.Partitions, comparePartitions)
	return m.includes(pid, epoch, p)
}

// EndTxn commits or aborts the producer's transaction: the outcome is made
// durable first (Prepare*), then the markers are written, then the
// transaction is complete. A retry of an EndTxn that already completed
// succeeds; one that failed while writing markers writes them again.
func (c *Coordinator) EndTxn(ctx context.Context, id string, pid int64, epoch int16, commit bool) error {
	ctx = stream.WithSystemAccess(ctx)
	e, err := c.lockedEntry(ctx, id)
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	if err := e.checkProducer(pid, epoch); err != nil {
		return err
	}
	prepare, complete := PrepareAbort, CompleteAbort
	if commit {
		prepare, complete = PrepareCommit, CompleteCommit
	}
	switch e.m.State {
	case Ongoing:
		m := e.m
		m.State, m.Reserved = prepare, nil // the partitions are exact now
		if err := c.save(ctx, e, m); err != nil {
			return err
		}
		e.disarm()
		return c.complete(ctx, e)
	case prepare:
		return c.complete(ctx, e)
	case complete:
		return nil // a retry
	case Empty:
		if !commit {
			return nil // nothing to abort
		}
	}
	return fmt.Errorf("%w: %s of a transaction that is %s", kerr.InvalidTxnState, map[bool]string{true: "commit", false: "abort"}[commit], e.m.State)
}

// EndTxnBumping is EndTxn as transaction.version 2 has it (KIP-890 part
// 2, EndTxn v5+): every end bumps the producer's epoch, the Prepare
// record carries the bumped epoch and the markers are written with it (so
// each partition fences the ended transaction's epoch as its marker
// lands), and the answer is the producer id and epoch the next
// transaction runs under. When the bump reaches the last epoch the
// markers use it and the id continues with a new producer id at epoch 0.
// An abort with no transaction open succeeds and bumps the epoch too
// (franz-go aborts after produces it cannot confirm). A retry of an end
// whose answer was lost carries the epoch before the bump: it gets the
// current producer id and epoch if it asks for the same outcome.
func (c *Coordinator) EndTxnBumping(ctx context.Context, id string, pid int64, epoch int16, commit bool) (int64, int16, error) {
	ctx = stream.WithSystemAccess(ctx)
	e, err := c.lockedEntry(ctx, id)
	if err != nil {
		return -1, -1, err
	}
	defer e.mu.Unlock()
	prepare, complete := PrepareAbort, CompleteAbort
	if commit {
		prepare, complete = PrepareCommit, CompleteCommit
	}
	if e.exists && e.m.isPrev(pid, epoch) && (pid != e.m.ProducerID || epoch != e.m.Epoch) {
		switch e.m.State {
		case complete:
			return e.m.ProducerID, e.m.Epoch, nil // a retry
		case prepare:
			if err := c.complete(ctx, e); err != nil {
				return -1, -1, err
			}
			return e.m.ProducerID, e.m.Epoch, nil
		}
		return -1, -1, fmt.Errorf("%w: epoch %d of producer %d ended its transaction already", kerr.ProducerFenced, epoch, pid)
	}
	if err := e.checkProducer(pid, epoch); err != nil {
		return -1, -1, err
	}
	switch e.m.State {
	case Ongoing:
		m := e.m
		m.State, m.Reserved = prepare, nil // the partitions are exact now
		c.bump(&m)
		if err := c.save(ctx, e, m); err != nil {
			return -1, -1, err
		}
		e.disarm()
		if err := c.complete(ctx, e); err != nil {
			return -1, -1, err
		}
		return e.m.ProducerID, e.m.Epoch, nil
	case prepare:
		// Decided by an earlier end at this epoch that did not bump
		// (EndTxn v4 or older): finish it.
		if err := c.complete(ctx, e); err != nil {
			return -1, -1, err
		}
		return e.m.ProducerID, e.m.Epoch, nil
	case Empty, CompleteCommit, CompleteAbort:
		if !commit {
			// Nothing open: an empty abort, which bumps the epoch all
			// the same. No marker is due, so the new id or epoch is
			// the state at once.
			m := e.m
			m.State, m.Partitions, m.Reserved, m.Groups = CompleteAbort, nil, nil, nil
			c.bump(&m)
			if m.NextProducerID != 0 {
				m.ProducerID, m.Epoch, m.NextProducerID = m.NextProducerID, 0, 0
			}
			if err := c.save(ctx, e, m); err != nil {
				return -1, -1, err
			}
			return m.ProducerID, m.Epoch, nil
		}
	}
	return -1, -1, fmt.Errorf("%w: %s of a transaction that is %s", kerr.InvalidTxnState, map[bool]string{true: "commit", false: "abort"}[commit], e.m.State)
}

// bump is an end's epoch bump under transaction.version 2: m keeps the
// ending producer id and epoch as Prev (to recognise a retry) and moves to
// the next epoch; at the last usable epoch it also names the producer id
// the transactional id continues with (NextProducerID).
func (c *Coordinator) bump(m *Meta) {
	m.Bumped, m.PrevProducerID, m.PrevEpoch = true, m.ProducerID, m.Epoch
	m.Epoch++
	if m.Epoch >= math.MaxInt16-1 {
		m.NextProducerID = c.cfg.NewProducerID()
	}
}

// isPrev reports whether pid/epoch ran the transaction the last bumping
// EndTxn ended.
func (m *Meta) isPrev(pid int64, epoch int16) bool {
	return m.Bumped && pid == m.PrevProducerID && epoch == m.PrevEpoch
}

// complete writes the markers of a decided transaction and marks it
// complete. The Complete state is not written to the state stream on its
// own (it would cost one more object-durable write per transaction): the
// next transition's record supersedes the Prepare* one, and a coordinator
// that loads a Prepare* record writes its markers again, which is harmless
// (a marker of a transaction already ended ends nothing; the producer
// cannot have written to a partition of its next transaction before that
// transaction's AddPartitionsToTxn was recorded).
func (c *Coordinator) complete(ctx context.Context, e *entry) error {
	m := e.m
	marker, done := record.MarkerAbort, CompleteAbort
	if m.State == PrepareCommit {
		marker, done = record.MarkerCommit, CompleteCommit
	}
	if err := c.cfg.Markers.WriteMarkers(ctx, m.ProducerID, m.Epoch, marker, m.Partitions, m.Groups); err != nil {
		return fmt.Errorf("txn %q: write %v markers: %w", e.id, marker, err)
	}
	e.m.State = done
	e.m.UpdateMs = c.clk.Now().UnixMilli()
	if e.m.NextProducerID != 0 {
		// The bump exhausted the epochs: the markers went out at the
		// last one, and the id continues with the producer id the
		// Prepare record names.
		e.m.ProducerID, e.m.Epoch, e.m.NextProducerID = e.m.NextProducerID, 0, 0
	}
	return nil
}

// abortFenced aborts e's open transaction with the next epoch, so the
// producer that opened it is fenced everywhere the markers land.
func (c *Coordinator) abortFenced(ctx context.Context, e *entry) error {
	m := e.m
	if m.Epoch >= math.MaxInt16-1 {
		// No epoch left to fence with: abort with this one; the next
		// InitProducerId takes a new producer id.
		m.State = PrepareAbort
	} else {
		m.Epoch++
		m.State = PrepareAbort
	}
	m.Reserved = nil // the partitions are exact now
	if err := c.save(ctx, e, m); err != nil {
		return err
	}
	e.disarm()
	return c.complete(ctx, e)
}

// arm starts the timeout of e's open transaction, counted from its start.
func (c *Coordinator) arm(e *entry) {
	e.disarm()
	e.armed++
	seq := e.armed
	deadline := time.UnixMilli(e.m.StartMs).Add(time.Duration(e.m.TimeoutMs) * time.Millisecond)
	e.timer = c.clk.AfterFunc(max(deadline.Sub(c.clk.Now()), 0), func() { c.expire(e, seq) })
}

func (e *entry) disarm() {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.armed++
}

// expire aborts a transaction open longer than its timeout (Kafka's
// transaction.timeout.ms), fencing its producer's epoch.
func (c *Coordinator) expire(e *entry, seq uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone || e.armed != seq || e.m.State != Ongoing {
		return
	}
	e.timer = nil
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	c.log.Info("kafka txn: transaction timed out, aborting", "txn", e.id, "producer", e.m.ProducerID, "epoch", e.m.Epoch)
	if err := c.abortFenced(ctx, e); err != nil {
		c.log.Warn("kafka txn: timeout abort not complete; retried", "txn", e.id, "err", err)
	}
}

// Scan takes over the state streams this node serves and has not loaded
// (their transactions time out or complete here from now on), completes
// decided transactions whose markers failed, and drops ids that moved.
func (c *Coordinator) Scan(ctx context.Context) error {
	ctx = stream.WithSystemAccess(ctx)
	after := ""
	for {
		page, more, err := c.cfg.Streams.List(ctx, stateRoot, after, 1000)
		if err != nil {
			return fmt.Errorf("txn: list state streams: %w", err)
		}
		for _, in := range page {
			id, ok := group.SystemStreamID(stateRoot, in.Name)
			if !ok {
				continue
			}
			e, err := c.lockedEntry(ctx, id)
			if err != nil {
				continue // elsewhere, or not now
			}
			if e.m.State.preparing() {
				if err := c.complete(ctx, e); err != nil {
					c.log.Warn("kafka txn: markers not written yet; retried", "txn", id, "err", err)
				}
			}
			e.mu.Unlock()
		}
		if !more || len(page) == 0 {
			return nil
		}
		after = page[len(page)-1].Name
	}
}

// Run scans every ScanInterval until ctx ends.
func (c *Coordinator) Run(ctx context.Context) error {
	ctx = stream.WithSystemAccess(ctx)
	t := time.NewTicker(c.cfg.ScanInterval)
	defer t.Stop()
	for {
		if err := c.Scan(ctx); err != nil && ctx.Err() == nil {
			c.log.Debug("kafka txn: scan", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Describe returns the state of id, or an error (NOT_COORDINATOR,
// TRANSACTIONAL_ID_NOT_FOUND).
func (c *Coordinator) Describe(ctx context.Context, id string) (Meta, error) {
	ctx = stream.WithSystemAccess(ctx)
	e, err := c.lockedEntry(ctx, id)
	if err != nil {
		return Meta{}, err
	}
	defer e.mu.Unlock()
	if !e.exists {
		return Meta{}, fmt.Errorf("%w: %q", kerr.TransactionalIDNotFound, id)
	}
	return e.m, nil
}

// List returns the transactions this node coordinates, sorted by id, after
// a scan so ids taken over are included.
func (c *Coordinator) List(ctx context.Context) ([]Meta, error) {
	ctx = stream.WithSystemAccess(ctx)
	if err := c.Scan(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	es := make([]*entry, 0, len(c.txns))
	for _, e := range c.txns {
		es = append(es, e)
	}
	c.mu.Unlock()
	var out []Meta
	for _, e := range es {
		e.mu.Lock()
		if e.exists && !e.gone {
			out = append(out, e.m)
		}
		e.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
