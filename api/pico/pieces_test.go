package pico

import (
	"bytes"
	"net/http/httptest"
	"testing"

	"github.com/PicoMQ/picomq/record"
)

// TestWriteRecordsInPieces: a page written in pieces is byte for byte the
// page rendered whole (binary frame, raw values), its size is what the
// Content-Length said, and no piece is much larger than writePiece.
func TestWriteRecordsInPieces(t *testing.T) {
	var recs []record.Record
	var raw []byte
	for i := range 300 {
		v := bytes.Repeat([]byte{byte(i)}, 1+i*7)
		recs = append(recs, record.Record{Offset: int64(i), Timestamp: int64(1000 + i), Key: []byte("k"), Value: v,
			Headers: []record.Header{{Key: "h", Value: []byte{byte(i)}}}})
		raw = append(raw, v...)
	}
	recs = append(recs, record.Record{Offset: 300, Value: make([]byte, 3*writePiece)}) // one record larger than a piece
	raw = append(raw, recs[300].Value...)
	for _, tc := range []struct {
		name string
		raw  bool
		want []byte
		size int
	}{{"binary", false, appendRecordsBinary(nil, recs), binarySize(recs)}, {"raw", true, raw, rawSize(recs)}} {
		w := &pieceRecorder{ResponseRecorder: httptest.NewRecorder()}
		buf := writeRecordsInPieces(w, nil, recs, tc.raw)
		got := w.Body.Bytes()
		if !bytes.Equal(got, tc.want) || len(got) != tc.size {
			t.Errorf("%s: %d bytes written, want %d (size %d), equal=%v", tc.name, len(got), len(tc.want), tc.size, bytes.Equal(got, tc.want))
		}
		if w.writes < 2 || len(buf) != 0 {
			t.Errorf("%s: %d writes, %d bytes left in the buffer; want pieces", tc.name, w.writes, len(buf))
		}
		if w.largest > 3*writePiece+writePiece+64 {
			t.Errorf("%s: a piece of %d bytes", tc.name, w.largest)
		}
	}
}

type pieceRecorder struct {
	*httptest.ResponseRecorder
	writes, largest int
}

func (r *pieceRecorder) Write(p []byte) (int, error) {
	r.writes++
	r.largest = max(r.largest, len(p))
	return r.ResponseRecorder.Write(p)
}
