package stream

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/record"
)

// Kafka transactions as the stream sees them (docs/architecture.md,
// "Visibility: high watermark and last stable offset"). A transactional
// producer's batches carry the transactional attribute; its transaction
// on this stream ends with a control batch (a commit or abort marker)
// that the transaction coordinator appends through AppendBatch with
// AppendRequest.Control. The stream keeps, per producer, the first offset
// of its open transaction, so
//
//	lso = min(hwm, first offset of the oldest transaction not yet ended
//	          by a durable marker)
//
// and the list of aborted transactions (producer, first offset, marker
// offset), which Kafka read_committed fetches carry and which HTTP reads
// use to skip aborted records. A stream that never saw a transactional
// batch has st.txn == nil: lso is hwm at no cost.

// AbortedTxn is one aborted transaction of a stream: producer ProducerID's
// batches from FirstOffset up to its abort marker at LastOffset.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
	LastOffset  int64
}

// txnSpan is a transaction that is open (end 0) or whose marker was
// assigned offset end-1 but may not be durable yet.
type txnSpan struct {
	pid   int64
	first int64
	end   int64
	at    int64 // when it opened (ms, the batch's time): StaleTransactions
}

type txnState struct {
	spans   []txnSpan
	aborted []AbortedTxn // in marker order, so by LastOffset
}

// noteBatchLocked records a transactional batch assigned offsets
// [base, end): data opens the producer's transaction on this stream if it
// is not open; a marker ends it (an abort is remembered).
func (st *streamState) noteBatchLocked(h record.BatchHeader, batch []byte, base, end, now int64) {
	if !h.Transactional() {
		return
	}
	if st.txn == nil {
		st.txn = &txnState{}
	}
	t := st.txn
	open := -1
	for i, sp := range t.spans {
		if sp.pid == h.ProducerID && sp.end == 0 {
			open = i
			break
		}
	}
	if !h.Control() {
		if open < 0 {
			t.spans = append(t.spans, txnSpan{pid: h.ProducerID, first: base, at: now})
		}
		return
	}
	m, err := record.ControlMarker(batch)
	if err != nil || open < 0 {
		return // a marker of a transaction with no data here: nothing to end
	}
	t.spans[open].end = end
	if m == record.MarkerAbort {
		t.aborted = append(t.aborted, AbortedTxn{ProducerID: h.ProducerID, FirstOffset: t.spans[open].first, LastOffset: base})
	}
}

// txnOpenLocked reports whether producer pid has a transaction open on
// the stream (data written, no marker yet).
func (st *streamState) txnOpenLocked(pid int64) bool {
	if st.txn == nil {
		return false
	}
	for _, sp := range st.txn.spans {
		if sp.pid == pid && sp.end == 0 {
			return true
		}
	}
	return false
}

// lastStableLocked is the stream's last stable offset below hwm; spans
// whose marker is durable are dropped on the way.
func (st *streamState) lastStableLocked(hwm int64) int64 {
	t := st.txn
	if t == nil {
		return hwm
	}
	lso := hwm
	kept := t.spans[:0]
	for _, sp := range t.spans {
		if sp.end != 0 && sp.end <= st.hwm {
			continue // ended by a durable marker
		}
		kept = append(kept, sp)
		lso = min(lso, sp.first)
	}
	clear(t.spans[len(kept):])
	t.spans = kept
	return lso
}

// abortedLocked lists the aborted transactions that overlap [from, to).
func (st *streamState) abortedLocked(from, to int64) []AbortedTxn {
	if st.txn == nil {
		return nil
	}
	var out []AbortedTxn
	for _, a := range st.txn.aborted {
		if a.LastOffset >= from && a.FirstOffset < to {
			out = append(out, a)
		}
	}
	return out
}

// trimAbortedLocked forgets aborted transactions that ended below start
// (trimmed away by retention or DeleteRecords).
func (st *streamState) trimAbortedLocked(start int64) {
	if st.txn == nil {
		return
	}
	a := st.txn.aborted
	i := sort.Search(len(a), func(i int) bool { return a[i].LastOffset >= start })
	if i > 0 {
		st.txn.aborted = append(a[:0:0], a[i:]...)
	}
}

// hiddenFromCommitted reports whether a batch is one a read_committed
// reader never sees: a marker, or data of an aborted transaction.
func hiddenFromCommitted(h record.BatchHeader, aborted []AbortedTxn) bool {
	if h.Control() {
		return true
	}
	if !h.Transactional() {
		return false
	}
	for _, a := range aborted {
		if a.ProducerID == h.ProducerID && h.BaseOffset >= a.FirstOffset && h.BaseOffset < a.LastOffset {
			return true
		}
	}
	return false
}

// txnSnapJSON is the transaction state in a flush's state snapshot.
type txnSnapJSON struct {
	Open    [][]int64  `json:"open,omitempty"`    // pid, first, end, opened at (ms)
	Aborted [][3]int64 `json:"aborted,omitempty"` // pid, first, last
}

func (t *txnState) snapshot() *txnSnapJSON {
	if t == nil || (len(t.spans) == 0 && len(t.aborted) == 0) {
		return nil
	}
	s := &txnSnapJSON{}
	for _, sp := range t.spans {
		s.Open = append(s.Open, []int64{sp.pid, sp.first, sp.end, sp.at})
	}
	for _, a := range t.aborted {
		s.Aborted = append(s.Aborted, [3]int64{a.ProducerID, a.FirstOffset, a.LastOffset})
	}
	return s
}

func (s *txnSnapJSON) restore() *txnState {
	if s == nil {
		return nil
	}
	t := &txnState{}
	for _, o := range s.Open {
		if len(o) < 3 {
			continue
		}
		sp := txnSpan{pid: o[0], first: o[1], end: o[2]}
		if len(o) > 3 {
			sp.at = o[3]
		}
		t.spans = append(t.spans, sp)
	}
	for _, a := range s.Aborted {
		t.aborted = append(t.aborted, AbortedTxn{ProducerID: a[0], FirstOffset: a[1], LastOffset: a[2]})
	}
	return t
}

// KafkaProducer is one Kafka producer a stream remembers
// (DescribeProducers).
type KafkaProducer struct {
	ProducerID    int64
	Epoch         int64
	LastSequence  int64 // -1: none written in this epoch
	LastTimestamp int64 // ms; -1 unknown
	// TxnStartOffset is the first offset of its open transaction, -1 if
	// none.
	TxnStartOffset int64
}

// KafkaProducers lists the Kafka producers of a stream this node owns.
func (s *Service) KafkaProducers(ctx context.Context, name string) ([]KafkaProducer, error) {
	st, err := s.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.lastStableLocked(st.hwm) // drops transactions whose marker is durable
	var out []KafkaProducer
	for id, ps := range st.producers {
		pidText, ok := strings.CutPrefix(id, "kafka:")
		if !ok {
			continue
		}
		pid, err := strconv.ParseInt(pidText, 10, 64)
		if err != nil {
			continue
		}
		kp := KafkaProducer{ProducerID: pid, Epoch: int64(ps.epoch), LastSequence: -1, LastTimestamp: -1, TxnStartOffset: -1}
		if !ps.fresh && ps.n > 0 {
			kp.LastSequence = int64(ps.lastSeq)
			kp.LastTimestamp = ps.recent[(ps.n-1)%dedupWindow].ts
		}
		if st.txn != nil {
			for _, sp := range st.txn.spans {
				if sp.pid == pid && sp.end == 0 {
					kp.TxnStartOffset = sp.first
				}
			}
		}
		out = append(out, kp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ProducerID < out[j].ProducerID })
	return out, nil
}

// StaleTxn is a transaction open on a stream for longer than asked.
type StaleTxn struct {
	Stream     string
	ProducerID int64
	Epoch      int16
}

// StaleTransactions lists the transactions open on this node's streams
// since before olderThan ago: ones no coordinator will end (its record of
// the partition was lost with its node, or the producer wrote without
// AddPartitionsToTxn). The Kafka frontend aborts them, so the stream's
// last stable offset moves on.
func (s *Service) StaleTransactions(olderThan time.Duration) []StaleTxn {
	cutoff := s.cfg.Now().Add(-olderThan).UnixMilli()
	s.mu.RLock()
	sts := make([]*streamState, 0, 8)
	for _, st := range s.byID {
		sts = append(sts, st)
	}
	s.mu.RUnlock()
	var out []StaleTxn
	for _, st := range sts {
		st.mu.Lock()
		if st.txn != nil && !st.deleted {
			st.lastStableLocked(st.hwm)
			for _, sp := range st.txn.spans {
				if sp.end != 0 || sp.at > cutoff {
					continue
				}
				var epoch int16
				if ps := st.producers[KafkaProducerID(sp.pid)]; ps != nil {
					epoch = int16(ps.epoch)
				}
				out = append(out, StaleTxn{Stream: st.info.Name, ProducerID: sp.pid, Epoch: epoch})
			}
		}
		st.mu.Unlock()
	}
	return out
}
