package stream

// Stream administration: listing, reconfiguring (Kafka topic alias,
// retention) and trimming. These are rare, operator-driven calls; each is
// one conditional registry write followed by an update of the in-memory
// state, in that order, so a change acknowledged to a client survives a
// restart (the in-memory state is rebuilt from the registry).

import (
	"context"
	"errors"
	"fmt"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// ErrOffsetTrimmed: the offset is below the stream's start offset (trimmed
// explicitly or by retention). errors.As gives *TrimmedError.
var ErrOffsetTrimmed = errors.New("stream: offset trimmed")

// TrimmedError reports the first offset that is still readable.
type TrimmedError struct {
	Name        string
	Offset      int64
	StartOffset int64
}

func (e *TrimmedError) Error() string {
	return fmt.Sprintf("%v: offset %d of %s is below its start offset %d", ErrOffsetTrimmed, e.Offset, e.Name, e.StartOffset)
}

func (e *TrimmedError) Unwrap() error { return ErrOffsetTrimmed }

// ConfigChange is a partial update of a stream's configuration; nil fields
// are left alone.
type ConfigChange struct {
	// KafkaTopic sets the alias; "" removes it.
	KafkaTopic *string
	// RetentionMs and RetentionBytes set retention limits; 0 removes one.
	RetentionMs    *int64
	RetentionBytes *int64
	// MaxBatchBytes sets the Kafka max.message.bytes; 0 = the node default.
	MaxBatchBytes *int64
	// LogAppendTime sets the Kafka message.timestamp.type (true =
	// LogAppendTime).
	LogAppendTime *bool
	// TrimBefore moves the start offset forward to this offset (at most
	// the next offset); a value at or below the current start is a no-op.
	TrimBefore *int64
	// Compaction, when non-nil, replaces the compaction setting: with
	// Configs, the Kafka-named configs to apply to the current one
	// (ParseCompaction; cleanup.policy=delete turns compaction off).
	Compaction *CompactionChange
}

// CompactionChange is a set of compaction configs (Kafka names and value
// syntax), applied in one conditional registry write so concurrent
// changes of different configs do not undo each other.
type CompactionChange struct {
	Configs map[string]string
	// Reset starts from "not compacted" instead of the stream's current
	// setting (Kafka's non-incremental AlterConfigs replaces every config).
	Reset bool
}

// checkTrimmed answers reads below the start offset. Data below it may
// still sit in the WAL or in objects until tiering reclaims it; it must
// never be served.
func (st *streamState) checkTrimmed(offset int64) error {
	st.mu.Lock()
	start := st.info.StartOffset
	st.mu.Unlock()
	if offset < start {
		return &TrimmedError{Name: st.info.Name, Offset: offset, StartOffset: start}
	}
	return nil
}

// Configure applies ch to the stream and returns its new description.
func (s *Service) Configure(ctx context.Context, name string, ch ConfigChange) (Info, error) {
	st, err := s.lookup(ctx, name)
	if err != nil {
		return Info{}, err
	}
	if t := ch.KafkaTopic; t != nil && *t != "" {
		if TopicForbidden(name) {
			return Info{}, fmt.Errorf("%w: %s is reserved and never carries a Kafka topic", ErrInvalidTopic, name)
		}
		if err := ValidateTopic(*t); err != nil {
			return Info{}, err
		}
	}
	for _, v := range []*int64{ch.RetentionMs, ch.RetentionBytes, ch.MaxBatchBytes, ch.TrimBefore} {
		if v != nil && *v < 0 {
			return Info{}, fmt.Errorf("%w: negative value %d", ErrInvalidArgument, *v)
		}
	}
	if ch.TrimBefore != nil {
		st.mu.Lock()
		hwm := st.hwm
		st.mu.Unlock()
		if *ch.TrimBefore > hwm {
			return Info{}, fmt.Errorf("%w: cannot trim %s before %d, its next offset is %d", ErrOffsetOutOfRange, name, *ch.TrimBefore, hwm)
		}
	}
	if ch.Compaction != nil {
		// Validated before the write, so a bad value is refused as such.
		if _, err := ParseCompaction(nil, ch.Compaction.Configs); err != nil {
			return Info{}, err
		}
	}
	id := st.info.ID
	stored, err := s.updateRecord(ctx, name, func(m *metadata.Stream) error {
		if m.ID != id {
			return fmt.Errorf("%w: %s was replaced by a newer stream of the same name", ErrNotFound, name)
		}
		if ch.KafkaTopic != nil {
			m.KafkaTopic = *ch.KafkaTopic
		}
		if ch.RetentionMs != nil {
			m.RetentionMs = *ch.RetentionMs
		}
		if ch.RetentionBytes != nil {
			m.RetentionBytes = *ch.RetentionBytes
		}
		if ch.MaxBatchBytes != nil {
			m.MaxBatchBytes = *ch.MaxBatchBytes
		}
		if ch.LogAppendTime != nil {
			m.LogAppendTime = *ch.LogAppendTime
		}
		if ch.Compaction != nil {
			base := compactionFromMeta(m.Compaction)
			if ch.Compaction.Reset {
				base = nil
			}
			c, err := ParseCompaction(base, ch.Compaction.Configs)
			if err != nil {
				return err
			}
			m.Compaction = compactionToMeta(c)
		}
		if ch.TrimBefore != nil {
			if floor := s.forkFloor(m.ID); *ch.TrimBefore > floor {
				return fmt.Errorf("%w: trimBefore %d would cut below offset %d, where a fork of %s still reads", ErrConflict, *ch.TrimBefore, floor, m.Name)
			}
			m.StartOffset = max(m.StartOffset, *ch.TrimBefore)
		}
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	st.applyConfig(stored)
	return st.snapshot(), nil
}

// applyConfig copies the administrable fields of a stored record into
// memory. The start offset only moves forward, whatever order concurrent
// trims finish in.
func (st *streamState) applyConfig(m metadata.Stream) {
	st.mu.Lock()
	st.info.KafkaTopic = m.KafkaTopic
	st.info.RetentionMs = m.RetentionMs
	st.info.RetentionBytes = m.RetentionBytes
	st.info.MaxBatchBytes = m.MaxBatchBytes
	st.info.LogAppendTime = m.LogAppendTime
	st.info.Compaction = m.Compaction
	st.info.StartOffset = max(st.info.StartOffset, m.StartOffset)
	st.mu.Unlock()
}

// List returns up to limit streams whose names start with prefix and sort
// after after, in byte-wise name order, and whether more exist. Streams
// this node holds in memory report their live offsets; others (owned by
// another node) report the registry's view with NextOffset -1 (unknown
// here). Streams that are deleted, being deleted or expired are left out.
func (s *Service) List(ctx context.Context, prefix, after string, limit int) ([]Info, bool, error) {
	l, ok := s.reg.(interface {
		ListStreams(ctx context.Context, prefix, after string, limit int) ([]metadata.Stream, bool, error)
	})
	if !ok {
		return nil, false, fmt.Errorf("%w: the registry cannot list streams", ErrUnavailable)
	}
	if limit <= 0 {
		return nil, false, fmt.Errorf("%w: limit %d", ErrInvalidArgument, limit)
	}
	recs, more, err := l.ListStreams(ctx, prefix, after, limit)
	if err != nil {
		return nil, false, fmt.Errorf("%w: registry list: %v", ErrUnavailable, err)
	}
	out := make([]Info, 0, len(recs))
	for _, m := range recs {
		if IsSystemName(m.Name) && !systemAccess(ctx) {
			continue // the server's own streams are not the clients'
		}
		s.mu.RLock()
		st := s.byID[m.ID]
		idle, isIdle := s.idleLocked(m.Name)
		s.mu.RUnlock()
		if isIdle && idle.ID == m.ID {
			out = append(out, idleInfo(idle))
			continue
		}
		if st != nil {
			if s.gate(st) != nil {
				continue
			}
			out = append(out, st.snapshot())
			continue
		}
		if listHidden(m) {
			continue
		}
		info := infoFromMeta(m)
		info.NextOffset = -1
		out = append(out, info)
	}
	return out, more, nil
}

// listHidden: records of streams that are gone for clients.
func listHidden(m metadata.Stream) bool {
	return m.SoftDeleted || m.Deleting
}
