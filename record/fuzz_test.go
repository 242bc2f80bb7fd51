package record

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzDecodeRecords feeds arbitrary bytes to DecodeRecords twice: as given,
// which mostly exercises header checks because random bytes rarely carry a
// valid CRC, and with length and CRC repaired, which lets mutations reach the
// decompressors and the record parser. Properties: no panic; every error is
// an ErrInvalid; a successful decode re-encodes through AppendBatch to the
// same keys, values and headers.
func FuzzDecodeRecords(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		if len(data) >= HeaderSize {
			repaired := bytes.Clone(data)
			fixLength(repaired)
			checkDecode(t, repaired)
		}
	})
}

// FuzzSplitBatches walks arbitrary payloads. Properties: no panic; errors are
// ErrInvalid; on success the batches handed to fn tile the payload exactly
// and each one satisfies the DecodeRecords properties.
func FuzzSplitBatches(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		total := 0
		err := SplitBatches(data, func(batch []byte, h BatchHeader) error {
			if !bytes.Equal(batch, data[total:total+len(batch)]) {
				t.Fatalf("batch at byte %d is not the next slice of the payload", total)
			}
			if h.Size() != len(batch) {
				t.Fatalf("header size %d for a %d-byte batch", h.Size(), len(batch))
			}
			total += len(batch)
			checkDecode(t, batch)
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error outside ErrInvalid: %v", err)
			}
			if total != 0 {
				t.Fatalf("fn saw %d bytes of a payload that was then rejected", total)
			}
			return
		}
		if total != len(data) {
			t.Fatalf("batches cover %d of %d bytes", total, len(data))
		}
	})
}

func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	recs, err := DecodeRecords(data, nil)
	if err != nil {
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("error outside ErrInvalid: %v", err)
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error is not a *Error: %v", err)
		}
		return
	}
	h, err := Validate(data)
	if err != nil {
		t.Fatalf("DecodeRecords accepted a batch Validate rejects: %v", err)
	}
	if len(recs) != int(h.NumRecords) {
		t.Fatalf("%d records decoded, header says %d", len(recs), h.NumRecords)
	}
	for i, r := range recs {
		if r.Offset < h.BaseOffset+int64(i) || r.Offset > h.LastOffset() || (i > 0 && r.Offset <= recs[i-1].Offset) {
			t.Fatalf("record %d: offset %d outside [%d, %d] or not ascending", i, r.Offset, h.BaseOffset, h.LastOffset())
		}
	}
	if h.Dense() {
		for i, r := range recs {
			if r.Offset != h.BaseOffset+int64(i) {
				t.Fatalf("dense batch, record %d: offset %d, want %d", i, r.Offset, h.BaseOffset+int64(i))
			}
		}
	}
	if len(recs) == 0 {
		return // an empty (compacted) batch: nothing to re-encode
	}
	again := AppendBatch(nil, BatchOptions{BaseOffset: h.BaseOffset, Timestamp: h.MaxTimestamp, ProducerID: -1}, recs)
	recs2, err := DecodeRecords(again, nil)
	if err != nil {
		t.Fatalf("re-encoded batch does not decode: %v", err)
	}
	if d := diffRecordContent(recs2, recs); d != "" {
		t.Fatalf("re-encoding changed the records: %s", d)
	}
}

// corpusDir is where the committed seed corpora live.
func corpusDir(target string) string { return filepath.Join("testdata", "fuzz", target) }

// fuzzSeeds are the batches committed as seed corpora. Names starting with
// "valid-" must decode; TestFuzzCorpus holds them to it.
func fuzzSeeds(t testing.TB) (decode, split map[string][]byte) {
	small := []Record{
		{Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: "h", Value: []byte("x")}, {Key: "n", Value: nil}}},
		{Key: nil, Value: nil},
		{Key: []byte{}, Value: []byte("empty key")},
	}
	kb := func(c Codec) kbatch {
		return kbatch{codec: c, baseOffset: 5, firstTS: 1_700_000_000_000, maxTS: 1_700_000_000_009,
			producerID: -1, epoch: -1, seq: -1, recs: toKmsg(small, []int64{0, 4, 9})}
	}
	withFlags := kb(CodecSnappy)
	withFlags.xerial = true
	stream := kb(CodecZstd)
	stream.zstdStream = true
	control := kbatch{attrs: attrTransactional | attrControl, baseOffset: 8, producerID: 3, epoch: 1, seq: -1,
		firstTS: 7, maxTS: 7, recs: []kmsg.Record{{Key: []byte{0, 0, 0, 0}, Value: []byte{0, 0, 0, 0, 0, 2}}}}
	txn := kb(CodecLZ4)
	txn.attrs, txn.producerID, txn.epoch, txn.seq = attrTransactional, 11, 0, 0

	decode = map[string][]byte{
		"valid-appendbatch-headers":   AppendBatch(nil, BatchOptions{BaseOffset: 3, Timestamp: 1_700_000_000_000, ProducerID: -1}, small),
		"valid-null-key-value":        AppendBatch(nil, BatchOptions{ProducerID: 9, BaseSequence: 4}, []Record{{}, {Value: []byte{}}}),
		"valid-kmsg-createtime":       buildKmsg(t, kb(CodecNone)),
		"valid-gzip":                  buildKmsg(t, kb(CodecGzip)),
		"valid-snappy-raw":            buildKmsg(t, kb(CodecSnappy)),
		"valid-snappy-xerial":         buildKmsg(t, withFlags),
		"valid-lz4-transactional":     buildKmsg(t, txn),
		"valid-zstd":                  buildKmsg(t, kb(CodecZstd)),
		"valid-zstd-streamed":         buildKmsg(t, stream),
		"valid-control-transactional": buildKmsg(t, control),
	}
	gappy, _, err := FilterBatch(nil, decode["valid-gzip"], func(r *Record) bool { return r.Value == nil })
	if err != nil {
		t.Fatal(err)
	}
	decode["valid-compacted-gap"] = gappy
	decode["valid-compacted-empty"] = AppendEmptyBatch(nil, 40, 49, 1_700_000_000_000)
	badCRC := bytes.Clone(decode["valid-kmsg-createtime"])
	badCRC[len(badCRC)-1] ^= 0x40
	decode["invalid-bad-crc"] = badCRC
	decode["invalid-truncated"] = decode["valid-gzip"][:len(decode["valid-gzip"])-3]
	magic1 := bytes.Clone(decode["valid-appendbatch-headers"])
	magic1[offMagic] = 1
	decode["invalid-magic-1"] = magic1

	var three []byte
	three = append(three, decode["valid-appendbatch-headers"]...)
	three = append(three, decode["valid-gzip"]...)
	three = append(three, decode["valid-control-transactional"]...)
	split = map[string][]byte{
		"valid-three-batches":       three,
		"valid-one-zstd":            decode["valid-zstd"],
		"valid-empty":               {},
		"invalid-trailing-partial":  append(bytes.Clone(three), decode["valid-lz4-transactional"][:40]...),
		"invalid-bad-crc-in-middle": append(append(bytes.Clone(decode["valid-snappy-raw"]), badCRC...), decode["valid-zstd"]...),
	}
	return decode, split
}

// TestWriteFuzzCorpus regenerates the committed corpora. It only runs when
// asked: RECORD_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus ./record/
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("RECORD_WRITE_CORPUS") == "" {
		t.Skip("set RECORD_WRITE_CORPUS=1 to regenerate testdata/fuzz")
	}
	decode, split := fuzzSeeds(t)
	for target, seeds := range map[string]map[string][]byte{"FuzzDecodeRecords": decode, "FuzzSplitBatches": split} {
		dir := corpusDir(target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range seeds {
			content := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFuzzCorpus keeps the committed corpora honest: every seed the generator
// names is committed, "valid-" seeds decode and "invalid-" seeds do not. It
// checks the committed bytes, not that they equal a fresh generation, because
// compressor output may change between library versions.
func TestFuzzCorpus(t *testing.T) {
	decode, split := fuzzSeeds(t)
	for target, seeds := range map[string]map[string][]byte{"FuzzDecodeRecords": decode, "FuzzSplitBatches": split} {
		for name := range seeds {
			raw, err := os.ReadFile(filepath.Join(corpusDir(target), name))
			if err != nil {
				t.Errorf("%s/%s: %v (regenerate with RECORD_WRITE_CORPUS=1)", target, name, err)
				continue
			}
			b := parseCorpusFile(t, string(raw))
			var ok bool
			if target == "FuzzDecodeRecords" {
				_, err = DecodeRecords(b, nil)
				ok = err == nil
			} else {
				err = SplitBatches(b, func(batch []byte, _ BatchHeader) error {
					_, err := DecodeRecords(batch, nil)
					return err
				})
				ok = err == nil
			}
			if want := strings.HasPrefix(name, "valid-"); ok != want {
				t.Errorf("%s/%s: decoded %v, want %v (err %v)", target, name, ok, want, err)
			}
		}
	}
}

func parseCorpusFile(t *testing.T, s string) []byte {
	t.Helper()
	body, ok := strings.CutPrefix(s, "go test fuzz v1\n[]byte(")
	body, ok2 := strings.CutSuffix(strings.TrimSpace(body), ")")
	if !ok || !ok2 {
		t.Fatalf("not a one-value []byte corpus file: %.60q", s)
	}
	v, err := strconv.Unquote(body)
	if err != nil {
		t.Fatalf("corpus value: %v", err)
	}
	return []byte(v)
}

// FuzzWalkBatches walks arbitrary bytes with WalkBatches. Properties: no
// panic; errors are ErrInvalid; the batches handed to fn are consecutive
// slices of the input, each as long as its header says; and wherever
// SplitBatches accepts the input, WalkBatches visits the same batches.
func FuzzWalkBatches(f *testing.F) {
	var payload []byte
	for i := range 3 {
		payload = AppendBatch(payload, BatchOptions{BaseOffset: int64(100 * i), ProducerID: -1}, valueRecords(i+1, 10))
	}
	f.Add(payload)
	f.Add(payload[:len(payload)-5])
	f.Add(payload[:HeaderSize-1])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		total, n := 0, 0
		err := WalkBatches(data, func(batch []byte, h BatchHeader) error {
			if !bytes.Equal(batch, data[total:total+len(batch)]) || h.Size() != len(batch) {
				t.Fatalf("batch %d at byte %d is not the next %d bytes of the input", n, total, h.Size())
			}
			total += len(batch)
			n++
			return nil
		})
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error outside ErrInvalid: %v", err)
		}
		if err == nil && total != len(data) {
			t.Fatalf("batches cover %d of %d bytes", total, len(data))
		}
		splitN := 0
		if SplitBatches(data, func([]byte, BatchHeader) error { splitN++; return nil }) == nil && (err != nil || splitN != n) {
			t.Fatalf("SplitBatches accepts %d batches, WalkBatches saw %d (%v)", splitN, n, err)
		}
	})
}
