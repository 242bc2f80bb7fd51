package wal

import (
	"bytes"
	"fmt"
	"io"
)

// readChunk is how much recovery reads per pread: large enough that scanning
// a 64 MiB segment is a few dozen syscalls, small enough to keep Open's
// memory flat however large the segments are.
const readChunk = 1 << 20

// window serves byte ranges of a segment through one reusable buffer, so
// scanning costs one pread per readChunk rather than two per record, and a
// payload handed to a Replay callback can point straight into the buffer.
type window struct {
	r    io.ReaderAt
	size int64
	base int64 // file offset of buf[0]
	buf  []byte
}

func (w *window) reset(r io.ReaderAt, size int64) {
	w.r, w.size, w.base, w.buf = r, size, 0, w.buf[:0]
}

// bytes returns the file's bytes [off, off+n); the caller guarantees that
// off+n <= w.size. The result is valid until the next call.
func (w *window) bytes(off int64, n int) ([]byte, error) {
	if off >= w.base && off+int64(n) <= w.base+int64(len(w.buf)) {
		i := int(off - w.base)
		return w.buf[i : i+n], nil
	}
	want := max(n, readChunk)
	if rest := w.size - off; int64(want) > rest {
		want = int(rest)
	}
	if cap(w.buf) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	w.base = off
	if _, err := w.r.ReadAt(w.buf, off); err != nil {
		w.buf = w.buf[:0]
		return nil, err
	}
	return w.buf[:n], nil
}

const whyZeroHeader = "zeroed record header"

// walk visits the valid records of a segment from offset 0 until limit or
// the first record that is not valid, and returns the offset where the valid
// prefix ends. fn sees the payload offset and bytes; the bytes are only valid
// during the call, and an error from fn is returned unchanged.
func walk(w *window, seg uint64, limit int64, fn func(off int64, payload []byte) error) (end int64, entries int, why string, err error) {
	seed := segmentSeed(seg)
	var off int64
	for off < limit {
		if limit-off < headerSize {
			return off, entries, "record header cut short by end of file", nil
		}
		h, err := w.bytes(off, headerSize)
		if err != nil {
			return off, entries, "", fmt.Errorf("wal: read segment %d at offset %d: %w", seg, off, err)
		}
		n, pcrc, st := parseHeader(h, seed)
		switch {
		case st == headerZero:
			return off, entries, whyZeroHeader, nil
		case st == headerBad:
			return off, entries, "record header checksum mismatch", nil
		case n > MaxEntrySize:
			return off, entries, fmt.Sprintf("record length %d exceeds the %d byte limit", n, MaxEntrySize), nil
		case int64(n) > limit-off-headerSize:
			return off, entries, fmt.Sprintf("record of %d bytes runs past end of file", n), nil
		}
		p, err := w.bytes(off+headerSize, int(n))
		if err != nil {
			return off, entries, "", fmt.Errorf("wal: read segment %d at offset %d: %w", seg, off+headerSize, err)
		}
		if payloadCRC(p) != pcrc {
			return off, entries, "payload checksum mismatch", nil
		}
		if fn != nil {
			if err := fn(off+headerSize, p); err != nil {
				return off, entries, "", err
			}
		}
		entries++
		off += headerSize + int64(n)
	}
	return off, entries, "", nil
}

// segScan is what recovery learned about one segment file.
type segScan struct {
	end     int64 // end of the valid prefix: where the next record goes
	entries int
	// junkEnd is one past the last non-zero byte at or after end; junkEnd >
	// end means bytes that are neither a valid record nor zero padding.
	junkEnd int64
	why     string // why the valid prefix ended, when junkEnd > end
}

// scanSegment finds the valid prefix of a segment image and classifies what
// follows it. It returns ErrCorrupt only for damage that cannot be a torn
// tail in any segment (a valid record after the damage); whether junk after
// the prefix is a torn tail or corruption depends on whether this is the
// last segment, which the caller knows.
func scanSegment(w *window, r io.ReaderAt, size int64, seg uint64) (segScan, error) {
	w.reset(r, size)
	end, entries, why, err := walk(w, seg, size, nil)
	if err != nil {
		return segScan{}, err
	}
	s := segScan{end: end, entries: entries, junkEnd: end, why: why}
	if end == size {
		return s, nil
	}
	if s.junkEnd, err = nonZeroEnd(w, end, size); err != nil {
		return segScan{}, fmt.Errorf("wal: read segment %d: %w", seg, err)
	}
	if s.junkEnd == end {
		return s, nil // zero padding, or a header cut short that happened to be zeros
	}
	at, found, err := findRecord(r, size, seg, end+1, s.junkEnd)
	if err != nil {
		return segScan{}, fmt.Errorf("wal: read segment %d: %w", seg, err)
	}
	if found {
		return segScan{}, fmt.Errorf("%w: segment %d (%s) offset %d: %s, but a valid record follows at offset %d",
			ErrCorrupt, seg, segmentName(seg), end, why, at)
	}
	if why == whyZeroHeader {
		s.why = fmt.Sprintf("non-zero bytes in the padding after the last record, up to offset %d", s.junkEnd)
	}
	return s, nil
}

// nonZeroEnd returns one past the last non-zero byte in [from, size), or
// from if there is none.
func nonZeroEnd(w *window, from, size int64) (int64, error) {
	last := from
	for off := from; off < size; {
		n := int(min(readChunk, size-off))
		b, err := w.bytes(off, n)
		if err != nil {
			return 0, err
		}
		if k := lastNonZero(b); k > 0 {
			last = off + int64(k)
		}
		off += int64(n)
	}
	return last, nil
}

// findRecord reports the first offset in [from, to) where a complete, valid
// record of segment seg starts. Only bytes equal to kindEntry can start one,
// and the header checksum rejects almost all of those without touching the
// payload, so the cost is one pass over [from, to).
func findRecord(r io.ReaderAt, size int64, seg uint64, from, to int64) (int64, bool, error) {
	seed := segmentSeed(seg)
	buf := make([]byte, min(readChunk, max(to-from, 0))+headerSize-1)
	var payload []byte
	for base := from; base < to; {
		scan := int(min(readChunk, to-base))
		// Read headerSize-1 bytes beyond the scanned range so a header that
		// starts near its end is still inside the buffer.
		n := int(min(int64(scan+headerSize-1), size-base))
		b := buf[:n]
		if _, err := r.ReadAt(b, base); err != nil {
			return 0, false, err
		}
		for i := 0; i < scan; {
			j := bytes.IndexByte(b[i:scan], kindEntry)
			if j < 0 {
				break
			}
			i += j
			at := base + int64(i)
			i++
			if at+headerSize > size {
				continue
			}
			ln, pcrc, st := parseHeader(b[i-1:i-1+headerSize], seed)
			if st != headerValid || ln > MaxEntrySize || int64(ln) > size-at-headerSize {
				continue
			}
			if cap(payload) < int(ln) {
				payload = make([]byte, ln)
			}
			payload = payload[:ln]
			if _, err := r.ReadAt(payload, at+headerSize); err != nil {
				return 0, false, err
			}
			if payloadCRC(payload) == pcrc {
				return at, true, nil
			}
		}
		base += int64(scan)
	}
	return 0, false, nil
}
