package segment

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/PicoMQ/picomq/tiering/extent"
)

// DefaultIndexInterval is the default data distance between batch index
// entries: a read at an arbitrary offset scans at most about this much
// before the batch it wants.
const DefaultIndexInterval = 4096

// WriterOptions configure a Writer.
type WriterOptions struct {
	// IndexInterval is the minimum number of data bytes between two batch
	// index entries of a stream. 0 means DefaultIndexInterval; a negative
	// value indexes every batch.
	IndexInterval int
}

// Writer streams batches into a segment object and appends the footer and
// trailer on Finish. It writes through to w as it goes (buffered), so an
// object never has to be held twice in memory.
//
// Batches of one stream must be appended consecutively and in offset order
// with no gaps (each batch's base offset = the previous batch's last offset
// + 1), and streams in strictly ascending id; Append rejects anything else
// with ErrInvalidBatch, as it rejects bytes that are not a valid batch, so
// a bad input never becomes an uploaded object.
type Writer struct {
	w        *bufio.Writer
	interval int64
	pos      int64
	streams  []streamIndex
	cur      *streamIndex
	crc      uint32 // running CRC of cur's range
	lastIdx  int64  // position of cur's last index entry
	err      error
	finished bool
}

// NewWriter returns a Writer that writes the object to w.
func NewWriter(w io.Writer, opts WriterOptions) *Writer {
	interval := int64(opts.IndexInterval)
	if interval == 0 {
		interval = DefaultIndexInterval
	} else if interval < 0 {
		interval = 0
	}
	return &Writer{w: bufio.NewWriterSize(w, 64<<10), interval: interval}
}

// Append adds one RecordBatch v2 of stream. It does not retain batch.
func (w *Writer) Append(stream uint64, batch []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.finished {
		return fmt.Errorf("segment: Append after Finish")
	}
	bi, err := checkBatch([][]byte{batch})
	if err != nil {
		return fmt.Errorf("%w: stream %d: %v", ErrInvalidBatch, stream, err)
	}
	if w.cur == nil || stream != w.cur.StreamID {
		if w.cur != nil && stream < w.cur.StreamID {
			return fmt.Errorf("%w: stream %d after stream %d (streams must ascend)", ErrInvalidBatch, stream, w.cur.StreamID)
		}
		w.closeStream()
		w.streams = append(w.streams, streamIndex{Extent: extent.Extent{
			StreamID: stream, First: bi.BaseOffset, Next: bi.BaseOffset,
			Offset: w.pos, FirstTimestamp: bi.FirstTimestamp, MaxTimestamp: bi.MaxTimestamp,
		}})
		w.cur = &w.streams[len(w.streams)-1]
		w.crc = 0
		w.lastIdx = -1
	}
	s := w.cur
	if bi.BaseOffset != s.Next {
		return fmt.Errorf("%w: stream %d: batch base offset %d, want %d (batches must be contiguous)", ErrInvalidBatch, stream, bi.BaseOffset, s.Next)
	}
	if w.lastIdx < 0 || w.pos-w.lastIdx >= w.interval {
		s.index = append(s.index, IndexEntry{Offset: bi.BaseOffset, Pos: w.pos})
		w.lastIdx = w.pos
	}
	s.MaxTimestamp = max(s.MaxTimestamp, bi.MaxTimestamp)
	s.index[len(s.index)-1].MaxTimestamp = s.MaxTimestamp
	s.Next = bi.LastOffset() + 1
	s.Batches++
	s.Length += int64(len(batch))
	w.crc = crc32.Update(w.crc, castagnoli, batch)
	if _, err := w.w.Write(batch); err != nil {
		w.err = fmt.Errorf("segment: write: %w", err)
		return w.err
	}
	w.pos += int64(len(batch))
	return nil
}

func (w *Writer) closeStream() {
	if w.cur != nil {
		w.cur.CRC = w.crc
		w.cur = nil
	}
}

// Size returns the number of data bytes appended so far (footer and
// trailer not included): what a flush policy compares with its size limit.
func (w *Writer) Size() int64 { return w.pos }

// Info describes a finished object.
type Info struct {
	// Size is the object's total size in bytes.
	Size int64
	// DataLen is the size of the data section (= the footer's position);
	// FooterLen the size of the footer. A reader that knows both can fetch
	// the footer with one exact ranged read.
	DataLen, FooterLen int64
	// Streams are the per-stream entries, in ascending stream id.
	Streams []extent.Extent
}

// Finish writes the footer and trailer, flushes, and describes the object.
// The underlying writer is not closed: with an objstore Writer, the caller
// commits with its Close. An object with no batches is an error: there is
// nothing to upload.
func (w *Writer) Finish() (Info, error) {
	if w.err != nil {
		return Info{}, w.err
	}
	if w.finished {
		return Info{}, fmt.Errorf("segment: Finish called twice")
	}
	w.finished = true
	if len(w.streams) == 0 {
		return Info{}, fmt.Errorf("segment: empty object")
	}
	w.closeStream()
	footer := appendFooter(nil, w.streams)
	t := Trailer{FooterLen: uint32(len(footer)), DataLen: uint64(w.pos), FooterCRC: crc32c(footer)}
	if int64(t.FooterLen) != int64(len(footer)) {
		return Info{}, fmt.Errorf("segment: footer of %d bytes too large", len(footer))
	}
	tail := appendTrailer(footer, t)
	if _, err := w.w.Write(tail); err != nil {
		w.err = fmt.Errorf("segment: write: %w", err)
		return Info{}, w.err
	}
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("segment: write: %w", err)
		return Info{}, w.err
	}
	f := Footer{streams: w.streams}
	return Info{
		Size:      w.pos + int64(len(tail)),
		DataLen:   w.pos,
		FooterLen: int64(len(footer)),
		Streams:   f.Streams(),
	}, nil
}
