package pico

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

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
// appendAck JSON body, formatted by hand into one buffer (what
// encoding/json would write, without reflection or an encoder per request).
func writeAppendAck(w http.ResponseWriter, ack stream.AppendResult, count int, producer bool) {
	// The numbers are formatted into one string and the header values
	// slice it: one allocation instead of one per number, and one backing
	// array for every header's []string.
	var nb [6 * 20]byte
	var ends [6]int
	b := nb[:0]
	k := 0
	num := func(b []byte) []byte { ends[k] = len(b); k++; return b }
	b = num(strconv.AppendInt(b, ack.FirstOffset, 10))
	b = num(strconv.AppendInt(b, ack.NextOffset, 10))
	b = num(strconv.AppendInt(b, ack.Timestamp, 10))
	b = num(strconv.AppendInt(b, int64(count), 10))
	if producer {
		b = num(strconv.AppendUint(b, ack.ProducerEpoch, 10))
		b = num(strconv.AppendUint(b, ack.ProducerSeq, 10))
	}
	nums := string(b)
	// The header values and the body share one allocation (both escape:
	// into the header map and through the ResponseWriter interface).
	sc := new(ackScratch)
	vals := sc.vals[:0:0]
	hd := w.Header()
	set := func(key, v string) {
		vals = append(sc.vals[:len(vals)], v)
		hd[key] = vals[len(vals)-1:]
	}
	field := func(i int) string {
		from := 0
		if i > 0 {
			from = ends[i-1]
		}
		return nums[from:ends[i]]
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
	_, _ = w.Write(appendAckJSON(sc.body[:0], ack, count, producer))
}

// ackScratch is writeAppendAck's memory for one response.
type ackScratch struct {
	vals [8]string
	body [192]byte
}

var jsonContentType = []string{wire.MediaJSON}

// appendAckJSON appends the JSON of appendAck{...} plus a newline, byte
// for byte what json.NewEncoder(w).Encode of the struct writes
// (TestAppendAckJSON).
func appendAckJSON(b []byte, ack stream.AppendResult, count int, producer bool) []byte {
	b = append(b, `{"offset":`...)
	b = strconv.AppendInt(b, ack.FirstOffset, 10)
	b = append(b, `,"nextOffset":`...)
	b = strconv.AppendInt(b, ack.NextOffset, 10)
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, ack.Timestamp, 10)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, int64(count), 10)
	if ack.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	if producer {
		b = append(b, `,"producerEpoch":`...)
		b = strconv.AppendUint(b, ack.ProducerEpoch, 10)
		b = append(b, `,"producerSeq":`...)
		b = strconv.AppendUint(b, ack.ProducerSeq, 10)
	}
	return append(b, "}\n"...)
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
