package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/segment"
	"github.com/PicoMQ/picomq/tiering/segment/segmenttest"
)

// TestParsePlan: a plan reads back as written; malformed lines, bad
// ranges and keys are refused.
func TestParsePlan(t *testing.T) {
	spans := []planSpan{{0, "l0/n/1", 0, 10}, {1, "l0/n/1", 10, 5}, {0, "l0/n/2", 7, 1 << 30}}
	got, streams, err := parsePlan(bytes.NewReader(formatPlan(spans)))
	if err != nil || streams != 2 || fmt.Sprint(got) != fmt.Sprint(spans) {
		t.Fatalf("got %v, %d streams, %v; want %v", got, streams, err, spans)
	}
	for _, bad := range []string{"0 k 0\n", "0 k -1 4\n", "0 k 0 0\n", "0  0 4\n", "x k 0 4\n", "0 k 0 4 5\n", "-1 k 0 4\n", "0 k 0 1125899906842625\n"} {
		if _, _, err := parsePlan(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzParsePlan: any input is parsed into spans that planWindows can
// cut, or refused; never a panic.
func FuzzParsePlan(f *testing.F) {
	f.Add(formatPlan([]planSpan{{0, "l0/n/1", 0, 10}, {1, "l0/n/1", 10, 5}}))
	f.Add([]byte("0 k 4194300 9\n1 k 0 4194304\n"))
	f.Add([]byte("3 k 0 1\n0 j 0 1\n0 k 0 1\n"))
	f.Add([]byte("0 k 0 1125899906842624\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		spans, streams, err := parsePlan(bytes.NewReader(in))
		if err != nil {
			return
		}
		for _, s := range spans {
			if s.off < 0 || s.n <= 0 || s.key == "" || s.stream >= streams {
				t.Fatalf("accepted span %+v of %d streams", s, streams)
			}
		}
		if streams > 1<<16 || len(spans) > 1<<12 {
			return // a valid plan too large to cut in a fuzz iteration
		}
		var total int64
		for _, s := range spans {
			total += s.n
		}
		if total > 1<<40 {
			return
		}
		windows, pieces, err := planWindows(spans, streams)
		if err != nil {
			return
		}
		var got int64
		for _, ps := range pieces {
			for _, p := range ps {
				if p.lo < 0 || p.hi <= p.lo || p.hi > p.w.n || p.w.n > floorRange {
					t.Fatalf("piece [%d, %d) of a window of %d bytes", p.lo, p.hi, p.w.n)
				}
				got += p.hi - p.lo
			}
		}
		if got != total || (total > 0 && len(windows) == 0) {
			t.Fatalf("pieces cover %d bytes of %d, %d windows", got, total, len(windows))
		}
	})
}

// TestPlanWindows: spans are cut at floorRange-aligned windows, each
// window is the hull of the spans in it (one GET for neighbouring
// streams), its reader count is the pieces in it, and a stream whose
// spans go back to an earlier window is refused.
func TestPlanWindows(t *testing.T) {
	const r = floorRange
	spans := []planSpan{
		{0, "a", 100, r - 100 + 50}, // window a/0 and a/1
		{1, "a", r + 50, 1000},      // a/1
		{1, "b", 0, 10},             // b/0
		{2, "a", 3 * r, 7},          // a/3
	}
	windows, pieces, err := planWindows(spans, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range windows {
		got = append(got, fmt.Sprintf("%s[%d,+%d)x%d", w.key, w.off, w.n, w.readers.Load()))
	}
	want := []string{
		fmt.Sprintf("a[100,+%d)x1", r-100),
		fmt.Sprintf("a[%d,+1050)x2", r),
		fmt.Sprintf("a[%d,+7)x1", 3*r),
		"b[0,+10)x1",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("windows %v, want %v", got, want)
	}
	if len(pieces[0]) != 2 || pieces[0][1].lo != 0 || pieces[0][1].hi != 50 || pieces[1][0].lo != 50 || pieces[1][0].hi != 1050 {
		t.Errorf("pieces %+v", pieces)
	}
	if _, _, err := planWindows([]planSpan{{0, "b", 0, 1}, {0, "a", 0, 1}}, 1); err == nil {
		t.Error("a stream going back from b to a: no error")
	}
}

// TestRelayManyFloor: on real MinIO (PICOMQ_S3_*, required under CI), a
// store of two L0 objects of three streams each (one stream's range
// crossing a 4 MiB window), a compacted L1 copy of one range and an
// object that is not a segment: the plan takes each stream's ranges once,
// in offset order; the relay child serves every stream to its own
// reader, byte for byte the stream's batches; a second pass is refused;
// and the cold-many floor rows come out of manyReadersFloor.
func TestRelayManyFloor(t *testing.T) {
	url, st := minioPrefix(t, "relaymany")
	ctx := t.Context()
	// Stream s has count batches of 100 records of 1 KiB per object:
	// stream 20's 50 batches in the first object are ~5 MiB.
	counts := map[uint64][2]int{10: {3, 2}, 20: {50, 4}, 30: {1, 1}}
	want := map[uint64][]byte{}
	next := map[uint64]int64{}
	put := func(key string, streams []uint64, obj int) {
		var buf bytes.Buffer
		w := segment.NewWriter(&buf, segment.WriterOptions{})
		for _, s := range streams {
			for _, b := range segmenttest.Stream(next[s], counts[s][obj], 100, 1024, 1) {
				if err := w.Append(s, b); err != nil {
					t.Fatal(err)
				}
				want[s] = append(want[s], b...)
			}
			next[s] += int64(counts[s][obj] * 100)
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if err := objstore.Put(ctx, st, key, buf.Bytes(), objstore.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put(tiering.L0Key("n1", 1, "aa"), []uint64{10, 20, 30}, 0)
	put(tiering.L0Key("n1", 2, "bb"), []uint64{10, 20, 30}, 1)
	// Stream 10's first range again, compacted into an L1 object.
	{
		var buf bytes.Buffer
		w := segment.NewWriter(&buf, segment.WriterOptions{})
		for _, b := range segmenttest.Stream(0, counts[10][0], 100, 1024, 1) {
			if err := w.Append(10, b); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if err := objstore.Put(ctx, st, tiering.L1Key(10, 0), buf.Bytes(), objstore.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := objstore.Put(ctx, st, "manifest.json", []byte("{}"), objstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	spans, streams, total, err := storePlan(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if streams != 3 || len(spans) != 6 || total != int64(len(want[10])+len(want[20])+len(want[30])) {
		t.Fatalf("plan: %d streams, %d spans, %d bytes: %v", streams, len(spans), total, spans)
	}

	// Every stream's body, byte for byte.
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	if err := os.WriteFile(plan, formatPlan(spans), 0o644); err != nil {
		t.Fatal(err)
	}
	p, addr, err := startChild("relay-many", "relay-many", "-store", url, "-plan", plan)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	get := func(i int) (*http.Response, error) {
		return http.Get(fmt.Sprintf("http://%s/stream?i=%d", addr, i))
	}
	bodies := make([][]byte, streams)
	errs := make(chan error, streams)
	for i := range streams {
		go func() {
			resp, err := get(i)
			if err == nil {
				bodies[i], err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	for range streams {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range []uint64{10, 20, 30} {
		got := unframe(t, bodies[i])
		if !bytes.Equal(got, want[id]) {
			t.Errorf("stream %d (index %d): %d bytes, want its %d bytes of batches", id, i, len(got), len(want[id]))
		}
	}
	for _, c := range []struct {
		i      string
		status int
	}{{"0", http.StatusConflict}, {"3", http.StatusNotFound}, {"x", http.StatusNotFound}} {
		resp, err := http.Get(fmt.Sprintf("http://%s/stream?i=%s", addr, c.i))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), `"error"`) {
			t.Errorf("stream %s again: %s %q %s, want %d with a JSON error", c.i, resp.Status, resp.Header.Get("Content-Type"), b, c.status)
		}
	}

	m := &matrix{cfg: config{work: dir}, res: &benchreport.Results{}}
	par, err := m.manyReadersFloor(ctx, 1, st, minio{}, url, 50, float64(total))
	if err != nil || len(m.res.Failures) > 0 || par <= 0 {
		t.Fatalf("manyReadersFloor: %v MB/s, %v, failures %v", par, err, m.res.Failures)
	}
	got := map[string]float64{}
	for _, s := range m.res.Samples {
		got[s.Row+"/"+s.Side] = s.Value
	}
	if got["cold-many-floor-relay-first/pico"] <= 0 || got["cold-many-floor-relay-first/peer"] != par ||
		got["cold-many-vs-relay/pico"] != 50 || got["cold-many-vs-relay/peer"] != got["cold-many-floor-relay-first/pico"] ||
		got["cold-many-floor-relay-touched/pico"] <= 0 || got["cold-many-floor-relay-touched/peer"] != par {
		t.Errorf("rows' sides: %v", got)
	}
}

// unframe returns the bytes of a relay body's frames, checking each
// frame's CRC-32C and the end frame.
func unframe(t *testing.T, body []byte) []byte {
	t.Helper()
	var out []byte
	for {
		if len(body) < relayFrameHeader {
			t.Fatalf("body cut before its end frame")
		}
		n, crc := binary.BigEndian.Uint32(body), binary.BigEndian.Uint32(body[4:])
		body = body[relayFrameHeader:]
		if n == 0 {
			return out
		}
		if int(n) > len(body) || crc32.Checksum(body[:n], castagnoli) != crc {
			t.Fatalf("frame of %d bytes: cut or CRC mismatch", n)
		}
		out, body = append(out, body[:n]...), body[n:]
	}
}
