package metadata

// Registry record encoding. A stream record is the value of
// <prefix>streams/<name>; with a million streams in one etcd (whose default
// quota is 2 GiB) every byte of it counts, and a restart decodes all of
// them, so it is stored in the protocol buffers wire format, written and
// read by hand with protowire (no generated code):
//
//   - the name is not stored: it is the key;
//   - fields holding their zero value are left out;
//   - a Kafka topic alias equal to the one derived from the name (slashes
//     to dots, no leading slash) is a one-byte flag instead of the string.
//
// Any value of this format can be read with `protoc --decode_raw`; the
// field numbers are listed in docs/operations.md. Records written by
// earlier versions are JSON objects, which can never start with the byte
// '{' in this format (that would be field 15 with the deprecated group wire
// type), so both are read, and a JSON record is rewritten in the new format
// the next time it changes. Unknown fields are skipped, so a field added
// later does not make older nodes fail to read a record.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of a stream record. Never reuse a number.
const (
	fID             = 1
	fContentType    = 2
	fCreatedSec     = 3
	fCreatedNsec    = 4
	fOwner          = 5
	fEpoch          = 6
	fKafkaTopic     = 7
	fTopicDerived   = 8 // 1: KafkaTopic is DerivedTopic(name)
	fRetentionMs    = 9
	fRetentionBytes = 10
	fMaxBatchBytes  = 11
	fDurability     = 12
	fStartOffset    = 13
	fTTLSeconds     = 14
	fExpiresSec     = 16 // 15 is never used: see jsonFirstByte
	fExpiresNsec    = 17
	fFork           = 18 // embedded message, fields fFork*
	fForkRefs       = 19
	fSoftDeleted    = 20
	fDeleting       = 21
	fReplicas       = 22
	fMinInSync      = 23
	fLogAppendTime  = 40 // a bool; 31-39 left for other stream settings
	// 24-29 left for other stream settings; compaction is a nested message.
	fCompaction = 30 // embedded message, fields fCompaction*
)

// Field numbers of a stream's key-compaction settings (StreamCompaction),
// nested in fCompaction. Every value is stored resolved (defaults filled
// in at create), so an absent field is a zero value, not "the default".
const (
	fCompactionDelete          = 1
	fCompactionDeleteRetention = 2
	fCompactionMinLag          = 3
	fCompactionMaxLag          = 4
	fCompactionSegment         = 5
	fCompactionDirtyPPM        = 6 // min.cleanable.dirty.ratio in millionths
)

// Field numbers of a fork (StreamFork), nested in fFork.
const (
	fForkSource    = 1
	fForkSourceID  = 2
	fForkOffset    = 3
	fForkSubOffset = 4
	fForkEnd       = 5
	fForkLastBytes = 6
)

// Field numbers of a topic index entry.
const (
	fTopicStream = 1
	fTopicID     = 2
)

// jsonFirstByte starts every record written before the compact format.
const jsonFirstByte = '{'

var errTruncated = errors.New("truncated or malformed field")

// DerivedTopic is the alias node/stream derives from a stream name by
// default. Only used to store such an alias as a flag: a record decodes to
// the same KafkaTopic whatever the derivation rule becomes.
func DerivedTopic(name string) string {
	if len(name) < 2 {
		return ""
	}
	return strings.ReplaceAll(name[1:], "/", ".")
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendInt(b []byte, num protowire.Number, v int64) []byte {
	return appendVarint(b, num, uint64(v))
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	return appendVarint(b, num, protowire.EncodeBool(v))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendTime writes a set time. The seconds are always written, even 0, so
// a time at the Unix epoch (both fields 0, which appendInt leaves out)
// stays present instead of decoding as the unset time (year 1).
func appendTime(b []byte, secNum, nsecNum protowire.Number, t time.Time) []byte {
	b = protowire.AppendTag(b, secNum, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.Unix()))
	return appendInt(b, nsecNum, int64(t.Nanosecond()))
}

// encodeStream encodes s without its name (the key holds it).
func encodeStream(s Stream) []byte {
	b := make([]byte, 0, 64+len(s.ContentType)+len(s.Owner))
	b = appendVarint(b, fID, s.ID)
	b = appendString(b, fContentType, s.ContentType)
	if !s.CreatedAt.IsZero() {
		// The decoder is unchanged, so stored records decode as before.
		b = appendTime(b, fCreatedSec, fCreatedNsec, s.CreatedAt)
	}
	b = appendString(b, fOwner, s.Owner)
	b = appendInt(b, fEpoch, s.Epoch)
	if s.KafkaTopic != "" && s.KafkaTopic == DerivedTopic(s.Name) {
		b = appendBool(b, fTopicDerived, true)
	} else {
		b = appendString(b, fKafkaTopic, s.KafkaTopic)
	}
	b = appendInt(b, fRetentionMs, s.RetentionMs)
	b = appendInt(b, fRetentionBytes, s.RetentionBytes)
	b = appendInt(b, fMaxBatchBytes, s.MaxBatchBytes)
	b = appendString(b, fDurability, s.Durability)
	b = appendInt(b, fStartOffset, s.StartOffset)
	b = appendInt(b, fTTLSeconds, s.TTLSeconds)
	if s.ExpiresAt != nil {
		b = appendTime(b, fExpiresSec, fExpiresNsec, *s.ExpiresAt)
	}
	if f := s.Fork; f != nil {
		var fb []byte
		fb = appendString(fb, fForkSource, f.Source)
		fb = appendVarint(fb, fForkSourceID, f.SourceID)
		fb = appendInt(fb, fForkOffset, f.Offset)
		fb = appendInt(fb, fForkSubOffset, f.SubOffset)
		fb = appendInt(fb, fForkEnd, f.End)
		fb = appendInt(fb, fForkLastBytes, f.LastBytes)
		b = protowire.AppendTag(b, fFork, protowire.BytesType)
		b = protowire.AppendBytes(b, fb)
	}
	b = appendInt(b, fForkRefs, s.ForkRefs)
	b = appendBool(b, fSoftDeleted, s.SoftDeleted)
	b = appendBool(b, fDeleting, s.Deleting)
	b = appendInt(b, fReplicas, s.Replicas)
	b = appendInt(b, fMinInSync, s.MinInSync)
	if s.LogAppendTime {
		b = appendBool(b, fLogAppendTime, true)
	}
	if c := s.Compaction; c != nil {
		// Written even when every field is zero: presence is the setting.
		cb := make([]byte, 0, 32)
		cb = appendBool(cb, fCompactionDelete, c.Delete)
		cb = appendInt(cb, fCompactionDeleteRetention, c.DeleteRetentionMs)
		cb = appendInt(cb, fCompactionMinLag, c.MinLagMs)
		cb = appendInt(cb, fCompactionMaxLag, c.MaxLagMs)
		cb = appendInt(cb, fCompactionSegment, c.SegmentMs)
		cb = appendInt(cb, fCompactionDirtyPPM, c.MinDirtyRatioPPM)
		b = protowire.AppendTag(b, fCompaction, protowire.BytesType)
		b = protowire.AppendBytes(b, cb)
	}
	return b
}

// fieldFn is called for each field of a message: v for varints, data for
// length-delimited fields. Other wire types are skipped.
type fieldFn func(num protowire.Number, v uint64, data []byte) error

// walkFields calls fn for every field of b, skipping fields of the wire
// types this format never writes (so a later version may add them).
func walkFields(b []byte, fn fieldFn) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: tag: %v", errTruncated, protowire.ParseError(n))
		}
		b = b[n:]
		var (
			v    uint64
			data []byte
		)
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			data, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n >= 0 {
				b = b[n:]
				continue
			}
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %v", errTruncated, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, v, data); err != nil {
			return err
		}
	}
	return nil
}

// decodeStreamValue decodes a stored record of the stream called name, in
// either format. The strings it returns do not alias value.
func decodeStreamValue(name string, value []byte) (Stream, error) {
	if len(value) > 0 && value[0] == jsonFirstByte {
		var s Stream
		if err := json.Unmarshal(value, &s); err != nil {
			return Stream{}, err
		}
		if s.Name != name {
			return Stream{}, fmt.Errorf("record names %q", s.Name)
		}
		return s, nil
	}
	s := Stream{Name: name}
	var (
		cSec, cNsec, eSec, eNsec int64
		hasCreated, hasExpires   bool
		derived                  bool
	)
	err := walkFields(value, func(num protowire.Number, v uint64, data []byte) error {
		switch num {
		case fID:
			s.ID = v
		case fContentType:
			s.ContentType = string(data)
		case fCreatedSec:
			cSec, hasCreated = int64(v), true
		case fCreatedNsec:
			cNsec, hasCreated = int64(v), true
		case fOwner:
			s.Owner = string(data)
		case fEpoch:
			s.Epoch = int64(v)
		case fKafkaTopic:
			s.KafkaTopic = string(data)
		case fTopicDerived:
			derived = v != 0
		case fRetentionMs:
			s.RetentionMs = int64(v)
		case fRetentionBytes:
			s.RetentionBytes = int64(v)
		case fMaxBatchBytes:
			s.MaxBatchBytes = int64(v)
		case fDurability:
			s.Durability = string(data)
		case fStartOffset:
			s.StartOffset = int64(v)
		case fTTLSeconds:
			s.TTLSeconds = int64(v)
		case fExpiresSec:
			eSec, hasExpires = int64(v), true
		case fExpiresNsec:
			eNsec, hasExpires = int64(v), true
		case fFork:
			f, err := decodeFork(data)
			if err != nil {
				return fmt.Errorf("fork: %w", err)
			}
			s.Fork = f
		case fForkRefs:
			s.ForkRefs = int64(v)
		case fSoftDeleted:
			s.SoftDeleted = v != 0
		case fDeleting:
			s.Deleting = v != 0
		case fReplicas:
			s.Replicas = int64(v)
		case fMinInSync:
			s.MinInSync = int64(v)
		case fLogAppendTime:
			s.LogAppendTime = v != 0
		case fCompaction:
			c, err := decodeCompaction(data)
			if err != nil {
				return fmt.Errorf("compaction: %w", err)
			}
			s.Compaction = c
		}
		return nil
	})
	if err != nil {
		return Stream{}, err
	}
	if s.ID == 0 {
		return Stream{}, errors.New("record has no id")
	}
	if hasCreated {
		s.CreatedAt = unixTime(cSec, cNsec)
	}
	if hasExpires {
		t := unixTime(eSec, eNsec)
		s.ExpiresAt = &t
	}
	if derived {
		s.KafkaTopic = DerivedTopic(name)
	}
	return s, nil
}

// unixTime is the UTC time a record stored, the same value a JSON record's
// RFC 3339 time decodes to.
func unixTime(sec, nsec int64) time.Time {
	return time.Unix(sec, nsec).UTC()
}

func decodeFork(b []byte) (*StreamFork, error) {
	f := &StreamFork{}
	err := walkFields(b, func(num protowire.Number, v uint64, data []byte) error {
		switch num {
		case fForkSource:
			f.Source = string(data)
		case fForkSourceID:
			f.SourceID = v
		case fForkOffset:
			f.Offset = int64(v)
		case fForkSubOffset:
			f.SubOffset = int64(v)
		case fForkEnd:
			f.End = int64(v)
		case fForkLastBytes:
			f.LastBytes = int64(v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

func decodeCompaction(b []byte) (*StreamCompaction, error) {
	c := &StreamCompaction{}
	err := walkFields(b, func(num protowire.Number, v uint64, _ []byte) error {
		switch num {
		case fCompactionDelete:
			c.Delete = v != 0
		case fCompactionDeleteRetention:
			c.DeleteRetentionMs = int64(v)
		case fCompactionMinLag:
			c.MinLagMs = int64(v)
		case fCompactionMaxLag:
			c.MaxLagMs = int64(v)
		case fCompactionSegment:
			c.SegmentMs = int64(v)
		case fCompactionDirtyPPM:
			c.MinDirtyRatioPPM = int64(v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func EncodeTopicEntry(e TopicEntry) []byte {
	b := make([]byte, 0, 8+len(e.Stream))
	b = appendString(b, fTopicStream, e.Stream)
	return appendVarint(b, fTopicID, e.ID)
}

// DecodeTopicEntry reads a topic index value in either format.
func DecodeTopicEntry(value []byte) (TopicEntry, error) {
	var e TopicEntry
	if len(value) > 0 && value[0] == jsonFirstByte {
		err := json.Unmarshal(value, &e)
		return e, err
	}
	err := walkFields(value, func(num protowire.Number, v uint64, data []byte) error {
		switch num {
		case fTopicStream:
			e.Stream = string(data)
		case fTopicID:
			e.ID = v
		}
		return nil
	})
	return e, err
}

// EncodeStream is the registry's encoding of s without its name (the key
// holds it): for a caller that keeps many records in memory compactly
// (node/stream keeps idle streams that way). DecodeStream reads it back.
func EncodeStream(s Stream) []byte { return encodeStream(s) }

// DecodeStream decodes a record of the stream called name that
// EncodeStream (or the registry) wrote.
func DecodeStream(name string, value []byte) (Stream, error) {
	return decodeStreamValue(name, value)
}
