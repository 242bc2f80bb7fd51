package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// walBytes sums the sizes of the node's WAL segment files.
func walBytes(t testing.TB, dataDir string) int64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dataDir, "wal", "*.wal"))
	var n int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

type b64Record struct {
	Offset        int64  `json:"offset"`
	Value         string `json:"value"`
	ValueEncoding string `json:"valueEncoding"`
}

// readValues reads a whole stream with base64 values (exact bytes).
func readValues(t testing.TB, base, stream string) [][]byte {
	t.Helper()
	return readValuesPaged(t, base, stream, 4<<20)
}

// readValuesPaged reads a whole stream in reads of about maxBytes with no
// binding record limit, so a read often stops inside an object range and
// the next one continues there (a mid-object cold read).
func readValuesPaged(t testing.TB, base, stream string, maxBytes int) [][]byte {
	t.Helper()
	var out [][]byte
	for off := int64(0); ; {
		r := do(t, "GET", fmt.Sprintf("%s%s?offset=%d&encoding=base64&max_bytes=%d&limit=10000", base, stream, off, maxBytes), nil)
		wantStatus(t, r, 200, "read "+stream)
		var page []b64Record
		if err := json.Unmarshal(r.Body, &page); err != nil {
			t.Fatalf("read %s: %v", stream, err)
		}
		for _, rec := range page {
			if rec.Offset != int64(len(out)) {
				t.Fatalf("%s: record at offset %d, expected %d", stream, rec.Offset, len(out))
			}
			v, err := base64.StdEncoding.DecodeString(rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		next, _ := strconv.ParseInt(r.Header.Get("Pico-Next-Offset"), 10, 64)
		if r.Header.Get("Pico-Up-To-Date") == "true" {
			return out
		}
		off = next
	}
}

// TestTieringToMinIO appends ~100 MiB across 100 streams with small seal
// thresholds, checks that objects land in MinIO and the WAL shrinks, then
// restarts the node with its WAL directory deleted: every record must come
// back byte-identical from MinIO.
func TestTieringToMinIO(t *testing.T) {
	m := startMinio(t)
	dir := t.TempDir()
	total := 100 << 20
	if testing.Short() {
		total = 10 << 20
	}
	n := startNodeEnv(t, dir, m.Env(), "--object-store", m.ObjectStoreURL(), "--seal-max-bytes", "4194304", "--seal-max-age", "200ms")
	const streams = 100
	for s := 0; s < streams; s++ {
		wantStatus(t, do(t, "PUT", fmt.Sprintf("%s/tier/%d", n.URL, s), nil, "Content-Type", "application/octet-stream"), 201, "create")
	}
	sent := make([][][]byte, streams)
	var mu sync.Mutex
	var wg sync.WaitGroup
	perWorker := total / 16
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for written := 0; written < perWorker; {
				s := rng.IntN(streams)
				val := make([]byte, 512+rng.IntN(16<<10))
				for i := range val {
					val[i] = byte(rng.Uint32())
				}
				// Appends to one stream are serialised by the lock so the
				// expected order is the acknowledged order.
				mu.Lock()
				r, err := tryDo(context.Background(), "POST", fmt.Sprintf("%s/tier/%d", n.URL, s), val, "Content-Type", "application/octet-stream")
				if err != nil || r.Status != 200 {
					mu.Unlock()
					t.Errorf("append: %v %d %s", err, r.Status, r.Body)
					return
				}
				off, _ := strconv.Atoi(r.Header.Get("Pico-Offset"))
				if off != len(sent[s]) {
					mu.Unlock()
					t.Errorf("stream %d: offset %d, expected %d", s, off, len(sent[s]))
					return
				}
				sent[s] = append(sent[s], val)
				mu.Unlock()
				written += len(val)
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Everything reaches object storage, and the WAL shrinks: segments
	// that hold only uploaded data are deleted.
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, n.URL, "picomq_unflushed_bytes") > 0 || (!testing.Short() && metric(t, n.URL, "picomq_wal_segments") > 1) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %v unflushed bytes, %v WAL segments", metric(t, n.URL, "picomq_unflushed_bytes"), metric(t, n.URL, "picomq_wal_segments"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	objects := countObjects(t, m)
	if objects == 0 {
		t.Fatal("no objects in the bucket")
	}
	t.Logf("%d MiB in %d objects; WAL now %d KiB", total>>20, objects, walBytes(t, dir)>>10)

	n.stop(t)
	if err := os.RemoveAll(filepath.Join(dir, "wal")); err != nil {
		t.Fatal(err)
	}
	n.restart()
	for s := 0; s < streams; s++ {
		// Odd streams in small reads: reads that stop and resume inside an
		// object's range must neither skip nor repeat a record.
		maxBytes := 4 << 20
		if s%2 == 1 {
			maxBytes = 48 << 10
		}
		got := readValuesPaged(t, n.URL, fmt.Sprintf("/tier/%d", s), maxBytes)
		if len(got) != len(sent[s]) {
			t.Fatalf("stream %d: %d records after restart without WAL, sent %d", s, len(got), len(sent[s]))
		}
		for i := range got {
			if !bytes.Equal(got[i], sent[s][i]) {
				t.Fatalf("stream %d offset %d differs after restart from MinIO", s, i)
			}
		}
	}
	// All of it came from MinIO through the block cache.
	if got := metric(t, n.URL, "picomq_cache_fetched_bytes_total"); got < float64(total) {
		t.Errorf("cache fetched %v bytes from object storage, want at least the %d written", got, total)
	}
}

// TestMinIOOutage stops MinIO during appends: local-durability appends keep
// being acknowledged, and after MinIO returns every acknowledged record is in
// object storage (proven by deleting the WAL after a clean stop).
func TestMinIOOutage(t *testing.T) {
	m := startMinio(t)
	dir := t.TempDir()
	n := startNodeEnv(t, dir, m.Env(), "--object-store", m.ObjectStoreURL(), "--seal-max-age", "100ms")
	wantStatus(t, do(t, "PUT", n.URL+"/outage", nil, "Content-Type", "text/plain"), 201, "create")
	var sent []string
	app := func(i int) {
		v := fmt.Sprintf("record-%d", i)
		r := do(t, "POST", n.URL+"/outage", []byte(v), "Content-Type", "text/plain")
		wantStatus(t, r, 200, "append "+v)
		sent = append(sent, v)
	}
	for i := 0; i < 100; i++ {
		app(i)
	}
	m.stop()
	for i := 100; i < 300; i++ {
		app(i) // object store down: local acks continue
	}
	m.start()
	for i := 300; i < 400; i++ {
		app(i)
	}
	n.stop(t) // the final flush must reach MinIO
	os.RemoveAll(filepath.Join(dir, "wal"))
	n.restart()
	got := readValues(t, n.URL, "/outage")
	if len(got) != len(sent) {
		t.Fatalf("%d records after the outage and WAL removal, sent %d", len(got), len(sent))
	}
	for i := range got {
		if string(got[i]) != sent[i] {
			t.Fatalf("offset %d: %q, sent %q", i, got[i], sent[i])
		}
	}
}

func countObjects(t testing.TB, m *minioServer) int {
	t.Helper()
	out, err := runCurl(m, m.URL()+"/"+m.Bucket+"?list-type=2")
	if err != nil {
		t.Fatalf("list bucket: %v %s", err, out)
	}
	return bytes.Count(out, []byte("<Key>"))
}

// metric reads one unlabelled Prometheus sample from /metrics.
func metric(t testing.TB, base, name string) float64 {
	t.Helper()
	r := do(t, "GET", base+"/metrics", nil)
	for _, line := range bytes.Split(r.Body, []byte("\n")) {
		if bytes.HasPrefix(line, []byte(name+" ")) {
			v, err := strconv.ParseFloat(string(bytes.TrimPrefix(line, []byte(name+" "))), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return v
		}
	}
	t.Fatalf("metric %s not exported", name)
	return 0
}

// TestTieringCrashKill9 SIGKILLs a node that flushes to MinIO many times a
// second (tiny seal thresholds), so kills land between an upload and its
// manifest commit, between the commit and the WAL truncation, and in the
// middle of truncation. After every restart each acknowledged record is
// at its offset with its bytes, and the log is gap-free. At the end the
// node is stopped cleanly and restarted without its WAL: recovery must
// have left every record in object storage, and nothing twice.
func TestTieringCrashKill9(t *testing.T) {
	m := startMinio(t)
	dir := t.TempDir()
	n := startNodeEnv(t, dir, m.Env(), "--object-store", m.ObjectStoreURL(), "--seal-max-bytes", "16384", "--seal-max-age", "20ms")
	const streams = 3
	acked := createCrashStreams(t, n.URL+"/tcrash", streams)
	var mu sync.Mutex
	verify := func(stage string) {
		t.Helper()
		total := 0
		for s := 0; s < streams; s++ {
			recs := readAll(t, n.URL, fmt.Sprintf("/tcrash/%d", s))
			mu.Lock()
			for i, rec := range recs {
				if rec.Offset != int64(i) || rec.Value == nil || !strings.HasPrefix(*rec.Value, "r") {
					mu.Unlock()
					t.Fatalf("%s: stream %d record %d: offset %d, a value no client sent, or a gap", stage, s, i, rec.Offset)
				}
				if want, ok := acked[s][rec.Offset]; ok && want != *rec.Value {
					mu.Unlock()
					t.Fatalf("%s: stream %d offset %d holds another value than acknowledged", stage, s, rec.Offset)
				}
				acked[s][rec.Offset] = *rec.Value // written, ack lost in the kill: part of the log from now on
			}
			if len(acked[s]) != len(recs) {
				mu.Unlock()
				t.Fatalf("%s: stream %d has %d records, %d acknowledged", stage, s, len(recs), len(acked[s]))
			}
			total += len(recs)
			mu.Unlock()
		}
		t.Logf("%s: %d records verified", stage, total)
	}
	for round := 0; round < 3; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for i := 0; ctx.Err() == nil; i++ {
					s := rng.IntN(streams)
					val := fmt.Sprintf("r%d-w%d-i%d-%s", round, w, i, strings.Repeat("t", rng.IntN(3000)))
					r, err := tryDo(ctx, "POST", fmt.Sprintf("%s/tcrash/%d", n.URL, s), []byte(val), "Content-Type", "application/octet-stream")
					if err != nil || r.Status != 200 {
						continue // the node died (or refused): outcome unknown
					}
					off, _ := strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
					mu.Lock()
					acked[s][off] = val
					mu.Unlock()
				}
			})
		}
		// Let flushes run; the kill moment is random on purpose.
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
		n.Kill()
		cancel()
		wg.Wait()
		n.restart()
		verify(fmt.Sprintf("round %d after kill -9", round))
	}
	if objects := countObjects(t, m); objects == 0 {
		t.Fatal("no objects in the bucket: the test did not exercise flushes")
	}
	n.stop(t)
	if err := os.RemoveAll(filepath.Join(dir, "wal")); err != nil {
		t.Fatal(err)
	}
	n.restart()
	verify("restart without the WAL")
}

// TestCorruptObjectNeverServed flips one byte of a stream's object in
// MinIO: reads answer 503 with a JSON error naming the corrupt object and
// never a byte of it, the node counts and logs it, and once the object is
// restored the same reads succeed (nothing about the failure is cached).
func TestCorruptObjectNeverServed(t *testing.T) {
	m := startMinio(t)
	dir := t.TempDir()
	n := startNodeEnv(t, dir, m.Env(), "--object-store", m.ObjectStoreURL(), "--seal-max-age", "50ms")
	wantStatus(t, do(t, "PUT", n.URL+"/bad", nil, "Content-Type", "application/octet-stream"), 201, "create")
	// One append of 20 records: one WAL entry, so one flush object however
	// slowly the machine runs (20 single appends can straddle seals and
	// leave several objects).
	var batch []map[string]string
	for i := 0; i < 20; i++ {
		batch = append(batch, map[string]string{"value": fmt.Sprintf("precious-%02d", i)})
	}
	body, err := json.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, do(t, "POST", n.URL+"/bad", body, "Content-Type", "application/vnd.picomq.batch+json"), 200, "append")
	deadline := time.Now().Add(20 * time.Second)
	for metric(t, n.URL, "picomq_unflushed_bytes") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("not flushed after 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.stop(t)
	if err := os.RemoveAll(filepath.Join(dir, "wal")); err != nil {
		t.Fatal(err)
	}
	list, err := runCurl(m, m.URL()+"/"+m.Bucket+"?list-type=2")
	if err != nil {
		t.Fatalf("list: %v %s", err, list)
	}
	keys := regexp.MustCompile(`<Key>([^<]+)</Key>`).FindAllSubmatch(list, -1)
	if len(keys) != 1 {
		t.Fatalf("want exactly one object, bucket has %d", len(keys))
	}
	objURL := m.URL() + "/" + m.Bucket + "/" + string(keys[0][1])
	orig, err := runCurl(m, objURL)
	if err != nil {
		t.Fatalf("get object: %v", err)
	}
	bad := bytes.Clone(orig)
	i := bytes.Index(bad, []byte("precious-07"))
	if i < 0 {
		t.Fatal("record bytes not found in the object")
	}
	bad[i+3] ^= 0x20 // "prEcious-07": still printable, wrong
	if out, err := curlPut(m, objURL, bad); err != nil {
		t.Fatalf("overwrite object: %v %s", err, out)
	}

	n.restart()
	r := do(t, "GET", n.URL+"/bad?offset=0", nil)
	if r.Status != 503 || !bytes.Contains(r.Body, []byte(`"code":"unavailable"`)) || !bytes.Contains(r.Body, []byte("corrupt")) {
		t.Fatalf("read of a corrupt object: %d %s", r.Status, r.Body)
	}
	if bytes.Contains(r.Body, []byte("precious")) || bytes.Contains(r.Body, []byte("prEcious")) {
		t.Fatalf("corrupt data served: %s", r.Body)
	}
	if got := metric(t, n.URL, "picomq_corrupt_objects_total"); got != 1 {
		t.Errorf("picomq_corrupt_objects_total = %v, want 1", got)
	}

	if out, err := curlPut(m, objURL, orig); err != nil {
		t.Fatalf("restore object: %v %s", err, out)
	}
	recs := readAll(t, n.URL, "/bad")
	if len(recs) != 20 || recs[7].Value == nil || *recs[7].Value != "precious-07" {
		t.Fatalf("after restoring the object: %d records", len(recs))
	}
}
