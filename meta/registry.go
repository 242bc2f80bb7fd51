package meta

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// DefaultPrefix is the key prefix NewRegistry uses when given "".
const DefaultPrefix = "/picomq/"

// MaxListLimit caps one ListStreams page. A page is a single etcd range
// response, and keeping it well below etcd's message limits keeps a listing
// from ever failing on a registry full of large records. Callers asking for
// more get MaxListLimit streams and more=true, so pagination stays correct.
const MaxListLimit = 1000

// bulkPageSize is the first page of AllStreams and EachStream; each
// further page is twice the one before, up to bulkPageGrowth times the
// first. etcd counts every key from a page's start to the end of the
// range to answer it (for the response's count), so a scan of n streams
// in pages of p visits about n²/2p keys: with 1,000 per page a million
// streams took half a billion visits, with 10,000 fifty million (~7 s of
// CPU), and a restart with 100,000 streams 550,000 (2.7 µs per stream of
// etcd's range time). Growing pages keep a small registry's scan to one
// small page and a large one's to a few passes. Records are tens of
// bytes, so the largest page (80,000) is a few MiB.
const (
	bulkPageSize   = 10_000
	bulkPageGrowth = 8
)

// Registry is the set of streams, stored in etcd under one key prefix. It is
// safe for concurrent use by many goroutines and many nodes: every write is a
// conditional transaction, so concurrent writers serialise in etcd rather
// than overwrite each other.
type Registry struct {
	cli        *clientv3.Client
	txnKV      clientv3.KV // create transactions: cli, or UseKV's
	prefix     string
	streamsKey string // prefix + "streams/"
	topicsKey  string // prefix + "topics/": Kafka topic alias -> stream
	idKey      string // prefix + "counters/stream-id"
	pageSize   int    // AllStreams page size; bulkPageSize except in tests
	// scanPage overrides scanPrefix's page size, and afterScanPage runs
	// between its pages: tests only.
	scanPage      int64
	afterScanPage func()
	maxTxnOps     int    // etcd's --max-txn-ops; DefaultMaxTxnOps except in tests
	idBlock       uint64 // IDs per reservation; idBlockSize except in tests
	// maxCreateTxns bounds the create transactions in flight at once;
	// defaultCreateTxns except in tests.
	maxCreateTxns int
	creates       createQueue
}

// NewRegistry returns a registry keeping all its keys under prefix (default
// DefaultPrefix; a missing trailing "/" is added so that "/a" and "/ab"
// prefixes can never overlap).
func NewRegistry(cli *clientv3.Client, prefix string) *Registry {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Registry{
		cli:           cli,
		txnKV:         cli,
		prefix:        prefix,
		streamsKey:    prefix + "streams/",
		topicsKey:     prefix + "topics/",
		idKey:         prefix + "counters/stream-id",
		pageSize:      bulkPageSize,
		idBlock:       idBlockSize,
		maxCreateTxns: defaultCreateTxns,
		maxTxnOps:     DefaultMaxTxnOps,
	}
}

// UseKV makes the registry send its create transactions through kv, the
// same etcd as its client's (Embedded.KV: in-process, without gRPC). Call
// it before the first create.
func (r *Registry) UseKV(kv clientv3.KV) { r.txnKV = kv }

// Prefix returns the normalised key prefix.
func (r *Registry) Prefix() string { return r.prefix }

func (r *Registry) streamKey(name string) string { return r.streamsKey + name }

// topicKey is the index entry that makes a Kafka topic alias unique across
// the registry. Every write that sets, changes or drops a stream's
// KafkaTopic maintains it in the same transaction as the stream record, so
// the index and the records can never disagree.
//
// A stream whose alias is the one derived from its name, and whose name has
// no '.', holds the alias without an index entry (keylessTopic): the
// derivation is reversible for such names, so the alias resolves to exactly
// one name (aliasHolder) and the record there says whether it holds it.
// Idle streams with derived aliases are the common case, and the index
// entry cost etcd a second key per stream (memory, database, restart).
// Claims stay unique because every claim compares both places: a keyless
// claim of T that no index entry for T exists, and a claim with an index
// entry that the record at aliasHolder(T) has not changed since it was
// seen not holding T. Index entries written by earlier versions for such
// aliases are still honoured (looked up first, deleted with the alias).
func (r *Registry) topicKey(topic string) string { return r.topicsKey + topic }

// keylessTopic reports whether s holds its KafkaTopic without an index
// entry: the alias is derived from a name without '.', so aliasHolder maps
// it back to s.Name.
func keylessTopic(s metadata.Stream) bool {
	return s.KafkaTopic != "" && !strings.Contains(s.Name, ".") && s.KafkaTopic == metadata.DerivedTopic(s.Name)
}

// aliasHolder is the one stream name that may hold topic without an index
// entry: the inverse of derivedTopic on names without '.'.
func aliasHolder(topic string) string { return "/" + strings.ReplaceAll(topic, ".", "/") }

// holdsTopic decodes kvs (a read of aliasHolder(topic), possibly empty)
// and reports whether that record holds topic, and its ModRevision (0 when
// absent) for a claim to compare against.
func (r *Registry) holdsTopic(kvs []*mvccpb.KeyValue, topic string) (s metadata.Stream, held bool, rev int64, err error) {
	if len(kvs) == 0 {
		return metadata.Stream{}, false, 0, nil
	}
	if s, err = r.decodeStream(kvs[0]); err != nil {
		return metadata.Stream{}, false, 0, err
	}
	return s, s.KafkaTopic == topic, kvs[0].ModRevision, nil
}

func (r *Registry) topicValue(s metadata.Stream) string {
	return string(metadata.EncodeTopicEntry(metadata.TopicEntry{Stream: s.Name, ID: s.ID}))
}

func checkName(name string) error {
	if name == "" || name[0] != '/' {
		return fmt.Errorf("%w: stream name %q must start with \"/\"", metadata.ErrInvalid, name)
	}
	return nil
}

// CreateStream stores s if no stream called s.Name exists and returns the
// stored record and true. If one exists it returns that record and false
// (and no error): deciding whether an existing stream with the same config
// is a success or a conflict is the caller's business.
//
// The registry assigns the ID (s.ID is ignored) and sets Epoch to 1;
// CreatedAt is set to now unless given. IDs come from blocks reserved on a
// counter key (idblock.go) rather than from the key's etcd create
// revision: revisions are not preserved when etcd data is mirrored to
// another cluster or restored with a revision bump, while a counter
// travels with the data.
//
// Concurrent creates are committed together (createbatch.go): one etcd
// transaction creates many streams (and, if configured so, a few such
// transactions may be in flight at once). Each create is still atomic, is refused alone if its
// name or topic is taken, and returns only once its transaction is
// committed.
//
// A non-empty s.KafkaTopic is claimed in the same transaction: if another
// stream holds that alias, nothing is created and the error wraps
// ErrTopicTaken (an existing stream of the same name still wins: it is
// returned with created=false whatever topic was asked for).
func (r *Registry) CreateStream(ctx context.Context, s metadata.Stream) (metadata.Stream, bool, error) {
	if err := checkName(s.Name); err != nil {
		return metadata.Stream{}, false, fmt.Errorf("meta: create stream: %w", err)
	}
	s.ID = 0
	s.Epoch = 1
	if s.CreatedAt.IsZero() {
		s.CreatedAt = time.Now()
	}
	s.CreatedAt = s.CreatedAt.UTC().Round(0)
	out, created, err := r.creates.create(ctx, r, s)
	if err != nil {
		return metadata.Stream{}, false, fmt.Errorf("meta: create stream %q: %w", s.Name, err)
	}
	return out, created, nil
}

// GetStream returns the stream called name, or ErrNotFound.
func (r *Registry) GetStream(ctx context.Context, name string) (metadata.Stream, error) {
	if err := checkName(name); err != nil {
		return metadata.Stream{}, fmt.Errorf("meta: get stream: %w", err)
	}
	resp, err := r.getExisting(ctx, r.streamKey(name))
	if err != nil {
		return metadata.Stream{}, fmt.Errorf("meta: get stream %q: %w", name, err)
	}
	s, err := r.decodeStream(resp.Kvs[0])
	if err != nil {
		return metadata.Stream{}, fmt.Errorf("meta: get stream %q: %w", name, err)
	}
	return s, nil
}

// getExisting reads key, which must exist: ErrNotFound otherwise.
func (r *Registry) getExisting(ctx context.Context, key string) (*clientv3.GetResponse, error) {
	resp, err := r.cli.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, metadata.ErrNotFound
	}
	return resp, nil
}

// DeleteStream removes the stream called name if its stored ID is id. The
// ID condition makes deletes safe against a concurrent delete and recreate:
// a request that looked up the old incarnation cannot delete the new one.
// It returns ErrNotFound if no such stream exists and ErrConflict if the
// name now belongs to another ID. The stream's Kafka topic alias is freed in
// the same transaction.
func (r *Registry) DeleteStream(ctx context.Context, name string, id uint64) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("meta: delete stream: %w", err)
	}
	if id == 0 {
		return fmt.Errorf("meta: delete stream %q: %w: id 0", name, metadata.ErrInvalid)
	}
	key := r.streamKey(name)
	resp, err := r.cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("meta: delete stream %q: read: %w", name, err)
	}
	kvs := resp.Kvs
	for {
		if len(kvs) == 0 {
			return fmt.Errorf("meta: delete stream %q: %w", name, metadata.ErrNotFound)
		}
		cur, err := r.decodeStream(kvs[0])
		if err != nil {
			return fmt.Errorf("meta: delete stream %q: %w", name, err)
		}
		if cur.ID != id {
			return fmt.Errorf("meta: delete stream %q: %w: id is %d, not %d", name, metadata.ErrConflict, cur.ID, id)
		}
		// Conditioned on the exact revision read, so an update racing with
		// the delete is re-checked rather than lost silently.
		ops := []clientv3.Op{clientv3.OpDelete(key), clientv3.OpDelete(r.reserveKey(cur.ID)), clientv3.OpDelete(r.replicaKey(cur.ID)), clientv3.OpDelete(r.stateKey(cur.ID))}
		if cur.KafkaTopic != "" {
			ops = append(ops, clientv3.OpDelete(r.topicKey(cur.KafkaTopic)))
		}
		tresp, err := r.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).
			Then(ops...).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("meta: delete stream %q: %w", name, err)
		}
		if tresp.Succeeded {
			return nil
		}
		kvs = tresp.Responses[0].GetResponseRange().Kvs
	}
}

// UpdateStream applies fn to the current record and stores the result,
// conditioned on the record not having changed since it was read; on a
// lost race it re-reads and calls fn again. fn may therefore run several
// times and must only compute from its argument. If fn returns an error,
// nothing is written and UpdateStream returns that error (wrapped), which is
// how callers express preconditions, e.g. "only if Epoch is still 3". fn must
// not change Name or ID (ErrInvalid). If fn changes nothing, nothing is
// written. It returns the record as stored.
//
// A change of KafkaTopic moves the stream's entry in the topic index in the
// same transaction; if the new alias belongs to another stream, nothing is
// written and the error wraps ErrTopicTaken.
func (r *Registry) UpdateStream(ctx context.Context, name string, fn func(*metadata.Stream) error) (metadata.Stream, error) {
	return r.updateStream(ctx, name, "", fn)
}

// TakeOver makes node the owner of m's stream with the next fencing epoch,
// only if the record still has m's ID, owner and epoch and m's owner holds
// no live membership (if it has an owner at all): the compare on the owner's member key is in the same
// transaction as the write. A stream is therefore never taken from a node
// that is a member at that moment, however stale the taker's view of the
// membership is; together with flush commits conditioned on the session
// they were prepared under, an owner whose session lives on is the only
// node that can commit the stream's data. A live owner (or any change of
// the record) is ErrConflict.
func (r *Registry) TakeOver(ctx context.Context, m metadata.Stream, node string) (metadata.Stream, error) {
	absent := ""
	if m.Owner != "" {
		absent = r.memberKey(m.Owner)
	}
	return r.updateStream(ctx, m.Name, absent, func(cur *metadata.Stream) error {
		if cur.ID != m.ID || cur.Owner != m.Owner || cur.Epoch != m.Epoch {
			return fmt.Errorf("%w: %s changed owner while being taken over", metadata.ErrConflict, m.Name)
		}
		cur.Owner = node
		cur.Epoch++
		return nil
	})
}

// updateStream is UpdateStream, also conditioned on absentKey (if set)
// not existing: if it exists the update fails with ErrConflict.
func (r *Registry) updateStream(ctx context.Context, name, absentKey string, fn func(*metadata.Stream) error) (metadata.Stream, error) {
	if err := checkName(name); err != nil {
		return metadata.Stream{}, fmt.Errorf("meta: update stream: %w", err)
	}
	key := r.streamKey(name)
	resp, err := r.cli.Get(ctx, key)
	if err != nil {
		return metadata.Stream{}, fmt.Errorf("meta: update stream %q: read: %w", name, err)
	}
	kvs := resp.Kvs
	var holderRev int64 // ModRevision of a new alias's holder record, as last seen (0: absent)
	for {
		if err := ctx.Err(); err != nil {
			return metadata.Stream{}, fmt.Errorf("meta: update stream %q: %w", name, err)
		}
		if len(kvs) == 0 {
			return metadata.Stream{}, fmt.Errorf("meta: update stream %q: %w", name, metadata.ErrNotFound)
		}
		cur, err := r.decodeStream(kvs[0])
		if err != nil {
			return metadata.Stream{}, fmt.Errorf("meta: update stream %q: %w", name, err)
		}
		next := cur // Stream holds no references, so this is a deep copy
		if err := fn(&next); err != nil {
			return metadata.Stream{}, fmt.Errorf("meta: update stream %q: %w", name, err)
		}
		if next.Name != cur.Name || next.ID != cur.ID {
			return metadata.Stream{}, fmt.Errorf("meta: update stream %q: %w: name/id are immutable (got %q/%d, stored %q/%d)",
				name, metadata.ErrInvalid, next.Name, next.ID, cur.Name, cur.ID)
		}
		next.CreatedAt = next.CreatedAt.UTC().Round(0)
		data := metadata.EncodeStream(next)
		if bytes.Equal(data, kvs[0].Value) {
			return cur, nil
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)}
		ops := []clientv3.Op{clientv3.OpPut(key, string(data))}
		newTopic := r.topicKey(next.KafkaTopic)
		claim := next.KafkaTopic != cur.KafkaTopic && next.KafkaTopic != ""
		keyed := claim && !keylessTopic(next)
		holderKey := r.streamKey(aliasHolder(next.KafkaTopic))
		if next.KafkaTopic != cur.KafkaTopic {
			if claim {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(newTopic), "=", 0))
			}
			if keyed {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(holderKey), "=", holderRev))
				ops = append(ops, clientv3.OpPut(newTopic, r.topicValue(next)))
			}
			if cur.KafkaTopic != "" {
				// Also for a keyless alias: an index entry an earlier
				// version wrote for it goes with it (none is no-op).
				ops = append(ops, clientv3.OpDelete(r.topicKey(cur.KafkaTopic)))
			}
		}
		elses := []clientv3.Op{clientv3.OpGet(key), clientv3.OpGet(newTopic)}
		if absentKey != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(absentKey), "=", 0))
			elses = append(elses, clientv3.OpGet(absentKey, clientv3.WithKeysOnly()))
		}
		if keyed {
			elses = append(elses, clientv3.OpGet(holderKey))
		}
		tresp, err := r.cli.Txn(ctx).
			If(cmps...).
			Then(ops...).
			Else(elses...).
			Commit()
		if err != nil {
			return metadata.Stream{}, fmt.Errorf("meta: update stream %q: %w", name, err)
		}
		if tresp.Succeeded {
			return next, nil
		}
		if absentKey != "" && len(tresp.Responses[2].GetResponseRange().Kvs) > 0 {
			return metadata.Stream{}, fmt.Errorf("meta: update stream %q: %w: %s exists", name, metadata.ErrConflict, absentKey)
		}
		reread := tresp.Responses[0].GetResponseRange().Kvs
		unchanged := len(reread) > 0 && reread[0].ModRevision == kvs[0].ModRevision
		if claim && unchanged && len(tresp.Responses[1].GetResponseRange().Kvs) > 0 {
			// The record did not change: the topic compare failed.
			owner, _ := metadata.DecodeTopicEntry(tresp.Responses[1].GetResponseRange().Kvs[0].Value)
			return metadata.Stream{}, fmt.Errorf("meta: update stream %q: %w: %q belongs to %s", name, metadata.ErrTopicTaken, next.KafkaTopic, owner.Stream)
		}
		if keyed {
			_, held, rev, err := r.holdsTopic(tresp.Responses[len(tresp.Responses)-1].GetResponseRange().Kvs, next.KafkaTopic)
			if err != nil {
				return metadata.Stream{}, fmt.Errorf("meta: update stream %q: alias holder: %w", name, err)
			}
			if held {
				return metadata.Stream{}, fmt.Errorf("meta: update stream %q: %w: %q belongs to %s", name, metadata.ErrTopicTaken, next.KafkaTopic, aliasHolder(next.KafkaTopic))
			}
			holderRev = rev
		}
		kvs = reread
	}
}

// LookupTopic returns the stream whose Kafka topic alias is topic, or
// ErrNotFound. It reads the index entry and the record at one revision, so it
// never returns a stream that no longer carries the alias.
func (r *Registry) LookupTopic(ctx context.Context, topic string) (metadata.Stream, error) {
	if topic == "" {
		return metadata.Stream{}, fmt.Errorf("meta: lookup topic: %w: empty topic", metadata.ErrInvalid)
	}
	// The index entry and the one record that may hold topic without one,
	// at one revision.
	tresp, err := r.cli.Txn(ctx).Then(clientv3.OpGet(r.topicKey(topic)), clientv3.OpGet(r.streamKey(aliasHolder(topic)))).Commit()
	if err != nil {
		return metadata.Stream{}, fmt.Errorf("meta: lookup topic %q: %w", topic, err)
	}
	index := tresp.Responses[0].GetResponseRange().Kvs
	if len(index) == 0 {
		s, held, _, err := r.holdsTopic(tresp.Responses[1].GetResponseRange().Kvs, topic)
		if err != nil {
			return metadata.Stream{}, fmt.Errorf("meta: lookup topic %q: %w", topic, err)
		}
		if !held {
			return metadata.Stream{}, fmt.Errorf("meta: lookup topic %q: %w", topic, metadata.ErrNotFound)
		}
		return s, nil
	}
	e, err := metadata.DecodeTopicEntry(index[0].Value)
	if err != nil || e.Stream == "" {
		return metadata.Stream{}, fmt.Errorf("meta: lookup topic %q: %w: index value %q", topic, metadata.ErrCorrupt, index[0].Value)
	}
	sresp, err := r.cli.Get(ctx, r.streamKey(e.Stream), clientv3.WithRev(tresp.Header.Revision))
	if err != nil {
		return metadata.Stream{}, fmt.Errorf("meta: lookup topic %q: %w", topic, err)
	}
	if len(sresp.Kvs) == 0 {
		return metadata.Stream{}, fmt.Errorf("meta: lookup topic %q: %w: index names %s, which does not exist", topic, metadata.ErrCorrupt, e.Stream)
	}
	s, err := r.decodeStream(sresp.Kvs[0])
	if err != nil {
		return metadata.Stream{}, fmt.Errorf("meta: lookup topic %q: %w", topic, err)
	}
	if s.ID != e.ID || s.KafkaTopic != topic {
		return metadata.Stream{}, fmt.Errorf("meta: lookup topic %q: %w: index names %s #%d, record is #%d with topic %q", topic, metadata.ErrCorrupt, e.Stream, e.ID, s.ID, s.KafkaTopic)
	}
	return s, nil
}

// ListStreams returns up to limit streams whose names start with prefix and
// sort strictly after after, in byte-wise name order, and whether more such
// streams exist. prefix is a plain string prefix, as in S3, S2 and Kafka
// listing APIs: "/a" matches "/a/1" and also "/ab/2"; pass "/a/" for the
// streams "inside" /a. To page, pass the last name of one page as after for
// the next. limit must be positive and is capped at MaxListLimit.
func (r *Registry) ListStreams(ctx context.Context, prefix, after string, limit int) ([]metadata.Stream, bool, error) {
	streams, more, _, err := r.list(ctx, prefix, after, limit, 0)
	if err != nil {
		return nil, false, fmt.Errorf("meta: list streams (prefix %q, after %q): %w", prefix, after, err)
	}
	return streams, more, nil
}

// list reads one page at revision rev (0 = latest) and also returns the
// revision it read at.
func (r *Registry) list(ctx context.Context, prefix, after string, limit int, rev int64) ([]metadata.Stream, bool, int64, error) {
	if limit <= 0 {
		return nil, false, 0, fmt.Errorf("%w: limit %d", metadata.ErrInvalid, limit)
	}
	resp, err := r.page(ctx, prefix, after, min(limit, MaxListLimit), rev)
	if err != nil || resp == nil {
		return nil, false, rev, err
	}
	streams := make([]metadata.Stream, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		s, err := r.decodeStream(kv)
		if err != nil {
			return nil, false, 0, err
		}
		streams = append(streams, s)
	}
	return streams, resp.More, resp.Header.Revision, nil
}

// page is one etcd range of up to limit stream records whose names start
// with prefix and sort after after, at revision rev (0 = latest); nil if
// that range is empty.
func (r *Registry) page(ctx context.Context, prefix, after string, limit int, rev int64) (*clientv3.GetResponse, error) {
	start := r.streamsKey + prefix
	if after != "" {
		// The smallest key sorting strictly after `after`.
		if k := r.streamsKey + after + "\x00"; k > start {
			start = k
		}
	}
	// streamsKey ends in "/", so the range end is always a real key and the
	// range never leaves the streams/ key space.
	end := clientv3.GetPrefixRangeEnd(r.streamsKey + prefix)
	if start >= end {
		return nil, nil
	}
	opts := []clientv3.OpOption{
		clientv3.WithRange(end),
		clientv3.WithLimit(int64(limit)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend),
	}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	return r.cli.Get(ctx, start, opts...)
}

// AllStreams returns every stream, in name order, as of one etcd revision:
// all pages are read at the revision of the first, so a stream renamed by a
// concurrent delete+create is seen exactly once or not at all, never twice
// or half-updated. If etcd compacts that revision away mid-scan, the scan
// starts over. EachStream does the same without holding every record.
func (r *Registry) AllStreams(ctx context.Context) ([]metadata.Stream, error) {
	var all []metadata.Stream
	err := r.EachStream(ctx, func() { all = all[:0] }, func(s metadata.Stream) error {
		all = append(all, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// EachStream calls fn with every stream, in name order, as of one etcd
// revision (see AllStreams), holding one page of records at a time. start
// is called before the first record and again whenever the scan starts
// over (the revision was compacted away mid-scan), so the caller can drop
// what it gathered. An error of fn ends the scan and is returned. Used at
// node start to rebuild in-memory state.
func (r *Registry) EachStream(ctx context.Context, start func(), fn func(metadata.Stream) error) error {
	err := r.scanPrefix(ctx, r.streamsKey, int64(r.pageSize), int64(bulkPageGrowth*r.pageSize), start, func(kv *mvccpb.KeyValue) error {
		s, err := r.decodeStream(kv)
		if err != nil {
			return err
		}
		return fn(s)
	})
	if err != nil {
		return fmt.Errorf("meta: all streams: %w", err)
	}
	return nil
}

func (r *Registry) decodeStream(kv *mvccpb.KeyValue) (metadata.Stream, error) {
	name, ok := strings.CutPrefix(string(kv.Key), r.streamsKey)
	if !ok {
		return metadata.Stream{}, fmt.Errorf("%w: key %q is not a stream key", metadata.ErrCorrupt, kv.Key)
	}
	s, err := metadata.DecodeStream(name, kv.Value)
	if err != nil {
		return metadata.Stream{}, fmt.Errorf("%w: key %q: %v", metadata.ErrCorrupt, kv.Key, err)
	}
	return s, nil
}
