package pico

import (
	"strconv"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
)

func (s *server) produce(path, body, id string, epoch, seq int) resp {
	s.t.Helper()
	return s.do("POST", path, []byte(body), wire.HeaderProducerID, id,
		wire.HeaderProducerEpoch, strconv.Itoa(epoch), wire.HeaderProducerSeq, strconv.Itoa(seq))
}

func TestIdempotentProducer(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/p", "text/plain")
	s.do("POST", "/p", []byte("anonymous"))

	r := s.produce("/p", "a", "w1", 0, 0)
	wantStatus(t, r, 200, "seq 0")
	wantHeader(t, r, wire.HeaderOffset, "1", "seq 0")
	wantHeader(t, r, wire.HeaderProducerEpoch, "0", "seq 0")
	wantHeader(t, r, wire.HeaderProducerSeq, "0", "seq 0")
	if r.Header.Get(wire.HeaderDuplicate) != "" {
		t.Fatal("first write flagged as duplicate")
	}
	r = s.produce("/p", "b", "w1", 0, 1)
	wantHeader(t, r, wire.HeaderOffset, "2", "seq 1")

	// A retry of seq 0 (its ack was lost) is acknowledged with the
	// original offsets and writes nothing.
	r = s.produce("/p", "a", "w1", 0, 0)
	wantStatus(t, r, 200, "retry of seq 0")
	wantHeader(t, r, wire.HeaderDuplicate, "true", "retry of seq 0")
	wantHeader(t, r, wire.HeaderOffset, "1", "retry of seq 0")
	wantHeader(t, r, wire.HeaderNextOffset, "2", "retry of seq 0")
	wantHeader(t, r, wire.HeaderProducerSeq, "1", "retry of seq 0")
	var ack appendAck
	r.json(t, &ack)
	if !ack.Duplicate || ack.Offset != 1 || ack.ProducerSeq == nil || *ack.ProducerSeq != 1 {
		t.Fatalf("duplicate ack %+v", ack)
	}

	// A gap: expected and received sequence in headers and body.
	r = s.produce("/p", "d", "w1", 0, 3)
	d := wantError(t, r, 409, wire.CodeProducerSeqGap, "gap")
	wantHeader(t, r, wire.HeaderProducerExpectedSeq, "2", "gap")
	wantHeader(t, r, wire.HeaderProducerReceivedSeq, "3", "gap")
	if d.ExpectedSeq == nil || *d.ExpectedSeq != 2 || d.ReceivedSeq == nil || *d.ReceivedSeq != 3 {
		t.Fatalf("gap body %+v", d)
	}
	// A fresh producer must start at 0.
	r = s.produce("/p", "x", "w2", 0, 5)
	d = wantError(t, r, 409, wire.CodeProducerSeqGap, "fresh producer at 5")
	if *d.ExpectedSeq != 0 || *d.ReceivedSeq != 5 {
		t.Fatalf("fresh producer gap %+v", d)
	}

	// A new epoch fences the old one; it must start at seq 0.
	wantError(t, s.produce("/p", "e", "w1", 1, 4), 400, wire.CodeProducerEpochSeq, "new epoch at seq 4")
	wantStatus(t, s.produce("/p", "e", "w1", 1, 0), 200, "new epoch")
	r = s.produce("/p", "z", "w1", 0, 2)
	d = wantError(t, r, 403, wire.CodeProducerFenced, "stale epoch")
	wantHeader(t, r, wire.HeaderProducerEpoch, "1", "stale epoch")
	if d.CurrentEpoch == nil || *d.CurrentEpoch != 1 {
		t.Fatalf("fenced body %+v", d)
	}

	// Producers are namespaced per protocol but shared by every shape:
	// a batch append takes one sequence number.
	r = s.do("POST", "/p", []byte(`[{"value":"f"},{"value":"g"}]`), "Content-Type", wire.MediaBatchJSON,
		wire.HeaderProducerID, "w1", wire.HeaderProducerEpoch, "1", wire.HeaderProducerSeq, "1")
	wantStatus(t, r, 200, "batch with producer")
	wantHeader(t, r, wire.HeaderNextOffset, "6", "batch with producer")

	// Producer state survives a restart: the retry is still a duplicate.
	s.restart()
	r = s.do("POST", "/p", []byte(`[{"value":"f"},{"value":"g"}]`), "Content-Type", wire.MediaBatchJSON,
		wire.HeaderProducerID, "w1", wire.HeaderProducerEpoch, "1", wire.HeaderProducerSeq, "1")
	wantHeader(t, r, wire.HeaderDuplicate, "true", "retry after restart")
	wantHeader(t, r, wire.HeaderOffset, "4", "retry after restart")
	wantError(t, s.produce("/p", "z", "w1", 0, 3), 403, wire.CodeProducerFenced, "stale epoch after restart")
	wantError(t, s.produce("/p", "z", "w1", 1, 3), 409, wire.CodeProducerSeqGap, "gap after restart")
	if recs, _ := s.readJSON("/p"); len(recs) != 6 {
		t.Fatalf("%d records, want 6 (duplicates must not be written)", len(recs))
	}
}

func TestProducerHeaderValidation(t *testing.T) {
	s := newServer(t, Config{}, stream.Config{})
	s.create("/v", "text/plain")
	for _, h := range [][]string{
		{wire.HeaderProducerID, "w"},
		{wire.HeaderProducerID, "w", wire.HeaderProducerEpoch, "0"},
		{wire.HeaderProducerEpoch, "0", wire.HeaderProducerSeq, "0"},
		{wire.HeaderProducerID, "w", wire.HeaderProducerEpoch, "-1", wire.HeaderProducerSeq, "0"},
		{wire.HeaderProducerID, "w", wire.HeaderProducerEpoch, "0", wire.HeaderProducerSeq, "x"},
		{wire.HeaderProducerID, "w", wire.HeaderProducerEpoch, "0", wire.HeaderProducerSeq, "99999999999999999999999"},
		{wire.HeaderProducerID, "", wire.HeaderProducerEpoch, "0", wire.HeaderProducerSeq, "0"},
	} {
		wantError(t, s.do("POST", "/v", []byte("x"), h...), 400, wire.CodeBadRequest, "producer headers "+jsonDump(h))
	}
	if _, r := s.readJSON("/v"); r.Header.Get(wire.HeaderNextOffset) != "0" {
		t.Fatal("a rejected producer append wrote a record")
	}
}
