package picomq

import (
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// recordBatchPage encodes n records of size-byte values at offsets
// 0..n-1 as one uncompressed RecordBatch v2 (Kafka's layout).
func recordBatchPage(n, size int) []byte {
	var body []byte
	v := make([]byte, size)
	for i := range n {
		rb := []byte{0}                           // attributes
		rb = binary.AppendVarint(rb, 0)           // timestamp delta
		rb = binary.AppendVarint(rb, int64(i))    // offset delta
		rb = binary.AppendVarint(rb, -1)          // null key
		rb = binary.AppendVarint(rb, int64(size)) // value
		rb = append(rb, v...)
		rb = binary.AppendVarint(rb, 0) // no headers
		body = binary.AppendVarint(body, int64(len(rb)))
		body = append(body, rb...)
	}
	h := make([]byte, 61)
	binary.BigEndian.PutUint32(h[8:], uint32(61-12+len(body)))
	h[16] = 2                                       // magic
	binary.BigEndian.PutUint32(h[23:], uint32(n-1)) // last offset delta
	binary.BigEndian.PutUint64(h[43:], ^uint64(0))  // producer id -1
	binary.BigEndian.PutUint16(h[51:], 0xffff)      // producer epoch -1
	binary.BigEndian.PutUint32(h[53:], ^uint32(0))  // base sequence -1
	binary.BigEndian.PutUint32(h[57:], uint32(n))   // records
	b := append(h, body...)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// TestPageDecodePresized: a catch-up page is decoded into a slice sized
// by its Pico-Record-Count, not grown by doubling (which allocated a
// third more than the records need and copied them each time), with its
// records' positions in one string.
func TestPageDecodePresized(t *testing.T) {
	const n = 4000
	page := recordBatchPage(n, 100)
	s := &stream{name: "/t"}
	decode := func(count string) float64 {
		return testing.AllocsPerRun(5, func() {
			h := http.Header{"Content-Type": {wire.MediaRecordBatches}}
			if count != "" {
				h.Set(wire.HeaderRecordCount, count)
			}
			p, err := s.picoReadFinish(pageReply{header: h, body: page, page: Page{Next: strconv.Itoa(n)}}, false)
			if err != nil || len(p.Records) != n {
				t.Fatalf("decoded %d records, %v", len(p.Records), err)
			}
		})
	}
	p, err := s.picoReadFinish(pageReply{header: http.Header{"Content-Type": {wire.MediaRecordBatches}}, body: page}, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range p.Records {
		if r.Position != strconv.Itoa(i) || len(r.Body) != 100 {
			t.Fatalf("record %d: position %q, %d-byte body", i, r.Position, len(r.Body))
		}
	}
	with, without := decode(strconv.Itoa(n)), decode("")
	// A page is a handful of allocations, not some per record (a
	// position string and two error labels each, before).
	if with > 10 {
		t.Errorf("decoding a page of %d records: %.0f allocations, want at most 10", n, with)
	}
	// Doubling from empty to 4,000 records is 12 allocations.
	if with > without-10 {
		t.Errorf("decoding a page of %d records: %.0f allocations with its record count, %.0f without; want at least 10 fewer", n, with, without)
	}
	// A header claiming more records than the body can hold is bounded
	// by the body (at least minimalRecordBytes a record).
	if got := pageRecordsHint(http.Header{wire.HeaderRecordCount: {"1000000000"}}, 70); got != 11 {
		t.Errorf("hint for 10^9 records in 70 bytes: %d, want 11", got)
	}
	for _, bad := range []string{"", "-1", "x"} {
		if got := pageRecordsHint(http.Header{wire.HeaderRecordCount: {bad}}, 70); got != 0 {
			t.Errorf("hint for %q: %d, want 0", bad, got)
		}
	}
}

// TestPageDecodeBytes: a page of stored batches is decoded straight into
// its Records: the memory it allocates is the Records slice and the
// positions, with no []codec.Record of the page in between (which was
// 88 bytes a record more, 0.35 MB of a 4,000-record page).
func TestPageDecodeBytes(t *testing.T) {
	const n = 4000
	page := recordBatchPage(n, 1000)
	s := &stream{name: "/t"}
	h := http.Header{"Content-Type": {wire.MediaRecordBatches}, wire.HeaderRecordCount: {strconv.Itoa(n)}}
	var before, after runtime.MemStats
	const rounds = 5
	runtime.ReadMemStats(&before)
	for range rounds {
		p, err := s.picoReadFinish(pageReply{header: h, body: page, page: Page{Next: strconv.Itoa(n)}}, false)
		if err != nil || len(p.Records) != n || p.Records[n-1].Position != strconv.Itoa(n-1) || p.Next != strconv.Itoa(n) {
			t.Fatalf("decoded %d records, %v", len(p.Records), err)
		}
	}
	runtime.ReadMemStats(&after)
	perPage := (after.TotalAlloc - before.TotalAlloc) / rounds
	// The Records, plus the positions (4 digits each, written once and
	// copied into one string) and their lengths: 9 bytes a record.
	want := uint64(n) * uint64(unsafe.Sizeof(Record{})+9)
	if perPage > want+want/10 {
		t.Errorf("decoding a page of %d records allocated %d bytes, want about %d (its Records and positions)", n, perPage, want)
	}
}
