// Package objstore is PicoMQ's port to object storage: one narrow interface,
// Store, with a local-filesystem implementation (file://); the
// S3-compatible one (s3://, on the AWS SDK for Go v2) is package s3, and
// package storeurl chooses between them by URL.
//
// The interface holds only what tiering needs, so that every implementation
// can honour exactly the same contract, checked by one acceptance suite
// (package objstoretest) that runs against each of them, MinIO included:
//
//   - ranged reads (ReadAt), safe to call in parallel, never partial unless
//     the object ends first;
//   - create-whose-Close-commits: bytes written to a Writer are invisible to
//     every other call until Close returns nil, and a crash or Abort before
//     that leaves nothing behind;
//   - conditional create (CreateOptions.IfNotExists): Close fails with
//     ErrExists if the key already exists, atomically, so two owners racing
//     to commit the same object can never both succeed (S3 "If-None-Match: *",
//     a hard link on the filesystem);
//   - list by prefix in lexical key order, idempotent delete, stat.
//
// # Keys
//
// A key is a slash-separated path of 1 to 1024 bytes of valid UTF-8 without
// control characters or backslashes, whose components are non-empty and do
// not begin with '.' (so "." and ".." can never escape a directory, and the
// file store can keep its temporary files in a dot directory no key can
// name). The same rule applies to every implementation so that a key valid
// on one is valid on all; anything else fails with ErrInvalidKey.
//
// # Implementations
//
// The file store is in this package; the S3 adapter is in package s3 below
// it, so that the packages that only use a Store do not link the AWS SDK.
// Package storeurl opens either from a URL (file:///path, s3://bucket?…).
//
// # Errors
//
// Implementations wrap the package's sentinels so callers classify with
// errors.Is: ErrNotExist, ErrExists, ErrInvalidKey, ErrPermission. Anything
// else (network, 5xx, throttling) is presumed transient; IsPermanent tells
// a retry loop when to stop.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"time"
)

// pendingObject is what every store's Writer keeps until Close commits the
// object or Abort drops it: where it goes, and whether it is finished.
type pendingObject struct {
	ctx  context.Context
	key  string
	opts CreateOptions
	done bool
}

// finish marks the object finished; false when it already was.
func (p *pendingObject) finish() bool {
	if p.done {
		return false
	}
	p.done = true
	return true
}

// write passes b on to dst unless the object is finished.
func (p *pendingObject) write(dst io.Writer, b []byte) (int, error) {
	if p.done {
		return 0, ErrClosed
	}
	return dst.Write(b)
}

// yieldSorted sorts a listing by key, as List promises, and yields it.
func yieldSorted(list []Attributes, yield func(Attributes, error) bool) {
	slices.SortFunc(list, func(a, b Attributes) int { return strings.Compare(a.Key, b.Key) })
	for _, a := range list {
		if !yield(a, nil) {
			return
		}
	}
}

// checkCall is how every store's calls that start work on one key begin:
// a key the rules allow and a context still live.
func checkCall(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return ctx.Err()
}

// ValidateRange is how every store's ReadAt and ReadRange begin (the S3
// adapter's included, which lives in its own package): a key the rules
// allow and a range that does not start or end before byte 0.
func ValidateRange(key string, off, length int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if off < 0 || length < 0 {
		return fmt.Errorf("objstore: read %q: negative offset (%d) or length (%d)", key, off, length)
	}
	return nil
}

// Put commits data under key with one Create, Write and Close; a failed
// write aborts the object, so nothing partial is ever visible.
func Put(ctx context.Context, s Store, key string, data []byte, opts CreateOptions) error {
	w, err := s.Create(ctx, key, opts)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		_ = w.Abort()
		return err
	}
	return w.Close()
}

// Store is an object store. All methods are safe for concurrent use.
//
// Objects are immutable once committed, except that a plain Create may
// replace an object as a whole; readers see either the old or the new
// object, never a mix (tiering never replaces objects: names are unique).
type Store interface {
	// ReadAt reads len(p) bytes of the object key starting at byte off. It
	// has io.ReaderAt's contract: n < len(p) only with a non-nil error, and
	// io.EOF (with the bytes that exist) when the object ends first, which
	// includes off >= size. A missing object is ErrNotExist. len(p) == 0
	// returns 0, nil without I/O. Calls may run in parallel on one key.
	ReadAt(ctx context.Context, key string, p []byte, off int64) (n int, err error)

	// Create starts writing the object key. Nothing is visible until the
	// Writer's Close returns nil; Close is the commit point, and with
	// opts.IfNotExists it fails with ErrExists if the key exists by then.
	// ctx bounds the writer's whole life, commit included.
	Create(ctx context.Context, key string, opts CreateOptions) (Writer, error)

	// Stat returns the object's attributes, or ErrNotExist.
	Stat(ctx context.Context, key string) (Attributes, error)

	// List yields the objects whose keys start with prefix (a plain string
	// prefix, not necessarily ending in '/'), in ascending byte order of key.
	// An error ends the sequence. Objects created or deleted during a listing
	// may or may not appear.
	List(ctx context.Context, prefix string) iter.Seq2[Attributes, error]

	// Delete removes the object key. Deleting a missing object succeeds, so a
	// delete that is retried after a crash or a lost response is harmless.
	Delete(ctx context.Context, key string) error

	// Close releases the store's resources. Writers and in-flight calls must
	// have finished first.
	Close() error
}

// Writer receives the bytes of one object. Close commits them; Abort
// discards them. It is not safe for concurrent use.
type Writer interface {
	io.Writer
	// Close commits the object. After an error nothing was committed
	// (except on an ambiguous network failure of a remote store, where the
	// object may or may not exist; an IfNotExists retry then meets
	// ErrExists, which callers resolve by comparing contents).
	Close() error
	// Abort discards everything written. It is a no-op after Close.
	Abort() error
}

// RangeStreamer is an optional Store capability: a byte range as a stream,
// for readers that spread one large ranged GET over buffers they own (the
// block cache splits read-ahead runs into blocks without copying). Both
// implementations here provide it; callers fall back to ReadAt without it.
type RangeStreamer interface {
	// ReadRange streams up to length bytes of key from off; fewer (down to
	// none) if the object ends first. A missing object is ErrNotExist. A
	// stream cut short of what the store promised fails with
	// io.ErrUnexpectedEOF, never a silent early EOF. The caller closes it.
	ReadRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)
}

// CreateOptions modify Create.
type CreateOptions struct {
	// IfNotExists makes the commit fail with ErrExists when an object of the
	// same key exists, atomically with respect to other commits.
	IfNotExists bool
}

// Attributes describe a committed object.
type Attributes struct {
	Key          string
	Size         int64
	LastModified time.Time
}

var (
	// ErrNotExist: the object (or the bucket) does not exist.
	ErrNotExist = errors.New("objstore: object does not exist")
	// ErrExists: a conditional create found the key already committed.
	ErrExists = errors.New("objstore: object already exists")
	// ErrInvalidKey: the key breaks the rules in the package documentation.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrPermission: the store refused the credentials or the operation.
	ErrPermission = errors.New("objstore: permission denied")
	// ErrClosed: the Writer was already closed or aborted.
	ErrClosed = errors.New("objstore: writer closed")
	// ErrUnavailable: Open parsed the settings but the store did not
	// answer its start-up check (unreachable, denied, no such bucket yet):
	// a condition that may pass, unlike a malformed URL.
	ErrUnavailable = errors.New("objstore: store unavailable")
)

// IsNotExist reports whether err means that the object does not exist.
func IsNotExist(err error) bool { return errors.Is(err, ErrNotExist) }

// IsPermanent reports whether retrying the same call cannot help: a typed
// outcome (missing, exists, bad key, no permission, closed writer) or a
// cancelled or expired context. Everything else — connection errors,
// timeouts, 5xx, throttling — is worth a retry with backoff.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrNotExist) || errors.Is(err, ErrExists) ||
		errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrPermission) ||
		errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded)
}
