package pico

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"unsafe"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

// appendAck is the JSON body of a successful append.
type appendAck struct {
	Offset     int64 `json:"offset"`
	NextOffset int64 `json:"nextOffset"`
	Timestamp  int64 `json:"timestamp"`
	Count      int   `json:"count"`
	// Duplicate: a producer retry of an append that was already written;
	// the offsets are the original's (-1 when no longer known).
	Duplicate     bool    `json:"duplicate,omitempty"`
	ProducerEpoch *uint64 `json:"producerEpoch,omitempty"`
	ProducerSeq   *uint64 `json:"producerSeq,omitempty"`
}

// appendScratch is the per-request memory of an append, pooled so that the
// hot path allocates per request, not per record or per body byte.
type appendScratch struct {
	body  []byte
	crecs []codec.Record
	one   [1]record.Record
}

var appendPool = sync.Pool{New: func() any { return &appendScratch{body: make([]byte, 0, 64<<10)} }}

// maxPooledBody keeps one huge append from pinning its buffer in the pool.
const maxPooledBody = 1 << 20

func (h *Handler) append(w http.ResponseWriter, r *http.Request, name string) {
	shape, mt, err := appendShape(r.Header.Get("Content-Type"))
	if err != nil {
		httpx.WriteError(w, http.StatusUnsupportedMediaType, wire.CodeUnsupportedMedia, err.Error())
		return
	}
	producer, err := parseProducer(r.Header)
	if err != nil {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
		return
	}
	if r.ContentLength > h.cfg.MaxAppendBytes {
		httpx.WriteError(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge,
			fmt.Sprintf("body of %d bytes exceeds the limit of %d", r.ContentLength, h.cfg.MaxAppendBytes))
		return
	}

	sc := appendPool.Get().(*appendScratch)
	defer func() {
		if cap(sc.body) <= maxPooledBody {
			sc.one[0] = record.Record{}
			clear(sc.crecs[:cap(sc.crecs)])
			appendPool.Put(sc)
		}
	}()
	sc.body, err = httpx.ReadBody(w, r, sc.body[:0], h.cfg.MaxAppendBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			httpx.WriteError(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge,
				fmt.Sprintf("body exceeds the limit of %d bytes", h.cfg.MaxAppendBytes))
			return
		}
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, "reading body: "+err.Error())
		return
	}
	body := sc.body

	var recs []record.Record
	switch shape {
	case shapeJSONBatch:
		recs, err = parseJSONBatch(body, h.lim)
	case shapeBinaryBatch:
		recs, sc.crecs, err = parseBinaryBatch(body, h.lim, sc.crecs)
	default:
		sc.one[0] = record.Record{Value: body}
		if k, ok := r.Header[wire.HeaderKey]; ok && len(k) > 0 {
			sc.one[0].Key = []byte(k[0])
		}
		sc.one[0].Headers, err = parseRecordHeaders(r.Header, h.lim.maxHeaders)
		if err == nil {
			recs = sc.one[:]
			err = h.lim.check(recs)
		}
	}
	if err != nil {
		writeParseError(w, err)
		return
	}
	// The service checks the stream's rules (content type, JSON values);
	// a batch envelope names no stream content type.
	req := stream.AppendRequest{Records: recs, Producer: producer}
	if shape == shapeSingle {
		req.ContentType = mt
	}
	ack, err := h.svc.AppendBatch(r.Context(), name, req)
	if err != nil {
		h.writeServiceError(w, r, err)
		return
	}
	writeAppendAck(w, ack, len(recs), producer != nil)
}

// writeAppendAck answers a successful append: the Pico-* headers and the
// appendAck JSON body, formatted by hand (what encoding/json would write,
// without reflection or an encoder per request) into one allocation that
// the header values share: each is a string over its number's digits in
// the body, which is never modified once rendered. Cold, as a live tail's
// appends run at 200/s, every allocation costs about a microsecond.
func writeAppendAck(w http.ResponseWriter, ack stream.AppendResult, count int, producer bool) {
	// The header values and the body share one allocation (both escape:
	// into the header map and through the ResponseWriter interface).
	sc := new(ackScratch)
	body, at := appendAckJSONAt(sc.body[:0], ack, count, producer)
	vals := sc.vals[:0:0]
	hd := w.Header()
	set := func(key, v string) {
		vals = append(sc.vals[:len(vals)], v)
		hd[key] = vals[len(vals)-1:]
	}
	field := func(i int) string {
		return unsafe.String(&body[at[i].from], at[i].to-at[i].from)
	}
	set(wire.HeaderOffset, field(0))
	set(wire.HeaderNextOffset, field(1))
	set(wire.HeaderTimestamp, field(2))
	set(wire.HeaderRecordCount, field(3))
	if producer {
		set(wire.HeaderProducerEpoch, field(4))
		set(wire.HeaderProducerSeq, field(5))
	}
	if ack.Duplicate {
		set(wire.HeaderDuplicate, "true")
	}
	if ack.Closed {
		set(wire.HeaderClosed, "true")
	}
	hd["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// ackScratch is writeAppendAck's memory for one response; body holds the
// largest ack (about 240 bytes: every number at its widest, a producer,
// a duplicate).
type ackScratch struct {
	vals [8]string
	body [256]byte
}

var jsonContentType = []string{wire.MediaJSON}

// appendAckJSON appends the JSON of appendAck{...} plus a newline, byte
// for byte what json.NewEncoder(w).Encode of the struct writes
// (TestAppendAckJSON).
func appendAckJSON(b []byte, ack stream.AppendResult, count int, producer bool) []byte {
	b, _ = appendAckJSONAt(b, ack, count, producer)
	return b
}

// ackNumbers are where appendAckJSONAt wrote each number, as b[from:to]:
// offset, next offset, timestamp, count, then producer epoch and
// sequence (with a producer).
type ackNumbers [6]struct{ from, to int }

// appendAckJSONAt is appendAckJSON that also says where the numbers are.
func appendAckJSONAt(b []byte, ack stream.AppendResult, count int, producer bool) ([]byte, ackNumbers) {
	var at ackNumbers
	k := 0
	num := func(b []byte, v int64) []byte {
		at[k].from = len(b)
		b = strconv.AppendInt(b, v, 10)
		at[k].to = len(b)
		k++
		return b
	}
	unum := func(b []byte, v uint64) []byte {
		at[k].from = len(b)
		b = strconv.AppendUint(b, v, 10)
		at[k].to = len(b)
		k++
		return b
	}
	b = append(b, `{"offset":`...)
	b = num(b, ack.FirstOffset)
	b = append(b, `,"nextOffset":`...)
	b = num(b, ack.NextOffset)
	b = append(b, `,"timestamp":`...)
	b = num(b, ack.Timestamp)
	b = append(b, `,"count":`...)
	b = num(b, int64(count))
	if ack.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	if producer {
		b = append(b, `,"producerEpoch":`...)
		b = unum(b, ack.ProducerEpoch)
		b = append(b, `,"producerSeq":`...)
		b = unum(b, ack.ProducerSeq)
	}
	return append(b, "}\n"...), at
}

// writeParseError answers a body that could not be turned into records.
func writeParseError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errRecordTooLarge):
		httpx.WriteError(w, http.StatusRequestEntityTooLarge, wire.CodeRecordTooLarge, err.Error())
	case errors.Is(err, errTooManyRecords):
		httpx.WriteError(w, http.StatusRequestEntityTooLarge, wire.CodeTooManyRecords, err.Error())
	case errors.Is(err, errBadHeader):
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeInvalidHeader, err.Error())
	default:
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeInvalidBatch, err.Error())
	}
}
