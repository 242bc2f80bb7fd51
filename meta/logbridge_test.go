package meta

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
)

// memHandler is a minimal slog.Handler that keeps records in memory.
type memHandler struct {
	mu    *sync.Mutex
	recs  *[]slog.Record
	level slog.Level
	attrs []slog.Attr
}

func newMem(level slog.Level) *memHandler {
	return &memHandler{mu: new(sync.Mutex), recs: new([]slog.Record), level: level}
}

func (h *memHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *memHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.recs = append(*h.recs, r)
	return nil
}
func (h *memHandler) WithAttrs(as []slog.Attr) slog.Handler {
	cp := *h
	cp.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &cp
}
func (h *memHandler) WithGroup(string) slog.Handler { return h }
func (h *memHandler) all() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), *h.recs...)
}

func attrs(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

func TestEtcdLoggerForwardsOnlyErrorsWhenNotDebugging(t *testing.T) {
	h := newMem(slog.LevelInfo)
	closing := new(atomic.Bool)
	lg := newEtcdZapLogger(slog.New(h), closing)

	lg.Info("elected leader")
	lg.Warn("slow fsync")
	lg.Error("lost disk", zap.Error(errors.New("EIO")), zap.Int("attempt", 3))
	closing.Store(true)
	lg.Error("listener closed")

	recs := h.all()
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
	h := newMem(slog.LevelDebug)
	closing := new(atomic.Bool)
	lg := newEtcdZapLogger(slog.New(h), closing).Named("raft").With(zap.String("member", "m1"))

	lg.Debug("tick")
	lg.Info("elected leader")
	closing.Store(true)
	lg.Warn("closing")

	recs := h.all()
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
	quiet := newMem(slog.LevelInfo)
	lg := newEtcdZapLogger(slog.New(quiet), new(atomic.Bool))
	lg.Error("failed to update storage version", zap.Error(errors.New("cannot detect storage schema version: missing term information")))
	lg.Error("failed to update storage version", zap.Error(errors.New("cannot create migration plan")))
	recs := quiet.all()
	if len(recs) != 1 || recs[0].Level != slog.LevelError || attrs(recs[0])["error"] != "cannot create migration plan" {
		t.Fatalf("records = %v, want only the unexplained failure, at ERROR", recs)
	}

	debug := newMem(slog.LevelDebug)
	lg = newEtcdZapLogger(slog.New(debug), new(atomic.Bool))
	lg.Error("failed to update storage version", zap.Error(errors.New("missing confstate information")))
	if recs := debug.all(); len(recs) != 1 || recs[0].Level != slog.LevelWarn {
		t.Fatalf("records = %v, want the benign error once at WARN", recs)
	}
}
