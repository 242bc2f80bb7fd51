package group_test

// This test speaks to the coordinator only through its exported surface
// (NewWithConfig, Handle, kmsg requests), so it holds whatever shape the
// package's internals take.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/node/stream/streamtest"
)

// selfLocator makes this node the coordinator of every group.
type selfLocator struct{}

func (selfLocator) Locate(ctx context.Context, name string) (group.Broker, bool, error) {
	if !stream.IsSystemName(name) {
		return group.Broker{}, false, errors.New("not an offsets stream: " + name)
	}
	return group.Broker{NodeID: 1, Host: "127.0.0.1", Port: 9092}, true, nil
}

type genClient struct {
	t *testing.T
	c *group.Coordinator
}

func (g genClient) handle(req kmsg.Request) kmsg.Response {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := g.c.Handle(group.WithClient(ctx, "gen-test", "127.0.0.1"), req)
	if err != nil {
		g.t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

// join sends a v3 JoinGroup (no MEMBER_ID_REQUIRED round trip) in the
// background: a join blocks until the rebalance completes.
func (g genClient) join(member string) <-chan *kmsg.JoinGroupResponse {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version, r.Group, r.MemberID, r.ProtocolType = 3, "g", member, "consumer"
	r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 30000, 30000
	r.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte("m")}}
	ch := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		resp, err := g.c.Handle(group.WithClient(context.Background(), "gen-test", "127.0.0.1"), r)
		if err != nil {
			g.t.Errorf("join: %v", err)
			ch <- nil
			return
		}
		ch <- resp.(*kmsg.JoinGroupResponse)
	}()
	return ch
}

func (g genClient) joined(ch <-chan *kmsg.JoinGroupResponse) *kmsg.JoinGroupResponse {
	g.t.Helper()
	select {
	case r := <-ch:
		if r == nil || r.ErrorCode != 0 {
			g.t.Fatalf("join: %+v", r)
		}
		return r
	case <-time.After(30 * time.Second):
		g.t.Fatal("join not answered within 30s")
	}
	return nil
}

func (g genClient) sync(member string, gen int32, assign map[string]string) <-chan int16 {
	r := kmsg.NewPtrSyncGroupRequest()
	r.Version, r.Group, r.MemberID, r.Generation = 5, "g", member, gen
	pt, p := "consumer", "range"
	r.ProtocolType, r.Protocol = &pt, &p
	for m, a := range assign {
		r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m, MemberAssignment: []byte(a)})
	}
	ch := make(chan int16, 1)
	go func() {
		resp, err := g.c.Handle(group.WithClient(context.Background(), "gen-test", "127.0.0.1"), r)
		if err != nil {
			g.t.Errorf("sync: %v", err)
			ch <- -1
			return
		}
		ch <- resp.(*kmsg.SyncGroupResponse).ErrorCode
	}()
	return ch
}

func (g genClient) heartbeat(member string, gen int32) int16 {
	g.t.Helper()
	r := kmsg.NewPtrHeartbeatRequest()
	r.Version, r.Group, r.MemberID, r.Generation = 4, "g", member, gen
	return g.handle(r).(*kmsg.HeartbeatResponse).ErrorCode
}

// commit commits offset for partitions 0 and 1 of topic t and returns each
// partition's error code.
func (g genClient) commit(version int16, member string, gen int32, offset int64) []int16 {
	g.t.Helper()
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Version, r.Group, r.MemberID, r.Generation = version, "g", member, gen
	r.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{
		{Partition: 0, Offset: offset, LeaderEpoch: -1}, {Partition: 1, Offset: offset, LeaderEpoch: -1},
	}}}
	var codes []int16
	for _, p := range g.handle(r).(*kmsg.OffsetCommitResponse).Topics[0].Partitions {
		codes = append(codes, p.ErrorCode)
	}
	return codes
}

func (g genClient) committed() [2]int64 {
	g.t.Helper()
	r := kmsg.NewPtrOffsetFetchRequest()
	r.Version, r.Group = 7, "g"
	r.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{0, 1}}}
	resp := g.handle(r).(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
		g.t.Fatalf("offset fetch: %+v", resp)
	}
	var out [2]int64
	for _, p := range resp.Topics[0].Partitions {
		out[p.Partition] = p.Offset
	}
	return out
}

// TestOffsetCommitOfStaleGenerationRefused: after a rebalance, a commit
// carrying the previous generation (a zombie member that has not rejoined
// yet) or a generation not issued yet gets ILLEGAL_GENERATION on every
// partition and moves no offset, backwards or forwards; the current
// generation's commit still works.
func TestOffsetCommitOfStaleGenerationRefused(t *testing.T) {
	st := streamtest.New(t, stream.Config{})
	c := group.NewWithConfig(group.Config{
		Streams: st.Svc, Locator: selfLocator{}, MinSessionTimeout: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	t.Cleanup(c.Close)
	g := genClient{t: t, c: c}

	// Generation 1: member a alone.
	j1 := g.joined(g.join(""))
	a, gen1 := j1.MemberID, j1.Generation
	if ec := <-g.sync(a, gen1, map[string]string{a: "p0,p1"}); ec != 0 {
		t.Fatalf("sync gen %d: %v", gen1, kerr.ErrorForCode(ec))
	}
	if codes := g.commit(8, a, gen1, 10); codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("commit of the current generation: %v", codes)
	}

	// Generation 2: b joins, a learns of the rebalance and rejoins.
	bch := g.join("")
	deadline := time.Now().Add(30 * time.Second)
	for ec := g.heartbeat(a, gen1); ec != kerr.RebalanceInProgress.Code; ec = g.heartbeat(a, gen1) {
		if ec != 0 || time.Now().After(deadline) {
			t.Fatalf("heartbeat while b joins: %v, want REBALANCE_IN_PROGRESS", kerr.ErrorForCode(ec))
		}
		time.Sleep(5 * time.Millisecond)
	}
	ja, jb := g.joined(g.join(a)), g.joined(bch)
	gen2, b := ja.Generation, jb.MemberID
	if gen2 <= gen1 || jb.Generation != gen2 {
		t.Fatalf("generations after the rebalance: a %d b %d, was %d", gen2, jb.Generation, gen1)
	}
	sb := g.sync(b, gen2, nil)
	if ec := <-g.sync(a, gen2, map[string]string{a: "p0", b: "p1"}); ec != 0 {
		t.Fatalf("leader sync gen %d: %v", gen2, kerr.ErrorForCode(ec))
	}
	if ec := <-sb; ec != 0 {
		t.Fatalf("follower sync gen %d: %v", gen2, kerr.ErrorForCode(ec))
	}

	for _, tc := range []struct {
		what    string
		version int16
		member  string
		gen     int32
		offset  int64
	}{
		{"a, previous generation, moving backwards", 8, a, gen1, 3},
		{"a, previous generation, moving forwards", 8, a, gen1, 99},
		{"a, previous generation, oldest commit version", 2, a, gen1, 3},
		{"b, a generation before it joined", 8, b, gen1, 99},
		{"a, a generation not issued yet", 8, a, gen2 + 1, 99},
	} {
		codes := g.commit(tc.version, tc.member, tc.gen, tc.offset)
		for p, ec := range codes {
			if ec != kerr.IllegalGeneration.Code {
				t.Errorf("%s (gen %d, current %d): partition %d got %v, want ILLEGAL_GENERATION", tc.what, tc.gen, gen2, p, kerr.ErrorForCode(ec))
			}
		}
		if got := g.committed(); got != [2]int64{10, 10} {
			t.Fatalf("after the refused commit (%s): committed offsets %v, want [10 10] unchanged", tc.what, got)
		}
	}
	if codes := g.commit(8, b, gen2, 11); codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("commit of the current generation after the refusals: %v", codes)
	}
	if got := g.committed(); got != [2]int64{11, 11} {
		t.Fatalf("committed offsets %v, want [11 11]", got)
	}
}
