package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/cache"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/segment"
)

// tierAdapter implements stream.Tier with the tiering packages: segment
// objects in an objstore.Store, read through the block cache.
type tierAdapter struct {
	store objstore.Store
	cache *cache.Cache // in front of store for every read
	src   segment.RangeReader
	up    *tiering.Uploader
	log   *slog.Logger
	// corrupt holds the keys of objects already reported corrupt.
	corrupt        sync.Map
	corruptObjects atomic.Int64

	mu      sync.Mutex
	readers map[string]*segment.Reader // opened footers, for deep reads
	order   []string                   // FIFO eviction of readers
}

// smallRange is the range size up to which a read fetches from the start of
// a stream's range (one GET, no footer) rather than via the object's index.
const smallRange = 1 << 20

const maxOpenReaders = 1024

func openTier(ctx context.Context, cfg Config, log *slog.Logger) (*tierAdapter, error) {
	var opts []objstore.Option
	if cfg.S3CA != "" {
		pool, err := loadCAPool("--s3-ca", cfg.S3CA)
		if err != nil {
			return nil, err
		}
		opts = append(opts, objstore.WithRootCAs(pool))
	}
	store, err := objstore.Open(ctx, cfg.ObjectStore, opts...)
	if err != nil {
		return nil, err
	}
	c, err := cache.New(store, cache.Options{MaxBytes: max(cfg.CacheBytes, 1<<20)})
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("read cache: %w", err)
	}
	up := tiering.NewUploader(store, tiering.UploaderOptions{
		// A few quick attempts per flush; the flush loop backs off further
		// and keeps the data in the WAL meanwhile.
		MaxAttempts: 3,
		OnRetry: func(key string, attempt int, err error, wait time.Duration) {
			log.Warn("object upload failed; retrying", "key", key, "attempt", attempt, "err", err, "wait", wait)
		},
	})
	return &tierAdapter{store: store, cache: c, src: c, up: up, log: log, readers: map[string]*segment.Reader{}}, nil
}

// Upload implements stream.Tier. The uploader retries transient errors and
// recognises a lost response (the object exists with our bytes).
func (t *tierAdapter) Upload(ctx context.Context, key string, streams []stream.UploadStream) ([]stream.ObjectRef, int64, error) {
	sbs := make([]tiering.StreamBatches, 0, len(streams))
	for _, s := range streams {
		if len(s.Batches) > 0 {
			sbs = append(sbs, tiering.StreamBatches{Stream: s.StreamID, Batches: s.Batches})
		}
	}
	u, err := t.up.Upload(ctx, key, sbs)
	if err != nil {
		return nil, 0, err
	}
	refs := make([]stream.ObjectRef, 0, len(u.Streams))
	for _, e := range u.Streams {
		refs = append(refs, stream.ObjectRef{Key: key, ObjectSize: u.Size, Extent: e})
	}
	return refs, u.Size, nil
}

// ReadBatches implements stream.Tier.
func (t *tierAdapter) ReadBatches(ctx context.Context, ref *stream.ObjectRef, from int64, maxBytes int) ([]byte, error) {
	data, err := t.readBatches(ctx, ref, from, maxBytes)
	if errors.Is(err, segment.ErrCorrupt) {
		// Do not keep the bad bytes: the next read fetches them again, so
		// a damaged transfer or a restored object heals by itself.
		t.cache.Forget(ref.Key)
		t.mu.Lock()
		delete(t.readers, ref.Key)
		t.mu.Unlock()
		// Readers get a 503 naming the object; the operator must hear of it
		// once per object, not once per read.
		if _, seen := t.corrupt.LoadOrStore(ref.Key, true); !seen {
			t.corruptObjects.Add(1)
			t.log.Error("object storage returned a corrupt object; reads of its ranges fail until it is restored", "object", ref.Key, "stream_id", ref.StreamID, "err", err)
		}
	}
	return data, err
}

func (t *tierAdapter) readBatches(ctx context.Context, ref *stream.ObjectRef, from int64, maxBytes int) ([]byte, error) {
	if ref.Length <= smallRange || from <= ref.First {
		b, err := segment.ReadStream(ctx, t.src, ref.Key, ref.Extent, from, maxBytes)
		if err != nil {
			return nil, missing(err)
		}
		return b.Data, nil
	}
	r, err := t.reader(ctx, ref.Key, ref.ObjectSize)
	if err != nil {
		return nil, missing(err)
	}
	b, err := r.ReadBatches(ctx, ref.StreamID, from, maxBytes)
	if err != nil {
		return nil, err
	}
	return b.Data, nil
}

// Prefetch implements stream.Prefetcher.
func (t *tierAdapter) Prefetch(ref *stream.ObjectRef) {
	t.cache.Advise(ref.Key, ref.Offset, ref.Offset+ref.Length)
}

// reader returns the open reader of object key of size bytes (0: unknown,
// ask the store), opening its footer on first use.
func (t *tierAdapter) reader(ctx context.Context, key string, size int64) (*segment.Reader, error) {
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

// Delete implements stream.Tier.
func (t *tierAdapter) Delete(ctx context.Context, key string) error {
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

// Close releases the cache and the store.
func (t *tierAdapter) Close() error {
	t.cache.Close()
	return t.store.Close()
}

// ListObjects implements stream.ObjectLister.
func (t *tierAdapter) ListObjects(ctx context.Context, prefix string) ([]stream.ObjectInfo, error) {
	var out []stream.ObjectInfo
	for a, err := range t.store.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		out = append(out, stream.ObjectInfo{Key: a.Key, ModTime: a.LastModified})
	}
	return out, nil
}

// missing marks not-found errors so the stream service refreshes its index.
func missing(err error) error {
	if objstore.IsNotExist(err) {
		return fmt.Errorf("%w: %v", stream.ErrObjectMissing, err)
	}
	return err
}
