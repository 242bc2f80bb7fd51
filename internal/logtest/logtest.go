// Package logtest is a slog handler for tests that assert what a component
// logs: it keeps every record at or above its level in memory.
package logtest

import (
	"context"
	"log/slog"
	"sync"
)

// Capture records every slog record it is given at or above its level.
// Handlers derived with WithAttrs share its records.
type Capture struct {
	mu    *sync.Mutex
	recs  *[]slog.Record
	level slog.Level
	attrs []slog.Attr
}

// New returns a Capture that keeps records at level and above.
func New(level slog.Level) *Capture {
	return &Capture{mu: new(sync.Mutex), recs: new([]slog.Record), level: level}
}

// Enabled is part of slog.Handler.
func (h *Capture) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

// Handle is part of slog.Handler.
func (h *Capture) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.recs = append(*h.recs, r)
	return nil
}

// WithAttrs is part of slog.Handler.
func (h *Capture) WithAttrs(as []slog.Attr) slog.Handler {
	cp := *h
	cp.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &cp
}

// WithGroup is part of slog.Handler; groups are not recorded.
func (h *Capture) WithGroup(string) slog.Handler { return h }

// Records returns a copy of the records so far.
func (h *Capture) Records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), *h.recs...)
}
