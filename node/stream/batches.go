package stream

// Stored-batch reads: the Kafka fetch path. A Kafka consumer wants the
// RecordBatches exactly as they were stored (client compression, CreateTime
// and headers untouched), so these reads return batch bytes instead of
// decoded records, through the same chunk index as Read: the WAL tail, the
// object cache and object storage.

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/PicoMQ/picomq/record"
)

// BatchRead is one page of stored batches.
type BatchRead struct {
	// Batches are whole RecordBatch v2 batches, concatenated, with their
	// stream offsets as base offsets. The first one holds the requested
	// offset (it may start before it); the page is empty at the end.
	Batches []byte
	// Pieces is the page as ReadBatchPieces returns it instead of
	// Batches: consecutive stretches of the batches, in order, left where
	// they lie (the block cache's memory for history, a fresh buffer for
	// the WAL). A batch that straddles two of the cache's GETs lies in
	// two adjacent pieces (record.WalkPieces reads them). Never modify
	// them.
	Pieces [][]byte
	// HighWatermark is one past the last durable offset: the end of what
	// any read may return.
	HighWatermark int64
	// LastStable is the last stable offset (<= HighWatermark): the end of
	// what a Kafka read_committed fetch may return. Aborted lists the
	// aborted transactions overlapping [offset, LastStable) of the read,
	// for read_committed fetches (docs/kafka.md, "Transactions").
	LastStable int64
	Aborted    []AbortedTxn
	Stream     Info
	// Changed is closed when the high watermark next moves (or the stream
	// goes away from this node). It was taken before the read, so an
	// append landing after the read closes it: a long-poll waits on it
	// without polling and misses nothing.
	Changed <-chan struct{}

	// releases end the loans of cache memory Pieces lie in (Release).
	releases []func()
}

// Release ends the loan of the block cache's memory that Pieces lie in
// (ReadBatchPieces): the Kafka fetch calls it once the response is
// written to the socket (or will not be), after which the cache may
// reuse the memory. Not calling it is safe (the memory is then never
// reused); calling it twice is harmless.
func (b BatchRead) Release() { releaseAll(b.releases) }

// ObjectPageBytes bounds a ReadBatches page read from object storage
// (history): about one GET of the block cache (4 MiB), as a Pico read page.
// A Kafka consumer keeps one fetch in flight (franz-go, librdkafka's
// default), so a fetch answered only once 16 MiB or more has come from the
// store keeps the consumer idle for those GETs at the start and leaves it
// decoding that much alone at the end; pages of one GET let it handle one
// while the read-ahead fetches the next (docs/kafka.md, "Fetch").
const ObjectPageBytes = 4 << 20

// ReadBatches returns stored batches of the stream starting with the one
// that holds offset, about maxBytes long (at most about ObjectPageBytes
// from object storage): whole batches only, and at least
// one batch when one is available even if it alone is larger (Kafka's
// KIP-74 rule, or a consumer would stall on a large batch). Offsets below
// the start offset are *TrimmedError, beyond the high watermark
// ErrOffsetOutOfRange; reading at the high watermark returns no batches.
// Only the owner serves it (a *RedirectError elsewhere): a Kafka consumer
// fetches from the partition leader. A stream deleted while it was being
// looked up is ErrNotFound.
func (s *Service) ReadBatches(ctx context.Context, name string, offset int64, maxBytes int) (BatchRead, error) {
	res, err := s.ReadBatchPieces(ctx, name, offset, maxBytes)
	switch {
	case err != nil:
	case len(res.Pieces) == 1:
		// Handed on as it lies: its loan is never ended (the caller has
		// no Release), so that memory is left to the GC.
		res.Batches = res.Pieces[0]
		res.releases = nil
	case len(res.Pieces) > 1:
		n := 0
		for _, p := range res.Pieces {
			n += len(p)
		}
		res.Batches = make([]byte, 0, n)
		for _, p := range res.Pieces {
			res.Batches = append(res.Batches, p...)
		}
		res.Release() // copied
		res.releases = nil
	}
	res.Pieces = nil
	return res, err
}

// errWalkDone ends a record.WalkPieces early.
var errWalkDone = errors.New("walk done")

// ReadBatchPieces reads like ReadBatches but returns the page as Pieces,
// not gathered into one buffer: the Kafka fetch writes them to the socket
// as they lie (one writev), with no copy of a consumer's history.
func (s *Service) ReadBatchPieces(ctx context.Context, name string, offset int64, maxBytes int) (BatchRead, error) {
	st, err := s.lookup(ctx, name)
	if err != nil {
		return BatchRead{}, err
	}
	st.mu.Lock()
	changed, deleted := st.wakeChanLocked(), st.deleted
	st.mu.Unlock()
	if deleted {
		return BatchRead{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	st.life.touch(s.cfg.Now())
	if err := st.checkTrimmed(offset); err != nil {
		return BatchRead{}, err
	}
	maxBytes = min(max(maxBytes, 1), s.cfg.MaxReadBytes)
	var res BatchRead
	if st.info.Fork != nil {
		res, err = s.readViewBatches(ctx, st, name, offset, maxBytes)
		if len(res.Batches) > 0 {
			res.Pieces, res.Batches = [][]byte{res.Batches}, nil
		}
	} else {
		if err := s.awaitReadable(ctx, st, offset); err != nil {
			return BatchRead{}, err
		}
		res, err = s.readBatches(ctx, st, offset, maxBytes)
		if errors.Is(err, ErrObjectMissing) {
			// Compaction or the collector replaced the object after this
			// read picked it: refresh the index from the manifests, once.
			if rerr := s.refreshObjects(ctx, st); rerr == nil {
				res, err = s.readBatches(ctx, st, offset, maxBytes)
			}
		}
	}
	if err != nil {
		return BatchRead{}, err
	}
	res.Changed = changed
	return res, nil
}

func (s *Service) readBatches(ctx context.Context, st *streamState, offset int64, maxBytes int) (BatchRead, error) {
	name := st.info.Name
	st.mu.Lock()
	hwm := s.readableEnd(st)
	info := st.infoLocked()
	if offset < 0 || offset > hwm {
		st.mu.Unlock()
		return BatchRead{}, fmt.Errorf("%w: offset %d of %s, readable range is [%d, %d]", ErrOffsetOutOfRange, offset, name, info.StartOffset, hwm)
	}
	lso := st.lastStableLocked(hwm)
	aborted := st.abortedLocked(offset, lso)
	i := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > offset })
	// Copy the chunks the page may need so the lock is not held during I/O.
	var refs []chunk
	var want int64
	for j := i; j < len(st.chunks) && st.chunks[j].base < hwm; j++ {
		refs = append(refs, st.chunks[j])
		if st.chunks[j].obj == nil {
			// A WAL chunk is one batch; stop once it surely fills the page.
			if want += int64(st.chunks[j].pos.Len); want > int64(maxBytes) {
				break
			}
		}
	}
	st.mu.Unlock()

	res := BatchRead{HighWatermark: hwm, LastStable: lso, Aborted: aborted, Stream: info}
	s.prefetchNext(refs, offset) // during the first chunk's GET, as Read does
	next := offset
	full := false
	taken := 0 // bytes in res.Pieces
	for ci := 0; ci < len(refs) && !full && next < hwm; {
		c := refs[ci]
		if next >= c.next {
			ci++
			continue
		}
		if c.gap {
			next = min(c.next, hwm) // offsets nobody holds: move past them
			ci++
			continue
		}
		if err := ctx.Err(); err != nil {
			res.Release()
			return BatchRead{}, err
		}
		if c.obj != nil {
			maxBytes = min(maxBytes, ObjectPageBytes)
		}
		before := next
		pieces, release, err := s.chunkPieces(ctx, info.ID, c, next, maxBytes-taken, true, nil)
		if errors.Is(err, ErrObjectMissing) {
			res.Release()
			return BatchRead{}, err
		}
		if err != nil {
			res.Release()
			return BatchRead{}, fmt.Errorf("%w: read %s at offset %d: %v", ErrUnavailable, name, next, err)
		}
		if release != nil {
			res.releases = append(res.releases, release)
		}
		// The batches taken are one stretch of the pieces, handed on as
		// they lie (object reads lend the cache's memory, a batch
		// straddling two GETs in two pieces; WAL reads are fresh or the
		// stream's latest batch held for live readers, tailcache.go):
		// never copied, never written to.
		from, to := -1, -1
		werr := record.WalkPieces(pieces, func(_ [][]byte, h record.BatchHeader, pos int) error {
			if h.LastOffset() < next {
				return nil
			}
			if h.BaseOffset >= hwm {
				full = true
				return errWalkDone
			}
			if t := taken + max(to-from, 0); t > 0 && t+h.Size() > maxBytes {
				full = true
				return errWalkDone
			}
			if from < 0 {
				from = pos
			}
			to = pos + h.Size()
			next = h.LastOffset() + 1
			return nil
		})
		if werr != nil && werr != errWalkDone {
			res.Release()
			return BatchRead{}, fmt.Errorf("%w: stored batch of %s at offset %d: %v", ErrUnavailable, name, next, werr)
		}
		if from >= 0 {
			res.Pieces = record.AppendCut(res.Pieces, pieces, from, to)
			taken += to - from
		}
		switch {
		case full:
		case next >= min(c.next, hwm):
			ci++
		case next == before || taken >= maxBytes || c.obj != nil:
			// An object read that ends inside its range stopped at its
			// byte budget (maxBytes-taken): its next batch does not fit
			// this page either. Asking again would read, verify and
			// throw away that batch, waiting for its GET if it lies in
			// the next one: the first fetch after a restart waited for a
			// second GET that way.
			full = true
		}
	}
	s.prefetchNext(refs, next)
	return res, nil
}

// readViewBatches serves a fork (whose history below the fork point is the
// source's log) by encoding the decoded records of one Read as a single
// uncompressed batch: forks are rare on the Kafka path and this keeps one
// implementation of the fork stitching.
func (s *Service) readViewBatches(ctx context.Context, st *streamState, name string, offset int64, maxBytes int) (BatchRead, error) {
	res, err := s.readView(ctx, st, ReadOptions{Offset: offset, MaxBytes: maxBytes})
	if err != nil {
		return BatchRead{}, err
	}
	st.mu.Lock()
	hwm := st.hwm
	st.mu.Unlock()
	out := BatchRead{HighWatermark: hwm, Stream: res.Stream}
	for i := 0; i < len(res.Records); {
		// One batch per run of consecutive offsets (a batch's offsets are
		// base + index).
		j := i + 1
		for j < len(res.Records) && res.Records[j].Offset == res.Records[j-1].Offset+1 {
			j++
		}
		run := res.Records[i:j]
		out.Batches = record.AppendBatch(out.Batches, record.BatchOptions{
			BaseOffset: run[0].Offset, Timestamp: run[0].Timestamp, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		}, run)
		i = j
	}
	return out, nil
}
