// Package objstoretest is the acceptance suite every objstore.Store
// implementation must pass, and the helper that connects tests to the S3
// (MinIO) store named by the environment.
//
// The suite is the executable form of the contract in package objstore's
// documentation: an implementation is correct when Run passes against it,
// and every implementation runs the same Run — the file store always, MinIO
// whenever PICOMQ_S3_ENDPOINT is set (and always under CI, see S3FromEnv).
package objstoretest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
)

// NewStore returns an empty store for one subtest; its cleanup is the
// factory's business (t.Cleanup).
type NewStore func(t *testing.T) objstore.Store

// Run runs the acceptance suite. Each subtest gets a fresh store from
// newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(*testing.T, objstore.Store)
	}{
		{"NotExist", testNotExist},
		{"InvalidKeys", testInvalidKeys},
		{"CloseCommits", testCloseCommits},
		{"Abort", testAbort},
		{"Overwrite", testOverwrite},
		{"IfNotExists", testIfNotExists},
		{"IfNotExistsRace", testIfNotExistsRace},
		{"ReadAtRanges", testReadAtRanges},
		{"ReadAtParallel", testReadAtParallel},
		{"EmptyObject", testEmptyObject},
		{"List", testList},
		{"ListBreak", testListBreak},
		{"Delete", testDelete},
		{"OddKeys", testOddKeys},
		{"CancelledContext", testCancelledContext},
		{"ReadRange", testReadRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

func mustPut(t *testing.T, s objstore.Store, key string, data []byte) {
	t.Helper()
	if err := objstore.Put(t.Context(), s, key, data, objstore.CreateOptions{}); err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
}

func mustRead(t *testing.T, s objstore.Store, key string) []byte {
	t.Helper()
	a, err := s.Stat(t.Context(), key)
	if err != nil {
		t.Fatalf("stat %q: %v", key, err)
	}
	buf := make([]byte, a.Size)
	if n, err := s.ReadAt(t.Context(), key, buf, 0); err != nil || n != len(buf) {
		t.Fatalf("read %q: n=%d err=%v (size %d)", key, n, err, a.Size)
	}
	return buf
}

func keys(t *testing.T, s objstore.Store, prefix string) []string {
	t.Helper()
	var out []string
	for a, err := range s.List(t.Context(), prefix) {
		if err != nil {
			t.Fatalf("list %q: %v", prefix, err)
		}
		out = append(out, a.Key)
	}
	return out
}

func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func testNotExist(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	if _, err := s.Stat(ctx, "missing/obj"); !objstore.IsNotExist(err) {
		t.Errorf("Stat missing: %v, want ErrNotExist", err)
	}
	if _, err := s.ReadAt(ctx, "missing/obj", make([]byte, 4), 0); !objstore.IsNotExist(err) {
		t.Errorf("ReadAt missing: %v, want ErrNotExist", err)
	}
	if err := s.Delete(ctx, "missing/obj"); err != nil {
		t.Errorf("Delete missing: %v, want nil (idempotent)", err)
	}
	if got := keys(t, s, "missing/"); len(got) != 0 {
		t.Errorf("List of nothing: %v", got)
	}
	// A "directory" of other objects is not an object.
	mustPut(t, s, "dir/obj", []byte("x"))
	if _, err := s.Stat(ctx, "dir"); !objstore.IsNotExist(err) {
		t.Errorf("Stat of a key prefix: %v, want ErrNotExist", err)
	}
	if _, err := s.ReadAt(ctx, "dir", make([]byte, 1), 0); !objstore.IsNotExist(err) {
		t.Errorf("ReadAt of a key prefix: %v, want ErrNotExist", err)
	}
}

func testInvalidKeys(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	for _, key := range []string{"", "/abs", "a//b", "a/", "a/../b", "..", ".hidden", "a/.tmp/x", "a\x00b", "a\nb", "a\\b", string(bytes.Repeat([]byte("k"), objstore.MaxKeyLen+1)), "bad\xffutf8"} {
		if _, err := s.Stat(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Stat(%q): %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.ReadAt(ctx, key, make([]byte, 1), 0); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("ReadAt(%q): %v, want ErrInvalidKey", key, err)
		}
		if _, err := s.Create(ctx, key, objstore.CreateOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Create(%q): %v, want ErrInvalidKey", key, err)
		}
		if err := s.Delete(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Delete(%q): %v, want ErrInvalidKey", key, err)
		}
		if objstore.IsNotExist(objstore.ValidateKey(key)) {
			t.Errorf("an invalid key must not look like a missing object")
		}
	}
	for a, err := range s.List(ctx, "a//") {
		if !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("List(\"a//\"): %v %v, want ErrInvalidKey", a, err)
		}
	}
}

func testCloseCommits(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	data := payload(300_001, 1)
	w, err := s.Create(ctx, "seg/a", objstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for chunk := range slices.Chunk(data, 65536) {
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing is visible before Close: not to Stat, ReadAt or List.
	if _, err := s.Stat(ctx, "seg/a"); !objstore.IsNotExist(err) {
		t.Errorf("Stat before Close: %v, want ErrNotExist", err)
	}
	if _, err := s.ReadAt(ctx, "seg/a", make([]byte, 1), 0); !objstore.IsNotExist(err) {
		t.Errorf("ReadAt before Close: %v, want ErrNotExist", err)
	}
	if got := keys(t, s, ""); len(got) != 0 {
		t.Errorf("List before Close: %v", got)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := w.Close(); !errors.Is(err, objstore.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Errorf("Write after Close succeeded")
	}
	if err := w.Abort(); err != nil {
		t.Errorf("Abort after Close: %v, want nil (no-op)", err)
	}
	a, err := s.Stat(ctx, "seg/a")
	if err != nil || a.Size != int64(len(data)) || a.Key != "seg/a" {
		t.Fatalf("Stat: %+v %v", a, err)
	}
	if a.LastModified.IsZero() {
		t.Errorf("Stat: zero LastModified")
	}
	if got := mustRead(t, s, "seg/a"); !bytes.Equal(got, data) {
		t.Errorf("content differs")
	}
}

func testAbort(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	w, err := s.Create(ctx, "x/aborted", objstore.CreateOptions{IfNotExists: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("doomed")); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if err := w.Close(); err == nil {
		t.Errorf("Close after Abort committed")
	}
	if _, err := s.Stat(ctx, "x/aborted"); !objstore.IsNotExist(err) {
		t.Errorf("aborted object exists: %v", err)
	}
	if got := keys(t, s, ""); len(got) != 0 {
		t.Errorf("List after Abort: %v", got)
	}
	// The key is still free for a conditional create.
	if err := objstore.Put(ctx, s, "x/aborted", []byte("ok"), objstore.CreateOptions{IfNotExists: true}); err != nil {
		t.Errorf("create after Abort: %v", err)
	}
}

func testOverwrite(t *testing.T, s objstore.Store) {
	mustPut(t, s, "o", []byte("first version, long"))
	mustPut(t, s, "o", []byte("second"))
	if got := mustRead(t, s, "o"); string(got) != "second" {
		t.Errorf("after overwrite: %q", got)
	}
}

func testIfNotExists(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	opts := objstore.CreateOptions{IfNotExists: true}
	if err := objstore.Put(ctx, s, "l1/7/000", []byte("owner one"), opts); err != nil {
		t.Fatalf("first conditional create: %v", err)
	}
	err := objstore.Put(ctx, s, "l1/7/000", []byte("owner two"), opts)
	if !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second conditional create: %v, want ErrExists", err)
	}
	if !objstore.IsPermanent(err) || objstore.IsNotExist(err) {
		t.Errorf("ErrExists must be permanent and not ErrNotExist")
	}
	if got := mustRead(t, s, "l1/7/000"); string(got) != "owner one" {
		t.Errorf("loser overwrote the winner: %q", got)
	}
	if got := keys(t, s, ""); !slices.Equal(got, []string{"l1/7/000"}) {
		t.Errorf("List after conflict: %v (a loser must leave nothing behind)", got)
	}
}

func testIfNotExistsRace(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	// All writers are created and filled before any commits, so the commits
	// really race.
	ws := make([]objstore.Writer, n)
	for i := range ws {
		w, err := s.Create(ctx, "race/seg", objstore.CreateOptions{IfNotExists: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(payload(10_000, byte(i))); err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	for i, w := range ws {
		wg.Go(func() { errs[i] = w.Close() })
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("writers %d and %d both committed", winner, i)
			}
			winner = i
		case !errors.Is(err, objstore.ErrExists):
			t.Errorf("writer %d: %v, want nil or ErrExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("nobody committed: %v", errs)
	}
	if got := mustRead(t, s, "race/seg"); !bytes.Equal(got, payload(10_000, byte(winner))) {
		t.Errorf("stored content is not the winner's")
	}
}

func testReadAtRanges(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	data := payload(1<<20+13, 3)
	mustPut(t, s, "r/obj", data)
	size := int64(len(data))
	cases := []struct {
		off, n  int64
		wantN   int64
		wantEOF bool
	}{
		{0, size, size, false},
		{0, 1, 1, false},
		{12345, 4096, 4096, false},
		{size - 10, 10, 10, false},
		{size - 10, 20, 10, true},
		{size, 1, 0, true},
		{size + 100, 5, 0, true},
		{7, 0, 0, false},
	}
	for _, c := range cases {
		p := make([]byte, c.n)
		n, err := s.ReadAt(ctx, "r/obj", p, c.off)
		if int64(n) != c.wantN || (err == io.EOF) != c.wantEOF || (err != nil && err != io.EOF) {
			t.Errorf("ReadAt(off=%d, len=%d) = %d, %v; want %d, EOF=%v", c.off, c.n, n, err, c.wantN, c.wantEOF)
			continue
		}
		if n > 0 && !bytes.Equal(p[:n], data[c.off:c.off+int64(n)]) {
			t.Errorf("ReadAt(off=%d, len=%d): wrong bytes", c.off, c.n)
		}
	}
	if _, err := s.ReadAt(ctx, "r/obj", make([]byte, 1), -1); err == nil {
		t.Errorf("negative offset accepted")
	}
}

func testReadAtParallel(t *testing.T, s objstore.Store) {
	data := payload(512<<10, 9)
	mustPut(t, s, "p/obj", data)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 8 {
				off := int64((g*8+i)*4099) % int64(len(data)-8192)
				p := make([]byte, 8192)
				if n, err := s.ReadAt(t.Context(), "p/obj", p, off); err != nil || n != len(p) || !bytes.Equal(p, data[off:off+8192]) {
					t.Errorf("parallel ReadAt at %d: n=%d err=%v", off, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func testEmptyObject(t *testing.T, s objstore.Store) {
	mustPut(t, s, "e/empty", nil)
	a, err := s.Stat(t.Context(), "e/empty")
	if err != nil || a.Size != 0 {
		t.Fatalf("Stat empty: %+v %v", a, err)
	}
	if n, err := s.ReadAt(t.Context(), "e/empty", make([]byte, 4), 0); n != 0 || err != io.EOF {
		t.Errorf("ReadAt empty: %d %v, want 0 EOF", n, err)
	}
}

func testList(t *testing.T, s objstore.Store) {
	all := []string{
		"l0/node-a/00000000000000000002-ff",
		"l0/node-a/00000000000000000010-aa",
		"l0/node-b/00000000000000000001-bb",
		"l0/node-a-x/00000000000000000001-cc", // '-' sorts before '/' as a key
		"streams/00000000000000000042/00000000000000000000",
		"streams/00000000000000000042/00000000000000001000",
		"top",
	}
	sizes := map[string]int{}
	for i, k := range all {
		sizes[k] = 10 + i
		mustPut(t, s, k, payload(10+i, 0))
	}
	sorted := slices.Clone(all)
	slices.Sort(sorted)
	if got := keys(t, s, ""); !slices.Equal(got, sorted) {
		t.Errorf("List(\"\") = %v\nwant %v", got, sorted)
	}
	for prefix, want := range map[string][]string{
		"l0/":                           {"l0/node-a-x/00000000000000000001-cc", "l0/node-a/00000000000000000002-ff", "l0/node-a/00000000000000000010-aa", "l0/node-b/00000000000000000001-bb"},
		"l0/node-a/":                    {"l0/node-a/00000000000000000002-ff", "l0/node-a/00000000000000000010-aa"},
		"l0/node-a/0000000000000000001": {"l0/node-a/00000000000000000010-aa"},
		"l0/node-a":                     {"l0/node-a-x/00000000000000000001-cc", "l0/node-a/00000000000000000002-ff", "l0/node-a/00000000000000000010-aa"},
		"streams/00000000000000000042/": {"streams/00000000000000000042/00000000000000000000", "streams/00000000000000000042/00000000000000001000"},
		"to":                            {"top"},
		"nothing/":                      nil,
		"l0/node-c/":                    nil,
	} {
		if got := keys(t, s, prefix); !slices.Equal(got, want) {
			t.Errorf("List(%q) = %v, want %v", prefix, got, want)
		}
	}
	for a, err := range s.List(t.Context(), "") {
		if err != nil {
			t.Fatal(err)
		}
		if a.Size != int64(sizes[a.Key]) {
			t.Errorf("List size of %q = %d, want %d", a.Key, a.Size, sizes[a.Key])
		}
	}
}

func testListBreak(t *testing.T, s objstore.Store) {
	for i := range 5 {
		mustPut(t, s, fmt.Sprintf("b/%d", i), []byte("x"))
	}
	n := 0
	for _, err := range s.List(t.Context(), "b/") {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if n == 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("break after 2 yielded %d", n)
	}
}

func testDelete(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	mustPut(t, s, "d/x/1", []byte("a"))
	mustPut(t, s, "d/x/2", []byte("b"))
	if err := s.Delete(ctx, "d/x/1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "d/x/1"); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := s.Stat(ctx, "d/x/1"); !objstore.IsNotExist(err) {
		t.Errorf("deleted object: %v", err)
	}
	if got := keys(t, s, "d/"); !slices.Equal(got, []string{"d/x/2"}) {
		t.Errorf("List after delete: %v", got)
	}
	if err := s.Delete(ctx, "d/x/2"); err != nil {
		t.Fatal(err)
	}
	// A deleted key can be created again, conditionally too.
	if err := objstore.Put(ctx, s, "d/x/1", []byte("again"), objstore.CreateOptions{IfNotExists: true}); err != nil {
		t.Errorf("re-create after delete: %v", err)
	}
}

func testOddKeys(t *testing.T, s objstore.Store) {
	for _, k := range []string{"sp ace/a+b=c&d", "ünï/cødé", "x/y~z(1)", "q?s#h%20"} {
		mustPut(t, s, k, []byte(k))
		if got := mustRead(t, s, k); string(got) != k {
			t.Errorf("%q: read %q", k, got)
		}
		if got := keys(t, s, k); !slices.Equal(got, []string{k}) {
			t.Errorf("List(%q) = %v", k, got)
		}
	}
}

func testCancelledContext(t *testing.T, s objstore.Store) {
	mustPut(t, s, "c/obj", []byte("data"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.ReadAt(ctx, "c/obj", make([]byte, 4), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadAt with cancelled ctx: %v", err)
	}
	if err := objstore.Put(ctx, s, "c/new", []byte("x"), objstore.CreateOptions{}); err == nil {
		t.Errorf("Put with cancelled ctx committed")
	}
	if _, err := s.Stat(t.Context(), "c/new"); !objstore.IsNotExist(err) {
		t.Errorf("object from cancelled Put: %v", err)
	}
}

func testReadRange(t *testing.T, s objstore.Store) {
	rs, ok := s.(objstore.RangeStreamer)
	if !ok {
		t.Skip("store does not implement RangeStreamer")
	}
	ctx := t.Context()
	data := payload(300_000, 5)
	mustPut(t, s, "rr/obj", data)
	size := int64(len(data))
	for _, c := range []struct{ off, n, want int64 }{
		{0, size, size}, {100, 1000, 1000}, {size - 10, 100, 10}, {size, 10, 0}, {size + 5, 10, 0}, {7, 0, 0},
	} {
		rc, err := rs.ReadRange(ctx, "rr/obj", c.off, c.n)
		if err != nil {
			t.Fatalf("ReadRange(%d, %d): %v", c.off, c.n, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || int64(len(got)) != c.want || (c.want > 0 && !bytes.Equal(got, data[c.off:c.off+c.want])) {
			t.Errorf("ReadRange(%d, %d): %d bytes, %v; want %d", c.off, c.n, len(got), err, c.want)
		}
	}
	if _, err := rs.ReadRange(ctx, "rr/missing", 0, 10); !objstore.IsNotExist(err) {
		t.Errorf("ReadRange missing: %v", err)
	}
}

// S3Env holds the MinIO (or S3) settings tests read from the environment.
type S3Env struct {
	Endpoint, AccessKey, SecretKey, Bucket string
}

// LookupS3Env reads PICOMQ_S3_ENDPOINT, PICOMQ_S3_ACCESS_KEY,
// PICOMQ_S3_SECRET_KEY and PICOMQ_S3_BUCKET (default "picomq-test"). If the
// endpoint is unset the test is skipped — unless CI is set, where a missing
// MinIO is a broken CI setup and the test fails, so that S3 coverage can
// never silently disappear.
func LookupS3Env(t testing.TB) S3Env {
	t.Helper()
	e := S3Env{
		Endpoint:  os.Getenv("PICOMQ_S3_ENDPOINT"),
		AccessKey: os.Getenv("PICOMQ_S3_ACCESS_KEY"),
		SecretKey: os.Getenv("PICOMQ_S3_SECRET_KEY"),
		Bucket:    os.Getenv("PICOMQ_S3_BUCKET"),
	}
	if e.Endpoint == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but PICOMQ_S3_ENDPOINT is not: .ci/run must start MinIO (deploy/local-minio.sh)")
		}
		t.Skip("PICOMQ_S3_ENDPOINT not set; start MinIO with `make minio` (deploy/local-minio.sh)")
	}
	if e.Bucket == "" {
		e.Bucket = "picomq-test"
	}
	return e
}

// URL returns the s3:// URL of prefix in the environment's bucket.
func (e S3Env) URL(prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=us-east-1", e.Bucket, prefix, e.Endpoint)
}

// S3FromEnv returns a NewStore that opens the environment's bucket under a
// fresh random prefix per call (so runs and subtests never see each
// other's objects), through storeurl.Open and the AWS credential chain
// (the PICOMQ_S3_* keys are exported as AWS_* for the test), exactly as a
// node would. Each store's objects are deleted at cleanup.
func S3FromEnv(t *testing.T) NewStore {
	e := LookupS3Env(t)
	t.Setenv("AWS_ACCESS_KEY_ID", e.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", e.SecretKey)
	return func(t *testing.T) objstore.Store {
		s, err := storeurl.Open(t.Context(), e.URL("test-"+RandomHex(8)))
		if err != nil {
			t.Fatalf("open MinIO at %s: %v", e.Endpoint, err)
		}
		t.Cleanup(func() {
			ctx := context.Background()
			for a, err := range s.List(ctx, "") {
				if err != nil {
					break
				}
				_ = s.Delete(ctx, a.Key)
			}
			_ = s.Close()
		})
		return s
	}
}

// FileStore is a NewStore: a file store in a fresh temporary directory.
func FileStore(t *testing.T) objstore.Store {
	s, err := objstore.NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
