package txn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/PicoMQ/picomq/kafka/clock"
	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/node/stream/streamtest"
	"github.com/PicoMQ/picomq/record"
)

// selfLocator says this node coordinates everything (or nothing).
type selfLocator struct{ elsewhere atomic.Bool }

func (l *selfLocator) Locate(ctx context.Context, name string) (group.Broker, bool, error) {
	if l.elsewhere.Load() {
		return group.Broker{NodeID: 2}, false, nil
	}
	return group.Broker{NodeID: 1}, true, nil
}

// streamMarkers writes markers to one stream per partition ("/<topic>-<p>")
// of the real stream service, and records them.
type streamMarkers struct {
	svc     *stream.Service
	written []string
}

func (m *streamMarkers) WriteMarkers(ctx context.Context, pid int64, epoch int16, mk record.Marker, parts []Partition, groups []string) error {
	for _, p := range parts {
		name := fmt.Sprintf("/%s-%d", p.Topic, p.Partition)
		_, err := m.svc.AppendBatch(ctx, name, stream.AppendRequest{Control: true,
			Producer: &stream.Producer{ID: stream.KafkaProducerID(pid), Epoch: uint64(epoch)},
			Batch:    record.AppendControlBatch(nil, 0, 1, pid, epoch, 0, mk)})
		if err != nil && !errors.Is(err, stream.ErrProducerFenced) {
			return err
		}
		m.written = append(m.written, fmt.Sprintf("%s@%d:%v", name, epoch, mk))
	}
	return nil
}

type env struct {
	t   *testing.T
	st  *streamtest.Env
	clk *clock.Fake
	loc *selfLocator
	mk  *streamMarkers
	c   *Coordinator
	pid int64
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, st: streamtest.New(t, stream.Config{}), clk: clock.NewFake(time.Unix(1_700_000_000, 0)), loc: &selfLocator{}}
	e.mk = &streamMarkers{svc: e.st.Svc}
	for _, n := range []string{"/t-0", "/t-1"} {
		if _, _, err := e.st.Svc.Create(context.Background(), n, stream.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.start()
	return e
}

func (e *env) start() {
	e.c = New(Config{Streams: e.st.Svc, Locator: e.loc, Markers: e.mk, Clock: e.clk,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		NewProducerID: func() int64 { e.pid++; return 1000 + e.pid }})
	e.t.Cleanup(e.c.Close)
}

// takeOver is a new coordinator on the same streams (the node that takes
// the state stream over): it knows only what the stream holds.
func (e *env) takeOver() {
	e.c.Close()
	e.start()
}

var ctx = stream.WithSystemAccess(context.Background())

func TestInitFenceAndCommit(t *testing.T) {
	e := newEnv(t)
	pid, epoch, err := e.c.InitProducerID(ctx, "a", 60_000, -1, -1)
	if err != nil || epoch != 0 {
		t.Fatalf("init: %d %d %v", pid, epoch, err)
	}
	parts := []Partition{{"t", 0}, {"t", 1}}
	if err := e.c.AddPartitions(ctx, "a", pid, epoch, parts, nil); err != nil {
		t.Fatal(err)
	}
	// A second producer with the same id fences the first: its open
	// transaction is aborted with the next epoch, it gets the one after.
	pid2, epoch2, err := e.c.InitProducerID(ctx, "a", 60_000, -1, -1)
	if err != nil || pid2 != pid || epoch2 != 2 {
		t.Fatalf("second init: %d %d %v, want %d 2", pid2, epoch2, err, pid)
	}
	if fmt.Sprint(e.mk.written) != "[/t-0@1:abort /t-1@1:abort]" {
		t.Fatalf("markers %v", e.mk.written)
	}
	for _, err := range []error{
		e.c.AddPartitions(ctx, "a", pid, epoch, parts, nil),
		e.c.EndTxn(ctx, "a", pid, epoch, true),
	} {
		if !errors.Is(err, kerr.ProducerFenced) {
			t.Fatalf("zombie: %v, want PRODUCER_FENCED", err)
		}
	}
	if err := e.c.EndTxn(ctx, "a", pid+1, epoch2, true); !errors.Is(err, kerr.InvalidProducerIDMapping) {
		t.Fatalf("wrong producer id: %v", err)
	}
	if err := e.c.AddPartitions(ctx, "a", pid, epoch2, parts[:1], nil); err != nil {
		t.Fatal(err)
	}
	if err := e.c.EndTxn(ctx, "a", pid, epoch2, true); err != nil {
		t.Fatal(err)
	}
	if err := e.c.EndTxn(ctx, "a", pid, epoch2, true); err != nil {
		t.Fatalf("retried commit: %v", err)
	}
	if err := e.c.EndTxn(ctx, "a", pid, epoch2, false); !errors.Is(err, kerr.InvalidTxnState) {
		t.Fatalf("abort after commit: %v", err)
	}
	if m, err := e.c.Describe(ctx, "a"); err != nil || m.State != CompleteCommit {
		t.Fatalf("describe: %+v %v", m, err)
	}
}

// TestTimeoutAbortsAndSurvivesTakeover: an open transaction is aborted at
// its timeout (not before), also by a coordinator that took the state
// stream over and counts from the transaction's start.
func TestTimeoutAbortsAndSurvivesTakeover(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		t.Run(fmt.Sprint("takeover=", takeover), func(t *testing.T) {
			e := newEnv(t)
			pid, epoch, err := e.c.InitProducerID(ctx, "b", 10_000, -1, -1)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.c.AddPartitions(ctx, "b", pid, epoch, []Partition{{"t", 1}}, nil); err != nil {
				t.Fatal(err)
			}
			e.clk.Advance(6 * time.Second)
			if takeover {
				e.takeOver()
				if err := e.c.Scan(ctx); err != nil {
					t.Fatal(err)
				}
			}
			e.clk.Advance(4*time.Second - time.Millisecond)
			if m, _ := e.c.Describe(ctx, "b"); m.State != Ongoing {
				t.Fatalf("before the timeout: %s", m.State)
			}
			e.clk.Advance(time.Millisecond)
			m, err := e.c.Describe(ctx, "b")
			if err != nil || m.State != CompleteAbort || m.Epoch != epoch+1 {
				t.Fatalf("after the timeout: %+v %v", m, err)
			}
			if fmt.Sprint(e.mk.written) != "[/t-1@1:abort]" {
				t.Fatalf("markers %v", e.mk.written)
			}
			if err := e.c.EndTxn(ctx, "b", pid, epoch, true); !errors.Is(err, kerr.ProducerFenced) {
				t.Fatalf("commit after the timeout: %v, want fenced", err)
			}
			// KIP-360: the timed-out producer re-initialises with its
			// old epoch and continues.
			_, epoch3, err := e.c.InitProducerID(ctx, "b", 10_000, pid, epoch)
			if err != nil || epoch3 != epoch+2 {
				t.Fatalf("re-init after the timeout: %d %v", epoch3, err)
			}
		})
	}
}

// TestPreparedCommitCompletedByTakeover: a coordinator that made a commit
// durable and died before its markers is completed by the next one.
func TestPreparedCommitCompletedByTakeover(t *testing.T) {
	e := newEnv(t)
	pid, epoch, err := e.c.InitProducerID(ctx, "c", 10_000, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.AddPartitions(ctx, "c", pid, epoch, []Partition{{"t", 0}}, nil); err != nil {
		t.Fatal(err)
	}
	// Simulate the crash between the two writes: the PrepareCommit record
	// is durable, no marker is.
	en, err := e.c.lockedEntry(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	m := en.m
	m.State = PrepareCommit
	if err := e.c.save(ctx, en, m); err != nil {
		t.Fatal(err)
	}
	en.mu.Unlock()
	e.takeOver()
	if err := e.c.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := e.c.Describe(ctx, "c"); err != nil || got.State != CompleteCommit {
		t.Fatalf("after takeover: %+v %v", got, err)
	}
	if fmt.Sprint(e.mk.written) != "[/t-0@0:commit]" {
		t.Fatalf("markers %v", e.mk.written)
	}
	if err := e.c.EndTxn(ctx, "c", pid, epoch, true); err != nil {
		t.Fatalf("client's retried commit: %v", err)
	}
}

func TestNotCoordinator(t *testing.T) {
	e := newEnv(t)
	e.loc.elsewhere.Store(true)
	if _, _, err := e.c.InitProducerID(ctx, "d", 1000, -1, -1); Code(err) != kerr.NotCoordinator.Code {
		t.Fatalf("init elsewhere: %v", err)
	}
	if _, _, err := e.c.InitProducerID(ctx, "d", 0, -1, -1); !errors.Is(err, kerr.InvalidTransactionTimeout) {
		t.Fatalf("timeout 0: %v", err)
	}
}

// TestLegacyStateRecordLoads: an id whose state earlier versions appended
// to its state stream (no state record yet) is loaded from the stream's
// last record, and its next transition is written as a state record.
func TestLegacyStateRecordLoads(t *testing.T) {
	e := newEnv(t)
	name, _ := StreamName("old")
	if _, _, err := e.st.Svc.Create(ctx, name, stream.CreateOptions{ContentType: "application/json", Durability: stream.DurabilityObject}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []Meta{
		{ID: "old", ProducerID: 77, Epoch: 3, TimeoutMs: 60_000, State: Empty},
		{ID: "old", ProducerID: 77, Epoch: 4, TimeoutMs: 60_000, State: Empty},
	} {
		if _, err := e.st.Svc.AppendBatch(ctx, name, stream.AppendRequest{Records: []record.Record{{Key: []byte(m.ID), Value: m.encode()}}}); err != nil {
			t.Fatal(err)
		}
	}
	pid, epoch, err := e.c.InitProducerID(ctx, "old", 60_000, -1, -1)
	if err != nil || pid != 77 || epoch != 5 {
		t.Fatalf("init over a legacy state: %d %d %v, want 77 5", pid, epoch, err)
	}
	b, err := e.st.Svc.State(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := decodeMeta(b); err != nil || m.Epoch != 5 {
		t.Fatalf("state record after init: %+v %v", m, err)
	}
	e.takeOver()
	if m, err := e.c.Describe(ctx, "old"); err != nil || m.Epoch != 5 {
		t.Fatalf("after takeover: %+v %v", m, err)
	}
}

// TestReservedPartitions: AddPartitions records the reserved partitions
// with the added ones; adding a reserved one later writes nothing; a
// commit writes markers only to what was added, but a coordinator that
// took the state over treats every reserved partition as added.
func TestReservedPartitions(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		t.Run(fmt.Sprint("takeover=", takeover), func(t *testing.T) {
			e := newEnv(t)
			pid, epoch, err := e.c.InitProducerID(ctx, "r", 60_000, -1, -1)
			if err != nil {
				t.Fatal(err)
			}
			all := []Partition{{"t", 0}, {"t", 1}}
			if err := e.c.AddPartitions(ctx, "r", pid, epoch, all[:1], all); err != nil {
				t.Fatal(err)
			}
			name, _ := StreamName("r")
			saved := func() Meta {
				t.Helper()
				b, err := e.st.Svc.State(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				m, err := decodeMeta(b)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			first := saved()
			if fmt.Sprint(first.Partitions, first.Reserved) != "[{t 0}] [{t 0} {t 1}]" {
				t.Fatalf("saved %v reserved %v", first.Partitions, first.Reserved)
			}
			if err := e.c.Includes(ctx, "r", pid, epoch, all[1]); !errors.Is(err, kerr.InvalidTxnState) {
				t.Fatalf("verify a reserved partition not added: %v, want INVALID_TXN_STATE", err)
			}
			if takeover {
				e.takeOver()
				if err := e.c.Includes(ctx, "r", pid, epoch, all[1]); err != nil {
					t.Fatalf("after takeover, a reserved partition counts as added: %v", err)
				}
			} else {
				if err := e.c.AddPartitions(ctx, "r", pid, epoch, all[1:], all); err != nil {
					t.Fatal(err)
				}
				if got := saved(); got.UpdateMs != first.UpdateMs || len(got.Partitions) != 1 {
					t.Fatalf("adding a reserved partition wrote %+v", got)
				}
				if w, r := e.c.Stats(); w != 2 || r != 1 {
					t.Fatalf("stats: %d writes (init, first add), %d reserved adds; want 2 and 1", w, r)
				}
				if err := e.c.Includes(ctx, "r", pid, epoch, all[1]); err != nil {
					t.Fatalf("verify the added partition: %v", err)
				}
			}
			if err := e.c.EndTxn(ctx, "r", pid, epoch, true); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(e.mk.written) != "[/t-0@0:commit /t-1@0:commit]" {
				t.Fatalf("markers %v", e.mk.written)
			}
			if got := saved(); got.State != PrepareCommit || len(got.Reserved) != 0 || len(got.Partitions) != 2 {
				t.Fatalf("prepared record %+v: want both partitions, none reserved", got)
			}
		})
	}
}

// TestEndTxnBumping (transaction.version 2, EndTxn v5): every end bumps
// the epoch and the markers carry the bumped one; the answer is the next
// epoch; a retry with the epoch before the bump gets the same answer, a
// request at that epoch is fenced; an abort with nothing open bumps too,
// a commit with nothing open is INVALID_TXN_STATE; a coordinator that
// takes over a bumped Prepare record writes its markers at the bumped
// epoch and answers the retry; at the last epoch the id moves to a new
// producer id, the markers going out at the last epoch of the old one.
func TestEndTxnBumping(t *testing.T) {
	e := newEnv(t)
	pid, epoch, err := e.c.InitProducerID(ctx, "v2", 60_000, -1, -1)
	if err != nil || epoch != 0 {
		t.Fatalf("init: %d %d %v", pid, epoch, err)
	}
	if err := e.c.AddPartitions(ctx, "v2", pid, 0, []Partition{{"t", 0}}, nil); err != nil {
		t.Fatal(err)
	}
	end := func(what string, p int64, ep int16, commit bool, wantPID int64, wantEpoch int16, wantErr error) {
		t.Helper()
		gotPID, gotEpoch, err := e.c.EndTxnBumping(ctx, "v2", p, ep, commit)
		if wantErr != nil {
			if !errors.Is(err, wantErr) {
				t.Fatalf("%s: %v, want %v", what, err, wantErr)
			}
			return
		}
		if err != nil || gotPID != wantPID || gotEpoch != wantEpoch {
			t.Fatalf("%s: %d/%d %v, want %d/%d", what, gotPID, gotEpoch, err, wantPID, wantEpoch)
		}
	}
	end("commit", pid, 0, true, pid, 1, nil)
	if fmt.Sprint(e.mk.written) != "[/t-0@1:commit]" {
		t.Fatalf("markers %v, want the commit at the bumped epoch 1", e.mk.written)
	}
	end("retried commit", pid, 0, true, pid, 1, nil)
	end("abort retrying a commit", pid, 0, false, 0, 0, kerr.ProducerFenced)
	if err := e.c.AddPartitions(ctx, "v2", pid, 0, []Partition{{"t", 1}}, nil); !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("add at the ended epoch: %v, want PRODUCER_FENCED", err)
	}
	end("empty abort", pid, 1, false, pid, 2, nil)
	end("empty commit", pid, 2, true, 0, 0, kerr.InvalidTxnState)
	if len(e.mk.written) != 1 {
		t.Fatalf("markers %v: an empty end writes none", e.mk.written)
	}

	// A Prepare record with the bump made durable, no marker written,
	// then the node dies.
	if err := e.c.AddPartitions(ctx, "v2", pid, 2, []Partition{{"t", 1}}, nil); err != nil {
		t.Fatal(err)
	}
	en, err := e.c.lockedEntry(ctx, "v2")
	if err != nil {
		t.Fatal(err)
	}
	m := en.m
	m.State = PrepareCommit
	e.c.bump(&m)
	if err := e.c.save(ctx, en, m); err != nil {
		t.Fatal(err)
	}
	en.mu.Unlock()
	e.takeOver()
	if err := e.c.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(e.mk.written[1:]) != "[/t-1@3:commit]" {
		t.Fatalf("markers after the takeover %v, want the commit at epoch 3", e.mk.written)
	}
	end("commit retried after the takeover", pid, 2, true, pid, 3, nil)

	// Epoch exhaustion: the last usable epoch.
	en, err = e.c.lockedEntry(ctx, "v2")
	if err != nil {
		t.Fatal(err)
	}
	m = en.m
	m.Epoch = math.MaxInt16 - 2
	if err := e.c.save(ctx, en, m); err != nil {
		t.Fatal(err)
	}
	en.mu.Unlock()
	last := int16(math.MaxInt16 - 2)
	if err := e.c.AddPartitions(ctx, "v2", pid, last, []Partition{{"t", 0}}, nil); err != nil {
		t.Fatal(err)
	}
	next := e.pid + 1001 // what NewProducerID hands out next
	end("commit at the last epoch", pid, last, true, next, 0, nil)
	if got := e.mk.written[len(e.mk.written)-1]; got != fmt.Sprintf("/t-0@%d:commit", last+1) {
		t.Fatalf("marker %s, want the old producer's epoch %d", got, last+1)
	}
	end("its retry", pid, last, true, next, 0, nil)
	// KIP-360: a producer that lost that answer re-initialises with the
	// producer id and epoch it had.
	if p, ep, err := e.c.InitProducerID(ctx, "v2", 60_000, pid, last); err != nil || p != next || ep != 1 {
		t.Fatalf("re-init with the exhausted epoch: %d/%d %v, want %d/1", p, ep, err, next)
	}
	if _, _, err := e.c.InitProducerID(ctx, "v2", 60_000, pid, last); !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("a second re-init with the exhausted epoch: %v, want PRODUCER_FENCED", err)
	}
}
