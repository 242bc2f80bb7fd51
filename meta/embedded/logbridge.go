package embedded

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// etcd logs through zap, PicoMQ through log/slog. slogCore is a zapcore.Core
// that forwards etcd's entries into the node's slog handler so that they end
// up in the same place, tagged component=etcd, instead of on raw stderr.
//
// etcd is chatty at info level (every election, every snapshot, every
// listener), which would drown the node's own logs, so unless the handler is
// enabled for debug output only errors and above are forwarded. While the
// server is being closed etcd reports its own listeners shutting down as
// errors; those are expected, so during Close nothing is forwarded unless
// debugging.
type slogCore struct {
	h       slog.Handler
	debug   bool         // the handler accepts debug records: forward all etcd levels it accepts
	closing *atomic.Bool // set by Server.Close
}

// newEtcdZapLogger returns the zap logger handed to embedded etcd. A nil
// logger silences etcd entirely.
func newEtcdZapLogger(l *slog.Logger, closing *atomic.Bool) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	h := l.With(slog.String("component", "etcd")).Handler()
	return zap.New(&slogCore{
		h:       h,
		debug:   forwardsEtcdWarnings(l),
		closing: closing,
	})
}

// etcdNeverWarn is a slow-request warning threshold no request reaches.
const etcdNeverWarn = 24 * time.Hour

// forwardsEtcdWarnings reports whether the bridge forwards etcd's levels
// below error (its warnings among them) to l: only when l takes debug
// records.
func forwardsEtcdWarnings(l *slog.Logger) bool {
	return l != nil && l.Handler().Enabled(context.Background(), slog.LevelDebug)
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	if !c.debug {
		if l < zapcore.ErrorLevel {
			return false
		}
		if c.closing != nil && c.closing.Load() {
			return false
		}
	}
	return c.h.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	cp := *c
	cp.h = c.h.WithAttrs(zapFieldsToAttrs(fields))
	return &cp
}

func (c *slogCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c *slogCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	if ent.Level == zapcore.ErrorLevel && knownBenignError(ent.Message, fields) {
		ent.Level = zapcore.WarnLevel
		if !c.Enabled(ent.Level) {
			return nil
		}
	}
	r := slog.NewRecord(ent.Time, slogLevel(ent.Level), ent.Message, 0)
	if ent.LoggerName != "" {
		r.AddAttrs(slog.String("logger", ent.LoggerName))
	}
	r.AddAttrs(zapFieldsToAttrs(fields)...)
	return c.h.Handle(context.Background(), r)
}

func (c *slogCore) Sync() error { return nil }

// slogLevel maps zap levels onto slog's scale; zap's panic/fatal levels have
// no slog name and become ERROR+n so they still sort above errors.
func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.ErrorLevel:
		return slog.LevelError
	default:
		return slog.LevelError + slog.Level(l-zapcore.ErrorLevel)
	}
}

// zapFieldsToAttrs renders zap fields with zap's own map encoder (which knows
// every field type, including errors and nested objects) and turns the result
// into slog attributes in a stable, sorted order.
func zapFieldsToAttrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	return attrs
}

// benignErrors lists error-level messages etcd emits during normal operation,
// with the error texts that make them harmless. Each is logged at warn
// instead, so operators are not told about an error on every start.
var benignErrors = map[string][]string{
	// Right after bootstrap the storage-version monitor can run before the
	// backend has persisted the raft term/confstate; it succeeds on its next
	// round. etcd-io/etcd#18978, #20495.
	"failed to update storage version": {
		"missing term information",
		"missing confstate information",
	},
}

func knownBenignError(msg string, fields []zapcore.Field) bool {
	texts, ok := benignErrors[msg]
	if !ok {
		return false
	}
	for _, f := range fields {
		if f.Type != zapcore.ErrorType {
			continue
		}
		err, ok := f.Interface.(error)
		if !ok {
			continue
		}
		for _, t := range texts {
			if strings.Contains(err.Error(), t) {
				return true
			}
		}
	}
	return false
}
