package objstore_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
)

func TestFileStore(t *testing.T) {
	objstoretest.Run(t, objstoretest.FileStore)
}

// TestFileStoreCrashLeftovers: temporary files of an interrupted write are
// never listed, and a fresh store removes old ones.
func TestFileStoreCrashLeftovers(t *testing.T) {
	dir := t.TempDir()
	s, err := objstore.NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Create(t.Context(), "a/b", objstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	// "Crash": the writer is never closed or aborted.
	for a, err := range s.List(t.Context(), "") {
		t.Errorf("listed %v %v", a, err)
	}
	tmps, _ := os.ReadDir(filepath.Join(dir, ".tmp"))
	if len(tmps) != 1 {
		t.Fatalf("want 1 temp file, got %d", len(tmps))
	}
	old := filepath.Join(dir, ".tmp", tmps[0].Name())
	if err := os.Chtimes(old, timeLongAgo, timeLongAgo); err != nil {
		t.Fatal(err)
	}
	if _, err := objstore.NewFileStore(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("stale temp file survived reopen: %v", err)
	}
}

// TestFileStoreDeletePrunesDirs: deleting the last object of a stream
// leaves no empty directories behind.
func TestFileStoreDeletePrunesDirs(t *testing.T) {
	dir := t.TempDir()
	s, _ := objstore.NewFileStore(dir)
	if err := objstore.Put(t.Context(), s, "streams/1/0", []byte("x"), objstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), "streams/1/0"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "streams")); !os.IsNotExist(err) {
		t.Errorf("empty directories left: %v", err)
	}
}
