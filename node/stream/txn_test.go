package stream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// txnBatch is a transactional producer's data batch of values.
func txnBatch(pid int64, epoch int16, seq int32, values ...string) []byte {
	recs := make([]record.Record, len(values))
	for i, v := range values {
		recs[i] = record.Record{Value: []byte(v), Timestamp: 1}
	}
	return record.AppendBatch(nil, record.BatchOptions{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq,
		CreateTime: true, Transactional: true}, recs)
}

func kprod(pid int64, epoch int16, seq int32) *stream.Producer {
	return &stream.Producer{ID: stream.KafkaProducerID(pid), Epoch: uint64(epoch), Seq: uint64(seq), PerRecord: true}
}

type txnStep struct {
	data   []string // values of a data batch, or
	marker *record.Marker
	pid    int64
	epoch  int16
	seq    int32
}

func appendTxnStep(t *testing.T, svc *stream.Service, name string, s txnStep) (stream.AppendResult, error) {
	t.Helper()
	ctx := context.Background()
	if s.marker != nil {
		return svc.AppendBatch(ctx, name, stream.AppendRequest{Control: true, Producer: kprod(s.pid, s.epoch, 0),
			Batch: record.AppendControlBatch(nil, 0, 1, s.pid, s.epoch, 0, *s.marker)})
	}
	return svc.AppendBatch(ctx, name, stream.AppendRequest{Producer: kprod(s.pid, s.epoch, s.seq), Batch: txnBatch(s.pid, s.epoch, s.seq, s.data...)})
}

// TestTransactionVisibility: the last stable offset stops at the oldest open
// transaction; aborted transactions are listed for Kafka and skipped by
// HTTP reads, markers too; all of it survives a restart (WAL replay) and a
// flush followed by a restart (state snapshot).
func TestTransactionVisibility(t *testing.T) {
	commit, abort := record.MarkerCommit, record.MarkerAbort
	for _, restart := range []string{"none", "replay", "flush"} {
		t.Run(restart, func(t *testing.T) {
			h := newTierHarness(t, stream.DurabilityLocal)
			ctx := context.Background()
			if _, _, err := h.svc.Create(ctx, "/t", stream.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			steps := []txnStep{
				{data: []string{"a1", "a2"}, pid: 1},   // 0-1 committed below
				{data: []string{"b1"}, pid: 2},         // 2 aborted below
				{marker: &commit, pid: 1},              // 3
				{data: []string{"b2"}, pid: 2, seq: 1}, // 4
				{marker: &abort, pid: 2},               // 5
				{data: []string{"c1"}, pid: 3},         // 6 open
				{data: []string{"a3"}, pid: 1, seq: 2}, // 7 open (pid 1's next transaction)
			}
			for i, s := range steps {
				if _, err := appendTxnStep(t, h.svc, "/t", s); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			if _, err := h.svc.Append(ctx, "/t", []record.Record{{Value: []byte("plain")}}); err != nil { // 8
				t.Fatal(err)
			}
			switch restart {
			case "flush":
				if err := h.svc.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				fallthrough
			case "replay":
				h.close()
				h.open()
			}
			br, err := h.svc.ReadBatches(ctx, "/t", 0, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if br.HighWatermark != 9 || br.LastStable != 6 {
				t.Fatalf("hwm %d lso %d, want 9 and 6", br.HighWatermark, br.LastStable)
			}
			if fmt.Sprint(br.Aborted) != "[{2 2 5}]" {
				t.Fatalf("aborted %v, want [{2 2 5}]", br.Aborted)
			}
			got := vals(readAllRecords(t, h.svc, "/t"))
			if fmt.Sprint(got) != "[a1 a2]" {
				t.Fatalf("HTTP read %v, want [a1 a2] (committed only, stopping at the open transaction)", got)
			}
			// Ending both open transactions makes everything stable.
			for _, s := range []txnStep{{marker: &abort, pid: 3}, {marker: &commit, pid: 1}} {
				if _, err := appendTxnStep(t, h.svc, "/t", s); err != nil {
					t.Fatal(err)
				}
			}
			br, err = h.svc.ReadBatches(ctx, "/t", 0, 1<<20)
			if err != nil || br.LastStable != br.HighWatermark || br.HighWatermark != 11 {
				t.Fatalf("after the markers: hwm %d lso %d %v", br.HighWatermark, br.LastStable, err)
			}
			if fmt.Sprint(br.Aborted) != "[{2 2 5} {3 6 9}]" {
				t.Fatalf("aborted %v", br.Aborted)
			}
			got = vals(readAllRecords(t, h.svc, "/t"))
			if fmt.Sprint(got) != "[a1 a2 a3 plain]" {
				t.Fatalf("HTTP read %v, want [a1 a2 a3 plain]", got)
			}
		})
	}
}

// TestTransactionMarkerFences: a marker with a newer epoch (the coordinator
// aborting a timed-out or fenced producer) fences the older epoch's data;
// the new epoch starts its sequence at 0. A client may not write a control
// batch as data.
func TestTransactionMarkerFences(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityLocal)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/t", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	abort := record.MarkerAbort
	if _, err := appendTxnStep(t, h.svc, "/t", txnStep{data: []string{"x"}, pid: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := appendTxnStep(t, h.svc, "/t", txnStep{marker: &abort, pid: 7, epoch: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := appendTxnStep(t, h.svc, "/t", txnStep{data: []string{"zombie"}, pid: 7, seq: 1})
	if !errors.Is(err, stream.ErrProducerFenced) {
		t.Fatalf("old epoch after the marker: %v, want fenced", err)
	}
	if _, err := appendTxnStep(t, h.svc, "/t", txnStep{data: []string{"y"}, pid: 7, epoch: 1}); err != nil {
		t.Fatalf("new epoch at sequence 0: %v", err)
	}
	if _, err := appendTxnStep(t, h.svc, "/t", txnStep{marker: &abort, pid: 7, epoch: 0}); !errors.Is(err, stream.ErrProducerFenced) {
		t.Fatalf("marker of an old epoch: %v, want fenced", err)
	}
	_, err = h.svc.AppendBatch(ctx, "/t", stream.AppendRequest{Batch: record.AppendControlBatch(nil, 0, 1, 7, 1, 0, abort)})
	if !errors.Is(err, stream.ErrInvalidArgument) {
		t.Fatalf("a control batch as data: %v, want invalid", err)
	}
}

// TestStaleTransactions: a transaction open longer than asked is listed
// with its producer's epoch there (the Kafka frontend aborts it); one
// ended by a marker, or younger, is not.
func TestStaleTransactions(t *testing.T) {
	h := newTierHarness(t, stream.DurabilityLocal)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/s", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	commit := record.MarkerCommit
	for _, s := range []txnStep{{data: []string{"x"}, pid: 1, epoch: 3}, {data: []string{"y"}, pid: 2}, {marker: &commit, pid: 2}} {
		if _, err := appendTxnStep(t, h.svc, "/s", s); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.svc.StaleTransactions(time.Hour); len(got) != 0 {
		t.Fatalf("older than an hour: %v", got)
	}
	if got := fmt.Sprint(h.svc.StaleTransactions(-time.Second)); got != "[{/s 1 3}]" {
		t.Fatalf("stale: %s, want [{/s 1 3}]", got)
	}
}
