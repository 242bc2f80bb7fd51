package tiering

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/internal/defaults"
	"github.com/PicoMQ/picomq/sdk/retry"
	"github.com/PicoMQ/picomq/tiering/extent"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/segment"
)

// StreamBatches is one stream's contribution to an object: consecutive
// RecordBatch v2 batches in offset order, exactly as the WAL holds them.
type StreamBatches struct {
	Stream  uint64
	Batches [][]byte
}

// ErrNothingToUpload: every stream given had no batches.
var ErrNothingToUpload = errors.New("tiering: nothing to upload")

// Build encodes streams into one segment object in memory. Streams may come
// in any order (they are written in ascending id); a stream id may appear
// only once; streams without batches are skipped.
func Build(streams []StreamBatches, opts segment.WriterOptions) ([]byte, segment.Info, error) {
	return buildInto(nil, streams, opts)
}

// buildInto is Build writing into dst's memory when it is large enough.
func buildInto(dst []byte, streams []StreamBatches, opts segment.WriterOptions) ([]byte, segment.Info, error) {
	sorted := slices.Clone(streams)
	slices.SortFunc(sorted, func(a, b StreamBatches) int {
		switch {
		case a.Stream < b.Stream:
			return -1
		case a.Stream > b.Stream:
			return 1
		}
		return 0
	})
	var size int
	for i, s := range sorted {
		if i > 0 && s.Stream == sorted[i-1].Stream {
			return nil, segment.Info{}, fmt.Errorf("tiering: stream %d given twice", s.Stream)
		}
		for _, b := range s.Batches {
			size += len(b)
		}
	}
	if size == 0 {
		return nil, segment.Info{}, ErrNothingToUpload
	}
	need := size + size/64 + 4096
	if cap(dst) < need {
		// A quarter more than this object needs (within maxSpare), so the
		// next, somewhat larger flush fits too. bytes.Buffer.Grow would
		// double the memory instead: past maxSpare it is not kept, and
		// every flush allocated and zeroed its object anew (measured: a
		// third of the node's CPU under a steady Kafka produce).
		dst = make([]byte, 0, max(need, min(need+need/4, maxSpare)))
	}
	buf := bytes.NewBuffer(dst[:0])
	w := segment.NewWriter(buf, opts)
	for _, s := range sorted {
		for _, b := range s.Batches {
			if err := w.Append(s.Stream, b); err != nil {
				return nil, segment.Info{}, err
			}
		}
	}
	info, err := w.Finish()
	if err != nil {
		return nil, segment.Info{}, err
	}
	return buf.Bytes(), info, nil
}

// UploaderOptions configure an Uploader. Zero values mean the defaults in
// the field comments.
type UploaderOptions struct {
	// Segment configures the object format (index density).
	Segment segment.WriterOptions
	// InitialBackoff is the first retry's nominal wait (default 100ms); each
	// retry doubles it up to MaxBackoff (default 10s). The actual wait is
	// drawn uniformly from [nominal/2, nominal], so nodes that failed
	// together do not retry in lockstep (the rule of package sdk/retry).
	InitialBackoff, MaxBackoff time.Duration
	// MaxAttempts bounds the attempts (default 0: until ctx ends, which is
	// what a flush loop wants: the WAL keeps the data meanwhile, and the
	// caller's context carries its own deadline or shutdown).
	MaxAttempts int
	// OnRetry, if set, is called before each wait (logging, metrics).
	OnRetry func(key string, attempt int, err error, wait time.Duration)

	// sleep is a test seam: waiting.
	sleep func(ctx context.Context, d time.Duration) error
}

// Uploader commits segment objects to a store: conditional create, so an
// object is never overwritten, with retries and backoff on transient
// errors. It is safe for concurrent use.
type Uploader struct {
	store objstore.Store
	opts  UploaderOptions

	// spare is the memory of the last object built, reused by the next
	// Upload: a flush object is several MiB, and allocating (and zeroing)
	// it anew for every flush cost a quarter of the node's CPU under a
	// steady produce load. Nil while an Upload holds it.
	spareMu sync.Mutex
	spare   []byte
}

// maxSpare bounds the object memory an Uploader keeps between uploads: a
// node's largest flush object (64 MiB of batches by default, plus one
// entry and the index) fits.
const maxSpare = 96 << 20

// NewUploader returns an Uploader writing to store.
func NewUploader(store objstore.Store, opts UploaderOptions) *Uploader {
	defaults.Set(&opts.InitialBackoff, 100*time.Millisecond)
	defaults.Set(&opts.MaxBackoff, 10*time.Second)
	if opts.MaxBackoff < opts.InitialBackoff {
		opts.MaxBackoff = opts.InitialBackoff
	}
	if opts.sleep == nil {
		opts.sleep = retry.Sleep
	}
	return &Uploader{store: store, opts: opts}
}

// Upload describes a committed object: what the caller records in the
// registry.
type Upload struct {
	Key string
	// Size, DataLen and FooterLen locate the footer, so a reader can open
	// the object without a HEAD request (segment.Open needs Size).
	Size, DataLen, FooterLen int64
	// Streams are the per-stream entries, ascending by stream id.
	Streams []extent.Extent
	// Attempts is how many PUTs it took (1 = no retry).
	Attempts int
}

// UploadL0 builds one flush object of node from streams and commits it
// under a fresh L0Key(node, seq, nonce).
func (u *Uploader) UploadL0(ctx context.Context, node string, seq uint64, streams []StreamBatches) (Upload, error) {
	if err := validNode(node); err != nil {
		return Upload{}, err
	}
	return u.Upload(ctx, L0Key(node, seq, NewNonce()), streams)
}

// Upload builds an object from streams and commits it under key with a
// conditional create, retrying transient failures with exponential backoff
// and jitter until it succeeds, ctx ends, MaxAttempts is reached, or the
// error is permanent.
//
// If the key already exists, the object there is compared with ours: the
// same bytes mean an earlier attempt did commit and only its response was
// lost (or the client retried a PUT internally), so the upload succeeded;
// different bytes mean another writer owns the key, and the result is an
// error matching objstore.ErrExists — for an L1 key, the sign of a
// concurrent owner, which must not commit anything on top.
func (u *Uploader) Upload(ctx context.Context, key string, streams []StreamBatches) (Upload, error) {
	u.spareMu.Lock()
	dst := u.spare
	u.spare = nil
	u.spareMu.Unlock()
	data, info, err := buildInto(dst, streams, u.opts.Segment)
	if err != nil {
		return Upload{}, err
	}
	defer func() { // the store has the bytes (or gave up): the memory is free again
		if cap(data) <= maxSpare {
			u.spareMu.Lock()
			u.spare = data[:0]
			u.spareMu.Unlock()
		}
	}()
	up := Upload{Key: key, Size: info.Size, DataLen: info.DataLen, FooterLen: info.FooterLen, Streams: info.Streams}
	for attempt := 1; ; attempt++ {
		up.Attempts = attempt
		err := objstore.Put(ctx, u.store, key, data, objstore.CreateOptions{IfNotExists: true})
		if errors.Is(err, objstore.ErrExists) {
			same, cerr := sameContent(ctx, u.store, key, data)
			switch {
			case cerr != nil:
				err = fmt.Errorf("tiering: upload %q: key exists, comparing contents: %w", key, cerr)
			case same:
				return up, nil
			default:
				return Upload{}, fmt.Errorf("tiering: upload %q: another writer committed different content: %w", key, err)
			}
		}
		if err == nil {
			return up, nil
		}
		if objstore.IsPermanent(err) && !errors.Is(err, objstore.ErrExists) {
			return Upload{}, fmt.Errorf("tiering: upload %q (attempt %d): %w", key, attempt, err)
		}
		if u.opts.MaxAttempts > 0 && attempt >= u.opts.MaxAttempts {
			return Upload{}, fmt.Errorf("tiering: upload %q: giving up after %d attempts: %w", key, attempt, err)
		}
		wait := u.backoff(attempt)
		if u.opts.OnRetry != nil {
			u.opts.OnRetry(key, attempt, err, wait)
		}
		if serr := u.opts.sleep(ctx, wait); serr != nil {
			return Upload{}, fmt.Errorf("tiering: upload %q: %w (last error: %v)", key, serr, err)
		}
	}
}

// backoff returns the wait before retry number attempt (1-based).
func (u *Uploader) backoff(attempt int) time.Duration {
	return retry.Policy{Initial: u.opts.InitialBackoff, Max: u.opts.MaxBackoff}.Delay(attempt)
}

// sameContent reports whether the object key holds exactly data.
func sameContent(ctx context.Context, s objstore.Store, key string, data []byte) (bool, error) {
	a, err := s.Stat(ctx, key)
	if err != nil {
		return false, err
	}
	if a.Size != int64(len(data)) {
		return false, nil
	}
	buf := make([]byte, min(len(data), 4<<20))
	for off := 0; off < len(data); off += len(buf) {
		n := min(len(buf), len(data)-off)
		if _, err := s.ReadAt(ctx, key, buf[:n], int64(off)); err != nil {
			return false, err
		}
		if !bytes.Equal(buf[:n], data[off:off+n]) {
			return false, nil
		}
	}
	return true, nil
}
