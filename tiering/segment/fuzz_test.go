package segment

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/PicoMQ/picomq/tiering/segment/segmenttest"
)

// FuzzOpen feeds arbitrary bytes to the trailer and footer decoders (as a
// whole object) and then reads every stream the footer claims. Invariants:
// no panic; every failure is ErrCorrupt (never a wrong-type error, never
// data); a footer that decodes re-encodes to a footer that decodes to the
// same value; every successful read returns batches inside the claimed
// range; reads through a Slicer match plain reads. Seeds are in testdata/fuzz/FuzzOpen (regenerate with
// PICOMQ_WRITE_FUZZ_SEEDS=1 go test -run TestFuzzSeeds).
func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		r, err := Open(ctx, memObject(data), "fuzz", int64(len(data)))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v is not ErrCorrupt", err)
			}
			return
		}
		var dataLen int64
		if ss := r.Streams(); len(ss) > 0 {
			dataLen = ss[len(ss)-1].End()
		}
		again, err := DecodeFooter(appendFooter(nil, r.footer.streams), dataLen)
		if err != nil || !reflect.DeepEqual(again.streams, r.footer.streams) {
			t.Fatalf("footer does not round-trip: %v", err)
		}
		for _, e := range r.Streams() {
			for _, off := range []int64{e.First, e.Last(), (e.First + e.Last()) / 2} {
				got, err := r.ReadBatches(ctx, e.StreamID, off, 0)
				if err != nil {
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("ReadBatches: %v is not ErrCorrupt", err)
					}
					continue
				}
				if got.FirstOffset > off || got.NextOffset <= off || got.NextOffset > e.Next {
					t.Fatalf("ReadBatches(%d) = [%d, %d) outside [%d, %d]", off, got.FirstOffset, got.NextOffset, e.First, e.Last())
				}
			}
			// The zero-copy path (windows lent by a Slicer, as the block
			// cache does) serves exactly what plain reads serve.
			for _, maxBytes := range []int{100, 4096} {
				plain, perr := ReadStream(ctx, memObject(data), "fuzz", e, e.First, maxBytes)
				lent, lerr := ReadStream(ctx, &memRuns{data: data, runSize: 64}, "fuzz", e, e.First, maxBytes)
				if (perr == nil) != (lerr == nil) || string(plain.Data) != string(lent.Data) {
					t.Fatalf("stream %d maxBytes %d: plain read (%v) and lent read (%v) differ", e.StreamID, maxBytes, perr, lerr)
				}
			}
		}
	})
}

// fuzzSeeds are valid objects of every shape the writer produces.
func fuzzSeeds(tb testing.TB) map[string][]byte {
	one, _ := build(tb, WriterOptions{}, testStream{id: 1, batches: segmenttest.Stream(0, 3, 2, 8, 1)})
	multi, _ := build(tb, WriterOptions{IndexInterval: -1}, threeStreams()[:2]...)
	sparse, _ := build(tb, WriterOptions{IndexInterval: 200}, testStream{id: 42, batches: segmenttest.Stream(7, 20, 1, 20, 5)},
		testStream{id: 43, batches: segmenttest.Stream(0, 1, 3, 0, -1)})
	return map[string][]byte{"valid-one-stream": one, "valid-two-streams-dense": multi, "valid-sparse-index": sparse}
}

// TestFuzzSeeds checks that the committed seed corpus still decodes (a
// format change must come with new seeds) and rewrites it on request.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	for name, data := range fuzzSeeds(t) {
		path := filepath.Join(dir, name)
		if os.Getenv("PICOMQ_WRITE_FUZZ_SEEDS") != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("seed %s: %v (regenerate with PICOMQ_WRITE_FUZZ_SEEDS=1)", name, err)
		}
		if want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data); string(raw) != want {
			t.Errorf("seed %s is stale (regenerate with PICOMQ_WRITE_FUZZ_SEEDS=1)", name)
		}
		if _, err := Open(t.Context(), memObject(data), name, int64(len(data))); err != nil {
			t.Errorf("seed %s: %v", name, err)
		}
	}
}
