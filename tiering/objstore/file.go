package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// tmpDirName is the directory under the root holding objects being
// written. Keys cannot start with '.', so no key can collide with it.
const tmpDirName = ".tmp"

// staleTempAge is how old a temporary file must be before NewFileStore
// removes it as the leftover of a crash. It is generous because another
// process may share the root (tests do) and be writing right now.
const staleTempAge = time.Hour

// FileStore keeps each object as a file under a root directory, the key's
// slashes becoming subdirectories. It is the zero-config default and the
// store of single-node tests, so it has S3's atomicity: a commit writes a
// temporary file, fsyncs it, moves it into place with rename (plain create)
// or link (conditional create: link fails if the name exists, which is the
// atomic test-and-set), then fsyncs the directory so the name survives a
// crash. Directories it creates are fsynced into their parents too.
//
// Unlike S3, a key cannot be both an object and a "directory" of others
// ("a" and "a/b"); tiering's names never need that.
type FileStore struct {
	root string
	tmp  string
}

var (
	_ Store         = (*FileStore)(nil)
	_ RangeStreamer = (*FileStore)(nil)
)

// NewFileStore opens (creating if needed) a file store rooted at dir.
func NewFileStore(dir string) (*FileStore, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("objstore: file store %q: %w", dir, err)
	}
	s := &FileStore{root: root, tmp: filepath.Join(root, tmpDirName)}
	if err := s.mkdirs(s.tmp); err != nil {
		return nil, fmt.Errorf("objstore: file store %q: %w", dir, err)
	}
	s.removeStaleTemps()
	return s, nil
}

// Root returns the store's directory.
func (s *FileStore) Root() string { return s.root }

func (s *FileStore) removeStaleTemps() {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTempAge {
			_ = os.Remove(filepath.Join(s.tmp, e.Name()))
		}
	}
}

func (s *FileStore) path(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key))
}

// ReadAt is part of the Store interface.
func (s *FileStore) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if err := ValidateRange(key, off, int64(len(p))); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return 0, s.mapErr("read", key, err)
	}
	defer f.Close()
	n, err := f.ReadAt(p, off)
	if err != nil && !errors.Is(err, io.EOF) {
		// Reading a directory fails here, not at open: S3 would say the
		// object does not exist.
		return n, s.mapErr("read", key, err)
	}
	return n, err
}

// ReadRange is part of the RangeStreamer interface.
func (s *FileStore) ReadRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := ValidateRange(key, off, length); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return nil, s.mapErr("read", key, err)
	}
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("objstore: read %q: %w", key, ErrNotExist)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, length), f}, nil
}

// Stat is part of the Store interface.
func (s *FileStore) Stat(ctx context.Context, key string) (Attributes, error) {
	if err := checkCall(ctx, key); err != nil {
		return Attributes{}, err
	}
	info, err := os.Stat(s.path(key))
	if err != nil {
		return Attributes{}, s.mapErr("stat", key, err)
	}
	if !info.Mode().IsRegular() {
		return Attributes{}, fmt.Errorf("objstore: stat %q: %w", key, ErrNotExist)
	}
	return Attributes{Key: key, Size: info.Size(), LastModified: info.ModTime()}, nil
}

// List is part of the Store interface.
func (s *FileStore) List(ctx context.Context, prefix string) iter.Seq2[Attributes, error] {
	return func(yield func(Attributes, error) bool) {
		if err := ValidatePrefix(prefix); err != nil {
			yield(Attributes{}, err)
			return
		}
		// Walk only the deepest directory the prefix pins down.
		base := s.root
		if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
			base = s.path(prefix[:i])
		}
		var out []Attributes
		err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // a directory removed by a concurrent Delete
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if strings.HasPrefix(d.Name(), ".") && p != base {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(s.root, p)
			if err != nil {
				return err
			}
			key := filepath.ToSlash(rel)
			if !strings.HasPrefix(key, prefix) {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			out = append(out, Attributes{Key: key, Size: info.Size(), LastModified: info.ModTime()})
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			yield(Attributes{}, fmt.Errorf("objstore: list %q: %w", prefix, err))
			return
		}
		// Directory order differs from key order ("a-b" < "a/b" as keys, but
		// the walk visits directory "a" first), so sort by key.
		yieldSorted(out, yield)
	}
}

// Delete is part of the Store interface. It also removes directories the
// delete left empty, so deleted streams leave no inodes behind.
func (s *FileStore) Delete(ctx context.Context, key string) error {
	if err := checkCall(ctx, key); err != nil {
		return err
	}
	p := s.path(key)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return s.mapErr("delete", key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("objstore: delete %q: %w", key, err)
	}
	for dir := filepath.Dir(p); dir != s.root && strings.HasPrefix(dir, s.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty, or already gone
		}
	}
	return nil
}

// Create is part of the Store interface.
func (s *FileStore) Create(ctx context.Context, key string, opts CreateOptions) (Writer, error) {
	if err := checkCall(ctx, key); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(s.tmp, "obj-*")
	if err != nil {
		return nil, fmt.Errorf("objstore: create %q: %w", key, err)
	}
	return &fileWriter{pendingObject: pendingObject{ctx: ctx, key: key, opts: opts}, s: s, f: f}, nil
}

// Close is part of the Store interface.
func (s *FileStore) Close() error { return nil }

func (s *FileStore) mapErr(op, key string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("objstore: %s %q: %w", op, key, ErrNotExist)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("objstore: %s %q: %w: %v", op, key, ErrPermission, err)
	}
	return fmt.Errorf("objstore: %s %q: %w", op, key, err)
}

// mkdirs creates dir and any missing parents, fsyncing each parent after
// creating a child in it, so the new path survives a crash.
func (s *FileStore) mkdirs(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := s.mkdirs(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // a concurrent writer made it
		}
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

type fileWriter struct {
	pendingObject
	s *FileStore
	f *os.File
}

func (w *fileWriter) Write(p []byte) (int, error) { return w.write(w.f, p) }

func (w *fileWriter) Abort() error {
	if !w.finish() {
		return nil
	}
	name := w.f.Name()
	_ = w.f.Close()
	return os.Remove(name)
}

func (w *fileWriter) Close() error {
	if !w.finish() {
		return ErrClosed
	}
	tmp := w.f.Name()
	defer os.Remove(tmp) // after a link, or after any failure
	if err := w.ctx.Err(); err != nil {
		w.f.Close()
		return err
	}
	if err := w.f.Sync(); err != nil {
		w.f.Close()
		return fmt.Errorf("objstore: commit %q: %w", w.key, err)
	}
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("objstore: commit %q: %w", w.key, err)
	}
	final := w.s.path(w.key)
	dir := filepath.Dir(final)
	// A concurrent Delete may remove the (empty) directory between mkdirs
	// and the link or rename; then ENOENT says "make it again".
	var err error
	for range 5 {
		if err = w.s.mkdirs(dir); err != nil {
			return w.s.mapErr("commit", w.key, err)
		}
		if w.opts.IfNotExists {
			err = os.Link(tmp, final)
		} else {
			err = os.Rename(tmp, final)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("objstore: commit %q: %w", w.key, ErrExists)
		}
		return w.s.mapErr("commit", w.key, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("objstore: commit %q: sync directory: %w", w.key, err)
	}
	return nil
}
