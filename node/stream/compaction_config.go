package stream

// A compacted stream's settings: Kafka's cleanup.policy=compact and the
// topic configs that tune it, under Kafka's names, so that the Kafka
// frontend (CreateTopics, DescribeConfigs, AlterConfigs) and the Pico API
// (create header, PATCH) accept and report exactly the same thing. The
// compactor that applies them is keycompact.go.

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// Kafka's names of the compaction configs.
const (
	ConfigCleanupPolicy       = "cleanup.policy"
	ConfigDeleteRetentionMs   = "delete.retention.ms"
	ConfigMinCompactionLagMs  = "min.compaction.lag.ms"
	ConfigMaxCompactionLagMs  = "max.compaction.lag.ms"
	ConfigSegmentMs           = "segment.ms"
	ConfigMinCleanableDirty   = "min.cleanable.dirty.ratio"
	PolicyDelete              = "delete"
	PolicyCompact             = "compact"
	PolicyCompactDelete       = "compact,delete"
	defaultDeleteRetentionMs  = 86_400_000  // Kafka's 1 day
	defaultSegmentMs          = 604_800_000 // Kafka's 7 days
	defaultMinDirtyRatio      = 0.5
	maxCompactionLagUnlimited = math.MaxInt64
)

// Compaction is a compacted stream's configuration (nil in Info and
// CreateOptions: not compacted, Kafka's cleanup.policy=delete).
type Compaction struct {
	// Delete is cleanup.policy=compact,delete: retention limits apply
	// as well. Without it a compacted stream's retention is ignored, as
	// Kafka ignores retention.ms on a compact-only topic.
	Delete bool
	// DeleteRetentionMs is how long a tombstone (a record with a null
	// value) stays readable before compaction removes it.
	DeleteRetentionMs int64
	// MinLagMs: a record younger than this is never compacted away.
	// MaxLagMs: a record older than this is compacted even when the
	// stream's dirty ratio is below MinDirtyRatio (0: no such bound).
	MinLagMs, MaxLagMs int64
	// SegmentMs: the longest a record stays in the WAL (not compactable)
	// before the compactor has it uploaded.
	SegmentMs int64
	// MinDirtyRatio: compact when the share of bytes written since the
	// last compaction reaches it.
	MinDirtyRatio float64
}

// DefaultCompaction returns Kafka's defaults for a compacted topic.
func DefaultCompaction() Compaction {
	return Compaction{DeleteRetentionMs: defaultDeleteRetentionMs, SegmentMs: defaultSegmentMs, MinDirtyRatio: defaultMinDirtyRatio}
}

// IsCompactionConfig reports whether name is one of the configs
// ParseCompaction reads.
func IsCompactionConfig(name string) bool {
	switch name {
	case ConfigCleanupPolicy, ConfigDeleteRetentionMs, ConfigMinCompactionLagMs, ConfigMaxCompactionLagMs,
		ConfigSegmentMs, ConfigMinCleanableDirty:
		return true
	}
	return false
}

// ParseCompaction applies configs (Kafka names, Kafka value syntax) to
// base, the stream's current setting (nil: not compacted). cleanup.policy
// decides whether the result is compacted at all (nil: delete); the other
// names tune it and are refused with ErrInvalidArgument when out of
// Kafka's ranges. A name that is not a compaction config is an error too:
// callers hand over only names IsCompactionConfig accepts.
func ParseCompaction(base *Compaction, configs map[string]string) (*Compaction, error) {
	c := DefaultCompaction()
	if base != nil {
		c = *base
	}
	compact := base != nil
	names := make([]string, 0, len(configs))
	for n := range configs {
		names = append(names, n)
	}
	sort.Strings(names) // one error for one input, whatever the map order
	for _, name := range names {
		v := strings.TrimSpace(configs[name])
		switch name {
		case ConfigCleanupPolicy:
			p, err := parsePolicy(v)
			if err != nil {
				return nil, err
			}
			compact = p != PolicyDelete
			c.Delete = p == PolicyCompactDelete
		case ConfigMinCleanableDirty:
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(r) || r < 0 || r > 1 {
				return nil, fmt.Errorf("%w: %s=%q: want a ratio from 0 to 1", ErrInvalidArgument, name, v)
			}
			c.MinDirtyRatio = r
		case ConfigDeleteRetentionMs, ConfigMinCompactionLagMs, ConfigMaxCompactionLagMs, ConfigSegmentMs:
			n, err := strconv.ParseInt(v, 10, 64)
			lowest := int64(0)
			if name == ConfigMaxCompactionLagMs || name == ConfigSegmentMs {
				lowest = 1 // Kafka's lower bounds
			}
			if err != nil || n < lowest {
				return nil, fmt.Errorf("%w: %s=%q: want an integer of at least %d", ErrInvalidArgument, name, v, lowest)
			}
			switch name {
			case ConfigDeleteRetentionMs:
				c.DeleteRetentionMs = n
			case ConfigMinCompactionLagMs:
				c.MinLagMs = n
			case ConfigMaxCompactionLagMs:
				if n == maxCompactionLagUnlimited {
					n = 0
				}
				c.MaxLagMs = n
			default:
				c.SegmentMs = n
			}
		default:
			return nil, fmt.Errorf("%w: %s is not a compaction config", ErrInvalidArgument, name)
		}
	}
	if !compact {
		return nil, nil
	}
	if c.MaxLagMs > 0 && c.MaxLagMs < c.MinLagMs {
		return nil, fmt.Errorf("%w: %s %d is below %s %d", ErrInvalidArgument, ConfigMaxCompactionLagMs, c.MaxLagMs, ConfigMinCompactionLagMs, c.MinLagMs)
	}
	return &c, nil
}

// parsePolicy reads a cleanup.policy list ("compact", "delete",
// "compact,delete" in either order) into one of the Policy constants.
func parsePolicy(v string) (string, error) {
	var compact, del bool
	for _, p := range strings.Split(v, ",") {
		switch strings.TrimSpace(p) {
		case PolicyCompact:
			compact = true
		case PolicyDelete:
			del = true
		default:
			return "", fmt.Errorf("%w: %s=%q: want compact, delete or compact,delete", ErrInvalidArgument, ConfigCleanupPolicy, v)
		}
	}
	switch {
	case compact && del:
		return PolicyCompactDelete, nil
	case compact:
		return PolicyCompact, nil
	}
	return PolicyDelete, nil
}

// CompactionConfigs renders c (nil: not compacted) as Kafka topic configs,
// in a fixed order, for DescribeConfigs and the Pico description.
func CompactionConfigs(c *Compaction) [][2]string {
	if c == nil {
		d := DefaultCompaction()
		c = &d
		return [][2]string{{ConfigCleanupPolicy, PolicyDelete}, {ConfigDeleteRetentionMs, itoa(c.DeleteRetentionMs)},
			{ConfigMinCompactionLagMs, "0"}, {ConfigMaxCompactionLagMs, itoa(maxCompactionLagUnlimited)},
			{ConfigSegmentMs, itoa(c.SegmentMs)}, {ConfigMinCleanableDirty, ftoa(c.MinDirtyRatio)}}
	}
	policy := PolicyCompact
	if c.Delete {
		policy = PolicyCompactDelete
	}
	maxLag := c.MaxLagMs
	if maxLag == 0 {
		maxLag = maxCompactionLagUnlimited
	}
	return [][2]string{{ConfigCleanupPolicy, policy}, {ConfigDeleteRetentionMs, itoa(c.DeleteRetentionMs)},
		{ConfigMinCompactionLagMs, itoa(c.MinLagMs)}, {ConfigMaxCompactionLagMs, itoa(maxLag)},
		{ConfigSegmentMs, itoa(c.SegmentMs)}, {ConfigMinCleanableDirty, ftoa(c.MinDirtyRatio)}}
}

func itoa(n int64) string   { return strconv.FormatInt(n, 10) }
func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// compactionToMeta and compactionFromMeta convert between the service's
// and the registry's forms (the ratio is stored in millionths).
func compactionToMeta(c *Compaction) *metadata.StreamCompaction {
	if c == nil {
		return nil
	}
	return &metadata.StreamCompaction{Delete: c.Delete, DeleteRetentionMs: c.DeleteRetentionMs, MinLagMs: c.MinLagMs,
		MaxLagMs: c.MaxLagMs, SegmentMs: c.SegmentMs, MinDirtyRatioPPM: int64(math.Round(c.MinDirtyRatio * 1e6))}
}

func compactionFromMeta(m *metadata.StreamCompaction) *Compaction {
	if m == nil {
		return nil
	}
	return &Compaction{Delete: m.Delete, DeleteRetentionMs: m.DeleteRetentionMs, MinLagMs: m.MinLagMs,
		MaxLagMs: m.MaxLagMs, SegmentMs: m.SegmentMs, MinDirtyRatio: float64(m.MinDirtyRatioPPM) / 1e6}
}

// retentionApplies reports whether retention limits delete data of a
// stream with this setting: always, unless it is compact-only.
func retentionApplies(m *metadata.StreamCompaction) bool { return m == nil || m.Delete }
