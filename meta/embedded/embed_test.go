package embedded_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/logtest"
	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/embedded"
	"github.com/PicoMQ/picomq/meta/metadata"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startEmbedded starts a server in dir and registers an idempotent Close.
func startEmbedded(t *testing.T, ctx context.Context, cfg embedded.Config) *embedded.Server {
	t.Helper()
	e, err := embedded.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testproc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestEmbeddedRestartOnSameDirKeepsData(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()

	e1 := startEmbedded(t, ctx, embedded.Config{Dir: dir, Fast: true})
	cli1, err := meta.Dial(ctx, e1.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	created, ok, err := meta.NewRegistry(cli1, "").CreateStream(ctx, metadata.Stream{Name: "/orders/1", ContentType: "application/json"})
	if err != nil || !ok {
		t.Fatalf("CreateStream = %v, %v", ok, err)
	}
	if err := cli1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// New free ports: the restarted member must not depend on its old URLs.
	e2 := startEmbedded(t, ctx, embedded.Config{Dir: dir, Fast: true})
	if e2.Endpoints()[0] == e1.Endpoints()[0] {
		t.Logf("restart happened to reuse endpoint %s", e2.Endpoints()[0])
	}
	cli2, err := meta.Dial(ctx, e2.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	reg := meta.NewRegistry(cli2, "")
	got, err := reg.GetStream(ctx, "/orders/1")
	if err != nil {
		t.Fatalf("GetStream after restart: %v", err)
	}
	if got != created {
		t.Fatalf("after restart got %+v, want %+v", got, created)
	}
	// The ID counter survived too: a new stream does not reuse the old ID.
	next, ok, err := reg.CreateStream(ctx, metadata.Stream{Name: "/orders/2"})
	if err != nil || !ok {
		t.Fatalf("CreateStream after restart = %v, %v", ok, err)
	}
	if next.ID <= created.ID {
		t.Fatalf("ID after restart = %d, want > %d", next.ID, created.ID)
	}
}

func TestEmbeddedCloseIsIdempotent(t *testing.T) {
	ctx := testCtx(t)
	e := startEmbedded(t, ctx, embedded.Config{Dir: t.TempDir(), Fast: true})
	u, err := url.Parse(e.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}

	// Concurrent and repeated Close calls: embed.Etcd.Close would panic on
	// the second call.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := e.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	if err := e.Close(); err != nil {
		t.Fatalf("Close after Close: %v", err)
	}
	if _, open := <-e.Err(); open {
		t.Fatal("Err channel still open after Close")
	}
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		c.Close()
		t.Fatalf("client port %s still accepting after Close", u.Host)
	}
}

func TestStartEmbeddedUsesFixedAddresses(t *testing.T) {
	ctx := testCtx(t)
	clientAddr, peerAddr := freeAddr(t), freeAddr(t)
	e := startEmbedded(t, ctx, embedded.Config{Dir: t.TempDir(), Fast: true, ClientAddr: clientAddr, PeerAddr: peerAddr, Name: "node-a"})
	if got, want := e.Endpoints(), []string{"http://" + clientAddr}; len(got) != 1 || got[0] != want[0] {
		t.Fatalf("Endpoints = %v, want %v", got, want)
	}
	cli, err := meta.Dial(ctx, []string{clientAddr}) // scheme-less endpoints work too
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	members, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 1 || members.Members[0].Name != "node-a" || members.Members[0].PeerURLs[0] != "http://"+peerAddr {
		t.Fatalf("members = %+v, want one named node-a at peer %s", members.Members, peerAddr)
	}
}

func TestStartEmbeddedFixedAddressInUseFails(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	_, err = embedded.Start(ctx, embedded.Config{Dir: dir, Fast: true, ClientAddr: busy.Addr().String()})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("StartEmbedded on a busy client address: err = %v, want EADDRINUSE", err)
	}
	// The failed start released the data dir: a normal start there works.
	startEmbedded(t, ctx, embedded.Config{Dir: dir, Fast: true})
}

func TestStartEmbeddedRejectsBadConfig(t *testing.T) {
	ctx := testCtx(t)
	if _, err := embedded.Start(ctx, embedded.Config{Fast: true}); !errors.Is(err, metadata.ErrInvalid) {
		t.Errorf("no Dir: err = %v, want ErrInvalid", err)
	}
	if _, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir(), ClientAddr: "nohostport"}); !errors.Is(err, metadata.ErrInvalid) {
		t.Errorf("bad ClientAddr: err = %v, want ErrInvalid", err)
	}
}

func TestStartEmbeddedHonoursCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir(), Fast: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func attrValue(r slog.Record, key string) (string, bool) {
	var v string
	var found bool
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value.String(), true
			return false
		}
		return true
	})
	return v, found
}

func TestEmbeddedLogsQuietUnlessDebugging(t *testing.T) {
	ctx := testCtx(t)

	info := logtest.New(slog.LevelInfo)
	e := startEmbedded(t, ctx, embedded.Config{Dir: t.TempDir(), Fast: true, Logger: slog.New(info)})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, r := range info.Records() {
		var as []string
		r.Attrs(func(a slog.Attr) bool { as = append(as, a.String()); return true })
		t.Errorf("info-level logger got etcd record during a clean start/stop: %s %q %v", r.Level, r.Message, as)
	}

	debug := logtest.New(slog.LevelDebug)
	e = startEmbedded(t, ctx, embedded.Config{Dir: t.TempDir(), Fast: true, Logger: slog.New(debug)})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	recs := debug.Records()
	if len(recs) == 0 {
		t.Fatal("debug-level logger got no etcd records")
	}
	for _, r := range recs {
		if c, _ := attrValue(r, "component"); c != "etcd" {
			t.Fatalf("record %q has component %q, want etcd", r.Message, c)
		}
	}
}
