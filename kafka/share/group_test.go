package share

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/clock"
)

var topicT = Topic{ID: [16]byte{1}, Partitions: 3}

func resolveT(names []string) map[string]Topic {
	out := map[string]Topic{}
	for _, n := range names {
		if n == "t" {
			out[n] = topicT
		}
	}
	return out
}

func hb(m *Manager, member string, epoch int32, topics []string) *kmsg.ShareGroupHeartbeatResponse {
	r := kmsg.NewPtrShareGroupHeartbeatRequest()
	r.Version, r.GroupID, r.MemberID, r.MemberEpoch, r.SubscribedTopicNames = 1, "g", member, epoch, topics
	return m.Heartbeat(r, Client{ID: "c", Host: "h"}, resolveT)
}

func assigned(r *kmsg.ShareGroupHeartbeatResponse) []int32 {
	if r.Assignment == nil {
		return nil
	}
	var ps []int32
	for _, tp := range r.Assignment.TopicPartitions {
		ps = append(ps, tp.Partitions...)
	}
	slices.Sort(ps)
	return ps
}

func TestHeartbeatAssignsAndShares(t *testing.T) {
	m := New(Config{Clock: clock.NewFake(time.Unix(1000, 0))})
	a := hb(m, "a", 0, []string{"t"})
	if a.ErrorCode != 0 || !slices.Equal(assigned(a), []int32{0, 1, 2}) {
		t.Fatalf("first member: code %d, assigned %v, want all 3", a.ErrorCode, assigned(a))
	}
	b := hb(m, "b", 0, []string{"t"})
	if !slices.Equal(assigned(b), []int32{1}) {
		t.Fatalf("second member assigned %v, want [1]", assigned(b))
	}
	// a learns its smaller assignment on its next heartbeat.
	a2 := hb(m, "a", a.MemberEpoch, nil)
	if a2.ErrorCode != 0 || !slices.Equal(assigned(a2), []int32{0, 2}) {
		t.Fatalf("a after b joined: code %d, %v, want [0 2]", a2.ErrorCode, assigned(a2))
	}
	// More members than partitions: every member gets one, shared.
	for _, id := range []string{"c", "d"} {
		hb(m, id, 0, []string{"t"})
	}
	got := map[int32]int{}
	for _, id := range []string{"a", "b", "c", "d"} {
		d := m.Describe("g")
		for _, mb := range d.Members {
			if mb.MemberID == id {
				if n := len(mb.Assignment.TopicPartitions); n != 1 || len(mb.Assignment.TopicPartitions[0].Partitions) != 1 {
					t.Fatalf("member %s assignment %+v, want one partition", id, mb.Assignment)
				}
				got[mb.Assignment.TopicPartitions[0].Partitions[0]]++
			}
		}
	}
	if len(got) != 3 || got[0] != 2 {
		t.Fatalf("partitions of 4 members over 3 partitions: %v, want partition 0 twice, 1 and 2 once", got)
	}
}

func TestHeartbeatFencingAndLeave(t *testing.T) {
	c := clock.NewFake(time.Unix(1000, 0))
	m := New(Config{Clock: c})
	if r := hb(m, "x", 3, nil); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("unknown member: code %d", r.ErrorCode)
	}
	a := hb(m, "a", 0, []string{"t"})
	if r := hb(m, "a", a.MemberEpoch+5, nil); r.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Fatalf("wrong epoch: code %d, want FENCED_MEMBER_EPOCH", r.ErrorCode)
	}
	if r := hb(m, "", 0, []string{"t"}); r.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("empty member id: code %d", r.ErrorCode)
	}
	// a holds records; leaving releases them.
	p := m.Partition(PartKey{"g", topicT.ID, 0})
	p.Init(0, true)
	p.Acquire("a", c.Now(), []Span{{0, 9, false}}, 10, 100, m.Limits("g"))
	if r := hb(m, "a", -1, nil); r.ErrorCode != 0 || r.MemberEpoch != -1 {
		t.Fatalf("leave: %+v", r)
	}
	if acq, avail := p.InFlight(); acq != 0 || avail != 10 {
		t.Fatalf("after leave: %d acquired %d available, want 0/10", acq, avail)
	}
	if n, ok := m.Members("g"); n != 0 || !ok {
		t.Fatalf("members %d %v", n, ok)
	}
}

func TestSessionTimeoutDropsMember(t *testing.T) {
	c := clock.NewFake(time.Unix(1000, 0))
	m := New(Config{Clock: c})
	hb(m, "a", 0, []string{"t"})
	p := m.Partition(PartKey{"g", topicT.ID, 1})
	p.Init(0, true)
	p.Acquire("a", c.Now(), []Span{{0, 4, false}}, 5, 100, m.Limits("g"))
	c.Advance(46 * time.Second)
	b := hb(m, "b", 0, []string{"t"})
	if !slices.Equal(assigned(b), []int32{0, 1, 2}) {
		t.Fatalf("b after a timed out: %v, want all", assigned(b))
	}
	if acq, _ := p.InFlight(); acq != 0 {
		t.Fatalf("a's records still acquired after its session timed out")
	}
}

func TestShareSessions(t *testing.T) {
	m := New(Config{Clock: clock.NewFake(time.Unix(1000, 0))})
	tp0, tp1 := TP{[16]byte{1}, 0}, TP{[16]byte{1}, 1}
	if _, _, _, err := m.FetchSession("g", "a", 0, []TP{tp0}, nil, true); err != kerr.InvalidRequest {
		t.Fatalf("acks in epoch 0: %v", err)
	}
	if _, _, _, err := m.FetchSession("g", "a", 1, []TP{tp0}, nil, false); err != kerr.ShareSessionNotFound {
		t.Fatalf("epoch 1 without a session: %v", err)
	}
	parts, _, _, err := m.FetchSession("g", "a", 0, []TP{tp0}, nil, false)
	if err != nil || !slices.Equal(parts, []TP{tp0}) {
		t.Fatalf("open: %v %v", parts, err)
	}
	// Incremental: epoch 1 adds tp1, the session fetches both.
	parts, _, _, err = m.FetchSession("g", "a", 1, []TP{tp1}, nil, false)
	if err != nil || !slices.Equal(parts, []TP{tp0, tp1}) {
		t.Fatalf("epoch 1: %v %v", parts, err)
	}
	if _, _, _, err := m.FetchSession("g", "a", 1, nil, nil, false); err != kerr.InvalidShareSessionEpoch {
		t.Fatalf("epoch 1 again: %v, want INVALID_SHARE_SESSION_EPOCH", err)
	}
	if final, err := m.AckSession("g", "a", 2); final || err != nil {
		t.Fatalf("ack at epoch 2: %v %v", final, err)
	}
	parts, forgotten, _, err := m.FetchSession("g", "a", 3, nil, []TP{tp0}, false)
	if err != nil || !slices.Equal(parts, []TP{tp1}) || !slices.Equal(forgotten, []TP{tp0}) {
		t.Fatalf("forget: %v %v %v", parts, forgotten, err)
	}
	if _, err := m.AckSession("g", "a", 0); err != kerr.InvalidShareSessionEpoch {
		t.Fatalf("ShareAcknowledge epoch 0: %v", err)
	}
	if final, err := m.AckSession("g", "a", -1); !final || err != nil {
		t.Fatalf("close: %v %v", final, err)
	}
}
