package segment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering/extent"
)

// RangeReader is how segment reads objects: a ranged read with io.ReaderAt
// semantics. objstore.Store implements it, and so does the block cache
// (package cache), which is what the read path should pass.
type RangeReader interface {
	ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error)
}

// Advisor is implemented by RangeReaders that profit from knowing a
// sequential read's extent in advance (the block cache: read-ahead). Reads
// of a stream's range advise the rest of the range as they ask for their
// first chunk, so read-ahead GETs run beside that chunk's GET rather than
// a round trip after it.
type Advisor interface {
	Advise(key string, off, end int64)
}

// Slicer is implemented by RangeReaders that hold fetched bytes in memory
// and can lend them (the block cache). Slice returns at least atLeast
// bytes from off (fewer, with io.EOF, where the object ends) and up to
// atMost when they are at hand, without copying; the caller must not
// modify them. Scans take these as their window buffers, so a catch-up
// through the cache allocates and copies nothing per chunk.
type Slicer interface {
	Slice(ctx context.Context, key string, off int64, atLeast, atMost int) ([]byte, error)
}

// PieceSlicer is implemented by Slicers that can lend a range lying in
// several of their buffers as one piece per buffer instead of copying it
// into one (the block cache: SlicePieces). The pieces are consecutive
// bytes of the object, at least atLeast in all (fewer, with io.EOF, where
// the object ends), the last running on up to atMost in all. Reads that
// return Batches.Pieces use it, so a batch that straddles two of the
// cache's GETs is checked and served in two pieces, never copied.
type PieceSlicer interface {
	SlicePieces(ctx context.Context, key string, off int64, atLeast, atMost int) ([][]byte, error)
}

// PieceLeaser is implemented by PieceSlicers that lend with a reference
// (the block cache: LeasePieces): the pieces stay valid until release is
// called, after which their memory may hold other bytes. The *Pieces
// reads use it and hand the releases on in Batches.Release; release is
// nil when err is neither nil nor io.EOF.
type PieceLeaser interface {
	LeasePieces(ctx context.Context, key string, off int64, atLeast, atMost int) (pieces [][]byte, release func(), err error)
}

// DefaultTailRead is how many bytes Open reads from the end of an object
// in its first request. It covers the trailer and the footer of any
// ordinary object (an 8 MiB object with a few thousand streams), so Open is
// one GET; a larger footer costs exactly one more.
const DefaultTailRead = 64 << 10

// Reader reads the streams of one object. It is immutable after Open and
// safe for concurrent use.
type Reader struct {
	src    RangeReader
	key    string
	size   int64
	footer *Footer
}

// Open reads and validates the trailer and footer of the object key of
// the given size (the size belongs in the registry next to the key; Stat
// returns it otherwise).
func Open(ctx context.Context, src RangeReader, key string, size int64) (*Reader, error) {
	if size < TrailerSize {
		return nil, corruptf(key, 0, "object of %d bytes is smaller than a trailer", size)
	}
	n := min(size, DefaultTailRead)
	tail := make([]byte, n)
	if err := readFull(ctx, src, key, tail, size-n); err != nil {
		return nil, err
	}
	t, err := ParseTrailer(tail[n-TrailerSize:], size)
	if err != nil {
		return nil, withKey(err, key)
	}
	var footer []byte
	if int64(t.FooterLen)+TrailerSize <= n {
		footer = tail[n-TrailerSize-int64(t.FooterLen) : n-TrailerSize]
	} else {
		footer = make([]byte, t.FooterLen)
		if err := readFull(ctx, src, key, footer, int64(t.DataLen)); err != nil {
			return nil, err
		}
	}
	if got := crc32c(footer); got != t.FooterCRC {
		return nil, corruptf(key, int64(t.DataLen), "footer CRC %08x, trailer says %08x", got, t.FooterCRC)
	}
	f, err := DecodeFooter(footer, int64(t.DataLen))
	if err != nil {
		return nil, withKey(err, key)
	}
	return &Reader{src: src, key: key, size: size, footer: f}, nil
}

// readFull reads exactly len(p) bytes at off; an object ending early is
// corruption (its size was promised), any other error is passed on
// (wrapped) so callers can tell a missing object or a network failure from
// bad bytes.
func readFull(ctx context.Context, src RangeReader, key string, p []byte, off int64) error {
	n, err := src.ReadAt(ctx, key, p, off)
	if n == len(p) {
		return nil
	}
	// Only the bare io.EOF means the object ended; an error wrapping one
	// is a failed transfer, not a truncated object.
	if err == nil || err == io.EOF {
		return corruptf(key, off+int64(n), "object ends after %d of %d bytes read at %d (truncated)", n, len(p), off)
	}
	return fmt.Errorf("segment: read %q [%d, +%d): %w", key, off, len(p), err)
}

func withKey(err error, key string) error {
	var ce *CorruptionError
	if errors.As(err, &ce) {
		ce.Key = key
	}
	return err
}

// Key returns the object's key.
func (r *Reader) Key() string { return r.key }

// Size returns the object's size.
func (r *Reader) Size() int64 { return r.size }

// Footer returns the decoded footer.
func (r *Reader) Footer() *Footer { return r.footer }

// Streams returns the entries of every stream in the object.
func (r *Reader) Streams() []extent.Extent { return r.footer.Streams() }

func (r *Reader) stream(id uint64) (*streamIndex, bool) {
	ss := r.footer.streams
	i := sort.Search(len(ss), func(i int) bool { return ss[i].StreamID >= id })
	if i == len(ss) || ss[i].StreamID != id {
		return nil, false
	}
	return &ss[i], true
}

// Stream returns the entry of stream id, if the object holds it.
func (r *Reader) Stream(id uint64) (extent.Extent, bool) {
	s, ok := r.stream(id)
	if !ok {
		return extent.Extent{}, false
	}
	return s.Extent, true
}

// Batches is the result of a read: whole batches, concatenated as stored.
// Data is owned by the caller (it may share memory only with nothing else
// the package keeps).
// The first batch may start before the offset asked for (a batch is never
// split, exactly as a Kafka fetch returns it); callers skip its leading
// records.
type Batches struct {
	Data        []byte
	FirstOffset int64 // base offset of the first batch in Data
	NextOffset  int64 // offset after the last record in Data
	Count       int   // number of batches
	// Pos is the byte position of Data in the object: with FirstOffset
	// (or any batch boundary inside Data) it is where a later read can
	// resume without the footer's index (ReadStreamAt).
	Pos int64
	// Pieces, set instead of Data by the *Pieces reads, are the same
	// batches as they lie in the source's memory: consecutive stretches
	// of the object, not copied together. A batch may begin in one piece
	// and end in the next (it straddles two of the cache's GETs); read
	// them as one byte string (record.WalkPieces). A caller that writes
	// them out (an HTTP page, a Kafka fetch) so copies nothing, where Data
	// costs a copy of every batch that straddles two GETs.
	Pieces [][]byte
	// Release, set by the *Pieces reads when the source lent its memory
	// with a reference (PieceLeaser), ends the loan: call it once Pieces
	// and everything sliced from them are no longer used (the response
	// written). Until then the memory is the object's bytes; after it, it
	// may be reused for other GETs. Not calling it is safe (the memory is
	// then never reused); it may be called more than once; nil means
	// there is nothing to release.
	Release func()
}

// Size returns the bytes of the batches, in Data or Pieces.
func (b Batches) Size() int {
	n := len(b.Data)
	for _, p := range b.Pieces {
		n += len(p)
	}
	return n
}

// ReadBatches returns the batches of stream holding offset and after it,
// at least one batch and then as many as fit in maxBytes (<= 0: to the end
// of the stream's range). It uses the batch index to start at most
// IndexInterval bytes before the wanted batch.
func (r *Reader) ReadBatches(ctx context.Context, stream uint64, offset int64, maxBytes int) (Batches, error) {
	return r.readIndexed(ctx, stream, offset, maxBytes, false)
}

// ReadBatchPieces reads like ReadBatches and returns the batches as
// Pieces (see Batches), not copied into one Data.
func (r *Reader) ReadBatchPieces(ctx context.Context, stream uint64, offset int64, maxBytes int) (Batches, error) {
	return r.readIndexed(ctx, stream, offset, maxBytes, true)
}

func (r *Reader) readIndexed(ctx context.Context, stream uint64, offset int64, maxBytes int, pieces bool) (Batches, error) {
	s, ok := r.stream(stream)
	if !ok {
		return Batches{}, fmt.Errorf("%w: object %q has no stream %d", ErrOffsetOutOfRange, r.key, stream)
	}
	if offset < s.First || offset > s.Last() {
		return Batches{}, fmt.Errorf("%w: object %q holds offsets [%d, %d] of stream %d, not %d", ErrOffsetOutOfRange, r.key, s.First, s.Last(), stream, offset)
	}
	// The last index entry at or before offset.
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].Offset > offset }) - 1
	e := s.index[i]
	b, _, _, err := readRange(ctx, r.src, r.key, s.Extent, e.Pos, e.Offset, offset, maxBytes, pieces)
	return b, err
}

// OffsetForTimestamp returns the first offset of stream in this object
// whose batch maxTimestamp is >= ts (Kafka ListOffsets by time), found
// with the index and one scan of at most IndexInterval bytes; ok is false
// if every batch is older.
func (r *Reader) OffsetForTimestamp(ctx context.Context, stream uint64, ts int64) (offset int64, ok bool, err error) {
	s, found := r.stream(stream)
	if !found || s.MaxTimestamp < ts {
		return 0, false, nil
	}
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].MaxTimestamp >= ts })
	e := s.index[i]
	end := s.End()
	if i+1 < len(s.index) {
		end = s.index[i+1].Pos
	}
	span := s.Extent
	var found2 int64 = -1
	_, _, err = scan(ctx, r.src, r.key, span, e.Pos, e.Offset, end, end-e.Pos, false, nil, nil, func(_ [][]byte, bi record.BatchHeader) (bool, bool) {
		if bi.MaxTimestamp >= ts {
			found2 = bi.BaseOffset
			return false, false
		}
		return true, true
	})
	if err != nil {
		return 0, false, err
	}
	if found2 < 0 {
		return 0, false, corruptf(r.key, e.Pos, "index promises a timestamp >= %d that no batch has", ts)
	}
	return found2, true, nil
}

// ReadStream reads like Reader.ReadBatches without the footer, from the
// start of the stream's range as the registry describes it: one ranged
// read when offset is near e.First, so the first record of a cold
// read costs a single GET. For an offset deep inside a large range, Open
// the object and use its index instead; to read a range piece by piece,
// use a Cursor.
func ReadStream(ctx context.Context, src RangeReader, key string, e extent.Extent, offset int64, maxBytes int) (Batches, error) {
	if offset < e.First || offset > e.Last() {
		return Batches{}, fmt.Errorf("%w: object %q holds offsets [%d, %d] of stream %d, not %d", ErrOffsetOutOfRange, key, e.First, e.Last(), e.StreamID, offset)
	}
	b, _, _, err := readRange(ctx, src, key, e, e.Offset, e.First, offset, maxBytes, false)
	return b, err
}

// ReadStreamPieces reads like ReadStream and returns the batches as
// Pieces (see Batches), not copied into one Data.
func ReadStreamPieces(ctx context.Context, src RangeReader, key string, e extent.Extent, offset int64, maxBytes int) (Batches, error) {
	if offset < e.First || offset > e.Last() {
		return Batches{}, fmt.Errorf("%w: object %q holds offsets [%d, %d] of stream %d, not %d", ErrOffsetOutOfRange, key, e.First, e.Last(), e.StreamID, offset)
	}
	b, _, _, err := readRange(ctx, src, key, e, e.Offset, e.First, offset, maxBytes, true)
	return b, err
}

// ReadStreamAt reads like ReadStream from a batch boundary already known:
// pos is the byte position of a batch of e whose base offset is base (a
// Batches' Pos and FirstOffset, or a boundary inside its Data), and
// offset is at or after base. A consumer's next page resumes there with
// neither the footer nor a re-scan from the start of the range.
func ReadStreamAt(ctx context.Context, src RangeReader, key string, e extent.Extent, pos, base, offset int64, maxBytes int) (Batches, error) {
	return readStreamAt(ctx, src, key, e, pos, base, offset, maxBytes, false)
}

// ReadStreamAtPieces reads like ReadStreamAt and returns the batches as
// Pieces (see Batches), not copied into one Data.
func ReadStreamAtPieces(ctx context.Context, src RangeReader, key string, e extent.Extent, pos, base, offset int64, maxBytes int) (Batches, error) {
	return readStreamAt(ctx, src, key, e, pos, base, offset, maxBytes, true)
}

func readStreamAt(ctx context.Context, src RangeReader, key string, e extent.Extent, pos, base, offset int64, maxBytes int, pieces bool) (Batches, error) {
	if pos < e.Offset || pos >= e.End() || base < e.First || base > e.Last() || offset < base || offset > e.Last() {
		return Batches{}, fmt.Errorf("%w: object %q: no batch of stream %d at byte %d with base offset %d for offset %d (range [%d, %d) at bytes [%d, %d))",
			ErrOffsetOutOfRange, key, e.StreamID, pos, base, offset, e.First, e.Next, e.Offset, e.End())
	}
	b, _, _, err := readRange(ctx, src, key, e, pos, base, offset, maxBytes, pieces)
	return b, err
}

// Cursor reads one stream's range of one object sequentially, chunk by
// chunk, remembering the byte position between calls: the shape of a
// consumer catching up. It is not safe for concurrent use.
type Cursor struct {
	src    RangeReader
	key    string
	e      extent.Extent
	pos    int64 // byte position of the next batch
	base   int64 // its base offset
	offset int64 // first offset the caller wants
}

// NewCursor returns a cursor at offset of the range e of object key. It
// starts at the range's first batch (no footer needed) and skips batches
// before offset on the first Next.
func NewCursor(src RangeReader, key string, e extent.Extent, offset int64) (*Cursor, error) {
	if offset < e.First || offset > e.Last() {
		return nil, fmt.Errorf("%w: object %q holds offsets [%d, %d] of stream %d, not %d", ErrOffsetOutOfRange, key, e.First, e.Last(), e.StreamID, offset)
	}
	return &Cursor{src: src, key: key, e: e, pos: e.Offset, base: e.First, offset: offset}, nil
}

// Cursor returns a cursor at offset of stream, positioned with the index
// so that it starts at most IndexInterval bytes before offset.
func (r *Reader) Cursor(stream uint64, offset int64) (*Cursor, error) {
	s, ok := r.stream(stream)
	if !ok {
		return nil, fmt.Errorf("%w: object %q has no stream %d", ErrOffsetOutOfRange, r.key, stream)
	}
	c, err := NewCursor(r.src, r.key, s.Extent, offset)
	if err != nil {
		return nil, err
	}
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].Offset > offset }) - 1
	c.pos, c.base = s.index[i].Pos, s.index[i].Offset
	return c, nil
}

// Next returns the next batches, at least one and then as many as fit in
// maxBytes (<= 0: the rest of the range), or io.EOF after the range's last
// batch.
func (c *Cursor) Next(ctx context.Context, maxBytes int) (Batches, error) {
	if c.pos >= c.e.End() {
		return Batches{}, io.EOF
	}
	b, pos, base, err := readRange(ctx, c.src, c.key, c.e, c.pos, c.base, max(c.offset, c.base), maxBytes, false)
	if err != nil {
		return Batches{}, err
	}
	c.pos, c.base = pos, base
	return b, nil
}

// readRange collects the batches of e holding offset and after, from the
// batch at byte pos with base offset base; it returns where it stopped.
// With pieces, the batches are returned as the stretches of the source's
// memory they lie in (Batches.Pieces) instead of copied into one Data.
func readRange(ctx context.Context, src RangeReader, key string, e extent.Extent, pos, base, offset int64, maxBytes int, pieces bool) (Batches, int64, int64, error) {
	out := Batches{FirstOffset: -1}
	// Read what the caller wants plus what the index may make us skip.
	hint := int64(maxBytes) + DefaultIndexInterval
	if maxBytes <= 0 {
		hint = e.End() - pos
	}
	// The batches taken are consecutive bytes of the object, and usually
	// all in one window buffer: collect them as slices of the windows and
	// copy only if they span several (most reads then copy nothing).
	var parts [][]byte
	size := 0
	at := pos // position of the batch fn sees
	// A batch past maxBytes is turned down on its header's size, before
	// its bytes are read and checked: the next page reads it, and reading
	// it for this one too (a 4 MiB page of 1 MiB batches: a fourth more
	// bytes read and checked, and copied when the batch straddles two
	// GETs) was waste.
	fits := func(n int64) bool { return out.Count == 0 || maxBytes <= 0 || size+int(n) <= maxBytes }
	var leases *[]func()
	if pieces {
		leases = new([]func())
	}
	pos, base, err := scan(ctx, src, key, e, pos, base, e.End(), hint, pieces, leases, fits, func(b [][]byte, bi record.BatchHeader) (bool, bool) {
		n := bi.Size()
		if bi.LastOffset() < offset {
			at += int64(n)
			return true, true
		}
		if out.Count == 0 { // fits turned down a batch past maxBytes already
			out.FirstOffset = bi.BaseOffset
			out.Pos = at
		}
		for _, p := range b {
			if k := len(parts) - 1; k >= 0 && adjacent(parts[k], p) {
				parts[k] = parts[k][:len(parts[k])+len(p)]
			} else {
				parts = append(parts, p)
			}
		}
		size += n
		out.NextOffset = bi.LastOffset() + 1
		out.Count++
		return true, maxBytes <= 0 || size < maxBytes
	})
	if err == nil && out.Count == 0 {
		err = corruptf(key, pos, "stream %d: no batch holds offset %d although the index says so", e.StreamID, offset)
	}
	if err != nil {
		if leases != nil {
			releaseAll(*leases) // nothing lent is returned
		}
		return Batches{}, 0, 0, err
	}
	if pieces {
		for i, p := range parts {
			parts[i] = p[:len(p):len(p)] // capped, as below
		}
		out.Pieces = parts
		if ls := *leases; len(ls) > 0 {
			out.Release = func() { releaseAll(ls) } // each is idempotent
		}
		return out, pos, base, nil
	}
	if len(parts) == 1 {
		// Capped: the window may be the source's memory (Slicer), and an
		// append by the caller must copy rather than write into it.
		out.Data = parts[0][:len(parts[0]):len(parts[0])]
	} else {
		out.Data = make([]byte, 0, size)
		for _, p := range parts {
			out.Data = append(out.Data, p...)
		}
	}
	return out, pos, base, nil
}

// releaseAll calls every release of ls.
func releaseAll(ls []func()) {
	for _, release := range ls {
		release()
	}
}

// adjacent reports whether b starts right where a ends and a's capacity
// covers it, so a can be extended over b. Windows lent by a Slicer may
// alias one another's memory while a's capacity ends before b does.
func adjacent(a, b []byte) bool {
	return cap(a)-len(a) >= len(b) && len(b) > 0 && &a[:len(a)+1][len(a)] == &b[0]
}

// scan walks the batches of e from byte pos (where the batch with base
// offset base starts) until stop or until fn says no more, verifying every
// batch before handing it to fn. fn returns whether it consumed the batch
// and whether to go on; scan returns the position and base offset of the
// first batch not consumed. fits, if not nil, sees each batch's size from
// its header first: a batch it turns down ends the scan unread. Reads are
// chunked, so a scan is a few large ranged reads, not one per batch.
//
// fn gets a batch as the pieces of memory it lies in: one slice, or with
// split (and a PieceSlicer source) one per buffer of the source it
// straddles, checked (CRC included) across them and never copied
// together. Without split a straddling batch is copied into one slice.
// The outer slice is scan's and reused: fn copies its elements to keep
// them. With leases (and split) a PieceLeaser source lends its memory
// with a reference: every release is appended to *leases, and the caller
// calls them once it is done with what fn kept (also after an error).
func scan(ctx context.Context, src RangeReader, key string, e extent.Extent, pos, base, stop, hint int64, split bool, leases *[]func(), fits func(n int64) bool, fn func([][]byte, record.BatchHeader) (consumed, more bool)) (int64, int64, error) {
	end := e.End()
	var buf []byte
	var bufPos int64
	advised := false
	psl, _ := src.(PieceSlicer)
	pl, _ := src.(PieceLeaser)
	if !split {
		psl = nil
	}
	if !split || leases == nil {
		pl = nil
	}
	var scratch [][]byte
	// window returns [p, p+n) as pieces: from buf, or else from a new
	// chunk read from the source, which then becomes buf (its last piece,
	// if it came in several).
	window := func(p, n int64) ([][]byte, error) {
		if p >= bufPos && p+n <= bufPos+int64(len(buf)) {
			scratch = append(scratch[:0], buf[p-bufPos:p-bufPos+n])
			return scratch, nil
		}
		if p+n > end {
			return nil, corruptf(key, p, "stream %d: batch of %d bytes crosses the end of its range at %d", e.StreamID, n, end)
		}
		want := min(max(n, chunkSize(min(hint, stop-p))), end-p)
		if adv, ok := src.(Advisor); ok && !advised && p+want < stop {
			// The rest of the range is advised before this chunk is
			// waited for: read-ahead GETs then run beside the first one
			// instead of a round trip after it (against S3 the round
			// trip, not the bandwidth, is what a reader waits for).
			adv.Advise(key, p+want, stop)
			advised = true
		}
		var ps [][]byte
		var err error
		switch sl, ok := src.(Slicer); {
		case pl != nil:
			var release func()
			ps, release, err = pl.LeasePieces(ctx, key, p, int(n), int(want))
			if release != nil {
				*leases = append(*leases, release)
			}
		case psl != nil:
			ps, err = psl.SlicePieces(ctx, key, p, int(n), int(want))
		case ok:
			var nb []byte
			nb, err = sl.Slice(ctx, key, p, int(n), int(want))
			ps = [][]byte{nb}
		default:
			nb := make([]byte, want)
			if err := readFull(ctx, src, key, nb, p); err != nil {
				return nil, err
			}
			ps = [][]byte{nb}
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("segment: read %q [%d, +%d): %w", key, p, n, err)
		}
		// Keep only the bytes of the range, and the last piece as buf.
		ps = record.AppendCut(make([][]byte, 0, len(ps)), ps, 0, int(end-p))
		got := int64(0)
		for _, q := range ps {
			got += int64(len(q))
		}
		if got < n {
			return nil, corruptf(key, p+got, "object ends after %d of %d bytes read at %d (truncated)", got, n, p)
		}
		buf = ps[len(ps)-1]
		bufPos = p + got - int64(len(buf))
		// Slices not capped at the batch's end: readRange extends one over
		// the next batch of the same buffer (adjacent).
		scratch = scratch[:0]
		left := n
		for _, q := range ps[:len(ps)-1] {
			if take := min(left, int64(len(q))); take > 0 {
				scratch = append(scratch, q[:take])
				left -= take
			}
		}
		if left > 0 {
			scratch = append(scratch, buf[:left])
		}
		return scratch, nil
	}
	var prefix [record.PrefixSize]byte
	expect := base
	for pos < stop {
		hdr, err := window(pos, record.PrefixSize)
		if err != nil {
			return 0, 0, err
		}
		var n int64
		if len(hdr) == 1 {
			n, err = batchSize(hdr[0])
		} else { // the size itself straddles two buffers: 12 bytes copied
			n, err = batchSize(record.Gather(prefix[:0], hdr, 0, record.PrefixSize))
		}
		if err != nil {
			return 0, 0, corruptf(key, pos, "stream %d: %v", e.StreamID, err)
		}
		if fits != nil && !fits(n) {
			return pos, expect, nil
		}
		b, err := window(pos, n)
		if err != nil {
			return 0, 0, err
		}
		bi, err := checkBatch(b)
		if err != nil {
			return 0, 0, corruptf(key, pos, "stream %d: %v", e.StreamID, err)
		}
		if bi.BaseOffset != expect {
			return 0, 0, corruptf(key, pos, "stream %d: batch base offset %d, want %d", e.StreamID, bi.BaseOffset, expect)
		}
		if bi.LastOffset() > e.Last() {
			return 0, 0, corruptf(key, pos, "stream %d: batch ends at offset %d past the range's last offset %d", e.StreamID, bi.LastOffset(), e.Last())
		}
		consumed, more := fn(b, bi)
		if consumed {
			pos += n
			expect = bi.LastOffset() + 1
		}
		if !more {
			return pos, expect, nil
		}
	}
	if pos == end && expect != e.Next {
		return 0, 0, corruptf(key, pos, "stream %d: range ends at offset %d, index says %d", e.StreamID, expect-1, e.Last())
	}
	return pos, expect, nil
}

// chunkSize is how much a scan reads at once: about what the caller
// wants, at least enough to amortise a request, at most 4 MiB (the block
// cache's largest GET) so the first batch of a cold read never waits for
// a huge transfer. A page up to that size is one GET when cold, not a
// first chunk and then a wait for the read-ahead behind it: against S3
// every GET waited for in turn is another round trip.
func chunkSize(want int64) int64 {
	const minChunk, maxChunk = 16 << 10, 4 << 20
	return min(max(want, minChunk), maxChunk)
}
