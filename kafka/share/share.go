// Package share is PicoMQ's KIP-932 share groups ("queues for Kafka"):
// the membership and assignment of share groups (ShareGroupHeartbeat,
// ShareGroupDescribe), the share sessions of ShareFetch/ShareAcknowledge,
// and the share-partitions, the per group and partition record of which
// offsets are acquired by whom, delivered how often, and done.
//
// What lives where (docs/kafka.md, "Share groups"): membership on the
// group's coordinator (the node serving its offsets stream, as for classic
// groups), share-partitions and sessions on the node that serves the
// partition (where clients send ShareFetch). Both are memory; the only
// durable state is each share-partition's start offset (SPSO), which the
// frontend writes to the group's offsets stream. A node that comes to
// serve a partition starts from the stored SPSO, so records between it and
// what was acknowledged are delivered again (at-least-once).
//
// The package does no I/O: the frontend (package kafka) reads the log,
// resolves topics and persists offsets, and passes the time in, so the
// acquisition and lock rules are tested with a fake clock.
package share

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/internal/defaults"
	"github.com/PicoMQ/picomq/kafka/clock"
)

// Config tunes share groups. Zero values take Kafka's defaults.
type Config struct {
	Clock  clock.Clock
	Logger *slog.Logger
	// Heartbeat is the interval members are told to heartbeat at
	// (group.share.heartbeat.interval.ms, 5 s).
	Heartbeat time.Duration
	// SessionTimeout drops a member that has not heartbeated for this
	// long (group.share.session.timeout.ms, 45 s).
	SessionTimeout time.Duration
	// Lock is the default acquisition lock (group.share.record.lock.
	// duration.ms, 30 s); a group may set share.record.lock.duration.ms.
	Lock time.Duration
	// DeliveryLimit archives a record delivered this many times
	// (group.share.delivery.count.limit, 5).
	DeliveryLimit int16
	// MaxInFlight bounds a share-partition's in-flight window, end
	// offset minus start offset (group.share.partition.max.record.locks,
	// 2000).
	MaxInFlight int
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	defaults.Set(&c.Heartbeat, 5*time.Second)
	defaults.Set(&c.SessionTimeout, 45*time.Second)
	defaults.Set(&c.Lock, 30*time.Second)
	if c.DeliveryLimit <= 0 {
		c.DeliveryLimit = 5
	}
	defaults.Set(&c.MaxInFlight, 2000)
}

// PartKey names a share-partition.
type PartKey struct {
	Group     string
	TopicID   [16]byte
	Partition int32
}

// TP is a topic partition by topic id.
type TP struct {
	TopicID   [16]byte
	Partition int32
}

// Manager holds the share groups, sessions and share-partitions of a node.
type Manager struct {
	cfg Config

	mu       sync.Mutex
	groups   map[string]*Group
	configs  map[string]map[string]string // group configs (share.*)
	parts    map[PartKey]*Partition
	sessions map[sessKey]*session
	names    map[[16]byte]string // topic id -> name, as heartbeats resolved them

	stats Stats
}

// Stats are counters for /metrics.
type Stats struct {
	Acquired atomic.Int64 // records handed out (redeliveries included)
	Acks     [5]atomic.Int64
	Released atomic.Int64 // records returned by session close or leave
}

// New returns a Manager.
func New(cfg Config) *Manager {
	cfg.setDefaults()
	return &Manager{cfg: cfg, groups: map[string]*Group{}, configs: map[string]map[string]string{},
		parts: map[PartKey]*Partition{}, sessions: map[sessKey]*session{}, names: map[[16]byte]string{}}
}

// Stats returns the counters.
func (m *Manager) Stats() *Stats { return &m.stats }

// Now is the manager's clock.
func (m *Manager) Now() time.Time { return m.cfg.Clock.Now() }

// Partition returns the share-partition of k, creating it unloaded.
func (m *Manager) Partition(k PartKey) *Partition {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[k]
	if p == nil {
		p = NewPartition()
		m.parts[k] = p
	}
	return p
}

// Forget drops share-partition k (its offsets were altered or deleted:
// the next fetch loads the stored start offset again).
func (m *Manager) Forget(k PartKey) {
	m.mu.Lock()
	delete(m.parts, k)
	m.mu.Unlock()
}

// Partitions returns the loaded share-partitions of group.
func (m *Manager) Partitions(group string) map[PartKey]*Partition {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[PartKey]*Partition{}
	for k, p := range m.parts {
		if k.Group == group {
			out[k] = p
		}
	}
	return out
}

// TopicName is the name of a topic id a heartbeat resolved ("" if none).
func (m *Manager) TopicName(id [16]byte) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.names[id]
}

// NoteTopic remembers a topic's id.
func (m *Manager) NoteTopic(id [16]byte, name string) {
	m.mu.Lock()
	m.names[id] = name
	m.mu.Unlock()
}

// Limits are the acquisition rules of group: the defaults, with its
// share.record.lock.duration.ms and share.delivery.count.limit.
func (m *Manager) Limits(group string) Limits {
	lim := Limits{Lock: m.cfg.Lock, DeliveryLimit: m.cfg.DeliveryLimit, MaxInFlight: m.cfg.MaxInFlight}
	c := m.Configs(group)
	if ms, ok := parseInt(c[ConfigLockMs]); ok {
		lim.Lock = time.Duration(ms) * time.Millisecond
	}
	if n, ok := parseInt(c[ConfigDeliveryLimit]); ok {
		lim.DeliveryLimit = int16(n)
	}
	return lim
}

// releaseMember returns member's records on every share-partition of group
// on this node to the pool. Called without m.mu.
func (m *Manager) releaseMember(group, member string, only map[TP]struct{}) {
	lim := m.Limits(group)
	var n int
	for k, p := range m.Partitions(group) {
		if only != nil {
			if _, ok := only[TP{k.TopicID, k.Partition}]; !ok {
				continue
			}
		}
		n += p.ReleaseMember(member, lim)
	}
	m.stats.Released.Add(int64(n))
}

// DeleteGroup forgets everything of group on this node (its offsets stream
// is the frontend's). false: the group has members (NON_EMPTY_GROUP).
func (m *Manager) DeleteGroup(group string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.groups[group]; g != nil {
		g.expireLocked(m, m.cfg.Clock.Now())
		if len(g.members) > 0 {
			return false
		}
	}
	delete(m.groups, group)
	for k := range m.parts {
		if k.Group == group {
			delete(m.parts, k)
		}
	}
	for k := range m.sessions {
		if k.group == group {
			delete(m.sessions, k)
		}
	}
	return true
}
