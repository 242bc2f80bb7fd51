package pico

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"hash/crc32"
	"strconv"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
	"github.com/PicoMQ/picomq/sdk/wire/recordbatch"
)

// kafkaBatch is a client's CreateTime batch of n records (values v<i>,
// timestamps ts+i), gzip-compressed if gz, as a Kafka producer sends it.
func kafkaBatch(t *testing.T, n int, ts int64, gz bool) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{Timestamp: ts + int64(i), Key: []byte("k"), Value: []byte("v" + strconv.Itoa(i)),
			Headers: []record.Header{{Key: "h", Value: []byte("x")}}}
	}
	b := record.AppendBatch(nil, record.BatchOptions{ProducerID: -1, CreateTime: true}, recs)
	if !gz {
		return b
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	if _, err := w.Write(b[record.HeaderSize:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b = append(b[:record.HeaderSize:record.HeaderSize], z.Bytes()...)
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|uint16(record.CodecGzip))
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// TestReadBatchesFormat: format=batches hands on the stored batches byte
// for byte (what Kafka fetch serves), with the page offset to skip below,
// at batch granularity; the records they decode to are the binary read's.
// A compressed batch is served as a binary page instead, and a client
// preferring another format gets it decoded.
func TestReadBatchesFormat(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/b", "application/octet-stream")
	ctx := context.Background()
	for i := range 3 { // offsets 0-2, 3-5, 6-8: one stored batch each
		if _, err := s.env.Svc.AppendBatch(ctx, "/b", stream.AppendRequest{Batch: kafkaBatch(t, 3, int64(1000+10*i), false)}); err != nil {
			t.Fatal(err)
		}
	}
	stored, err := s.env.Svc.ReadBatches(ctx, "/b", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	binRecs := func(query string) []codec.Record {
		r := s.do("GET", "/b?format=binary&"+query, nil)
		wantStatus(t, r, 200, "binary "+query)
		recs, err := codec.Decode(r.Body, nil, codec.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}

	r := s.do("GET", "/b?format=batches", nil)
	wantStatus(t, r, 200, "batches")
	wantHeader(t, r, "Content-Type", wire.MediaRecordBatches, "batches")
	wantHeader(t, r, wire.HeaderRecordCount, "9", "batches")
	wantHeader(t, r, wire.HeaderNextOffset, "9", "batches")
	wantHeader(t, r, wire.HeaderPageOffset, "0", "batches")
	if !bytes.Equal(r.Body, stored.Batches) {
		t.Fatalf("batches page is not the stored bytes (%d vs %d bytes)", len(r.Body), len(stored.Batches))
	}
	got, err := recordbatch.Decode(r.Body, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := binRecs(""); jsonDump(got) != jsonDump(want) {
		t.Fatalf("batches decode to\n%s\nbinary read gives\n%s", jsonDump(got), jsonDump(want))
	}

	// From inside a batch: the whole batch, and the offset to skip below.
	r = s.do("GET", "/b?offset=4&format=batches", nil, "Accept", wire.MediaJSON)
	wantHeader(t, r, wire.HeaderPageOffset, "4", "from offset 4")
	wantHeader(t, r, wire.HeaderRecordCount, "5", "from offset 4")
	got, err = recordbatch.Decode(r.Body, 4, nil)
	if err != nil || jsonDump(got) != jsonDump(binRecs("offset=4")) {
		t.Fatalf("from offset 4: %s, %v; want %s", jsonDump(got), err, jsonDump(binRecs("offset=4")))
	}

	// limit and max_bytes hold at batch granularity (at least one batch).
	r = s.do("GET", "/b?offset=4&limit=3", nil, "Accept", wire.MediaRecordBatches)
	wantHeader(t, r, "Content-Type", wire.MediaRecordBatches, "by Accept")
	wantHeader(t, r, wire.HeaderRecordCount, "2", "limit 3 from 4")
	wantHeader(t, r, wire.HeaderNextOffset, "6", "limit 3 from 4")

	// A client that prefers JSON gets JSON, decoded from those batches.
	r = s.do("GET", "/b?offset=4", nil, "Accept", wire.MediaJSON+", "+wire.MediaRecordBatches+";q=0.5")
	wantHeader(t, r, "Content-Type", wire.MediaJSON, "JSON preferred")
	var js []struct{ Offset int64 }
	r.json(t, &js)
	if len(js) != 5 || js[0].Offset != 4 {
		t.Fatalf("JSON preferred: %s", r.Body)
	}

	// A compressed batch is never handed on: the page that starts with it
	// is binary, and a batches page stops before it.
	if _, err := s.env.Svc.AppendBatch(ctx, "/b", stream.AppendRequest{Batch: kafkaBatch(t, 2, 2000, true)}); err != nil {
		t.Fatal(err)
	}
	r = s.do("GET", "/b?offset=6&format=batches", nil)
	wantHeader(t, r, "Content-Type", wire.MediaRecordBatches, "before the compressed batch")
	wantHeader(t, r, wire.HeaderNextOffset, "9", "before the compressed batch")
	r = s.do("GET", "/b?offset=9&format=batches", nil)
	wantHeader(t, r, "Content-Type", wire.MediaBatch, "compressed batch")
	wantHeader(t, r, wire.HeaderRecordCount, "2", "compressed batch")
	got, err = codec.Decode(r.Body, nil, codec.Limits{})
	if err != nil || len(got) != 2 || got[1].Offset != 10 || string(got[1].Value) != "v1" || got[1].Timestamp != 2001 {
		t.Fatalf("compressed batch as binary: %s, %v", jsonDump(got), err)
	}
}
