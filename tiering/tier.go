package tiering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering/cache"
	"github.com/PicoMQ/picomq/tiering/extent"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/segment"
)

// ObjectRef is one stream's range in an uploaded object: the object's key
// and size (0: unknown, so a reader needs no HEAD) and the extent, all that
// is needed to read the range with a single ranged GET, without the
// object's footer. The stream service keeps one per chunk of its offset
// index.
type ObjectRef struct {
	Key        string
	ObjectSize int64
	extent.Extent
}

// ObjectInfo describes one stored object (for the orphan collector).
type ObjectInfo struct {
	Key     string
	ModTime time.Time
}

// ErrObjectMissing is what Tier.ReadBatches wraps when an object does not
// exist (any more): the reader's index is stale, not the data lost. (The
// text is the one the stream service used when it defined it.)
var ErrObjectMissing = errors.New("stream: object missing")

// Tier is a node's object tier: segment objects in an objstore.Store,
// uploaded by an Uploader and read through the block cache. It keeps the
// open footers of objects read deep inside (a bounded FIFO) and counts the
// corrupt objects its reads meet. It is what the stream service's Tier
// port needs; the node only opens the store and hands it over.
type Tier struct {
	store objstore.Store
	cache *cache.Cache // in front of store for every read
	src   segment.RangeReader
	up    *Uploader
	log   *slog.Logger
	// corrupt holds the keys of objects already reported corrupt.
	corrupt        sync.Map
	corruptObjects atomic.Int64

	mu      sync.Mutex
	readers map[string]*segment.Reader // opened footers, for deep reads
	order   []string                   // FIFO eviction of readers
	marks   map[markKey]resumeMark     // where streams' last reads stopped
}

// markKey names one stream's range in one object.
type markKey struct {
	key    string
	stream uint64
}

// resumeMark is where the last read of a stream's range in an object
// stopped, as batch boundaries: the last batch it returned and the one
// after it. A consumer's next page starts at one of them (the next batch,
// or inside the last one when the page ended mid-batch), so it resumes
// there without the object's footer (one GET less per object, a whole
// round trip against remote S3) and without re-scanning from an index
// entry.
type resumeMark struct {
	lastPos, lastBase int64
	endPos, end       int64
}

// maxResumeMarks bounds the marks kept; past it they are all forgotten
// (the next read of each stream falls back to the footer index once).
const maxResumeMarks = 8192

// smallRange is the range size up to which a read fetches from the start of
// a stream's range (one GET, no footer) rather than via the object's index.
const smallRange = 1 << 20

const maxOpenReaders = 1024

// TierOptions configure NewTier.
type TierOptions struct {
	// CacheBytes bounds the block cache (at least 1 MiB is used).
	CacheBytes int64
	// ReadAheadBytes is the node-wide read-ahead budget (0: the cache's
	// default, 64 MiB); demand GETs in flight are bounded by the same
	// amount. See cache.Options.
	ReadAheadBytes int64
	// Pretouch fills the cache's free list of GET buffers (up to the
	// read-ahead budget) with memory touched now, before the node says
	// it is ready, so the first reads after a start or takeover do not
	// fault in fresh pages (--cache-pretouch; cache.Cache.Pretouch).
	Pretouch bool
	Log      *slog.Logger
}

// NewTier builds the tier over store, which it owns from now on (Close
// closes it, also when NewTier fails).
func NewTier(store objstore.Store, opts TierOptions) (*Tier, error) {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	c, err := cache.New(store, cache.Options{MaxBytes: max(opts.CacheBytes, 1<<20), ReadAheadBytes: opts.ReadAheadBytes})
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("read cache: %w", err)
	}
	if opts.Pretouch {
		start := time.Now()
		n := c.Pretouch()
		log.Info("read cache: GET buffers pre-touched", "bytes", n, "took", time.Since(start))
	}
	up := NewUploader(store, UploaderOptions{
		// A few quick attempts per flush; the flush loop backs off further
		// and keeps the data in the WAL meanwhile.
		MaxAttempts: 3,
		OnRetry: func(key string, attempt int, err error, wait time.Duration) {
			log.Warn("object upload failed; retrying", "key", key, "attempt", attempt, "err", err, "wait", wait)
		},
	})
	return &Tier{store: store, cache: c, src: c, up: up, log: log, readers: map[string]*segment.Reader{}, marks: map[markKey]resumeMark{}}, nil
}

// Upload writes one object at key holding streams' batches (streams
// without batches are skipped) and returns each stream's range, in
// ascending stream order, and the object's size. The uploader retries
// transient errors and recognises a lost response (the object exists with
// our bytes).
func (t *Tier) Upload(ctx context.Context, key string, streams []StreamBatches) ([]ObjectRef, int64, error) {
	u, err := t.up.Upload(ctx, key, streams)
	if err != nil {
		return nil, 0, err
	}
	refs := make([]ObjectRef, 0, len(u.Streams))
	for _, e := range u.Streams {
		refs = append(refs, ObjectRef{Key: key, ObjectSize: u.Size, Extent: e})
	}
	return refs, u.Size, nil
}

// ReadBatches returns whole, CRC-verified batches of ref's stream from the
// batch holding offset from, about maxBytes long. A corrupt object is
// dropped from the cache (the next read fetches it again, so a damaged
// transfer or a restored object heals by itself) and logged once.
func (t *Tier) ReadBatches(ctx context.Context, ref *ObjectRef, from int64, maxBytes int) ([]byte, error) {
	b, err := t.read(ctx, ref, from, maxBytes, false)
	return b.Data, err
}

// ReadBatchPieces reads like ReadBatches and returns the batches as they
// lie in the block cache's memory: consecutive stretches of the object,
// neither copied nor joined, in which a batch may cross from one piece
// into the next (segment.Batches.Pieces; record.WalkPieces reads them).
// A reader that writes them out as they are (an HTTP page of stored
// batches) saves one copy of every byte of a page that spans two GETs.
// The pieces alias the cache and must not be modified. release (nil when
// there is nothing to release) ends their loan (segment.Batches.Release):
// the caller calls it once the pieces are written out and no longer
// used, and the cache may then reuse their memory; a caller that never
// calls it only keeps that memory from being reused.
func (t *Tier) ReadBatchPieces(ctx context.Context, ref *ObjectRef, from int64, maxBytes int) (pieces [][]byte, release func(), err error) {
	b, err := t.read(ctx, ref, from, maxBytes, true)
	return b.Pieces, b.Release, err
}

func (t *Tier) read(ctx context.Context, ref *ObjectRef, from int64, maxBytes int, pieces bool) (segment.Batches, error) {
	b, err := t.readBatches(ctx, ref, from, maxBytes, pieces)
	if errors.Is(err, segment.ErrCorrupt) {
		t.cache.Forget(ref.Key)
		t.mu.Lock()
		delete(t.readers, ref.Key)
		delete(t.marks, markKey{ref.Key, ref.StreamID})
		t.mu.Unlock()
		// Readers get a 503 naming the object; the operator must hear of it
		// once per object, not once per read.
		if _, seen := t.corrupt.LoadOrStore(ref.Key, true); !seen {
			t.corruptObjects.Add(1)
			t.log.Error("object storage returned a corrupt object; reads of its ranges fail until it is restored", "object", ref.Key, "stream_id", ref.StreamID, "err", err)
		}
	}
	return b, err
}

func (t *Tier) readBatches(ctx context.Context, ref *ObjectRef, from int64, maxBytes int, pieces bool) (segment.Batches, error) {
	var b segment.Batches
	var err error
	switch pos, base, ok := t.resumeAt(ref, from); {
	case ok && pieces:
		b, err = segment.ReadStreamAtPieces(ctx, t.src, ref.Key, ref.Extent, pos, base, from, maxBytes)
	case ok:
		b, err = segment.ReadStreamAt(ctx, t.src, ref.Key, ref.Extent, pos, base, from, maxBytes)
	case (ref.Length <= smallRange || from <= ref.First) && pieces:
		b, err = segment.ReadStreamPieces(ctx, t.src, ref.Key, ref.Extent, from, maxBytes)
	case ref.Length <= smallRange || from <= ref.First:
		b, err = segment.ReadStream(ctx, t.src, ref.Key, ref.Extent, from, maxBytes)
	default:
		r, rerr := t.reader(ctx, ref.Key, ref.ObjectSize)
		if rerr != nil {
			return segment.Batches{}, missing(rerr)
		}
		if pieces {
			b, err = r.ReadBatchPieces(ctx, ref.StreamID, from, maxBytes)
		} else {
			b, err = r.ReadBatches(ctx, ref.StreamID, from, maxBytes)
		}
		if err != nil {
			return segment.Batches{}, err
		}
		t.remember(ref, b)
		return b, nil
	}
	if err != nil {
		return segment.Batches{}, missing(err)
	}
	t.remember(ref, b)
	return b, nil
}

// resumeAt returns a batch boundary of ref's range to read offset from,
// if an earlier read of the range stopped right there.
func (t *Tier) resumeAt(ref *ObjectRef, from int64) (pos, base int64, ok bool) {
	t.mu.Lock()
	m, found := t.marks[markKey{ref.Key, ref.StreamID}]
	t.mu.Unlock()
	switch {
	case !found:
		return 0, 0, false
	case from == m.end && m.end < ref.Next:
		return m.endPos, m.end, true
	case from >= m.lastBase && from < m.end:
		return m.lastPos, m.lastBase, true
	}
	return 0, 0, false
}

// remember notes where a read of ref's range stopped (b: what it returned,
// whole verified batches from b.Pos, in Data or in consecutive Pieces).
func (t *Tier) remember(ref *ObjectRef, b segment.Batches) {
	size := b.Size()
	if size == 0 {
		return
	}
	// The last batch of b: walk the headers (sizes only; the batches were
	// verified when read). A batch may cross from one piece into the next.
	parts := b.Pieces
	if len(b.Data) > 0 {
		parts = [][]byte{b.Data}
	}
	last, lastBase := 0, b.FirstOffset
	if record.WalkPieces(parts, func(_ [][]byte, h record.BatchHeader, pos int) error {
		last, lastBase = pos, h.BaseOffset
		return nil
	}) != nil {
		return
	}
	m := resumeMark{lastPos: b.Pos + int64(last), lastBase: lastBase, endPos: b.Pos + int64(size), end: b.NextOffset}
	t.mu.Lock()
	if len(t.marks) >= maxResumeMarks {
		clear(t.marks)
	}
	t.marks[markKey{ref.Key, ref.StreamID}] = m
	t.mu.Unlock()
}

// Prefetch starts fetching ref's range into the cache (read-ahead); it
// does not block.
func (t *Tier) Prefetch(ref *ObjectRef) {
	t.cache.Advise(ref.Key, ref.Offset, ref.Offset+ref.Length)
}

// reader returns the open reader of object key of size bytes (0: unknown,
// ask the store), opening its footer on first use.
func (t *Tier) reader(ctx context.Context, key string, size int64) (*segment.Reader, error) {
	t.mu.Lock()
	r := t.readers[key]
	t.mu.Unlock()
	if r != nil {
		return r, nil
	}
	if size <= 0 {
		attrs, err := t.store.Stat(ctx, key)
		if err != nil {
			return nil, err
		}
		size = attrs.Size
	}
	r, err := segment.Open(ctx, t.src, key, size)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if _, ok := t.readers[key]; !ok {
		t.readers[key] = r
		t.order = append(t.order, key)
		if len(t.order) > maxOpenReaders {
			delete(t.readers, t.order[0])
			t.order = t.order[1:]
		}
	}
	t.mu.Unlock()
	return r, nil
}

// Delete removes an object; deleting a missing object is not an error.
func (t *Tier) Delete(ctx context.Context, key string) error {
	t.mu.Lock()
	delete(t.readers, key)
	t.mu.Unlock()
	t.cache.Forget(key)
	err := t.store.Delete(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil
	}
	return err
}

// ListObjects returns the objects under prefix with their modification
// times.
func (t *Tier) ListObjects(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	for a, err := range t.store.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		out = append(out, ObjectInfo{Key: a.Key, ModTime: a.LastModified})
	}
	return out, nil
}

// CorruptObjects is how many distinct objects failed their CRC on read.
func (t *Tier) CorruptObjects() int64 { return t.corruptObjects.Load() }

// CacheStats returns the block cache's counters.
func (t *Tier) CacheStats() cache.Stats { return t.cache.Stats() }

// Close releases the cache and the store.
func (t *Tier) Close() error {
	t.cache.Close()
	return t.store.Close()
}

// missing marks not-found errors so the stream service refreshes its index.
func missing(err error) error {
	if objstore.IsNotExist(err) {
		return fmt.Errorf("%w: %v", ErrObjectMissing, err)
	}
	return err
}
