package embedded

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/PicoMQ/picomq/internal/logtest"
)

func attrs(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

func TestEtcdLoggerForwardsOnlyErrorsWhenNotDebugging(t *testing.T) {
	h := logtest.New(slog.LevelInfo)
	closing := new(atomic.Bool)
	lg := newEtcdZapLogger(slog.New(h), closing)

	lg.Info("elected leader")
	lg.Warn("slow fsync")
	lg.Error("lost disk", zap.Error(errors.New("EIO")), zap.Int("attempt", 3))
	closing.Store(true)
	lg.Error("listener closed")

	recs := h.Records()
	if len(recs) != 1 {
		t.Fatalf("got %d records, want only the pre-close error", len(recs))
	}
	r := recs[0]
	if r.Level != slog.LevelError || r.Message != "lost disk" {
		t.Fatalf("record = %s %q, want ERROR \"lost disk\"", r.Level, r.Message)
	}
	got := attrs(r)
	for k, want := range map[string]string{"component": "etcd", "error": "EIO", "attempt": "3"} {
		if got[k] != want {
			t.Errorf("attr %s = %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
}

func TestEtcdLoggerForwardsEverythingWhenDebugging(t *testing.T) {
	h := logtest.New(slog.LevelDebug)
	closing := new(atomic.Bool)
	lg := newEtcdZapLogger(slog.New(h), closing).Named("raft").With(zap.String("member", "m1"))

	lg.Debug("tick")
	lg.Info("elected leader")
	closing.Store(true)
	lg.Warn("closing")

	recs := h.Records()
	wantLevels := []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn}
	if len(recs) != len(wantLevels) {
		t.Fatalf("got %d records, want %d", len(recs), len(wantLevels))
	}
	for i, r := range recs {
		if r.Level != wantLevels[i] {
			t.Errorf("record %d level = %s, want %s", i, r.Level, wantLevels[i])
		}
		a := attrs(r)
		if a["member"] != "m1" || a["logger"] != "raft" || a["component"] != "etcd" {
			t.Errorf("record %d attrs = %v, want member=m1 logger=raft component=etcd", i, a)
		}
	}
}

func TestEtcdLoggerNilIsSilent(t *testing.T) {
	lg := newEtcdZapLogger(nil, new(atomic.Bool))
	if lg.Core().Enabled(zap.FatalLevel) {
		t.Fatal("nil slog logger must give a disabled zap logger")
	}
}

func TestEtcdLoggerDemotesKnownBenignErrors(t *testing.T) {
	quiet := logtest.New(slog.LevelInfo)
	lg := newEtcdZapLogger(slog.New(quiet), new(atomic.Bool))
	lg.Error("failed to update storage version", zap.Error(errors.New("cannot detect storage schema version: missing term information")))
	lg.Error("failed to update storage version", zap.Error(errors.New("cannot create migration plan")))
	recs := quiet.Records()
	if len(recs) != 1 || recs[0].Level != slog.LevelError || attrs(recs[0])["error"] != "cannot create migration plan" {
		t.Fatalf("records = %v, want only the unexplained failure, at ERROR", recs)
	}

	debug := logtest.New(slog.LevelDebug)
	lg = newEtcdZapLogger(slog.New(debug), new(atomic.Bool))
	lg.Error("failed to update storage version", zap.Error(errors.New("missing confstate information")))
	if recs := debug.Records(); len(recs) != 1 || recs[0].Level != slog.LevelWarn {
		t.Fatalf("records = %v, want the benign error once at WARN", recs)
	}
}
