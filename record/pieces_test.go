package record

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// cutInto splits data at the given cut points (clamped, in any order)
// into consecutive pieces, empty ones included.
func cutInto(data []byte, cuts ...int) [][]byte {
	var pieces [][]byte
	at := 0
	for _, c := range cuts {
		c = min(max(c, at), len(data))
		pieces = append(pieces, data[at:c:c])
		at = c
	}
	return append(pieces, data[at:])
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestValidatePieces checks a batch split at every kind of place (in
// the header, at the CRC'd region's start, in the records) validates as
// it does whole, and that a flipped bit in either piece is refused.
func TestValidatePieces(t *testing.T) {
	batch := AppendBatch(nil, BatchOptions{BaseOffset: 7, ProducerID: -1}, valueRecords(4, 100))
	want, err := Validate(batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{0, 1, offCRC, offAttributes, offAttributes + 1, HeaderSize - 1, HeaderSize, 200, len(batch) - 1, len(batch)} {
		for _, cut2 := range []int{cut, cut + 1, len(batch)} {
			pieces := cutInto(bytes.Clone(batch), cut, cut2)
			h, err := ValidatePieces(pieces)
			if err != nil || h != want {
				t.Fatalf("cut at %d, %d: %+v, %v; want %+v", cut, cut2, h, err, want)
			}
			for _, flip := range []int{offAttributes, HeaderSize + 3, len(batch) - 1} {
				bad := bytes.Clone(batch)
				bad[flip] ^= 0x10
				if _, err := ValidatePieces(cutInto(bad, cut, cut2)); !errors.Is(err, ErrBadCRC) {
					t.Fatalf("cut at %d, %d, bit flipped at %d: %v, want ErrBadCRC", cut, cut2, flip, err)
				}
			}
		}
	}
	if _, err := ValidatePieces(cutInto(batch[:len(batch)-1], 100)); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short pieces: %v, want ErrTruncated", err)
	}
	long := append(bytes.Clone(batch), 0)
	if _, err := ValidatePieces(cutInto(long, 100)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a byte too many: %v, want ErrCorrupt", err)
	}
}

// TestWalkPieces walks three batches cut into pieces across their
// headers and bodies and checks each comes whole, at its position.
func TestWalkPieces(t *testing.T) {
	var data []byte
	var starts []int
	for i := range 3 {
		starts = append(starts, len(data))
		data = AppendBatch(data, BatchOptions{BaseOffset: int64(10 * i), ProducerID: -1}, valueRecords(i+1, 50))
	}
	for _, cuts := range [][]int{nil, {starts[1] + 5}, {starts[1]}, {starts[1] - 1, starts[1] + HeaderSize + 1}, {3, 4, starts[2] + 70}} {
		pieces := cutInto(data, cuts...)
		var got []int
		err := WalkPieces(pieces, func(batch [][]byte, h BatchHeader, pos int) error {
			if j := Gather(nil, batch, 0, h.Size()); !bytes.Equal(j, data[pos:pos+h.Size()]) {
				t.Fatalf("cuts %v: batch at %d is not the input's bytes there", cuts, pos)
			}
			for _, p := range batch {
				if len(p) == 0 || cap(p) != len(p) {
					t.Fatalf("cuts %v: batch at %d has an empty or uncapped piece", cuts, pos)
				}
			}
			got = append(got, pos)
			return nil
		})
		if err != nil || fmt.Sprint(got) != fmt.Sprint(starts) {
			t.Fatalf("cuts %v: batches at %v (%v), want %v", cuts, got, err, starts)
		}
	}
	if err := WalkPieces(cutInto(data[:len(data)-1], starts[2]+3), func([][]byte, BatchHeader, int) error { return nil }); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated last batch: %v, want ErrTruncated", err)
	}
}

// FuzzValidatePieces checks ValidatePieces against Validate: the input
// cut into three pieces anywhere validates exactly as it does whole (the
// same header, the same error), both as given and with its length and
// CRC repaired so that mutations reach the success path.
func FuzzValidatePieces(f *testing.F) {
	batch := AppendBatch(nil, BatchOptions{BaseOffset: 3, ProducerID: -1}, valueRecords(3, 40))
	f.Add(batch, uint16(10), uint16(70))
	f.Add(batch, uint16(HeaderSize-1), uint16(HeaderSize+1))
	f.Add(batch[:50], uint16(20), uint16(20))
	f.Add([]byte{}, uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, a, b uint16) {
		check := func(data []byte) {
			wantH, wantErr := Validate(data)
			h, err := ValidatePieces(cutInto(bytes.Clone(data), int(a), int(b)))
			if errString(err) != errString(wantErr) || (err == nil && h != wantH) {
				t.Fatalf("cut at %d, %d: %+v, %v; whole: %+v, %v", a, b, h, err, wantH, wantErr)
			}
		}
		check(data)
		if len(data) >= HeaderSize {
			repaired := bytes.Clone(data)
			fixLength(repaired)
			check(repaired)
		}
	})
}

// FuzzWalkPieces checks WalkPieces against WalkBatches over the joined
// input: the same batches at the same positions, the same error, and
// each batch's pieces holding exactly its bytes.
func FuzzWalkPieces(f *testing.F) {
	var payload []byte
	for i := range 3 {
		payload = AppendBatch(payload, BatchOptions{BaseOffset: int64(100 * i), ProducerID: -1}, valueRecords(i+1, 10))
	}
	f.Add(payload, uint16(30), uint16(120))
	f.Add(payload[:len(payload)-5], uint16(0), uint16(HeaderSize))
	f.Add([]byte{}, uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, a, b uint16) {
		type seen struct {
			pos, size int
			h         BatchHeader
		}
		var want []seen
		pos := 0
		wantErr := WalkBatches(data, func(batch []byte, h BatchHeader) error {
			want = append(want, seen{pos, len(batch), h})
			pos += len(batch)
			return nil
		})
		var got []seen
		err := WalkPieces(cutInto(data, int(a), int(b)), func(batch [][]byte, h BatchHeader, pos int) error {
			n := 0
			for _, p := range batch {
				if len(p) == 0 {
					t.Fatalf("empty piece in the batch at %d", pos)
				}
				n += len(p)
			}
			if !bytes.Equal(Gather(nil, batch, 0, n), data[pos:pos+n]) {
				t.Fatalf("batch at %d is not the input's bytes there", pos)
			}
			got = append(got, seen{pos, n, h})
			return nil
		})
		if errString(err) != errString(wantErr) || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("cut at %d, %d: %v, %v; WalkBatches: %v, %v", a, b, got, err, want, wantErr)
		}
	})
}
