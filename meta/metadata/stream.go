package metadata

import (
	"time"
)

// Stream is the registry record of one stream. It is stored in a compact
// binary form (record.go) in which new optional fields can be added without
// a migration; the JSON tags describe the records of earlier versions,
// which are still read.
type Stream struct {
	// Name is the stream's URL path, e.g. "/orders/1042". It always starts
	// with "/"; the full grammar is checked by the caller.
	Name string `json:"name"`
	// ID identifies this incarnation of the stream and names its data in
	// the WAL and object storage. It is unique forever, across nodes and
	// restarts: deleting a stream and creating one with the same name
	// yields a new ID. IDs increase create after create on one node (one
	// Registry), but not across nodes: each takes them from its own block
	// (meta/idblock.go), so a later create elsewhere may get a smaller one.
	ID          uint64    `json:"id"`
	ContentType string    `json:"contentType"`
	CreatedAt   time.Time `json:"createdAt"`
	// Owner is the node id serving the stream's writes; empty when unowned.
	Owner string `json:"owner,omitempty"`
	// Epoch is the fencing epoch, 1 at create, incremented by every
	// ownership change. Commits by an owner are conditioned on it.
	Epoch int64 `json:"epoch"`
	// KafkaTopic is the Kafka topic alias, if any.
	KafkaTopic string `json:"kafkaTopic,omitempty"`
	// RetentionMs and RetentionBytes bound the stream's history; 0 means no
	// limit of that kind.
	RetentionMs    int64 `json:"retentionMs,omitempty"`
	RetentionBytes int64 `json:"retentionBytes,omitempty"`
	// MaxBatchBytes bounds one Kafka-produced batch (the topic's
	// max.message.bytes); 0 means the node default.
	MaxBatchBytes int64 `json:"maxBatchBytes,omitempty"`
	// LogAppendTime: the topic's message.timestamp.type is LogAppendTime,
	// so the owner stamps each Kafka-produced batch with its append time.
	LogAppendTime bool `json:"logAppendTime,omitempty"`
	// Durability is the ack level ("local" or "object"); empty means the
	// node default.
	Durability string `json:"durability,omitempty"`
	// StartOffset is the trim point: offsets below it are gone (trimmed
	// explicitly or by retention).
	StartOffset int64 `json:"startOffset,omitempty"`
	// Replicas (R, owner included) and MinInSync (M) configure a
	// `replicated` stream: its owner acknowledges an append once M copies
	// are fsynced. Which nodes hold the copies, and which of them are in
	// sync, changes with the membership and is kept beside (ReplicaSet,
	// meta/replicas.go), so this record stays stable.
	Replicas  int64 `json:"replicas,omitempty"`
	MinInSync int64 `json:"minInSync,omitempty"`

	// Lifecycle (node/stream/lifecycle.go). TTLSeconds is a sliding
	// time-to-live reset by reads and appends; ExpiresAt an absolute expiry.
	// At most one is set. An expired stream behaves as absent.
	TTLSeconds int64      `json:"ttlSeconds,omitempty"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	// Fork makes this stream a fork (node/stream/fork.go): offsets below
	// Fork.End are served from the source's log, shared rather than copied.
	Fork *StreamFork `json:"fork,omitempty"`
	// ForkRefs counts the live forks that read this stream's history. A
	// stream deleted while ForkRefs > 0 is only SoftDeleted: gone for
	// clients, its data kept until the last fork goes.
	ForkRefs    int64 `json:"forkRefs,omitempty"`
	SoftDeleted bool  `json:"softDeleted,omitempty"`
	// Deleting marks a delete in progress. It is set in the same
	// conditional write that saw ForkRefs == 0, and a new fork may only
	// take a reference on a stream that is neither SoftDeleted nor
	// Deleting, so a fork can never reference a stream being removed.
	Deleting bool `json:"deleting,omitempty"`
	// Compaction, when set, makes the stream a compacted one (Kafka's
	// cleanup.policy=compact): node/stream/keycompact.go keeps the latest
	// record per key of its object-stored data. nil: never compacted by key.
	Compaction *StreamCompaction `json:"compaction,omitempty"`
}

// StreamCompaction is a compacted stream's settings, Kafka's topic configs
// of the same names, stored resolved (defaults filled in by the stream
// service at create).
type StreamCompaction struct {
	// Delete: cleanup.policy=compact,delete, retention limits apply too.
	Delete bool `json:"delete,omitempty"`
	// DeleteRetentionMs: delete.retention.ms, how long a tombstone stays.
	DeleteRetentionMs int64 `json:"deleteRetentionMs,omitempty"`
	// MinLagMs, MaxLagMs: min/max.compaction.lag.ms (MaxLagMs 0 = none).
	MinLagMs int64 `json:"minLagMs,omitempty"`
	MaxLagMs int64 `json:"maxLagMs,omitempty"`
	// SegmentMs: segment.ms, the longest a record waits to become
	// compactable (uploaded to object storage).
	SegmentMs int64 `json:"segmentMs,omitempty"`
	// MinDirtyRatioPPM: min.cleanable.dirty.ratio in millionths.
	MinDirtyRatioPPM int64 `json:"minDirtyRatioPPM,omitempty"`
}

// StreamFork is where a fork's inherited history comes from.
type StreamFork struct {
	// Source and SourceID name the source stream's incarnation.
	Source   string `json:"source"`
	SourceID uint64 `json:"sourceId"`
	// Offset is the fork point in the source and SubOffset the position
	// past it that the client asked for (values for JSON streams, bytes
	// otherwise); both are kept to compare a repeated create.
	Offset    int64 `json:"offset"`
	SubOffset int64 `json:"subOffset,omitempty"`
	// End is the first offset of the fork's own log: offsets below it are
	// read from the source.
	End int64 `json:"end"`
	// LastBytes > 0 means the inherited record at End-1 is cut to its
	// first LastBytes bytes (a byte sub-offset inside one record).
	LastBytes int64 `json:"lastBytes,omitempty"`
}

// TopicEntry is the value of a topic index key.
type TopicEntry struct {
	Stream string `json:"stream"`
	ID     uint64 `json:"id"`
}
