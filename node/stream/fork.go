package stream

// Forks. A fork is a stream whose history up to a fork point is its
// source's: it shares the source's stored batches instead of copying them,
// and only its own appends go to its own log, which starts at the fork
// point (metadata.StreamFork.End). The fork uses the source's offsets for the
// inherited part, so an offset means the same record in both up to the fork
// point. Forks of forks chain; reads walk the chain.
//
// A fork point can fall inside a source message:
//   - JSON streams store one record per value, so a sub-offset of n values
//     past the fork point just moves End n records further;
//   - other streams store one record per append, so a sub-offset of n bytes
//     inherits the record at the fork point cut to its first n bytes
//     (LastBytes); the fork's own log starts after that record.
// Either way nothing is copied: the cut is applied when the record is read.
//
// The source's data must outlive the fork: each fork holds a reference on
// its source (metadata.Stream.ForkRefs, see lifecycle.go), and a source deleted
// while referenced is only soft-deleted.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// ForkOptions make a create a fork of Source.
type ForkOptions struct {
	// Source is the source stream's name.
	Source string
	// Offset is the fork point in the source; -1 means the source's tail.
	Offset int64
	// SubOffset moves the fork point into the message at Offset: values for
	// JSON streams, bytes otherwise. 0 means none.
	SubOffset int64
}

// logStart is the first offset of a stream's own log: 0, or a fork's fork
// point (End).
func logStart(m metadata.Stream) int64 {
	if m.Fork != nil {
		return m.Fork.End
	}
	return 0
}

// resolveFork validates a fork create against its source and fills plan and
// the inherited parts of opts (content type, expiry).
func (s *Service) resolveFork(ctx context.Context, opts *CreateOptions, plan *createPlan) error {
	fo := opts.Fork
	if fo.SubOffset < 0 {
		return fmt.Errorf("%w: negative fork sub-offset", ErrInvalidArgument)
	}
	if fo.Offset < -1 {
		return fmt.Errorf("%w: fork offset %d", ErrInvalidArgument, fo.Offset)
	}
	if err := ValidateName(fo.Source); err != nil {
		return fmt.Errorf("%w: fork source: %v", ErrInvalidArgument, err)
	}
	src := s.local(fo.Source)
	if src == nil {
		// Not served here: the routing step claims it if this node should
		// own it, or names its owner. A fork is created beside its source
		// (it reads the source's log), so a source owned elsewhere is a
		// *RedirectError, which the frontend answers with a 307 to the
		// fork's own path on the source's owner (or 421 across protocols).
		var err error
		if src, err = s.route(ctx, fo.Source); err != nil {
			if errors.Is(err, ErrNotFound) {
				return fmt.Errorf("%w: fork source %s", ErrNotFound, fo.Source)
			}
			return fmt.Errorf("fork source: %w", err)
		}
	}
	if err := s.gate(src); err != nil {
		if errors.Is(err, ErrGone) {
			return fmt.Errorf("%w: fork source %s was deleted (its history is kept for its forks)", ErrConflict, fo.Source)
		}
		return fmt.Errorf("fork source: %w", err)
	}
	srcCT := src.info.ContentType
	if strings.TrimSpace(opts.ContentType) == "" {
		opts.ContentType = srcCT
	} else if !SameContentType(opts.ContentType, srcCT) {
		return fmt.Errorf("%w: fork source %s has content type %q, not %q", ErrConflict, fo.Source, srcCT, opts.ContentType)
	}
	src.mu.Lock()
	tail, srcStart := src.hwm, src.info.StartOffset
	src.mu.Unlock()
	off := fo.Offset
	plan.forkOffsetGiven = off >= 0
	if off < 0 {
		off = tail
	}
	if off > tail {
		return fmt.Errorf("%w: fork offset %d is beyond the end (%d) of %s", ErrInvalidArgument, off, tail, fo.Source)
	}
	fork := &metadata.StreamFork{Source: src.info.Name, SourceID: src.info.ID, Offset: off, SubOffset: fo.SubOffset, End: off}
	if sub := fo.SubOffset; sub > 0 {
		count, first, err := s.messageAt(ctx, src, off)
		if err != nil {
			return err
		}
		if count == 0 {
			return fmt.Errorf("%w: fork sub-offset %d, but %s has no message at offset %d", ErrInvalidArgument, sub, fo.Source, off)
		}
		if wire.IsDSJSONMode(srcCT) {
			if sub > count {
				return fmt.Errorf("%w: fork sub-offset %d is past the %d values of the message at offset %d", ErrInvalidArgument, sub, count, off)
			}
			fork.End = off + sub
		} else {
			n := int64(len(first.Value))
			if sub > n {
				return fmt.Errorf("%w: fork sub-offset %d is past the %d bytes of the message at offset %d", ErrInvalidArgument, sub, n, off)
			}
			fork.End = off + 1
			if sub < n {
				fork.LastBytes = sub
			}
		}
	}
	if opts.TTL == 0 && opts.ExpiresAt.IsZero() {
		// A fork without its own expiry inherits its source's: the same
		// sliding window (refreshed independently) or the same deadline.
		opts.TTL = src.life.ttl
		opts.ExpiresAt = src.life.expiry()
	}
	plan.fork = fork
	plan.src = src
	plan.forkStart = min(srcStart, off)
	return nil
}

// segment is one stretch [lo, hi) of a stream's view served from st's own
// log.
type segment struct {
	st     *streamState
	lo, hi int64
}

// view resolves st's offsets [0, hi) into segments of its own log and its
// sources' logs, in offset order, plus the cuts of inherited records split
// by a byte sub-offset (offset → bytes kept; the smallest cut wins when
// forks of forks cut the same record).
func (s *Service) view(ctx context.Context, st *streamState, hi int64) ([]segment, map[int64]int64, error) {
	var segs []segment
	var cuts map[int64]int64
	cur := st
	for depth := 0; ; depth++ {
		if depth > 1000 {
			return nil, nil, fmt.Errorf("%w: fork chain of %s is too deep or cyclic", ErrUnavailable, st.info.Name)
		}
		f := cur.info.Fork
		lo := int64(0)
		if f != nil {
			lo = f.End
		}
		if lo < hi {
			segs = append(segs, segment{st: cur, lo: lo, hi: hi})
		}
		if f == nil || hi <= 0 {
			break
		}
		if f.LastBytes > 0 && f.End-1 < hi {
			if cuts == nil {
				cuts = make(map[int64]int64)
			}
			if c, ok := cuts[f.End-1]; !ok || f.LastBytes < c {
				cuts[f.End-1] = f.LastBytes
			}
		}
		hi = min(hi, f.End)
		s.mu.RLock()
		src := s.byID[f.SourceID]
		s.mu.RUnlock()
		if src == nil {
			var err error
			if src, err = s.remoteSource(ctx, f); err != nil {
				return nil, nil, fmt.Errorf("%w: fork source %s (id %d) of %s is missing: %v", ErrUnavailable, f.Source, f.SourceID, cur.info.Name, err)
			}
			if src.next < hi {
				// Object storage does not hold all the source's records
				// below the fork point yet. A live owner uploads them
				// with its next flush; an owner that is gone left them
				// to whoever serves the source next, which takes over
				// what the copies hold and makes the rest a gap. Nobody
				// may ask for the source itself, so if this node is to
				// serve it, it does so now.
				if own, err := s.route(ctx, f.Source); err == nil && own.info.ID == f.SourceID {
					src = own
				}
			}
		}
		cur = src
	}
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	return segs, cuts, nil
}

// remoteSource is a read-only view of a fork's source that this node does
// not serve: its records in object storage. A fork is created beside its
// source, but a takeover places each stream on its own, so after one the
// source may be served by another node (or by none yet). Records the
// source's owner has not uploaded yet are not in the view; a read that
// needs them fails (ErrUnavailable) until they are.
func (s *Service) remoteSource(ctx context.Context, f *metadata.StreamFork) (*streamState, error) {
	if s.tier == nil || s.tcfg.Manifests == nil {
		return nil, errors.New("not served here and no object storage to read it from")
	}
	rctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	m, err := s.reg.GetStream(rctx, f.Source)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	if m.ID != f.SourceID {
		return nil, fmt.Errorf("the name now belongs to stream id %d", m.ID)
	}
	// A source's records below a fork point are usually long uploaded: a
	// listing a few seconds old holds them, and a fresh one is needed
	// only when it does not reach the fork point.
	var st *streamState
	for _, age := range []time.Duration{5 * time.Second, 0} {
		ms, err := s.manifestsFresh(rctx, age)
		if err != nil {
			return nil, fmt.Errorf("manifests: %w", err)
		}
		st = &streamState{info: m}
		if m.Fork != nil {
			st.next, st.hwm, st.uploaded = m.Fork.End, m.Fork.End, m.Fork.End
		}
		if err := st.applyPieces(indexManifests(ms)[m.ID]); err != nil {
			return nil, err
		}
		st.hwm = max(st.hwm, st.uploaded, st.next)
		if st.next >= f.End {
			break
		}
	}
	return st, nil
}

// messageAt returns how many records of the message (append batch) at off
// are inside st's view, and the record at off (cut as the view cuts it).
func (s *Service) messageAt(ctx context.Context, st *streamState, off int64) (int64, record.Record, error) {
	st.mu.Lock()
	hwm := st.hwm
	st.mu.Unlock()
	if off >= hwm {
		return 0, record.Record{}, nil
	}
	segs, cuts, err := s.view(ctx, st, hwm)
	if err != nil {
		return 0, record.Record{}, err
	}
	for _, sg := range segs {
		if off < sg.lo || off >= sg.hi {
			continue
		}
		var count int64
		var rec record.Record
		found := false
		_, err := s.walkOwn(ctx, sg.st, off, sg.hi, 64<<10, func(batch []byte, h record.BatchHeader) (bool, error) {
			if h.BaseOffset > off {
				return false, nil
			}
			recs, err := record.DecodeRecords(batch, nil)
			if err != nil {
				return false, err
			}
			for _, r := range recs {
				if r.Offset == off {
					rec, found = r, true
				}
			}
			count = min(h.LastOffset()+1, sg.hi) - off
			return false, nil
		})
		if err != nil || !found {
			return 0, record.Record{}, err
		}
		if c, ok := cuts[rec.Offset]; ok && int64(len(rec.Value)) > c {
			rec.Value = rec.Value[:c]
		}
		return count, rec, nil
	}
	return 0, record.Record{}, nil
}

// walkOwn calls fn with each whole batch of st's own log that holds offsets
// in [from, to), in order, until fn returns false. maxBytes hints how much
// to fetch per chunk from object storage. It returns the offset it reached:
// past the last batch given to fn and past the gaps (offsets a takeover
// skipped) it walked over.
func (s *Service) walkOwn(ctx context.Context, st *streamState, from, to int64, maxBytes int, fn func(batch []byte, h record.BatchHeader) (more bool, err error)) (int64, error) {
	st.mu.Lock()
	i := sort.Search(len(st.chunks), func(i int) bool { return st.chunks[i].next > from })
	// Copy the chunks so the lock is not held during I/O; the slice is
	// rewritten by flushes, so never alias it.
	var refs []chunk
	for j := i; j < len(st.chunks) && st.chunks[j].base < to; j++ {
		refs = append(refs, st.chunks[j])
	}
	st.mu.Unlock()
	pos := from
	for _, c := range refs {
		if err := ctx.Err(); err != nil {
			return pos, err
		}
		if c.gap {
			pos = max(pos, min(c.next, to))
			continue
		}
		for pos < min(c.next, to) {
			data, err := s.chunkBatches(ctx, st.info.ID, c, pos, maxBytes)
			if err != nil {
				return pos, fmt.Errorf("%w: read %s at offset %d: %v", ErrUnavailable, st.info.Name, pos, err)
			}
			more, progressed := true, false
			err = record.SplitBatches(data, func(batch []byte, h record.BatchHeader) error {
				if !more || h.LastOffset() < pos || h.BaseOffset >= to {
					return nil
				}
				var err error
				more, err = fn(batch, h)
				pos, progressed = h.LastOffset()+1, true
				return err
			})
			if err != nil {
				return pos, fmt.Errorf("%w: decode %s at offset %d: %v", ErrUnavailable, st.info.Name, pos, err)
			}
			if !more {
				return pos, nil
			}
			if !progressed {
				return pos, fmt.Errorf("%w: %s: no batch holds offset %d", ErrUnavailable, st.info.Name, pos)
			}
		}
	}
	return pos, nil
}

// readOwn appends to out the records of st's own log in [from, to), at most
// limit records and, past the first, about maxBytes of keys and values.
// When it read everything it could (not stopped by limit or maxBytes),
// walked is the offset it reached (past trailing gaps); otherwise -1.
func (s *Service) readOwn(ctx context.Context, st *streamState, from, to int64, limit, maxBytes int, out []record.Record) (_ []record.Record, walked int64, _ error) {
	bytes, n := 0, 0
	full := false
	reached, err := s.walkOwn(ctx, st, from, to, maxBytes, func(batch []byte, h record.BatchHeader) (bool, error) {
		// Decode into a fresh slice: returned records alias batch.
		recs, err := record.DecodeRecords(batch, nil)
		if err != nil {
			return false, err
		}
		for _, r := range recs {
			if r.Offset < from || r.Offset >= to {
				continue
			}
			size := len(r.Value) + len(r.Key)
			if n > 0 && (n >= limit || bytes+size > maxBytes) {
				full = true
				return false, nil
			}
			out = append(out, r)
			bytes += size
			n++
		}
		return true, nil
	})
	if full {
		reached = -1
	}
	return out, reached, err
}

// readView is Read for a fork: it stitches the source chain's records below
// the fork point to the fork's own.
func (s *Service) readView(ctx context.Context, st *streamState, opts ReadOptions) (ReadResult, error) {
	limit, maxBytes := s.readLimits(opts)

	st.mu.Lock()
	hwm := st.hwm
	info := st.infoLocked()
	st.mu.Unlock()
	if opts.Offset < 0 || opts.Offset > hwm {
		return ReadResult{}, fmt.Errorf("%w: offset %d of %s, readable range is [%d, %d]", ErrOffsetOutOfRange, opts.Offset, info.Name, info.StartOffset, hwm)
	}
	segs, cuts, err := s.view(ctx, st, hwm)
	if err != nil {
		return ReadResult{}, err
	}
	res := ReadResult{NextOffset: opts.Offset, From: opts.Offset, Stream: info}
	bytes := 0
	for _, sg := range segs {
		if sg.hi <= res.NextOffset {
			continue
		}
		left := limit - len(res.Records)
		if left <= 0 || (len(res.Records) > 0 && bytes >= maxBytes) {
			break
		}
		from := max(res.NextOffset, sg.lo)
		n := len(res.Records)
		budget := maxBytes - bytes
		if n == 0 {
			budget = maxBytes
		}
		var walked int64
		res.Records, walked, err = s.readOwn(ctx, sg.st, from, sg.hi, left, budget, res.Records)
		if err != nil {
			return ReadResult{}, err
		}
		for i := n; i < len(res.Records); i++ {
			r := &res.Records[i]
			if c, ok := cuts[r.Offset]; ok && int64(len(r.Value)) > c {
				r.Value = r.Value[:c]
			}
			bytes += len(r.Value) + len(r.Key)
		}
		if len(res.Records) > n {
			res.NextOffset = res.Records[len(res.Records)-1].Offset + 1
		}
		// A segment that ends in a gap (offsets a takeover skipped) is
		// walked past; otherwise a reader would ask for the gap forever.
		res.NextOffset = max(res.NextOffset, min(walked, sg.hi))
		if res.NextOffset < sg.hi {
			if walked >= 0 && len(res.Records) == n {
				// The walk ended below the segment's end with nothing
				// read: no record holds the offset. Say so rather than
				// answer an empty page, not up to date, forever.
				return ReadResult{}, fmt.Errorf("%w: %s: no record of %s holds offset %d", ErrUnavailable, info.Name, sg.st.info.Name, res.NextOffset)
			}
			break // the page is full
		}
	}
	res.UpToDate = res.NextOffset >= hwm
	res.Closed = res.UpToDate && info.Closed
	return res, nil
}
