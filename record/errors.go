package record

import (
	"errors"
	"strconv"
	"strings"
)

// ErrInvalid is the class of every input error this package reports. Bad
// batches come from clients or from damaged storage, never from a bug on the
// caller's side, so frontends answer the whole class the same way (HTTP 400,
// Kafka CORRUPT_MESSAGE) and only need the specific kind for logs and metrics.
var ErrInvalid = errors.New("invalid record batch")

// Kinds of invalid input. Each wraps ErrInvalid.
var (
	// ErrTruncated means the input ends before the size its own length
	// field promises: a short read or a cut-off payload rather than a lie
	// inside the batch.
	ErrTruncated = newKind("truncated")
	// ErrBadMagic means the batch is not RecordBatch v2. Magic 0 and 1
	// message sets predate idempotence and headers; Kafka clients new enough
	// to talk to PicoMQ never send them.
	ErrBadMagic = newKind("unsupported magic")
	// ErrBadCRC means the bytes changed after the producer checksummed them.
	ErrBadCRC = newKind("CRC mismatch")
	// ErrCorrupt means the batch is self-inconsistent: counts, lengths or
	// varints that contradict each other or the batch size.
	ErrCorrupt = newKind("corrupt")
	// ErrUnsupportedCodec means attribute bits 0-2 name a codec Kafka does
	// not define (5-7).
	ErrUnsupportedCodec = newKind("unsupported compression codec")
	// ErrTooLarge means decompression would exceed MaxDecompressedSize.
	ErrTooLarge = newKind("decompressed size over limit")
)

// kindError is a sentinel kind: it prints its own name and belongs to ErrInvalid.
type kindError struct{ name string }

func newKind(name string) error    { return &kindError{name} }
func (k *kindError) Error() string { return ErrInvalid.Error() + ": " + k.name }
func (k *kindError) Unwrap() error { return ErrInvalid }

// Error describes one invalid batch precisely enough to find the bad byte in a
// hex dump: which batch of a payload, which record, which byte offset.
type Error struct {
	// Kind is one of the sentinels above (ErrTruncated, ErrCorrupt, ...).
	Kind error
	// Batch is the index of the batch within a SplitBatches payload, or -1.
	Batch int
	// Record is the index of the record within its batch, or -1 when the
	// problem is in the batch header or framing.
	Record int
	// Offset is the byte offset of the problem: from the start of the payload
	// for SplitBatches, from the start of the batch otherwise, or, when
	// Decompressed is set, from the start of the decompressed records. -1
	// when no single position applies.
	Offset int
	// Decompressed says Offset counts bytes of decompressed record data,
	// which is the only place record framing exists in a compressed batch.
	Decompressed bool
	// Detail says which rule was broken, with the values involved.
	Detail string
	// Err is the underlying cause, e.g. a decompressor's error, or nil.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("record: ")
	if e.Kind != nil {
		b.WriteString(e.Kind.Error())
	} else {
		b.WriteString(ErrInvalid.Error())
	}
	sep := ": "
	if e.Batch >= 0 {
		b.WriteString(sep + "batch " + strconv.Itoa(e.Batch))
		sep = ", "
	}
	if e.Record >= 0 {
		b.WriteString(sep + "record " + strconv.Itoa(e.Record))
		sep = ", "
	}
	if e.Offset >= 0 {
		if e.Decompressed {
			b.WriteString(sep + "decompressed byte " + strconv.Itoa(e.Offset))
		} else {
			b.WriteString(sep + "byte " + strconv.Itoa(e.Offset))
		}
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap exposes both the kind (so errors.Is(err, ErrCorrupt) and
// errors.Is(err, ErrInvalid) hold) and the cause (so a decompressor's own
// error can still be matched).
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// headerError reports a problem at a fixed byte position of the batch header.
func headerError(kind error, off int, detail string) *Error {
	return &Error{Kind: kind, Batch: -1, Record: -1, Offset: off, Detail: detail}
}
