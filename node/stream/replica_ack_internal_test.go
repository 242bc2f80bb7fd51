package stream

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/wal"
	"github.com/PicoMQ/picomq/wal/faultfs"
)

// A follower in ReplicaAckWrite mode answers a replication request while
// the fdatasync of the request's entries is still held; in
// ReplicaAckFsync mode (the default) it answers only after that
// fdatasync returns. The WAL runs on the fault-injecting filesystem,
// whose held Sync stands for a slow disk.
func TestReplicaAckMode(t *testing.T) {
	cli := metatest.StartEtcd(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, mode := range []string{ReplicaAckFsync, ReplicaAckWrite} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ffs := faultfs.New()
			w, _, err := wal.Open(wal.Options{Dir: t.TempDir(), FS: ffs, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			reg := prometheus.NewRegistry()
			cfg := Config{NodeID: "follower", Logger: quiet, Registerer: reg, Replication: ReplicationConfig{Ack: mode}}
			if mode == ReplicaAckFsync {
				cfg.Replication.Ack = "" // the default
			}
			svc, err := Open(ctx, cfg, w, meta.NewRegistry(cli, "/ack-"+mode+"/"))
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			if got := ackModes(t, reg); len(got) != 2 || got[mode] != 1 || got[otherMode(mode)] != 0 {
				t.Errorf("picomq_replica_ack_mode by mode = %v, want %s 1 and %s 0", got, mode, otherMode(mode))
			}

			held, release := ffs.HoldSegmentSyncs(nil)
			released := false
			defer func() {
				if !released {
					close(release)
				}
			}()
			frame := ReplicaFrame{StreamID: 7, Name: "copied", Epoch: 1, From: 0,
				Entries: [][]byte{appendEntryHeader(nil, 7, nil, "", false, true)}}
			res, wait, err := svc.StartReplica([]ReplicaFrame{frame})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 1 || res[0].Status != ReplicaOK {
				t.Fatalf("answer %+v, want one ReplicaOK", res)
			}
			answered := make(chan error, 1)
			go func() { answered <- wait(ctx) }()
			select {
			case <-held: // written; its fdatasync waits for release
			case <-ctx.Done():
				t.Fatal("the entry's fdatasync never started")
			}
			if mode == ReplicaAckWrite {
				select {
				case err := <-answered:
					if err != nil {
						t.Fatalf("answer while the fdatasync is held: %v", err)
					}
				case <-time.After(30 * time.Second): // generous: the answer needs no disk
					t.Fatal("write mode: no answer while the fdatasync is held")
				}
				close(release)
				released = true
				return
			}
			// Nothing can answer before release in fsync mode; a bounded
			// look shows that it does not.
			select {
			case err := <-answered:
				t.Fatalf("fsync mode answered (%v) while the fdatasync is held", err)
			case <-time.After(300 * time.Millisecond):
			}
			close(release)
			released = true
			if err := <-answered; err != nil {
				t.Fatalf("answer after the fdatasync: %v", err)
			}
		})
	}
}

func otherMode(mode string) string {
	if mode == ReplicaAckWrite {
		return ReplicaAckFsync
	}
	return ReplicaAckWrite
}

// ackModes reads picomq_replica_ack_mode from reg as /metrics shows it.
func ackModes(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "picomq_replica_ack_mode" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "mode" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// With ReplicaAckWrite and a lazy WAL (--replica-sync-interval), a
// follower answers request after request with no fdatasync at all (one
// later fdatasync covers them), and pulls of the copy read them all back:
// one at the same epoch (no fence: the pull waits for the copies, which
// has the WAL fdatasync them now) and a takeover's, whose fence is an
// ordinary entry. In
// ReplicaAckFsync mode the same lazy WAL changes nothing: each answer
// waits for its own fdatasync, which happens at once.
func TestReplicaLazySync(t *testing.T) {
	cli := metatest.StartEtcd(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, mode := range []string{ReplicaAckFsync, ReplicaAckWrite} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// An hour: only another commit can make the copies durable
			// within the test.
			w, _, err := wal.Open(wal.Options{Dir: t.TempDir(), Logger: quiet, LazySync: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			cfg := Config{NodeID: "follower", Logger: quiet, Registerer: prometheus.NewRegistry(), Replication: ReplicationConfig{Ack: mode}}
			svc, err := Open(ctx, cfg, w, meta.NewRegistry(cli, "/lazy-"+mode+"/"))
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			syncs0 := w.Stats().Syncs
			const requests = 5
			for i := range requests {
				e := appendEntryHeader(nil, 7, nil, "", false, false)
				e = record.AppendBatch(e, record.BatchOptions{BaseOffset: int64(i), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
					[]record.Record{{Value: []byte{byte(i)}}})
				res, err := svc.ApplyReplica(ctx, []ReplicaFrame{{StreamID: 7, Name: "copied", Epoch: 1, From: int64(i), Entries: [][]byte{e}}})
				if err != nil || len(res) != 1 || res[0].Status != ReplicaOK || res[0].Next != int64(i+1) {
					t.Fatalf("request %d: %+v, %v; want ReplicaOK next %d", i, res, err, i+1)
				}
			}
			st := w.Stats()
			if mode == ReplicaAckWrite && (st.Syncs != syncs0 || st.LazyGroups != requests) {
				t.Fatalf("write mode: %d fdatasyncs and %d lazy groups for %d requests; want none and %d", st.Syncs-syncs0, st.LazyGroups, requests, requests)
			}
			if mode == ReplicaAckFsync && (st.Syncs-syncs0 < requests || st.LazyGroups != 0) {
				t.Fatalf("fsync mode: %d fdatasyncs and %d lazy groups for %d requests; want one each and none", st.Syncs-syncs0, st.LazyGroups, requests)
			}
			// A pull at the copy's own epoch writes no fence: it must
			// have the lazy copies made durable before it reads them.
			f, err := svc.ReplicaTail(ctx, 7, 1, 0)
			if err != nil || len(f.Entries) != requests {
				t.Fatalf("pull at the same epoch: %d entries, %v; want %d", len(f.Entries), err, requests)
			}
			f, err = svc.ReplicaTail(ctx, 7, 2, 0)
			if err != nil {
				t.Fatalf("takeover pull: %v", err)
			}
			if len(f.Entries) != requests || f.From != 0 {
				t.Fatalf("takeover pull: %d entries from %d, want %d from 0", len(f.Entries), f.From, requests)
			}
			if st := w.Stats(); st.Entries < requests+1 {
				t.Fatalf("after the pull %d entries are durable, want the %d copies and the fence", st.Entries, requests)
			}
		})
	}
}
