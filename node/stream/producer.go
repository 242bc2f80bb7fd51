package stream

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/PicoMQ/picomq/wal"
)

// Producer identifies one batch of an idempotent producer. ID is namespaced
// by the frontend ("pico:"+id, "ds:"+id) so protocols never collide. Seq
// counts batches (requests) per epoch, as in the Durable Streams protocol.
type Producer struct {
	ID    string
	Epoch uint64
	Seq   uint64
	// PerRecord selects Kafka's sequence rules: Seq is the sequence of the
	// batch's first record and the batch uses one number per record (the
	// next batch starts at Seq+records), and a producer the stream has never
	// seen may start at any sequence (KIP-360: its earlier batches may have
	// been trimmed or written before a restart of the client's state).
	PerRecord bool `json:",omitempty"`
}

// span is how many sequence numbers a batch of n records uses.
func (p *Producer) span(n int) uint64 {
	if p.PerRecord && n > 0 {
		return uint64(n)
	}
	return 1
}

// Producer errors. Use errors.As with *ProducerError for the numbers.
var (
	// ErrProducerFenced: the epoch is older than the producer's current one.
	ErrProducerFenced = errors.New("stream: producer epoch is stale (fenced)")
	// ErrProducerSeqGap: the sequence skips ahead of the next expected one.
	ErrProducerSeqGap = errors.New("stream: producer sequence gap")
	// ErrProducerEpochSeq: a new epoch must start at sequence 0.
	ErrProducerEpochSeq = errors.New("stream: a new producer epoch must start at sequence 0")
	// ErrWriterSeq: a Durable Streams Stream-Seq did not increase.
	ErrWriterSeq = errors.New("stream: writer sequence did not increase")
	// ErrStreamClosed: the stream is closed; errors.As gives *ClosedError.
	ErrStreamClosed = errors.New("stream: closed")
)

// ProducerError carries the numbers a producer needs to tell a lost ack from
// a gap, or to re-claim with a higher epoch.
type ProducerError struct {
	Err          error
	CurrentEpoch uint64
	ExpectedSeq  uint64
	ReceivedSeq  uint64
}

func (e *ProducerError) Error() string {
	switch e.Err {
	case ErrProducerFenced:
		return fmt.Sprintf("%v: current epoch is %d", e.Err, e.CurrentEpoch)
	case ErrProducerSeqGap:
		return fmt.Sprintf("%v: expected sequence %d, received %d", e.Err, e.ExpectedSeq, e.ReceivedSeq)
	}
	return e.Err.Error()
}

func (e *ProducerError) Unwrap() error { return e.Err }

// ClosedError reports the final offset of a closed stream.
type ClosedError struct {
	Name       string
	NextOffset int64
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("%v: %s ends at offset %d", ErrStreamClosed, e.Name, e.NextOffset)
}

func (e *ClosedError) Unwrap() error { return ErrStreamClosed }

// dedupWindow is how many recent batches per producer keep their offsets, so
// a retry of any of them is acknowledged with the original offsets (Kafka
// keeps five in-flight batches per producer for the same reason).
const dedupWindow = 8

type sentBatch struct {
	seq         uint64
	first, next int64
	ts          int64
	pending     *wal.Pending // nil once known durable (e.g. replayed)
}

// producerState is what the stream remembers about one producer.
type producerState struct {
	epoch   uint64
	lastSeq uint64
	recent  [dedupWindow]sentBatch
	n       int // number of valid entries in recent (ring, newest at (n-1)%len)
	// fresh: the epoch came from a transaction marker (the coordinator
	// fenced older epochs) and no batch of it was written yet, so its
	// first batch starts a sequence as a new producer's does.
	fresh bool
}

func (p *producerState) remember(b sentBatch) {
	p.recent[p.n%dedupWindow] = b
	p.n++
}

func (p *producerState) find(seq uint64) (sentBatch, bool) {
	for i := 0; i < min(p.n, dedupWindow); i++ {
		if b := p.recent[i]; b.seq == seq {
			return b, true
		}
	}
	return sentBatch{}, false
}

// producerVerdict is the outcome of checking a batch against producer state.
type producerVerdict int

const (
	produceAccept producerVerdict = iota
	produceDuplicate
)

// checkProducer applies the idempotent-producer rules (the Durable Streams
// table, which Pico shares): a fresh producer starts at seq 0; an older epoch
// is fenced; a newer epoch must start at 0; within an epoch seq must be
// last+1, and anything at or below last is a duplicate.
func checkProducer(ps *producerState, p *Producer) (producerVerdict, error) {
	if ps != nil && ps.fresh {
		if p.Epoch < ps.epoch {
			return 0, &ProducerError{Err: ErrProducerFenced, CurrentEpoch: ps.epoch}
		}
		ps = nil
	}
	if ps == nil {
		if p.Seq != 0 && !p.PerRecord {
			return 0, &ProducerError{Err: ErrProducerSeqGap, ExpectedSeq: 0, ReceivedSeq: p.Seq}
		}
		return produceAccept, nil
	}
	switch {
	case p.Epoch < ps.epoch:
		return 0, &ProducerError{Err: ErrProducerFenced, CurrentEpoch: ps.epoch}
	case p.Epoch > ps.epoch:
		if p.Seq != 0 {
			return 0, &ProducerError{Err: ErrProducerEpochSeq, CurrentEpoch: ps.epoch, ReceivedSeq: p.Seq}
		}
		return produceAccept, nil
	case p.Seq <= ps.lastSeq:
		return produceDuplicate, nil
	case p.Seq == ps.lastSeq+1:
		return produceAccept, nil
	default:
		return 0, &ProducerError{Err: ErrProducerSeqGap, CurrentEpoch: ps.epoch, ExpectedSeq: ps.lastSeq + 1, ReceivedSeq: p.Seq}
	}
}

// applyProducer records an accepted batch of n records in the producer
// state.
func (st *streamState) applyProducer(p Producer, n int, b sentBatch) {
	if st.producers == nil {
		st.producers = make(map[string]*producerState)
	}
	ps := st.producers[p.ID]
	if ps == nil || p.Epoch > ps.epoch || ps.fresh {
		ps = &producerState{epoch: p.Epoch}
		st.producers[p.ID] = ps
	}
	ps.lastSeq = p.Seq + p.span(n) - 1
	b.seq = p.Seq
	ps.remember(b)
}

// KafkaProducerID names a Kafka producer id in the producer state (the
// Kafka frontend's namespace), so a transaction marker found in a replayed
// batch header reaches the same producer as the frontend's batches.
func KafkaProducerID(pid int64) string { return "kafka:" + strconv.FormatInt(pid, 10) }

func kafkaProducerID(pid int64) string { return KafkaProducerID(pid) }

// markerEpochLocked applies a transaction marker's epoch to its producer:
// a newer epoch (the coordinator bumped it to fence a zombie, or to abort
// a timed-out transaction) replaces the producer's state, so batches of
// the older epoch are fenced from now on.
func (st *streamState) markerEpochLocked(id string, epoch uint64) {
	ps := st.producers[id]
	if ps != nil && epoch <= ps.epoch {
		return
	}
	if st.producers == nil {
		st.producers = make(map[string]*producerState)
	}
	st.producers[id] = &producerState{epoch: epoch, fresh: true}
}
