package stream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// fakeClock is a settable clock for TTL tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newClockHarness is newHarness with a fake clock.
func newClockHarness(t *testing.T) (*harness, *fakeClock) {
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	h := &harness{t: t, dir: t.TempDir(), cli: metatest.StartEtcd(t), now: clock.Now}
	h.open()
	t.Cleanup(func() { h.w.Close() })
	return h, clock
}

func recs(vals ...string) []record.Record {
	out := make([]record.Record, len(vals))
	for i, v := range vals {
		out[i].Value = []byte(v)
	}
	return out
}

func readValues(t *testing.T, svc *stream.Service, name string, from int64) []string {
	t.Helper()
	var out []string
	for {
		res, err := svc.Read(context.Background(), name, stream.ReadOptions{Offset: from})
		if err != nil {
			t.Fatalf("read %s at %d: %v", name, from, err)
		}
		out = append(out, vals(res.Records)...)
		if res.UpToDate {
			return out
		}
		from = res.NextOffset
	}
}

func registryRecord(t *testing.T, h *harness, name string) (metadata.Stream, error) {
	t.Helper()
	return meta.NewRegistry(h.cli, "/test/").GetStream(context.Background(), name)
}

func TestTTLSlidesOnReadsAndWritesNotHead(t *testing.T) {
	h, clock := newClockHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/ttl", stream.CreateOptions{ContentType: "text/plain", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(6 * time.Second)
	if _, err := h.svc.Read(ctx, "/ttl", stream.ReadOptions{}); err != nil {
		t.Fatalf("read at 6s: %v", err)
	}
	clock.Advance(6 * time.Second) // 12s after create, 6s after the read
	if _, err := h.svc.Append(ctx, "/ttl", recs("x")); err != nil {
		t.Fatalf("append at 12s: %v", err)
	}
	clock.Advance(9 * time.Second)
	info, err := h.svc.Head(ctx, "/ttl")
	if err != nil || info.TTL != 10*time.Second {
		t.Fatalf("head at 21s: %+v %v", info, err)
	}
	clock.Advance(1 * time.Second) // 10s after the append; HEAD did not count
	if _, err := h.svc.Head(ctx, "/ttl"); !errors.Is(err, stream.ErrNotFound) || errors.Is(err, stream.ErrGone) {
		t.Fatalf("head after expiry: %v, want ErrNotFound", err)
	}
	if _, err := h.svc.Append(ctx, "/ttl", recs("y")); !errors.Is(err, stream.ErrNotFound) {
		t.Fatalf("append after expiry: %v, want ErrNotFound", err)
	}
	// The name is free again, with any configuration.
	info, created, err := h.svc.Create(ctx, "/ttl", stream.CreateOptions{ContentType: "application/json"})
	if err != nil || !created {
		t.Fatalf("re-create after expiry: %+v %v %v", info, created, err)
	}
	if got := readValues(t, h.svc, "/ttl", 0); len(got) != 0 {
		t.Fatalf("re-created stream holds %q", got)
	}
}

func TestExpiresAtIsAbsoluteAndDurable(t *testing.T) {
	h, clock := newClockHarness(t)
	ctx := context.Background()
	at := clock.Now().Add(5 * time.Second)
	if _, _, err := h.svc.Create(ctx, "/exp", stream.CreateOptions{ExpiresAt: at, Initial: recs("a")}); err != nil {
		t.Fatal(err)
	}
	// Same instant, another zone: identical configuration.
	if _, created, err := h.svc.Create(ctx, "/exp", stream.CreateOptions{ExpiresAt: at.In(time.FixedZone("x", 3600))}); err != nil || created {
		t.Fatalf("identical re-create: %v %v", created, err)
	}
	if _, _, err := h.svc.Create(ctx, "/exp", stream.CreateOptions{ExpiresAt: at.Add(time.Second)}); !errors.Is(err, stream.ErrConflict) {
		t.Fatalf("different expiry: %v, want ErrConflict", err)
	}
	clock.Advance(4 * time.Second)
	if got := readValues(t, h.svc, "/exp", 0); len(got) != 1 {
		t.Fatalf("read before expiry: %q", got)
	}
	clock.Advance(time.Second) // reads never extend an absolute expiry
	if _, err := h.svc.Read(ctx, "/exp", stream.ReadOptions{}); !errors.Is(err, stream.ErrNotFound) {
		t.Fatalf("read after expiry: %v", err)
	}
	// The reaper makes the expiry durable: the registry record is gone, so
	// a restart cannot bring the stream back.
	defer startReaper(t, h.svc, stream.LifecycleOptions{ReapInterval: 10 * time.Millisecond})()
	waitFor(t, func() bool {
		_, err := registryRecord(t, h, "/exp")
		return errors.Is(err, metadata.ErrNotFound)
	})
}

func TestCreateComparesLifecycleConfig(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	o := stream.CreateOptions{ContentType: "text/plain", TTL: time.Hour}
	if _, created, err := h.svc.Create(ctx, "/c", o); err != nil || !created {
		t.Fatal(created, err)
	}
	if _, created, err := h.svc.Create(ctx, "/c", o); err != nil || created {
		t.Fatalf("same TTL: %v %v", created, err)
	}
	for name, bad := range map[string]stream.CreateOptions{
		"other TTL":  {ContentType: "text/plain", TTL: 2 * time.Hour},
		"no TTL":     {ContentType: "text/plain"},
		"expiry":     {ContentType: "text/plain", ExpiresAt: time.Now().Add(time.Hour)},
		"closed":     {ContentType: "text/plain", TTL: time.Hour, Closed: true},
		"other type": {ContentType: "text/csv", TTL: time.Hour},
	} {
		if _, _, err := h.svc.Create(ctx, "/c", bad); !errors.Is(err, stream.ErrConflict) {
			t.Errorf("%s: %v, want ErrConflict", name, err)
		}
	}
	if _, _, err := h.svc.Create(ctx, "/d", stream.CreateOptions{TTL: time.Hour, ExpiresAt: time.Now()}); !errors.Is(err, stream.ErrInvalidArgument) {
		t.Errorf("TTL and expiry: %v, want ErrInvalidArgument", err)
	}
	if _, _, err := h.svc.Create(ctx, "/d", stream.CreateOptions{TTL: 1500 * time.Millisecond}); !errors.Is(err, stream.ErrInvalidArgument) {
		t.Errorf("fractional TTL: %v, want ErrInvalidArgument", err)
	}
}

func TestCreateWithInitialRecordsClosed(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	info, created, err := h.svc.Create(ctx, "/closed", stream.CreateOptions{ContentType: "text/plain", Initial: recs("a", "b"), Closed: true})
	if err != nil || !created || !info.Closed || info.NextOffset != 2 {
		t.Fatalf("create closed: %+v %v %v", info, created, err)
	}
	// Closure is part of the configuration: an open create conflicts, a
	// closed one is identical (its body is not appended again).
	if _, _, err := h.svc.Create(ctx, "/closed", stream.CreateOptions{ContentType: "text/plain"}); !errors.Is(err, stream.ErrConflict) {
		t.Fatalf("open re-create of a closed stream: %v", err)
	}
	if info, created, err := h.svc.Create(ctx, "/closed", stream.CreateOptions{ContentType: "text/plain", Closed: true, Initial: recs("zzz")}); err != nil || created || info.NextOffset != 2 {
		t.Fatalf("closed re-create: %+v %v %v", info, created, err)
	}
	if _, err := h.svc.Append(ctx, "/closed", recs("c")); !errors.Is(err, stream.ErrStreamClosed) {
		t.Fatalf("append to closed: %v", err)
	}
	h.reopen()
	info, err = h.svc.Head(ctx, "/closed")
	if err != nil || !info.Closed || info.NextOffset != 2 {
		t.Fatalf("after restart: %+v %v", info, err)
	}
	if got := readValues(t, h.svc, "/closed", 0); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("after restart: %q", got)
	}
}

func TestLifecycleSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	if _, _, err := h.svc.Create(ctx, "/t", stream.CreateOptions{TTL: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.svc.Create(ctx, "/e", stream.CreateOptions{ExpiresAt: at}); err != nil {
		t.Fatal(err)
	}
	h.reopen()
	if info, err := h.svc.Head(ctx, "/t"); err != nil || info.TTL != 90*time.Second {
		t.Fatalf("/t after restart: %+v %v", info, err)
	}
	if info, err := h.svc.Head(ctx, "/e"); err != nil || !info.ExpiresAt.Equal(at) {
		t.Fatalf("/e after restart: %+v %v", info, err)
	}
}

// startJob runs one of the service's jobs (Run(ctx) error) the way the
// node's supervisor does; stop cancels it and waits for it to return (a
// second stop does nothing).
func startJob(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("job: %v", err)
			}
		})
	}
}

// startReaper reconciles the service after a (simulated) restart and runs
// its expiry reaper, as the node does at start-up.
func startReaper(t *testing.T, svc *stream.Service, opts stream.LifecycleOptions) (stop func()) {
	t.Helper()
	if err := svc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	return startJob(t, func(ctx context.Context) error { return svc.RunReaper(ctx, opts) })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
