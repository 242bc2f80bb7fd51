package stream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/wal"
)

// TestIdleStreamsBuiltOnFirstUse: a plain stream stays a record in memory
// (idle.go) through create, describe, list, an identical re-create and a
// restart, and behaves exactly like a built one when first used; streams
// with more than a record (a TTL, closed, written, forked) are built.
func TestIdleStreamsBuiltOnFirstUse(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	svc := func() *stream.Service { return h.svc }
	create := func(name string, opts stream.CreateOptions) stream.Info {
		t.Helper()
		info, created, err := svc().Create(ctx, name, opts)
		if err != nil || !created {
			t.Fatalf("create %s: created=%v %v", name, created, err)
		}
		return info
	}
	idle := func(name string, want bool) {
		t.Helper()
		if got := stream.Idle(svc(), name); got != want {
			t.Fatalf("%s idle = %v, want %v", name, got, want)
		}
	}
	a := create("/idle/a", stream.CreateOptions{})
	create("/idle/json", stream.CreateOptions{ContentType: "application/json"})
	create("/idle/ttl", stream.CreateOptions{TTL: time.Hour})
	create("/idle/closed", stream.CreateOptions{Closed: true})
	create("/idle/initial", stream.CreateOptions{Initial: []record.Record{{Value: []byte("x")}}})
	idle("/idle/a", true)
	idle("/idle/json", true)
	idle("/idle/ttl", false)
	idle("/idle/closed", false)
	idle("/idle/initial", false)
	if a.NextOffset != 0 || a.Owner != "n1" || a.ContentType != "application/octet-stream" || a.KafkaTopic != "idle.a" || a.Epoch != 1 {
		t.Fatalf("create of an idle stream answered %+v", a)
	}

	// Describe, list and an identical re-create answer from the record.
	d, err := svc().Describe(ctx, "/idle/a")
	if err != nil || d != a {
		t.Fatalf("describe: %+v %v, want %+v", d, err, a)
	}
	again, created, err := svc().Create(ctx, "/idle/a", stream.CreateOptions{})
	if err != nil || created || again != a {
		t.Fatalf("identical re-create: %+v %v %v", again, created, err)
	}
	if _, _, err := svc().Create(ctx, "/idle/a", stream.CreateOptions{ContentType: "text/plain"}); !errors.Is(err, stream.ErrConflict) {
		t.Fatalf("re-create with another content type: %v", err)
	}
	list, _, err := svc().List(ctx, "/idle/", "", 100)
	if err != nil || len(list) != 5 || list[0] != a {
		t.Fatalf("list: %+v %v", list, err)
	}
	idle("/idle/a", true)
	j, err := svc().Describe(ctx, "/idle/json")
	if err != nil || j.ContentType != "application/json" {
		t.Fatalf("describe json: %+v %v", j, err)
	}

	// A restart keeps plain streams idle and builds the rest.
	create("/idle/b", stream.CreateOptions{})
	if _, err := svc().Append(ctx, "/idle/a", []record.Record{{Value: []byte("v0")}}); err != nil {
		t.Fatal(err)
	}
	idle("/idle/a", false)
	h.reopen()
	idle("/idle/a", false) // it has a WAL entry now
	idle("/idle/b", true)
	idle("/idle/json", true)
	idle("/idle/ttl", false)
	res, err := svc().Read(ctx, "/idle/a", stream.ReadOptions{})
	if err != nil || len(res.Records) != 1 || string(res.Records[0].Value) != "v0" {
		t.Fatalf("read /idle/a after restart: %+v %v", res, err)
	}

	// First use builds it: a read of an empty stream, then appends.
	res, err = svc().Read(ctx, "/idle/b", stream.ReadOptions{})
	if err != nil || len(res.Records) != 0 || !res.UpToDate || res.NextOffset != 0 {
		t.Fatalf("read of the idle /idle/b: %+v %v", res, err)
	}
	idle("/idle/b", false)
	if r, err := svc().Append(ctx, "/idle/b", []record.Record{{Value: []byte("b0")}}); err != nil || r.FirstOffset != 0 {
		t.Fatalf("append to /idle/b: %+v %v", r, err)
	}

	// A fork of an idle source builds the source and takes its reference.
	f, created, err := svc().Create(ctx, "/idle/fork", stream.CreateOptions{Fork: &stream.ForkOptions{Source: "/idle/json", Offset: -1}})
	if err != nil || !created || f.ContentType != "application/json" {
		t.Fatalf("fork of an idle stream: %+v %v %v", f, created, err)
	}
	idle("/idle/json", false)
	idle("/idle/fork", false)

	// Delete of an idle stream, then a new one of the same name.
	create("/idle/c", stream.CreateOptions{})
	if err := svc().Delete(ctx, "/idle/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc().Describe(ctx, "/idle/c"); !errors.Is(err, stream.ErrNotFound) {
		t.Fatalf("describe after delete: %v", err)
	}
	c2 := create("/idle/c", stream.CreateOptions{})
	idle("/idle/c", true)
	h.reopen()
	d, err = svc().Describe(ctx, "/idle/c")
	if err != nil || d.ID != c2.ID {
		t.Fatalf("describe the new /idle/c after restart: %+v %v, want id %d", d, err, c2.ID)
	}
	idle("/idle/c", true)
	idle("/idle/json", false) // a fork reads it
}

// TestIdleStreamTakenOverWhileLeaseLost: an idle stream that another node
// claimed while this one had no lease is dropped at the rejoin (requests
// for it are then redirected), and the idle streams nobody claimed stay.
func TestIdleStreamTakenOverWhileLeaseLost(t *testing.T) {
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, "/it/")
	shared := &dirTier{dir: t.TempDir()}
	a := startSessionNode(t, reg, shared, "a")
	b := startSessionNode(t, reg, shared, "b")
	ctx := context.Background()
	for _, name := range []string{"/moved", "/kept"} {
		if _, _, err := a.svc.Create(ctx, name, stream.CreateOptions{Durability: stream.DurabilityLocal}); err != nil {
			t.Fatal(err)
		}
		if !stream.Idle(a.svc, name) {
			t.Fatalf("%s is not idle on a", name)
		}
	}
	if res, err := loseLeaseAndAppend(t, cli, a, b, "/moved", "b0"); err != nil || res.FirstOffset != 0 {
		t.Fatalf("append on b after the takeover: %+v %v", res, err)
	}
	a.svc.Fence(metadata.ErrLeaseLost)
	a.join(t, reg)
	if err := a.svc.Rejoined(ctx); err != nil {
		t.Fatal(err)
	}
	if stream.Idle(a.svc, "/moved") {
		t.Fatal("a still holds /moved after b took it over")
	}
	if !stream.Idle(a.svc, "/kept") {
		t.Fatal("a dropped /kept, which nobody claimed")
	}
	var redirect *stream.RedirectError
	if _, err := a.svc.Append(ctx, "/moved", []record.Record{{Value: []byte("a1")}}); !errors.As(err, &redirect) || redirect.NodeID != "b" {
		t.Fatalf("append to /moved on a: %v, want a redirect to b", err)
	}
	if d, err := a.svc.Describe(ctx, "/moved"); err != nil || d.Owner != "b" {
		t.Fatalf("describe /moved on a: %+v %v", d, err)
	}
	if res, err := a.svc.Append(ctx, "/kept", []record.Record{{Value: []byte("k0")}}); err != nil || res.FirstOffset != 0 {
		t.Fatalf("append to /kept on a: %+v %v", res, err)
	}
}

// TestIdleStreamGauges: picomq_streams counts every stream the node holds
// and picomq_streams_idle those still held as their record.
func TestIdleStreamGauges(t *testing.T) {
	ctx := context.Background()
	cli := metatest.StartEtcd(t)
	w, _, err := wal.Open(wal.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	metrics := prometheus.NewRegistry()
	svc, err := stream.Open(ctx, stream.Config{NodeID: "n1", Registerer: metrics}, w, meta.NewRegistry(cli, "/g/"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/a", "/b", "/c"} {
		if _, _, err := svc.Create(ctx, name, stream.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Append(ctx, "/a", []record.Record{{Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	families, err := metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if m := f.GetMetric(); len(m) == 1 && m[0].GetGauge() != nil {
			got[f.GetName()] = m[0].GetGauge().GetValue()
		}
	}
	if got["picomq_streams"] != 3 || got["picomq_streams_idle"] != 2 {
		t.Fatalf("picomq_streams = %v, picomq_streams_idle = %v; want 3 and 2", got["picomq_streams"], got["picomq_streams_idle"])
	}
}
