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
