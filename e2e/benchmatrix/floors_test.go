package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
)

// TestMain lets the test binary be the floors' child processes, as the
// benchmatrix binary is under make bench (floors.go).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// TestReplFloorSmoke: the bare replication floor's three child processes
// start, answer local and replicated appends with both follower modes at
// 1 and 64 clients, and the rows carry positive figures, each with its
// local peer. Points are 150 ms: it checks that the floor runs, not what
// it measures.
func TestReplFloorSmoke(t *testing.T) {
	defer func(w, p time.Duration) { replFloorWarmup, replFloorPoint = w, p }(replFloorWarmup, replFloorPoint)
	replFloorWarmup, replFloorPoint = 50*time.Millisecond, 150*time.Millisecond
	m := &matrix{cfg: config{work: t.TempDir()}, res: &benchreport.Results{}}
	if err := m.replFloorRows(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range m.res.Samples {
		got[s.Row+"/"+s.Side] = s.Value
	}
	for _, row := range []string{"repl-floor-p50-c1", "repl-floor-c64", "repl-floor-p50-c1-write", "repl-floor-c64-write"} {
		for _, side := range []string{benchreport.SidePico, benchreport.SidePeer} {
			if v := got[row+"/"+side]; v <= 0 {
				t.Errorf("%s/%s = %v, want > 0", row, side, v)
			}
		}
	}
	t.Logf("%v", got)
}

// TestReplFloorAppends: an append answered by the floor's owner is in
// its file and in both followers' files at the offset it was given, with
// its header (fdatasynced by the owner before the answer; the followers'
// copies are read after they answered, once both have).
func TestReplFloorAppends(t *testing.T) {
	dir := t.TempDir()
	c, err := startReplFloor(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var offs []time.Duration
	err = floorClient(ctx, c.owner, 'F', 100, time.Now().Add(200*time.Millisecond), func(_ time.Time, took time.Duration) { offs = append(offs, took) })
	if err != nil || len(offs) == 0 {
		t.Fatalf("%d appends: %v", len(offs), err)
	}
	// The owner's file holds len(offs) entries of 100 zero bytes, each
	// with its length and CRC-32C.
	b, err := os.ReadFile(filepath.Join(dir, "owner-F.log"))
	if err != nil {
		t.Fatal(err)
	}
	want := binary.BigEndian.AppendUint32(nil, 100)
	want = binary.BigEndian.AppendUint32(want, crc32.Checksum(make([]byte, 100), castagnoli))
	want = append(want, make([]byte, 100)...)
	if got := bytes.Count(b, want); got != len(offs) {
		t.Errorf("owner's file holds %d entries, %d answered", got, len(offs))
	}
	// Both followers get every entry (one of them may still be writing
	// the last ones: wait for it, bounded).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var counts []int
		files, _ := filepath.Glob(filepath.Join(dir, "follower-f-*.log"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			counts = append(counts, bytes.Count(b, want))
		}
		if len(counts) == 2 && counts[0] == len(offs) && counts[1] == len(offs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("followers' files hold %v entries, %d answered", counts, len(offs))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// relayFrames is a relay body for data in frames of at most size bytes.
func relayFrames(data []byte, size int) []byte {
	var out []byte
	for len(data) > 0 {
		n := min(size, len(data))
		out = binary.BigEndian.AppendUint32(out, uint32(n))
		out = binary.BigEndian.AppendUint32(out, crc32.Checksum(data[:n], castagnoli))
		out = append(out, data[:n]...)
		data = data[n:]
	}
	return append(out, make([]byte, relayFrameHeader)...)
}

// TestReadRelay: the bare reader returns the byte count of an intact
// body and fails on a flipped byte, a cut body and an oversized frame.
func TestReadRelay(t *testing.T) {
	data := make([]byte, 3<<20+123)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	body := relayFrames(data, 1<<20)
	if n, err := readRelay(bytes.NewReader(body), 64<<10); err != nil || n != int64(len(data)) {
		t.Fatalf("intact: %d bytes, %v", n, err)
	}
	bad := bytes.Clone(body)
	bad[len(bad)/2] ^= 1
	if _, err := readRelay(bytes.NewReader(bad), 64<<10); err == nil || !strings.Contains(err.Error(), "CRC-32C") {
		t.Errorf("flipped byte: %v, want a CRC-32C error", err)
	}
	if _, err := readRelay(bytes.NewReader(body[:len(body)-relayFrameHeader]), 64<<10); err == nil {
		t.Error("body without its end frame: no error")
	}
	big := binary.BigEndian.AppendUint32(nil, floorRange+1)
	if _, err := readRelay(bytes.NewReader(append(big, 0, 0, 0, 0)), 64<<10); err == nil {
		t.Error("oversized frame: no error")
	}
}

// FuzzReadRelay: any body is either read or refused with an error, never
// a panic or more bytes than it holds.
func FuzzReadRelay(f *testing.F) {
	f.Add(relayFrames([]byte("hello, floor"), 5))
	f.Add(relayFrames(nil, 1))
	f.Add([]byte{0, 0, 0, 3, 1, 2, 3, 4, 'a', 'b', 'c'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		n, _ := readRelay(bytes.NewReader(body), 7)
		if n < 0 || n > int64(len(body)) {
			t.Fatalf("%d bytes read from a body of %d", n, len(body))
		}
	})
}

// FuzzFollow: a follower given any message stream writes what it
// accepts within its file and answers, or stops with an error; it never
// panics.
func FuzzFollow(f *testing.F) {
	msg := func(seq uint64, entries []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(8+len(entries)))
		b = binary.BigEndian.AppendUint64(b, seq)
		return append(b, entries...)
	}
	f.Add(append(msg(1, []byte("entry")), msg(2, []byte("two"))...))
	f.Add(msg(7, nil))
	f.Add([]byte{0, 0, 0, 4, 1, 2, 3, 4})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	file, err := os.Create(filepath.Join(f.TempDir(), "follower.log"))
	if err != nil {
		f.Fatal(err)
	}
	defer file.Close()
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		err := follow(bufio.NewReader(bytes.NewReader(in)), &out, file, false)
		if err == nil {
			t.Fatal("follow returned nil at the end of its input")
		}
		if out.Len()%8 != 0 {
			t.Fatalf("answers of %d bytes", out.Len())
		}
	})
}

// TestRelayFloor: the bare relay child reads every object of a MinIO
// prefix (real MinIO, PICOMQ_S3_*; required under CI) in ranged GETs and
// the reader gets all of their bytes with the right CRCs, twice (the
// second pass reuses the relay's buffers); and the object rows' floors
// come out of coldReadFloors with their sides.
func TestRelayFloor(t *testing.T) {
	url, st := minioPrefix(t, "relayfloor")
	ctx := t.Context()
	var total int64
	for i, size := range []int{floorRange*2 + 17, 1 << 20, 3} {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rand.Uint32())
		}
		if err := objstore.Put(ctx, st, fmt.Sprintf("obj-%02d", i), data, objstore.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		total += int64(size)
	}
	rc, err := startRelay(url)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.stop()
	for pass := range 2 {
		r, err := rc.pass(ctx, total)
		if err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		if r.bytes != total || r.mbs <= 0 || r.seconds <= 0 {
			t.Fatalf("pass %d: relayed %d of %d bytes at %v MB/s in %v s", pass, r.bytes, total, r.mbs, r.seconds)
		}
	}
	// A pass over some keys (the running cold-read row's stream) relays
	// only those objects.
	if r, err := rc.passKeys(ctx, 1<<20+3, []string{"obj-01", "obj-02"}); err != nil || r.bytes != 1<<20+3 {
		t.Fatalf("pass over two keys: %d bytes, %v", r.bytes, err)
	}

	// The object rows' floors: both next to the sequential GETs, and the
	// cold read next to the relay.
	m := &matrix{res: &benchreport.Results{}}
	m.coldReadFloors(ctx, 1, st, url, 50, 100, total)
	if len(m.res.Failures) > 0 {
		t.Fatalf("failures: %v", m.res.Failures)
	}
	got := map[string]float64{}
	for _, s := range m.res.Samples {
		got[s.Row+"/"+s.Side] = s.Value
	}
	for _, want := range []string{"cold-read-floor-parallel/pico", "cold-read-floor-relay/pico", "cold-read-floor-relay-first/pico", "cold-read-floor-relay-first/peer",
		"cold-read-floor-relay-touched/pico", "cold-read-floor-relay-touched/peer"} {
		if got[want] <= 0 {
			t.Errorf("%s = %v, want > 0", want, got[want])
		}
	}
	// The peer is the sequential GETs over both rounds: the 100 MB/s
	// given for the first and a measured second.
	if seq := got["cold-read-floor-parallel/peer"]; seq <= 0 || seq != got["cold-read-floor-relay/peer"] ||
		got["cold-read-vs-relay/pico"] != 50 || got["cold-read-vs-relay/peer"] != got["cold-read-floor-relay/pico"] {
		t.Errorf("rows' sides: %v", got)
	}
}

// minioPrefix is a fresh prefix of the test MinIO (PICOMQ_S3_*; required
// under CI) as a store URL, with the store open on it and the AWS
// environment the floors' child processes read set; its objects are
// deleted when the test ends.
func minioPrefix(t *testing.T, name string) (string, objstore.Store) {
	t.Helper()
	e := objstoretest.LookupS3Env(t)
	t.Setenv("AWS_ACCESS_KEY_ID", e.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", e.SecretKey)
	t.Setenv("AWS_REGION", "us-east-1")
	url := e.URL(name + "-" + objstoretest.RandomHex(8))
	st, err := storeurl.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for a, err := range st.List(context.Background(), "") {
			if err == nil {
				_ = st.Delete(context.Background(), a.Key)
			}
		}
		st.Close()
	})
	return url, st
}

// TestTailFloor: the live-tail floor's child delivers every appended
// record to its subscriber exactly once, in order, as it was sent; and
// tailFloorRows puts the floor's latencies, all positive, next to
// JetStream's and PicoMQ's p50 next to the floor's.
func TestTailFloor(t *testing.T) {
	p, addr, err := startTailFloor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tc, err := dialTail(ctx, addr, false, time.Now().Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.close()
	const n = 300
	got := make(chan []string, 1)
	go func() {
		var recs []string
		for len(recs) < n+1 { // one more than appended: the end shows no extra
			rec, _, err := readTailFrame(tc.subR, nil)
			if err != nil || rec == nil {
				break
			}
			recs = append(recs, string(rec))
		}
		got <- recs
	}()
	offs := map[int64]bool{}
	for i := range n {
		if err := tc.send(fmt.Appendf(nil, "record %04d", i)); err != nil {
			t.Fatal(err)
		}
		off, err := tc.answer()
		if err != nil || offs[off] {
			t.Fatalf("append %d: offset %d (seen before: %v), %v", i, off, offs[off], err)
		}
		offs[off] = true
	}
	// A last record after every numbered one: once it is delivered,
	// anything delivered twice would have come before it.
	if err := tc.send([]byte("end")); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.answer(); err != nil {
		t.Fatal(err)
	}
	recs := <-got
	if len(recs) != n+1 || recs[n] != "end" {
		t.Fatalf("%d records delivered, want %d and the end (the last ones: %q)", len(recs), n+1, recs[max(0, len(recs)-3):])
	}
	for i := range n {
		if want := fmt.Sprintf("record %04d", i); recs[i] != want {
			t.Fatalf("delivery %d is %q, want %q", i, recs[i], want)
		}
	}

	m := &matrix{cfg: config{work: t.TempDir(), secs: time.Second}, res: &benchreport.Results{}}
	m.tailFloorRows(1, m.tailFloor(ctx), &benchreport.Latency{P50: 0.7, P99: 2}, &benchreport.Latency{P50: 0.6, P99: 1.5})
	if len(m.res.Failures) > 0 {
		t.Fatalf("failures: %v", m.res.Failures)
	}
	side := map[string]float64{}
	for _, s := range m.res.Samples {
		side[s.Row+"/"+s.Side] = s.Value
	}
	if side["tail-floor-p50/pico"] <= 0 || side["tail-floor-p99/pico"] < side["tail-floor-p50/pico"] ||
		side["tail-floor-p50/peer"] != 0.6 || side["tail-floor-p99/peer"] != 1.5 ||
		side["tail-vs-floor/pico"] != 0.7 || side["tail-vs-floor/peer"] != side["tail-floor-p50/pico"] ||
		side["tail-floor-1conn-p50/pico"] <= 0 || side["tail-floor-1conn-p50/peer"] != side["tail-floor-p50/pico"] {
		t.Errorf("rows' sides: %v", side)
	}
	t.Logf("%v", side)
}

// TestTailFloorDeliversDurable: the floor's owner (in this process, its
// fdatasync held by the test) sends an appended record to its subscriber
// only after the fdatasync that covers it has returned, and answers the
// append only then too.
func TestTailFloorDeliversDurable(t *testing.T) {
	var hold atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	s := &floorServer{dir: t.TempDir(), logs: map[byte]*floorLog{}, datasync: func(f *os.File) error {
		if hold.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
		return unix.Fdatasync(int(f.Fd()))
	}}
	l, err := s.openLog("owner-L.log", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.logs['L'] = l
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { _ = s.accept(ln) }()
	tc, err := dialTail(t.Context(), ln.Addr().String(), false, time.Now().Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.close()
	// A first record shows the subscription is live.
	if err := tc.send([]byte("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.answer(); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := readTailFrame(tc.subR, nil); err != nil || string(rec) != "first" {
		t.Fatalf("first delivery %q, %v", rec, err)
	}
	hold.Store(true)
	if err := tc.send([]byte("second")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered: // written, its fdatasync held
	case <-time.After(time.Minute):
		t.Fatal("no fdatasync after a minute")
	}
	// While the fdatasync is held neither the subscriber nor the
	// appender gets anything (a delivery before durability would be here
	// within microseconds).
	_ = tc.sub.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if rec, _, err := readTailFrame(tc.subR, nil); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("delivered %q (%v) before its fdatasync returned", rec, err)
	}
	_ = tc.app.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if off, err := tc.answer(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("answered (%d, %v) before its fdatasync returned", off, err)
	}
	close(release)
	_ = tc.sub.SetReadDeadline(time.Now().Add(time.Minute))
	_ = tc.app.SetReadDeadline(time.Now().Add(time.Minute))
	if rec, _, err := readTailFrame(tc.subR, nil); err != nil || string(rec) != "second" {
		t.Fatalf("second delivery %q, %v", rec, err)
	}
	if _, err := tc.answer(); err != nil {
		t.Fatal(err)
	}
}

// FuzzReadTailFrame: any subscriber stream is read as frames that fit in
// it, or refused with an error; never a panic.
func FuzzReadTailFrame(f *testing.F) {
	frame := func(rec string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(rec))), rec...)
	}
	f.Add(append(frame("1733400000000000000 xxxx"), frame("two")...))
	f.Add(frame(""))
	f.Add([]byte{0, 0, 0, 9, 'a', 'b'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0})
	f.Add(append([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 1, 8}, frame("after an answer")...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		var buf []byte
		total := 0
		for {
			rec, ans, err := readTailFrame(r, buf)
			if err != nil {
				break
			}
			if ans >= 0 {
				total += 12
			} else {
				total += 4 + len(rec)
			}
			if total > len(in) {
				t.Fatalf("frames of %d bytes from %d", total, len(in))
			}
			buf = rec
		}
	})
}
