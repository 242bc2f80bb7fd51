package stream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/wal"
)

// clusterNode is one stream service of a two-node test cluster sharing a
// real embedded etcd and one object store.
type clusterNode struct {
	id   string
	sess *meta.Session
	w    *wal.WAL
	svc  *stream.Service
}

func startClusterNode(t *testing.T, reg *meta.Registry, tier *dirTier, id string) *clusterNode {
	t.Helper()
	ctx := context.Background()
	n := &clusterNode{id: id}
	var err error
	n.sess, err = reg.Join(ctx, metadata.Member{NodeID: id, AdvertiseURL: "http://" + id}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	n.w, _, err = wal.Open(wal.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.w.Close() })
	n.svc, err = stream.Open(ctx, stream.Config{
		NodeID: id, Cluster: reg, DefaultDurability: stream.DurabilityObject,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tier:   stream.TierConfig{Tier: tier, Manifests: reg, Session: func() metadata.Lease { return meta.LeaseOf(n.sess) }, SealMaxAge: 20 * time.Millisecond},
	}, n.w, reg)
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go n.svc.RunFlusher(fctx)
	return n
}

// startTwoNodes starts nodes "a" and "b" on one etcd (registry under
// prefix) and one object store.
func startTwoNodes(t *testing.T, prefix string) (*clientv3.Client, *meta.Registry, *clusterNode, *clusterNode) {
	t.Helper()
	cli := metatest.StartEtcd(t)
	reg := meta.NewRegistry(cli, prefix)
	tier := &dirTier{dir: t.TempDir()}
	return cli, reg, startClusterNode(t, reg, tier, "a"), startClusterNode(t, reg, tier, "b")
}

// TestRedirectTakeoverAndFencing: a live owner gets redirects; once its lease
// is gone the placement target claims the stream with epoch+1 and serves
// every acknowledged record and the producer state; the old owner's session
// can no longer commit.
func TestRedirectTakeoverAndFencing(t *testing.T) {
	cli, reg, a, b := startTwoNodes(t, "/rt/")
	ctx := context.Background()
	if _, _, err := a.svc.Create(ctx, "/s", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := a.svc.AppendBatch(ctx, "/s", stream.AppendRequest{
			Records:  []record.Record{{Value: []byte(fmt.Sprint(i))}},
			Producer: &stream.Producer{ID: "pico:p", Seq: uint64(i)},
		}); err != nil {
			t.Fatal(err)
		}
	}
	var re *stream.RedirectError
	if _, err := b.svc.Append(ctx, "/s", []record.Record{{Value: []byte("x")}}); !errors.As(err, &re) || re.NodeID != "a" || re.URL != "http://a" {
		t.Fatalf("append on b while a is alive: %v, want a redirect to a", err)
	}
	// History is served by b without a redirect.
	page, err := b.svc.Read(ctx, "/s", stream.ReadOptions{Offset: 0})
	if err != nil || len(page.Records) != 10 || !page.ServedRemotely {
		t.Fatalf("history read on b: %d records, remote=%v, %v", len(page.Records), page.ServedRemotely, err)
	}
	// a's lease ends (as if it died). b is the only live node, so it is
	// the placement target and claims the stream.
	if _, err := cli.Revoke(ctx, a.sess.LeaseID()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	var res stream.AppendResult
	for {
		res, err = b.svc.AppendBatch(ctx, "/s", stream.AppendRequest{
			Records: []record.Record{{Value: []byte("10")}}, Producer: &stream.Producer{ID: "pico:p", Seq: 10},
		})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// b continues past a's offset reservation: a's offsets are never
	// handed out again (reserve.go).
	if err != nil || res.FirstOffset < 10 {
		t.Fatalf("append on b after takeover: %+v %v", res, err)
	}
	m, err := reg.GetStream(ctx, "/s")
	if err != nil || m.Owner != "b" || m.Epoch != 2 {
		t.Fatalf("registry after takeover: %+v %v", m, err)
	}
	dup, err := b.svc.AppendBatch(ctx, "/s", stream.AppendRequest{
		Records: []record.Record{{Value: []byte("9")}}, Producer: &stream.Producer{ID: "pico:p", Seq: 9},
	})
	if err != nil || !dup.Duplicate || dup.FirstOffset != 9 {
		t.Fatalf("producer state did not survive takeover: %+v %v", dup, err)
	}
	// The zombie: a still has the stream loaded, but it cannot ack.
	if _, err := a.svc.Append(ctx, "/s", []record.Record{{Value: []byte("zombie")}}); err == nil {
		t.Fatal("the old owner acknowledged an append after losing its lease")
	}
	if err := a.svc.Flush(ctx); err == nil {
		t.Fatal("the old owner committed a flush after losing its lease")
	}
	page, err = b.svc.Read(ctx, "/s", stream.ReadOptions{})
	if err != nil || len(page.Records) != 11 {
		t.Fatalf("read on new owner: %d records %v", len(page.Records), err)
	}
}

// TestDrainHandsStreamsOver: a drain moves every stream to the other node
// with nothing lost; the drained node then redirects.
func TestDrainHandsStreamsOver(t *testing.T) {
	_, _, a, b := startTwoNodes(t, "/dr/")
	ctx := context.Background()
	for s := 0; s < 5; s++ {
		name := fmt.Sprintf("/d%d", s)
		if _, _, err := a.svc.Create(ctx, name, stream.CreateOptions{Durability: stream.DurabilityLocal}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			if _, err := a.svc.Append(ctx, name, []record.Record{{Value: []byte(fmt.Sprint(i))}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	moved, err := a.svc.Drain(ctx)
	if err != nil || moved != 5 {
		t.Fatalf("drain: moved %d, %v", moved, err)
	}
	for s := 0; s < 5; s++ {
		name := fmt.Sprintf("/d%d", s)
		var re *stream.RedirectError
		if _, err := a.svc.Append(ctx, name, []record.Record{{Value: []byte("x")}}); !errors.As(err, &re) || re.NodeID != "b" {
			t.Fatalf("%s on drained node: %v", name, err)
		}
		res, err := b.svc.Append(ctx, name, []record.Record{{Value: []byte("4")}})
		if err != nil || res.FirstOffset != 4 {
			t.Fatalf("%s on new owner: %+v %v", name, res, err)
		}
	}
}
