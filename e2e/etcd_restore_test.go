package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdutlBinary finds etcdutl (the etcd release's offline tool, which
// `snapshot restore` needs): PICOMQ_ETCDUTL_BIN, PATH, or the tool cache
// that deploy/etcd-tools.sh fills. Missing fails the test.
func etcdutlBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("PICOMQ_ETCDUTL_BIN"); b != "" {
		return b
	}
	if p, err := exec.LookPath("etcdutl"); err == nil {
		return p
	}
	out, err := exec.Command("bash", filepath.Join("..", "deploy", "etcd-tools.sh"), "bin").Output()
	if b := strings.TrimSpace(string(out)); err == nil && b != "" {
		if _, err := os.Stat(b); err == nil {
			return b
		}
	}
	t.Fatal("etcdutl not found: run deploy/etcd-tools.sh build (or set PICOMQ_ETCDUTL_BIN); .ci/run builds it")
	return ""
}

// TestEtcdRestoreDrill is the restore procedure of docs/operations.md
// ("Restore etcd") on a real etcd daemon and MinIO: streams are created and
// flushed, etcd is snapshotted, more streams are created and appended to,
// then etcd is restored from the snapshot with etcdutl and the counters
// are raised with `picomq restore-counters`. After that no stream ID is
// handed out twice (the restored counter alone would reuse the IDs of the
// streams created after the snapshot, whose objects are still in the
// bucket) and every stream created before the snapshot reads back from
// object storage.
func TestEtcdRestoreDrill(t *testing.T) {
	etcdutl := etcdutlBinary(t)
	m := startMinio(t)
	e := startEtcd(t)
	dataDir := t.TempDir()
	n := startNodeEnv(t, dataDir, m.Env(), "--etcd-endpoints", e.Endpoint(), "--object-store", m.ObjectStoreURL(),
		"--seal-max-age", "200ms")

	create := func(name string, records int) uint64 {
		t.Helper()
		r := do(t, "PUT", n.URL+name, nil, "Content-Type", "text/plain")
		wantStatus(t, r, 201, "create "+name)
		id, err := strconv.ParseUint(r.Header.Get("Pico-Stream-Id"), 10, 64)
		if err != nil || id == 0 {
			t.Fatalf("create %s: Pico-Stream-Id %q", name, r.Header.Get("Pico-Stream-Id"))
		}
		for i := range records {
			r := do(t, "POST", n.URL+name, []byte(fmt.Sprintf("%s #%d", name, i)), "Content-Type", "text/plain")
			if r.Status != 200 && r.Status != 204 {
				t.Fatalf("append to %s: %d %s", name, r.Status, r.Body)
			}
		}
		return id
	}

	// Before the snapshot: streams whose data a clean stop flushes.
	preIDs := map[string]uint64{}
	for i := range 4 {
		name := fmt.Sprintf("/drill/pre-%d", i)
		preIDs[name] = create(name, 3)
	}
	n.stop(t)

	snap := filepath.Join(t.TempDir(), "etcd.snapshot")
	saveSnapshot(t, e.ClientURL(), snap)

	// After the snapshot: more creates and appends, flushed as well.
	n.restart()
	var laterMax uint64
	for i := range 4 {
		laterMax = max(laterMax, create(fmt.Sprintf("/drill/post-%d", i), 2))
	}
	n.stop(t)

	// Restore: a new data dir from the snapshot, the same member.
	e.stop()
	restored := filepath.Join(t.TempDir(), "etcd-restored")
	peer := "http://" + e.PeerAddr
	out, err := exec.Command(etcdutl, "snapshot", "restore", snap, "--data-dir", restored, "--name", e.Name,
		"--initial-cluster", e.Name+"="+peer, "--initial-advertise-peer-urls", peer).CombinedOutput()
	if err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	e.DataDir = restored
	e.start()
	counter := func() uint64 {
		t.Helper()
		v, ok, err := e.get("/picomq/counters/stream-id")
		if err != nil || !ok {
			t.Fatalf("counter: %v %v", ok, err)
		}
		c, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := counter(); c >= laterMax {
		t.Fatalf("the restored counter %d is not below the later streams' IDs (up to %d): the drill proves nothing", c, laterMax)
	}

	cmd := exec.Command(picomqBin, "restore-counters", "--etcd-endpoints", e.Endpoint(), "--object-store", m.ObjectStoreURL())
	cmd.Env = append(os.Environ(), m.Env()...)
	out, err = cmd.CombinedOutput()
	t.Logf("restore-counters:\n%s", out)
	if err != nil {
		t.Fatalf("picomq restore-counters: %v", err)
	}
	if c := counter(); c < laterMax {
		t.Fatalf("after restore-counters the counter is %d, below stream ID %d in object storage", c, laterMax)
	}

	// A node on the restored registry, with a blank data dir (as after an
	// instance-store loss): what it serves comes from object storage.
	n = startNodeEnv(t, t.TempDir(), m.Env(), "--etcd-endpoints", e.Endpoint(), "--object-store", m.ObjectStoreURL(),
		"--seal-max-age", "200ms")
	used := map[uint64]string{}
	for name, id := range preIDs {
		used[id] = name
	}
	for i := range 4 {
		name := fmt.Sprintf("/drill/new-%d", i)
		id := create(name, 1)
		if id <= laterMax {
			t.Errorf("%s got stream ID %d, not above %d, the highest ID created after the snapshot", name, id, laterMax)
		}
		if other, dup := used[id]; dup {
			t.Errorf("%s got stream ID %d, already %s's", name, id, other)
		}
		used[id] = name
	}
	for name := range preIDs {
		// gaps: a node on an empty data dir skips the offsets its earlier
		// incarnation had reserved (they may have been acknowledged from
		// a WAL that is gone), so the next offset may lie past the records.
		recs := mustReadStreamFrom(t, n.URL, name, true)
		if len(recs) != 3 {
			t.Errorf("%s: %d records after the restore, want the 3 written before the snapshot", name, len(recs))
			continue
		}
		for i, r := range recs {
			if want := fmt.Sprintf("%s #%d", name, i); r.Value != want || r.Offset != int64(i) {
				t.Errorf("%s record %d: %q at offset %d, want %q at %d", name, i, r.Value, r.Offset, want, i)
			}
		}
	}
	n.stop(t)
}

// saveSnapshot streams a snapshot of the etcd at endpoint into path, as
// `etcdctl snapshot save` (deploy/etcd-backup.sh) does.
func saveSnapshot(t *testing.T, endpoint, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
