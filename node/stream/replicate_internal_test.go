package stream

import (
	"slices"
	"testing"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// Followers go to zones that hold no copy yet first, keep the live ones
// already chosen, and never include the owner or a node twice.
func TestChooseFollowersPrefersOtherZones(t *testing.T) {
	members := []metadata.Member{
		{NodeID: "a", Zone: "z1"}, {NodeID: "b", Zone: "z1"}, {NodeID: "c", Zone: "z1"},
		{NodeID: "d", Zone: "z2"}, {NodeID: "e", Zone: "z3"},
	}
	for _, name := range []string{"/s/1", "/s/2", "/s/3", "/orders/42"} {
		got := chooseFollowers(name, "a", "z1", members, nil, 2)
		if !slices.Equal(sorted(got), []string{"d", "e"}) {
			t.Errorf("%s: followers %v, want the nodes of z2 and z3", name, got)
		}
	}
	got := chooseFollowers("/s/1", "a", "z1", members, []string{"b", "gone", "a"}, 2)
	if len(got) != 2 || got[0] != "b" || slices.Contains(got, "a") || slices.Contains(got, "gone") {
		t.Errorf("keeping b: followers %v, want b first, then one other live node, never the owner or a dead node", got)
	}
	if got := chooseFollowers("/s/1", "a", "z1", members[:2], nil, 2); !slices.Equal(got, []string{"b"}) {
		t.Errorf("two nodes: followers %v, want [b]", got)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// A follower's copy continues its owner's log, is truncated when the owner
// resends an overlap, starts over only where object storage covers the
// hole, and a copy of another ownership restarts at the new owner's floor.
func TestReplicaPlace(t *testing.T) {
	r := &replica{}
	if r.place(1, 10, 5) {
		t.Fatal("a new copy accepted a frame starting past what object storage holds")
	}
	if !r.place(1, 5, 5) || r.next != 5 {
		t.Fatalf("a new copy at the floor: ok=false or next %d", r.next)
	}
	r.entries = []replicaEntry{{base: 5, next: 8}, {base: 8, next: 12}}
	r.next = 12
	if !r.place(1, 12, 5) || r.next != 12 {
		t.Fatal("a frame continuing the copy was refused")
	}
	if !r.place(1, 8, 5) || r.next != 8 || len(r.entries) != 1 {
		t.Fatalf("a resend from 8: next %d, entries %v; want the copy cut at 8", r.next, r.entries)
	}
	if r.place(1, 20, 8) {
		t.Fatal("a frame leaving a hole above the floor was accepted")
	}
	if !r.place(1, 20, 20) || r.next != 20 || len(r.entries) != 0 {
		t.Fatalf("a frame at the floor past the copy: next %d, entries %v; want a fresh copy at 20", r.next, r.entries)
	}
	r.entries, r.next = []replicaEntry{{base: 20, next: 30}}, 30
	if r.place(2, 40, 35) {
		t.Fatal("a new owner's frame above its floor was accepted onto an old owner's copy")
	}
	if r.epoch != 2 {
		t.Fatalf("epoch %d after a frame of epoch 2, want the copy fenced at 2", r.epoch)
	}
	if !r.place(2, 35, 35) || r.next != 35 || len(r.entries) != 0 {
		t.Fatalf("the new owner's frame at its floor: next %d entries %v", r.next, r.entries)
	}
}

// BenchmarkReplicaFrames: encoding and decoding one request of 64
// streams' 100 B appends, the follower's and the owner's per-request cost.
func BenchmarkReplicaFrames(b *testing.B) {
	entry := appendEntryHeader(nil, 7, nil, "", false, false)
	entry = append(entry, make([]byte, 170)...)
	frames := make([]ReplicaFrame, 64)
	for i := range frames {
		frames[i] = ReplicaFrame{StreamID: uint64(i + 1), Name: "/bench/stream", Epoch: 3, Uploaded: 1000, From: 1200, Entries: [][]byte{entry}}
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendReplicaFrames(buf[:0], frames)
		if _, err := DecodeReplicaFrames(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// buildFrames turns one request's queued entries into frames, consecutive
// entries of a stream into one frame, with a fixed number of allocations
// (it runs once per replication request on the owner; it made 21 for
// these 9 entries before its slices were sized up front).
func TestBuildFramesAllocations(t *testing.T) {
	s := &Service{}
	const nStreams = 8
	var sts []*streamState
	for i := range nStreams {
		sts = append(sts, &streamState{info: metadata.Stream{ID: uint64(i + 1), Name: "/s/" + string(rune('a'+i)), Epoch: 3}})
	}
	var items []shipItem
	for i, st := range sts {
		items = append(items, shipItem{st: st, from: 10, end: 11, data: []byte{byte(i)}})
	}
	items = append(items, shipItem{st: sts[0], from: 11, end: 13, data: []byte{100}}) // continues stream 1's frame
	frames, streams := s.buildFrames("f", items, nil)
	if len(frames) != nStreams || len(streams) != nStreams {
		t.Fatalf("%d frames for %d streams", len(frames), nStreams)
	}
	for i, f := range frames {
		want := [][]byte{{byte(i)}}
		if i == 0 {
			want = append(want, []byte{100})
		}
		if streams[i] != sts[i] || f.StreamID != uint64(i+1) || f.From != 10 || f.Epoch != 3 || !slices.EqualFunc(f.Entries, want, slices.Equal) {
			t.Fatalf("frame %d: %+v, want stream %d from 10 with entries %v", i, f, i+1, want)
		}
	}
	allocs := testing.AllocsPerRun(100, func() { s.buildFrames("f", items, nil) })
	if allocs > 5 {
		t.Fatalf("buildFrames: %.0f allocations for %d entries, want at most 5", allocs, len(items))
	}
}

// sendCounter is a ReplicaConn that records the requests sent on it and
// answers none (the test plays the answers).
type sendCounter struct{ sent [][]ReplicaFrame }

func (c *sendCounter) Send(frames []ReplicaFrame) error {
	c.sent = append(c.sent, frames)
	return nil
}
func (c *sendCounter) Recv() ([]ReplicaResult, error) { select {} }
func (c *sendCounter) Close() error                   { return nil }

// At 64 clients the entries that queue while a request is in flight wait
// for its answer and go out as one request, rather than the next one
// going out alone as a second request (the follower takes its requests
// one at a time, so it would only wait in the follower's socket, at the
// cost of a request on both sides). One client's append still goes out
// at once, and a large queue does not wait.
func TestSecondRequestWaitsForTheFirstAnswer(t *testing.T) {
	s := &Service{}
	c := &sendCounter{}
	p := &peer{node: "f", kick: make(chan struct{}, 1), conn: c}
	st := &streamState{info: metadata.Stream{ID: 1, Name: "/s/a", Epoch: 1}}
	next := int64(0)
	appendOne := func(size int) {
		p.push(shipItem{st: st, from: next, end: next + 1, data: make([]byte, size)})
		next++
		s.drive(p)
	}
	appendOne(100)
	if len(c.sent) != 1 {
		t.Fatalf("an append with nothing in flight: %d requests, want 1 at once", len(c.sent))
	}
	for range 63 {
		appendOne(100)
	}
	if len(c.sent) != 1 {
		t.Fatalf("63 appends of 100 B while one request is in flight: %d requests sent, want them to wait for its answer", len(c.sent))
	}
	// The answer: the reader frees the slot and sends what queued.
	p.mu.Lock()
	p.inFlight = p.inFlight[1:]
	p.mu.Unlock()
	s.drive(p)
	if len(c.sent) != 2 || len(c.sent[1]) != 1 || len(c.sent[1][0].Entries) != 63 {
		t.Fatalf("after the answer: %d requests, want 2, the second with the 63 queued entries in one frame", len(c.sent))
	}
	// 64 KiB queued behind one request in flight do not wait for it.
	appendOne(secondRequestBytes)
	if len(c.sent) != 3 {
		t.Fatalf("%d bytes queued behind one request in flight: %d requests, want the second at once", secondRequestBytes, len(c.sent))
	}
	// The window stays at maxInFlight.
	appendOne(secondRequestBytes)
	if len(c.sent) != 3 {
		t.Fatalf("%d requests with %d in flight, want no more than %d in flight", len(c.sent), maxInFlight, maxInFlight)
	}
}
