package record

import (
	"fmt"
	"hash/crc32"
)

// Batches read from object storage through the block cache are lent as
// they lie in the cache's memory: one GET's buffer per stretch. A batch
// that begins in one GET's bytes and ends in the next is then two pieces,
// and copying it together (a megabyte of fresh memory for the common
// 1 MiB batch) costs more CPU than serving it. The functions here read
// such a list of pieces as one byte string: the concatenation of its
// pieces, in which batches follow one another and may cross from a piece
// into the next.

// ValidatePieces checks, like Validate, that the concatenation of pieces
// is exactly one complete, intact batch, without joining them: the
// CRC-32C runs over the pieces in turn, and only a header that itself
// crosses a piece boundary is copied (its 61 bytes) to be parsed.
func ValidatePieces(pieces [][]byte) (BatchHeader, error) {
	if len(pieces) == 1 {
		return Validate(pieces[0])
	}
	var hb [HeaderSize]byte
	hdr := Gather(hb[:0], pieces, 0, HeaderSize)
	h, err := ParseHeader(hdr)
	if err != nil {
		return h, err
	}
	total := 0
	for _, p := range pieces {
		total += len(p)
	}
	if size := h.Size(); total != size {
		if total < size {
			return h, headerError(ErrTruncated, total,
				fmt.Sprintf("batch length says %d bytes, have %d", size, total))
		}
		return h, headerError(ErrCorrupt, size,
			fmt.Sprintf("%d bytes after the %d-byte batch", total-size, size))
	}
	var crc uint32
	skip := offAttributes // bytes before the CRC'd region still to pass
	for _, p := range pieces {
		if skip >= len(p) {
			skip -= len(p)
			continue
		}
		crc = crc32.Update(crc, castagnoli, p[skip:])
		skip = 0
	}
	if crc != h.CRC {
		return h, headerError(ErrBadCRC, offCRC,
			fmt.Sprintf("stored %#08x, computed %#08x", h.CRC, crc))
	}
	return h, nil
}

// Gather appends bytes [from, to) of the concatenation of pieces to dst
// (fewer where the pieces end first): a copy of a few header bytes that
// cross a piece boundary, or of a whole batch for a caller that needs it
// in one slice.
func Gather(dst []byte, pieces [][]byte, from, to int) []byte {
	at := 0
	for _, p := range pieces {
		if at >= to {
			break
		}
		if end := at + len(p); end > from {
			dst = append(dst, p[max(from-at, 0):min(to-at, len(p))]...)
		}
		at += len(p)
	}
	return dst
}

// AppendCut appends bytes [from, to) of the concatenation of pieces to dst
// as slices of the pieces (no copy), each capped so that an append to it
// copies rather than writes into the memory after it.
func AppendCut(dst [][]byte, pieces [][]byte, from, to int) [][]byte {
	at := 0
	for _, p := range pieces {
		if at >= to {
			break
		}
		if end := at + len(p); end > from {
			lo, hi := max(from-at, 0), min(to-at, len(p))
			if hi > lo {
				dst = append(dst, p[lo:hi:hi])
			}
		}
		at += len(p)
	}
	return dst
}

// WalkPieces walks the batches of the concatenation of pieces (whole
// batches, any of which may cross from one piece into the next) and calls
// fn with each batch's header, its byte position in the concatenation and
// its bytes as pieces: one slice when it lies in one piece. The outer
// slice is reused from call to call; fn must copy it (not the bytes) to
// keep it. Like WalkBatches it checks only the framing (a sane header, a
// batch that ends within the pieces), not the CRC: for batches verified
// on their way in. An error of fn stops the walk and is returned as is.
func WalkPieces(pieces [][]byte, fn func(batch [][]byte, h BatchHeader, pos int) error) error {
	var hb [HeaderSize]byte
	var scratch [][]byte
	total := 0
	for _, p := range pieces {
		total += len(p)
	}
	i, in := 0, 0 // piece holding the next batch, and where in it
	pos := 0      // its position in the concatenation
	for n := 0; pos < total; n++ {
		for in >= len(pieces[i]) { // skip to the piece the batch starts in
			in -= len(pieces[i])
			i++
		}
		var h BatchHeader
		var err error
		if p := pieces[i][in:]; len(p) >= HeaderSize {
			h, err = ParseHeader(p)
		} else {
			h, err = ParseHeader(Gather(hb[:0], pieces[i:], in, in+HeaderSize))
		}
		if err == nil && h.Size() > total-pos {
			err = headerError(ErrTruncated, total-pos, fmt.Sprintf("batch length says %d bytes, have %d", h.Size(), total-pos))
		}
		if err != nil {
			return inBatch(err, n, pos)
		}
		size := h.Size()
		if p := pieces[i][in:]; len(p) >= size {
			scratch = append(scratch[:0], p[:size:size])
		} else {
			scratch = AppendCut(scratch[:0], pieces[i:], in, in+size)
		}
		if err := fn(scratch, h, pos); err != nil {
			return err
		}
		pos += size
		in += size
	}
	return nil
}
