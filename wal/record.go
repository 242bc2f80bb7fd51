package wal

import (
	"encoding/binary"
	"hash/crc32"
)

const (
	// headerSize is the framing overhead per entry; see the package doc.
	headerSize = 13

	// kindEntry is the only record kind of format version 1. Zero is
	// reserved for "never written" so preallocated space is self-describing.
	kindEntry byte = 0x01

	// MaxEntrySize bounds one payload. Recovery trusts a length field only
	// after its header checksum matched, but a bound still keeps a damaged
	// or hostile file from making us allocate gigabytes, and keeps Pos.Len
	// comfortably inside int32.
	MaxEntrySize = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segmentSeed is the CRC state after the segment number; continuing from it
// yields CRC-32C(segment number ‖ header bytes) without building that
// concatenation for every record.
func segmentSeed(seg uint64) uint32 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seg)
	return crc32.Update(0, castagnoli, b[:])
}

func payloadCRC(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// putHeader fills dst[:headerSize]. The payload checksum is an argument so
// Enqueue can compute it before taking the log's lock: only the 9-byte header
// checksum depends on the segment, which is known only under the lock.
func putHeader(dst []byte, seed uint32, n int, pcrc uint32) {
	dst[0] = kindEntry
	binary.LittleEndian.PutUint32(dst[1:5], uint32(n))
	binary.LittleEndian.PutUint32(dst[5:9], pcrc)
	binary.LittleEndian.PutUint32(dst[9:13], crc32.Update(seed, castagnoli, dst[:9]))
}

// headerState classifies the bytes at a would-be record start.
type headerState int

const (
	headerValid headerState = iota
	headerZero              // all zero: nothing was ever written here
	headerBad               // wrong kind or checksum: damage or torn write
)

// parseHeader checks h (headerSize bytes) against the segment's seed and
// returns the payload length and checksum it declares.
func parseHeader(h []byte, seed uint32) (n uint32, pcrc uint32, st headerState) {
	if allZero(h[:headerSize]) {
		return 0, 0, headerZero
	}
	if h[0] != kindEntry ||
		binary.LittleEndian.Uint32(h[9:13]) != crc32.Update(seed, castagnoli, h[:9]) {
		return 0, 0, headerBad
	}
	return binary.LittleEndian.Uint32(h[1:5]), binary.LittleEndian.Uint32(h[5:9]), headerValid
}

func allZero(b []byte) bool { return lastNonZero(b) == 0 }

// lastNonZero returns one past the index of the last non-zero byte of b, or
// 0 if b is all zeros. Recovery runs it over the preallocated tail of the
// last segment (up to SegmentSize of zeros), hence eight bytes at a time.
func lastNonZero(b []byte) int {
	i := len(b)
	for i >= 8 && binary.LittleEndian.Uint64(b[i-8:i]) == 0 {
		i -= 8
	}
	for i > 0 && b[i-1] == 0 {
		i--
	}
	return i
}
