package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
)

// Legacy message sets: the magic 0 and 1 formats of Kafka before 0.11,
// which old clients (kafka-python told an old api_version, Produce v0–v2)
// still send. Each entry is offset int64, size int32, then the message:
// crc int32 (IEEE, over the rest), magic int8, attributes int8 (codec in
// bits 0–2, LogAppendTime in bit 3 for magic 1), timestamp int64 (magic 1
// only), key and value as int32-length byte strings (-1 = null). A
// compressed message is a wrapper whose value is a compressed message set.

// legacyOffMagic is where the magic byte of a legacy entry sits (after
// offset, size and crc); the same place as in a RecordBatch v2 header.
const legacyOffMagic = 8 + 4 + 4

// IsLegacy reports whether b starts with a magic 0 or 1 message set.
func IsLegacy(b []byte) bool { return len(b) > legacyOffMagic && b[legacyOffMagic] < Magic }

// UpconvertLegacy decodes the legacy message set b (compressed wrappers
// included; their inner sets may not nest further) and appends its records
// to dst as one uncompressed RecordBatch v2 at base offset 0, as Kafka
// converts old producers' messages for a v2 log. Magic 1 timestamps are
// kept as CreateTime (a LogAppendTime wrapper's own timestamp for its inner
// messages); magic 0 messages, which have none, get now. Errors are this
// package's kinds: ErrTruncated, ErrBadCRC, ErrBadMagic, ErrUnsupportedCodec
// (zstd has no legacy form), ErrCorrupt.
func UpconvertLegacy(dst, b []byte, now int64) ([]byte, error) {
	recs, err := appendLegacy(nil, b, now, -1, false)
	if err != nil {
		return dst, err
	}
	if len(recs) == 0 {
		return dst, fmt.Errorf("%w: empty message set", ErrTruncated)
	}
	return AppendBatch(dst, BatchOptions{ProducerID: -1, CreateTime: true}, recs), nil
}

// appendLegacy decodes one message set. inner is set inside a compressed
// wrapper; wrapperTS >= 0 overrides the inner timestamps (LogAppendTime).
func appendLegacy(recs []Record, b []byte, now, wrapperTS int64, inner bool) ([]Record, error) {
	for len(b) > 0 {
		if len(b) < 12 {
			return nil, fmt.Errorf("%w: %d bytes left of a message set entry", ErrTruncated, len(b))
		}
		size := int(int32(binary.BigEndian.Uint32(b[8:])))
		const minMessage = 4 + 1 + 1 + 4 + 4
		if size < minMessage || size > len(b)-12 {
			return nil, fmt.Errorf("%w: message of %d bytes in %d", ErrTruncated, size, len(b)-12)
		}
		msg := b[12 : 12+size]
		b = b[12+size:]
		if crc32.ChecksumIEEE(msg[4:]) != binary.BigEndian.Uint32(msg) {
			return nil, fmt.Errorf("%w: legacy message", ErrBadCRC)
		}
		magic, attrs := msg[4], msg[5]
		p := 6
		ts := now
		switch magic {
		case 0:
		case 1:
			if len(msg) < p+8+8 {
				return nil, fmt.Errorf("%w: magic 1 message of %d bytes", ErrTruncated, len(msg))
			}
			ts = int64(binary.BigEndian.Uint64(msg[p:]))
			p += 8
		default:
			return nil, fmt.Errorf("%w: %d inside a legacy message set", ErrBadMagic, magic)
		}
		if wrapperTS >= 0 {
			ts = wrapperTS
		}
		key, p, err := legacyBytes(msg, p)
		if err != nil {
			return nil, err
		}
		value, p, err := legacyBytes(msg, p)
		if err != nil {
			return nil, err
		}
		if p != len(msg) {
			return nil, fmt.Errorf("%w: %d bytes after a legacy message", ErrCorrupt, len(msg)-p)
		}
		codec := Codec(attrs & 0x07)
		if codec == CodecNone {
			recs = append(recs, Record{Timestamp: ts, Key: key, Value: value})
			continue
		}
		if inner || codec > CodecLZ4 {
			return nil, fmt.Errorf("%w: codec %d in a legacy message (nested: %v)", ErrUnsupportedCodec, codec, inner)
		}
		if codec == CodecLZ4 && magic == 0 {
			value = fixOldKafkaLZ4(value)
		}
		set, err := decompress(codec, value)
		if err != nil {
			return nil, err
		}
		innerTS := int64(-1)
		if magic == 1 && attrs&0x08 != 0 {
			innerTS = ts
		}
		if recs, err = appendLegacy(recs, set, now, innerTS, true); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// legacyBytes reads an int32-length byte string (-1 = nil) at p.
func legacyBytes(msg []byte, p int) ([]byte, int, error) {
	if len(msg)-p < 4 {
		return nil, p, fmt.Errorf("%w: legacy message field", ErrTruncated)
	}
	n := int(int32(binary.BigEndian.Uint32(msg[p:])))
	p += 4
	if n < 0 {
		return nil, p, nil
	}
	if n > len(msg)-p {
		return nil, p, fmt.Errorf("%w: legacy field of %d bytes in %d", ErrTruncated, n, len(msg)-p)
	}
	return msg[p : p+n], p + n, nil
}

// fixOldKafkaLZ4 repairs the LZ4 frame header checksum that magic-0
// producers compute wrongly (over the frame magic too; KAFKA-3160, fixed
// by KIP-57 for magic 1), so the standard decoder accepts the frame. The
// frame is copied; anything that is not an LZ4 frame is left alone.
func fixOldKafkaLZ4(frame []byte) []byte {
	const magicLen = 4
	if len(frame) < magicLen+3 || binary.LittleEndian.Uint32(frame) != 0x184D2204 {
		return frame
	}
	n := 2 // FLG and BD
	flg := frame[magicLen]
	if flg&0x08 != 0 {
		n += 8 // content size
	}
	if flg&0x01 != 0 {
		n += 4 // dictionary id
	}
	if len(frame) <= magicLen+n {
		return frame
	}
	out := append([]byte(nil), frame...)
	out[magicLen+n] = byte(xxh32(out[magicLen:magicLen+n]) >> 8)
	return out
}

// xxh32 is xxHash32 with seed 0 of a short input (< 16 bytes: the LZ4
// frame descriptor), as the frame header checksum uses it.
func xxh32(b []byte) uint32 {
	const p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
	h := uint32(p5) + uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		h += binary.LittleEndian.Uint32(b) * p3
		h = bits.RotateLeft32(h, 17) * p4
	}
	for _, c := range b {
		h += uint32(c) * p5
		h = bits.RotateLeft32(h, 11) * p1
	}
	h ^= h >> 15
	h *= p2
	h ^= h >> 13
	h *= p3
	h ^= h >> 16
	return h
}
