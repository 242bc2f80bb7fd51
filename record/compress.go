package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// MaxDecompressedSize caps the bytes one batch may decompress to. A Kafka
// producer can store a small batch that expands a thousandfold; without a cap
// every HTTP read of it would be a memory bomb. Decompression stops and
// DecodeRecords returns ErrTooLarge as soon as output would exceed the cap,
// so no more than about the cap is ever allocated for the decompressed bytes.
//
// The decoded []Record costs more than the bytes: a minimal 7-byte record
// becomes an 88-byte Record, a minimal 2-byte header a 40-byte Header, so the
// worst case per batch is roughly 20 times this value. Kafka's default
// message.max.bytes (1 MiB compressed) keeps real batches far below it.
//
// Set it once at startup, before any decoding; it is read without
// synchronisation.
var MaxDecompressedSize = 64 << 20

// errLimit signals, inside this file, that output passed the cap.
var errLimit = errors.New("decompressed size over limit")

// decompress returns the records of a compressed batch in a buffer allocated
// for this call: decoded keys and values point into it, so it cannot be pooled.
func decompress(c Codec, src []byte) ([]byte, error) {
	limit := MaxDecompressedSize
	var out []byte
	var err error
	if limit < 1 {
		err = errLimit
	} else {
		switch c {
		case CodecGzip:
			out, err = gunzip(src, limit)
		case CodecSnappy:
			out, err = unsnappy(src, limit)
		case CodecLZ4:
			out, err = unlz4(src, limit)
		case CodecZstd:
			out, err = unzstd(src, limit)
		default: // unreachable after ParseHeader; kept so a new codec cannot slip through
			return nil, headerError(ErrUnsupportedCodec, offAttributes, fmt.Sprintf("codec %d", int8(c)))
		}
	}
	if err != nil {
		if errors.Is(err, errLimit) {
			return nil, headerError(ErrTooLarge, HeaderSize,
				fmt.Sprintf("%s records decompress to more than %d bytes", c, limit))
		}
		e := headerError(ErrCorrupt, HeaderSize, c.String()+" records do not decompress")
		e.Err = err
		return nil, e
	}
	return out, nil
}

// readAll reads r to EOF into a buffer that starts at hint bytes and never
// grows past limit+1, the one extra byte being how overflow is noticed.
func readAll(r io.Reader, hint, limit int) ([]byte, error) {
	buf := make([]byte, 0, min(max(hint, 512), limit+1))
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), limit+1-len(buf)))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, errLimit
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// gzip: pooled readers, because each holds a ~40 KiB inflate state.
type gzipState struct {
	src bytes.Reader
	zr  gzip.Reader
}

const maxDeflateRatio = 1032

var gzipPool = sync.Pool{New: func() any { return new(gzipState) }}

func gunzip(src []byte, limit int) ([]byte, error) {
	st := gzipPool.Get().(*gzipState)
	defer func() {
		st.src.Reset(nil) // do not keep the caller's batch alive from the pool
		gzipPool.Put(st)
	}()
	st.src.Reset(src)
	// bytes.Reader is an io.ByteReader, so Reset does not add a bufio layer.
	if err := st.zr.Reset(&st.src); err != nil {
		return nil, err
	}
	// The gzip trailer's ISIZE is the uncompressed size mod 2^32: exact for
	// any honest single-member batch. Deflate cannot expand more than about
	// 1032:1, so a larger claim is a lie and must not size the buffer.
	hint := 0
	if len(src) >= 4 {
		hint = min(int(binary.LittleEndian.Uint32(src[len(src)-4:]))+1, maxDeflateRatio*len(src))
	}
	return readAll(&st.zr, hint, limit)
}

// lz4: Kafka (since KIP-57) writes the standard LZ4 frame format.
type lz4State struct {
	src bytes.Reader
	zr  *lz4.Reader
}

var lz4Pool = sync.Pool{New: func() any { return &lz4State{zr: lz4.NewReader(nil)} }}

func unlz4(src []byte, limit int) ([]byte, error) {
	st := lz4Pool.Get().(*lz4State)
	defer func() {
		st.zr.Reset(nil)
		st.src.Reset(nil)
		lz4Pool.Put(st)
	}()
	st.src.Reset(src)
	st.zr.Reset(&st.src)
	return readAll(st.zr, 4*len(src), limit)
}

// zstd: one shared decoder. DecodeAll is safe for concurrent use, decodes
// straight into the output without a window-sized ring buffer, and enforces
// the size cap itself (WithDecoderMaxMemory), including for frames that
// declare no content size. The decoder is rebuilt if MaxDecompressedSize
// changes, because the cap is fixed at construction.
//
// The library also refuses frames whose declared window exceeds the cap, so
// such a frame is ErrTooLarge even if its content is small. Only streaming
// encoders at the top levels declare windows that large (zstd level 22
// without a pledged size: 128 MiB); Kafka's default level 3 declares 2 MiB.
type zstdDecoder struct {
	limit int
	dec   *zstd.Decoder
}

var zstdShared atomic.Pointer[zstdDecoder]

func unzstd(src []byte, limit int) ([]byte, error) {
	z := zstdShared.Load()
	if z == nil || z.limit != limit {
		dec, err := zstd.NewReader(nil,
			zstd.WithDecoderMaxMemory(uint64(limit)),
			zstd.WithDecoderConcurrency(0))
		if err != nil {
			return nil, err
		}
		z = &zstdDecoder{limit: limit, dec: dec}
		zstdShared.Store(z)
	}
	out, err := z.dec.DecodeAll(src, nil)
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) || len(out) > limit {
		return nil, errLimit
	}
	return out, err
}

// snappy comes in two shapes. Most clients (franz-go, librdkafka, Sarama)
// send one raw snappy block. The Java client wraps blocks in snappy-java's
// "xerial" stream format: a 16-byte header starting with xerialMagic, then
// chunks of a 4-byte big-endian length and a raw block. Raw blocks are
// decoded by s2, whose decoder accepts every snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const xerialHeaderSize = 16 // magic, version int32, compatible version int32

func unsnappy(src []byte, limit int) ([]byte, error) {
	if bytes.HasPrefix(src, xerialMagic) {
		return unxerial(src, limit)
	}
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, errLimit
	}
	return s2.Decode(make([]byte, n), src)
}

func unxerial(src []byte, limit int) ([]byte, error) {
	if len(src) < xerialHeaderSize {
		return nil, fmt.Errorf("xerial snappy: %d-byte stream header, want %d", len(src), xerialHeaderSize)
	}
	body := src[xerialHeaderSize:]
	// First pass sizes the output exactly from each block's own length
	// prefix, so the cap is enforced before anything is allocated.
	total := 0
	for p := 0; p < len(body); {
		chunk, next, err := xerialChunk(body, p)
		if err != nil {
			return nil, err
		}
		n, err := s2.DecodedLen(chunk)
		if err != nil {
			return nil, fmt.Errorf("xerial snappy: chunk at byte %d: %w", xerialHeaderSize+p, err)
		}
		if total += n; total > limit {
			return nil, errLimit
		}
		p = next
	}
	out := make([]byte, total)
	o := 0
	for p := 0; p < len(body); {
		chunk, next, _ := xerialChunk(body, p)
		n, _ := s2.DecodedLen(chunk)
		if _, err := s2.Decode(out[o:o+n], chunk); err != nil {
			return nil, fmt.Errorf("xerial snappy: chunk at byte %d: %w", xerialHeaderSize+p, err)
		}
		o += n
		p = next
	}
	return out, nil
}

// xerialChunk returns the block whose length prefix is at body[p] and the
// position after it.
func xerialChunk(body []byte, p int) ([]byte, int, error) {
	if len(body)-p < 4 {
		return nil, 0, fmt.Errorf("xerial snappy: chunk length at byte %d cut short", xerialHeaderSize+p)
	}
	n := int(binary.BigEndian.Uint32(body[p:]))
	p += 4
	if n > len(body)-p {
		return nil, 0, fmt.Errorf("xerial snappy: chunk at byte %d claims %d bytes, %d remain", xerialHeaderSize+p-4, n, len(body)-p)
	}
	return body[p : p+n], p + n, nil
}
