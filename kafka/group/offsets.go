package group

// Committed offsets. Each group has one offsets stream,
//
//	/_sys/kafka/groups/<group id, escaped>
//
// created by the group's first commit with `object` durability, so an
// acknowledged commit survives the loss of the node. Every OffsetCommit is
// one append (one batch: a commit is all-or-nothing); a record's key names
// the partition and its value is the commit or a deletion, and the latest
// record of a key wins. The coordinator keeps the live offsets in memory
// and catches up with the stream before answering (a node that becomes
// coordinator loads them all). Once the stream holds CompactAfter more
// records than live offsets, the live offsets are appended again as one
// batch and everything before it is trimmed.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// groupsRoot is where the offsets streams live.
const groupsRoot = stream.SystemRoot + "kafka/groups/"

// maxMetadata bounds a commit's metadata string (Kafka's
// offset.metadata.max.bytes default).
const maxMetadata = 4096

var errGroupIDTooLong = errors.New("group id too long for a stream name")

// streamName is the offsets stream of group id.
func streamName(id string) (string, error) {
	name, ok := SystemStreamName(groupsRoot, id)
	if !ok {
		return "", fmt.Errorf("%w: %q", errGroupIDTooLong, id)
	}
	return name, nil
}

// StreamName is the offsets stream of group id, where a transaction's
// offsets (TxnOffsetCommit) wait for its marker.
func StreamName(id string) (string, error) { return streamName(id) }

// SystemStreamName names the stream of a Kafka id (a group id, a
// transactional id) under root. Bytes outside [A-Za-z0-9._-] are written
// ~XX (hex), so every id has its own stream name and the id can be read
// back from it; false if the id is empty or the name too long.
func SystemStreamName(root, id string) (string, bool) {
	var b strings.Builder
	b.WriteString(root)
	dots := id == "." || id == ".." // not a legal path segment as is
	for i := 0; i < len(id); i++ {
		ch := id[i]
		if !dots && (ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-') {
			b.WriteByte(ch)
			continue
		}
		fmt.Fprintf(&b, "~%02X", ch)
	}
	if id == "" || b.Len() > stream.MaxNameLen {
		return "", false
	}
	return b.String(), true
}

// groupID is the inverse of streamName.
func groupID(name string) (string, bool) { return SystemStreamID(groupsRoot, name) }

// SystemStreamID is the inverse of SystemStreamName.
func SystemStreamID(root, name string) (string, bool) {
	enc, ok := strings.CutPrefix(name, root)
	if !ok || enc == "" || strings.Contains(enc, "/") {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(enc); i++ {
		if enc[i] != '~' {
			b.WriteByte(enc[i])
			continue
		}
		var v byte
		if i+2 >= len(enc) {
			return "", false
		}
		if _, err := fmt.Sscanf(enc[i+1:i+3], "%02X", &v); err != nil {
			return "", false
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), true
}

// tp is a topic partition.
type tp struct {
	topic     string
	partition int32
}

// committed is one partition's committed offset.
type committed struct {
	offset   int64
	epoch    int32
	metadata *string
	at       int64 // commit time, ms since the epoch
}

// Record layout (part of the stored format; never change the meaning of a
// kind byte):
//
//	key:   uint16 topic length, topic, int32 partition (big endian)
//	value: kind byte; kindCommit: int64 offset, int32 leader epoch,
//	       int64 commit time ms, int32 metadata length (-1 = null), metadata
//	       kindDelete: nothing more
const (
	kindCommit = 0
	kindDelete = 1
)

func encodeKey(p tp) []byte {
	b := make([]byte, 0, 6+len(p.topic))
	b = binary.BigEndian.AppendUint16(b, uint16(len(p.topic)))
	b = append(b, p.topic...)
	return binary.BigEndian.AppendUint32(b, uint32(p.partition))
}

func decodeKey(b []byte) (tp, error) {
	if len(b) < 2 {
		return tp{}, errors.New("short key")
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) != 2+n+4 {
		return tp{}, fmt.Errorf("key of %d bytes, topic of %d", len(b), n)
	}
	return tp{topic: string(b[2 : 2+n]), partition: int32(binary.BigEndian.Uint32(b[2+n:]))}, nil
}

func encodeCommit(c committed) []byte {
	b := make([]byte, 0, 25)
	b = append(b, kindCommit)
	b = binary.BigEndian.AppendUint64(b, uint64(c.offset))
	b = binary.BigEndian.AppendUint32(b, uint32(c.epoch))
	b = binary.BigEndian.AppendUint64(b, uint64(c.at))
	if c.metadata == nil {
		return binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(*c.metadata)))
	return append(b, *c.metadata...)
}

// decodeValue returns the commit, or ok=false for a deletion.
func decodeValue(b []byte) (c committed, ok bool, err error) {
	if len(b) == 1 && b[0] == kindDelete {
		return c, false, nil
	}
	if len(b) < 25 || b[0] != kindCommit {
		return c, false, fmt.Errorf("bad value (%d bytes)", len(b))
	}
	c.offset = int64(binary.BigEndian.Uint64(b[1:]))
	c.epoch = int32(binary.BigEndian.Uint32(b[9:]))
	c.at = int64(binary.BigEndian.Uint64(b[13:]))
	n := int32(binary.BigEndian.Uint32(b[21:]))
	switch {
	case n == -1 && len(b) == 25:
	case n >= 0 && int(n) == len(b)-25:
		m := string(b[25:])
		c.metadata = &m
	default:
		return c, false, fmt.Errorf("bad metadata length %d in a %d-byte value", n, len(b))
	}
	return c, true, nil
}

// offsets is the in-memory copy of a group's offsets stream.
type offsets struct {
	mu     sync.Mutex
	m      map[tp]committed
	id     uint64 // stream id; 0 = no stream yet
	start  int64
	next   int64 // read up to here
	loaded bool
	// unstable: partitions with offsets of a transaction not yet ended
	// (TxnOffsetCommit); they apply when its commit marker lands, and
	// reading stops before them (o.next is the stream's last stable
	// offset, not its end, while any is open).
	unstable map[tp]bool
	// seen is the end of the stream as this coordinator last knew it:
	// what lies past it was appended by someone else.
	seen int64
}

func (o *offsets) reset(id uint64, start int64) {
	o.m, o.id, o.start, o.next, o.unstable, o.seen = map[tp]committed{}, id, start, start, nil, start
}

// syncOffsets catches up with the offsets stream. foreign reports that
// the stream changed in a way this node did not write (another node
// coordinated the group meanwhile): the caller then starts the group's
// membership afresh.
func (g *group) syncOffsets(ctx context.Context) (foreign bool, err error) {
	o := &g.offs
	o.mu.Lock()
	defer o.mu.Unlock()
	return g.catchUpLocked(ctx)
}

func (g *group) catchUpLocked(ctx context.Context) (foreign bool, err error) {
	o := &g.offs
	info, err := g.c.svc.Head(ctx, g.stream)
	if errors.Is(err, stream.ErrNotFound) {
		foreign = o.loaded && o.id != 0
		o.reset(0, 0)
		o.loaded = true
		return foreign, nil
	}
	if err != nil {
		return false, fmt.Errorf("group %q: offsets stream: %w", g.id, err)
	}
	if info.ID != o.id || info.StartOffset > o.next || info.NextOffset < o.next {
		foreign = o.loaded
		o.reset(info.ID, info.StartOffset)
	}
	if info.NextOffset > o.next {
		// Transaction markers are appended by transaction coordinators:
		// only other batches mean another group coordinator.
		if !foreign && o.loaded && info.NextOffset > o.seen {
			if foreign, err = g.othersWroteLocked(ctx, o.seen); err != nil {
				return false, err
			}
		}
		if err := g.readLocked(ctx, info.NextOffset); err != nil {
			return false, err
		}
	}
	o.loaded = true
	return foreign, nil
}

// readLocked applies the stream's records from o.next up to end.
func (g *group) readLocked(ctx context.Context, end int64) error {
	o := &g.offs
	for o.next < end {
		res, err := g.c.svc.Read(ctx, g.stream, stream.ReadOptions{Offset: o.next})
		var te *stream.TrimmedError
		if errors.As(err, &te) {
			o.reset(o.id, te.StartOffset) // compacted meanwhile: reload
			continue
		}
		if err != nil {
			return fmt.Errorf("group %q: read offsets at %d: %w", g.id, o.next, err)
		}
		if res.NextOffset <= o.next {
			if res.UpToDate {
				break // the last stable offset: a transaction is open
			}
			return fmt.Errorf("group %q: read offsets at %d made no progress", g.id, o.next)
		}
		for _, r := range res.Records {
			if err := o.apply(r); err != nil {
				return fmt.Errorf("group %q: offsets record %d: %w", g.id, r.Offset, err)
			}
		}
		o.next = res.NextOffset
	}
	o.unstable = nil
	o.seen = max(o.seen, end)
	if o.next < end {
		return g.readUnstableLocked(ctx, end)
	}
	return nil
}

// readUnstableLocked notes the partitions of the transactional offsets
// between o.next (the last stable offset) and end.
func (g *group) readUnstableLocked(ctx context.Context, end int64) error {
	o := &g.offs
	o.unstable = map[tp]bool{}
	for at := o.next; at < end; {
		br, err := g.c.svc.ReadBatches(ctx, g.stream, at, 1<<20)
		if err != nil {
			return fmt.Errorf("group %q: read open transactions at %d: %w", g.id, at, err)
		}
		if len(br.Batches) == 0 {
			break
		}
		err = record.SplitBatches(br.Batches, func(b []byte, h record.BatchHeader) error {
			at = max(at, h.LastOffset()+1)
			if !h.Transactional() || h.Control() {
				return nil
			}
			recs, err := record.DecodeRecords(b, nil)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if p, err := decodeKey(r.Key); err == nil {
					o.unstable[p] = true
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("group %q: open transactions at %d: %w", g.id, at, err)
		}
	}
	return nil
}

func (o *offsets) apply(r record.Record) error {
	p, err := decodeKey(r.Key)
	if err != nil {
		return err
	}
	c, ok, err := decodeValue(r.Value)
	if err != nil {
		return err
	}
	if ok {
		o.m[p] = c
	} else {
		delete(o.m, p)
	}
	return nil
}

// change is one partition of a commit: c, or a deletion when del is set.
type change struct {
	p   tp
	c   committed
	del bool
}

func (ch change) record() record.Record {
	if ch.del {
		return record.Record{Key: encodeKey(ch.p), Value: []byte{kindDelete}}
	}
	return record.Record{Key: encodeKey(ch.p), Value: encodeCommit(ch.c)}
}

// commit appends changes as one batch and applies them once durable.
func (g *group) commit(ctx context.Context, changes []change) error {
	if len(changes) == 0 {
		return nil
	}
	o := &g.offs
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := g.ensureStreamLocked(ctx); err != nil {
		return err
	}
	recs := make([]record.Record, len(changes))
	for i, ch := range changes {
		recs[i] = ch.record()
	}
	res, err := g.c.svc.AppendBatch(ctx, g.stream, stream.AppendRequest{Records: recs})
	if err != nil {
		if errors.Is(err, stream.ErrNotFound) {
			o.reset(0, 0) // deleted meanwhile; the next commit creates it again
		}
		return fmt.Errorf("group %q: append offsets: %w", g.id, err)
	}
	if res.FirstOffset != o.next {
		// Someone else appended (a transaction marker; another node
		// cannot while this node owns the stream): the stream is the
		// truth.
		o.reset(o.id, o.start)
		return g.readLocked(ctx, res.NextOffset)
	}
	for _, ch := range changes {
		if ch.del {
			delete(o.m, ch.p)
		} else {
			o.m[ch.p] = ch.c
		}
	}
	o.next, o.seen = res.NextOffset, res.NextOffset
	g.maybeCompactLocked(ctx)
	return nil
}

// txnCommit appends the offsets of producer pid's transaction as one
// transactional batch: they apply when the transaction's commit marker
// lands after it, and never if an abort marker does.
func (g *group) txnCommit(ctx context.Context, pid int64, epoch int16, changes []change) error {
	o := &g.offs
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := g.ensureStreamLocked(ctx); err != nil {
		return err
	}
	recs := make([]record.Record, len(changes))
	for i, ch := range changes {
		recs[i] = ch.record()
	}
	batch := record.AppendBatch(nil, record.BatchOptions{Timestamp: g.c.clock.Now().UnixMilli(),
		ProducerID: pid, ProducerEpoch: epoch, BaseSequence: -1, Transactional: true}, recs)
	res, err := g.c.svc.AppendBatch(ctx, g.stream, stream.AppendRequest{Batch: batch})
	if err != nil {
		if errors.Is(err, stream.ErrNotFound) {
			o.reset(0, 0)
		}
		return fmt.Errorf("group %q: append transactional offsets: %w", g.id, err)
	}
	return g.readLocked(ctx, res.NextOffset)
}

// ensureStreamLocked creates the offsets stream on the first commit.
func (g *group) ensureStreamLocked(ctx context.Context) error {
	o := &g.offs
	if o.id == 0 {
		none := ""
		info, _, err := g.c.svc.Create(ctx, g.stream, stream.CreateOptions{
			ContentType: "application/octet-stream", Durability: stream.DurabilityObject, KafkaTopic: &none})
		if err != nil {
			return fmt.Errorf("group %q: create offsets stream: %w", g.id, err)
		}
		if info.ID != o.id {
			o.reset(info.ID, info.StartOffset)
			if err := g.readLocked(ctx, info.NextOffset); err != nil {
				return err
			}
		}
	}
	return nil
}

// maybeCompactLocked rewrites the live offsets and trims what they
// supersede, once enough dead records piled up. Failures only delay it.
func (g *group) maybeCompactLocked(ctx context.Context) {
	o := &g.offs
	if o.unstable != nil {
		return // a transaction's offsets wait past o.next: never trim them
	}
	if o.next-o.start <= int64(g.c.cfg.CompactAfter+len(o.m)) {
		return
	}
	recs := make([]record.Record, 0, len(o.m))
	for p, c := range o.m {
		recs = append(recs, change{p: p, c: c}.record())
	}
	trim := o.next
	if len(recs) > 0 {
		res, err := g.c.svc.AppendBatch(ctx, g.stream, stream.AppendRequest{Records: recs})
		if err != nil || res.FirstOffset != o.next {
			g.c.log.Warn("kafka group offsets compaction: append failed", "group", g.id, "err", err)
			return
		}
		trim, o.next = res.FirstOffset, res.NextOffset
	}
	if _, err := g.c.svc.Configure(ctx, g.stream, stream.ConfigChange{TrimBefore: &trim}); err != nil {
		g.c.log.Warn("kafka group offsets compaction: trim failed", "group", g.id, "err", err)
		return
	}
	o.start = trim
}

// lookup returns the committed offset of p.
func (o *offsets) lookup(p tp) (committed, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.m[p]
	return c, ok
}

// all returns every committed offset, by topic.
func (o *offsets) all() map[string]map[int32]committed {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]map[int32]committed{}
	for p, c := range o.m {
		if out[p.topic] == nil {
			out[p.topic] = map[int32]committed{}
		}
		out[p.topic][p.partition] = c
	}
	return out
}

// exists: the group has an offsets stream (it committed at least once).
func (o *offsets) exists() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.id != 0
}

// isUnstable reports whether p has offsets of an open transaction.
func (o *offsets) isUnstable(p tp) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.unstable[p]
}

// GroupOfStream is the group whose offsets stream name is, if it is one.
func GroupOfStream(name string) (string, bool) { return groupID(name) }

// othersWroteLocked reports whether the stream holds anything but
// transaction markers from offset from on.
func (g *group) othersWroteLocked(ctx context.Context, from int64) (bool, error) {
	for at := from; ; {
		br, err := g.c.svc.ReadBatches(ctx, g.stream, at, 1<<20)
		if err != nil {
			return false, fmt.Errorf("group %q: read offsets at %d: %w", g.id, at, err)
		}
		if len(br.Batches) == 0 {
			return false, nil
		}
		others := false
		err = record.SplitBatches(br.Batches, func(b []byte, h record.BatchHeader) error {
			at = max(at, h.LastOffset()+1)
			if h.LastOffset() >= from && !h.Control() {
				others = true
			}
			return nil
		})
		if err != nil || others {
			return others, err
		}
	}
}
