package pico

import (
	"errors"
	"fmt"
	"io"
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
	sc.body, err = readBody(w, r, sc.body[:0], h.cfg.MaxAppendBytes)
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
	hd := w.Header()
	hd.Set(wire.HeaderOffset, strconv.FormatInt(ack.FirstOffset, 10))
	hd.Set(wire.HeaderNextOffset, strconv.FormatInt(ack.NextOffset, 10))
	hd.Set(wire.HeaderTimestamp, strconv.FormatInt(ack.Timestamp, 10))
	hd.Set(wire.HeaderRecordCount, strconv.Itoa(len(recs)))
	out := appendAck{Offset: ack.FirstOffset, NextOffset: ack.NextOffset, Timestamp: ack.Timestamp, Count: len(recs), Duplicate: ack.Duplicate}
	if producer != nil {
		ep, sq := ack.ProducerEpoch, ack.ProducerSeq
		out.ProducerEpoch, out.ProducerSeq = &ep, &sq
		hd.Set(wire.HeaderProducerEpoch, strconv.FormatUint(ep, 10))
		hd.Set(wire.HeaderProducerSeq, strconv.FormatUint(sq, 10))
	}
	if ack.Duplicate {
		hd.Set(wire.HeaderDuplicate, "true")
	}
	if ack.Closed {
		hd.Set(wire.HeaderClosed, "true")
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// readBody reads the request body into dst, at most limit bytes. With a
// Content-Length the buffer is sized once (one spare byte, so seeing EOF
// does not grow it).
func readBody(w http.ResponseWriter, r *http.Request, dst []byte, limit int64) ([]byte, error) {
	if r.ContentLength > 0 && int64(cap(dst)) <= r.ContentLength {
		dst = make([]byte, 0, r.ContentLength+1)
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := rd.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
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
