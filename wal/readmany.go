package wal

import (
	"errors"
	"fmt"
	"os"
	"slices"
)

// maxReadGap is the most bytes between two wanted records that ReadMany
// reads over rather than starting another pread: other records (of
// streams not being read, or metadata) sit between the wanted ones.
const maxReadGap = 4 << 10

// ReadMany reads the payloads at ps, verifying each record's checksums as
// ReadAt does, with one pread per run of records that lie next to each
// other in a segment (as a flush's records do: a group commit writes the
// appends of many streams back to back). The payloads are left in one
// buffer, grown from buf[:0] and returned for reuse; fn is called with
// every ps[i] and its payload in the order of ps, and the payload stays
// valid until buf is reused. Every position must be durable; fn is
// called only once every record has been read and verified, and ReadMany
// stops at fn's first error.
func (w *WAL) ReadMany(ps []Pos, buf []byte, fn func(i int, payload []byte) error) ([]byte, error) {
	if err := w.failed.Load(); err != nil {
		return buf[:0], *err
	}
	if w.isClosed.Load() {
		return buf[:0], ErrClosed
	}
	if len(ps) == 0 {
		return buf[:0], nil
	}
	for _, p := range ps {
		if p.Offset < headerSize || p.Len < 0 || p.Len > MaxEntrySize {
			return buf[:0], fmt.Errorf("%w: invalid position %+v", ErrNotDurable, p)
		}
	}
	// Positions in log order; at[i] is where ps[i]'s record starts in buf.
	order := make([]int32, len(ps))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		pa, pb := &ps[a], &ps[b]
		if pa.Segment != pb.Segment {
			if pa.Segment < pb.Segment {
				return -1
			}
			return 1
		}
		return int(pa.Offset - pb.Offset)
	})
	type run struct {
		seg      uint64
		from, to int64 // record bytes [from, to) of seg
		at       int   // where the run starts in buf
	}
	var runs []run
	at := make([]int, len(ps))
	total := 0
	for _, i := range order {
		p := ps[i]
		start, end := p.Offset-headerSize, p.Offset+int64(p.Len)
		if n := len(runs); n > 0 && runs[n-1].seg == p.Segment && start >= runs[n-1].from && start <= runs[n-1].to+maxReadGap {
			r := &runs[n-1]
			if end > r.to {
				total += int(end - r.to)
				r.to = end
			}
			at[i] = r.at + int(start-r.from)
			continue
		}
		runs = append(runs, run{seg: p.Segment, from: start, to: end, at: total})
		at[i] = total
		total += int(end - start)
	}
	if cap(buf) < total {
		// A quarter more, so that the next, somewhat larger call (the
		// flusher's grow from one flush to the next) fits too.
		buf = make([]byte, total, total+total/4)
	}
	buf = buf[:total]
	for _, r := range runs {
		f, err := w.durableFile(Pos{Segment: r.seg, Offset: r.from + headerSize}, r.to)
		if err != nil {
			return buf[:0], err
		}
		if _, err := f.ReadAt(buf[r.at:r.at+int(r.to-r.from)], r.from); err != nil {
			return buf[:0], w.readError(err, r.seg, r.from)
		}
	}
	seg, seed := ps[0].Segment, segmentSeed(ps[0].Segment)
	for i, p := range ps {
		if p.Segment != seg {
			seg, seed = p.Segment, segmentSeed(p.Segment)
		}
		if err := checkRecord(buf[at[i]:at[i]+headerSize+int(p.Len)], p, seed); err != nil {
			return buf[:0], err
		}
	}
	for i, p := range ps {
		if err := fn(i, buf[at[i]+headerSize:at[i]+headerSize+int(p.Len)]); err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// durableFile returns the file of pos's segment once the log's durable
// point covers pos's record up to end, or why it cannot be read.
func (w *WAL) durableFile(pos Pos, end int64) (File, error) {
	w.segMu.RLock()
	defer w.segMu.RUnlock()
	if len(w.segs) == 0 {
		return nil, ErrClosed
	}
	first := w.segs[0].num
	if pos.Segment < first {
		return nil, fmt.Errorf("%w: segment %d (oldest is %d)", ErrRemoved, pos.Segment, first)
	}
	if pos.Segment > w.durSeg || (pos.Segment == w.durSeg && end > w.durEnd) {
		return nil, fmt.Errorf("%w: %+v", ErrNotDurable, pos)
	}
	s := w.segs[pos.Segment-first]
	if pos.Segment < w.durSeg && end > s.end {
		return nil, fmt.Errorf("%w: %+v is past the end of segment %d", ErrNotDurable, pos, pos.Segment)
	}
	return s.f, nil
}

// readError wraps a failed pread of segment seg at off.
func (w *WAL) readError(err error, seg uint64, off int64) error {
	if errors.Is(err, os.ErrClosed) { // closed under us by Close or RemoveSegmentsBefore
		if w.isClosed.Load() {
			return ErrClosed
		}
		return fmt.Errorf("%w: segment %d", ErrRemoved, seg)
	}
	return fmt.Errorf("wal: read segment %d at offset %d: %w", seg, off, err)
}

// checkRecord verifies that rec, the record bytes read for pos, carries a
// valid header for exactly pos.Len bytes and a matching payload checksum;
// seed is segmentSeed(pos.Segment).
func checkRecord(rec []byte, pos Pos, seed uint32) error {
	ln, pcrc, st := parseHeader(rec[:headerSize], seed)
	switch {
	case st != headerValid:
		return fmt.Errorf("%w: segment %d (%s) offset %d: no valid record header for %+v",
			ErrCorrupt, pos.Segment, segmentName(pos.Segment), pos.Offset-headerSize, pos)
	case ln != uint32(pos.Len):
		return fmt.Errorf("%w: segment %d (%s) offset %d: record holds %d bytes, position says %d",
			ErrCorrupt, pos.Segment, segmentName(pos.Segment), pos.Offset-headerSize, ln, pos.Len)
	case payloadCRC(rec[headerSize:]) != pcrc:
		return fmt.Errorf("%w: segment %d (%s) offset %d: payload checksum mismatch",
			ErrCorrupt, pos.Segment, segmentName(pos.Segment), pos.Offset-headerSize)
	}
	return nil
}
