package group

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/clock"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/node/stream/streamtest"
)

// locator is a one-node Locator whose answer a test can flip.
type locator struct{ notSelf atomic.Bool }

func (l *locator) Locate(ctx context.Context, name string) (Broker, bool, error) {
	if !stream.IsSystemName(name) {
		return Broker{}, false, errors.New("not an offsets stream: " + name)
	}
	if l.notSelf.Load() {
		return Broker{NodeID: 2, Host: "127.0.0.2", Port: 9092}, false, nil
	}
	return Broker{NodeID: 1, Host: "127.0.0.1", Port: 9092}, true, nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	t   testing.TB
	st  *streamtest.Env
	loc *locator
	c   *Coordinator
	cfg Config
	clk *clock.Fake // the coordinator's time: moves only when a test says so
}

func newEnv(t testing.TB, cfg Config) *env {
	e := &env{t: t, st: streamtest.New(t, stream.Config{}), loc: &locator{}, cfg: cfg,
		clk: clock.NewFake(time.Unix(1_700_000_000, 0))}
	e.start()
	t.Cleanup(func() { e.c.Close() })
	return e
}

func (e *env) start() {
	cfg := e.cfg
	cfg.Streams, cfg.Locator, cfg.Logger, cfg.Clock = e.st.Svc, e.loc, quiet, e.clk
	if cfg.MinSessionTimeout == 0 {
		cfg.MinSessionTimeout = time.Millisecond
	}
	e.c = NewWithConfig(cfg)
}

// restart stops the coordinator, restarts the stream service on the same
// WAL and registry, and starts a fresh coordinator: what a node restart
// does to the group state.
func (e *env) restart() {
	e.c.Close()
	e.st.Restart()
	e.start()
}

func (e *env) do(req kmsg.Request) kmsg.Response {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := e.c.Handle(WithClient(ctx, "cli", "127.0.0.1"), req)
	if err != nil {
		e.t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

// async runs a (long-poll) request in the background.
func (e *env) async(req kmsg.Request) <-chan kmsg.Response {
	ch := make(chan kmsg.Response, 1)
	go func() {
		resp, err := e.c.Handle(WithClient(context.Background(), "cli", "127.0.0.1"), req)
		if err != nil {
			e.t.Errorf("%s: %v", kmsg.NameForKey(req.Key()), err)
		}
		ch <- resp
	}()
	return ch
}

func recv[T kmsg.Response](t testing.TB, ch <-chan kmsg.Response) T {
	t.Helper()
	select {
	case r := <-ch:
		return r.(T)
	case <-time.After(20 * time.Second):
		t.Fatal("no response within 20s")
	}
	panic("unreachable")
}

// pending reports whether the long-poll is still waiting after the
// coordinator had every chance to answer it (its state is only changed by
// requests and timers, none of which are due).
func pending(ch <-chan kmsg.Response) bool {
	select {
	case <-ch:
		return false
	case <-time.After(50 * time.Millisecond):
		return true
	}
}

type joinOpts struct {
	version   int16
	member    string
	instance  string
	session   time.Duration
	rebalance time.Duration
	meta      string
	protocols []string
}

func joinReq(group string, o joinOpts) *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.Version = o.version
	if r.Version == 0 {
		r.Version = 9
	}
	r.Group, r.MemberID, r.ProtocolType = group, o.member, "consumer"
	if o.session == 0 {
		o.session = 10 * time.Second
	}
	if o.rebalance == 0 {
		o.rebalance = 10 * time.Second
	}
	r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = int32(o.session/time.Millisecond), int32(o.rebalance/time.Millisecond)
	if o.instance != "" {
		r.InstanceID = &o.instance
	}
	if o.protocols == nil {
		o.protocols = []string{"range"}
	}
	for _, p := range o.protocols {
		r.Protocols = append(r.Protocols, kmsg.JoinGroupRequestProtocol{Name: p, Metadata: []byte(o.meta)})
	}
	return r
}

// joinNew joins as a new dynamic member (through MEMBER_ID_REQUIRED) and
// returns the channel of the real join.
func (e *env) joinNew(group string, o joinOpts) (string, <-chan kmsg.Response) {
	e.t.Helper()
	first := e.do(joinReq(group, o)).(*kmsg.JoinGroupResponse)
	if first.ErrorCode != kerr.MemberIDRequired.Code || first.MemberID == "" {
		e.t.Fatalf("first join: error %d member %q, want MEMBER_ID_REQUIRED with an id", first.ErrorCode, first.MemberID)
	}
	o.member = first.MemberID
	return first.MemberID, e.async(joinReq(group, o))
}

func syncReq(group, member string, gen int32, assign map[string]string) *kmsg.SyncGroupRequest {
	r := kmsg.NewPtrSyncGroupRequest()
	r.Version = 5
	r.Group, r.MemberID, r.Generation = group, member, gen
	pt, p := "consumer", "range"
	r.ProtocolType, r.Protocol = &pt, &p
	for m, a := range assign {
		r.GroupAssignment = append(r.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m, MemberAssignment: []byte(a)})
	}
	return r
}

// awaitRebalance heartbeats as member until told to rejoin (the join that
// starts the rebalance runs concurrently).
func (e *env) awaitRebalance(group, member string, gen int32) {
	e.t.Helper()
	e.until("REBALANCE_IN_PROGRESS", func() bool {
		ec := e.heartbeat(group, member, gen)
		if ec != 0 && ec != kerr.RebalanceInProgress.Code {
			e.t.Fatalf("heartbeat: %v, waiting for REBALANCE_IN_PROGRESS", kerr.ErrorForCode(ec))
		}
		return ec == kerr.RebalanceInProgress.Code
	})
}

// until waits for cond, which a request running on another goroutine makes
// true; the deadline only bounds a broken test (the coordinator's clock is
// fake: no timer fires while the test waits).
func (e *env) until(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("gave up waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// state is the group's state as DescribeGroups reports it.
func (e *env) state(group string) string { return e.describe(group).State }

func (e *env) heartbeat(group, member string, gen int32) int16 {
	e.t.Helper()
	r := kmsg.NewPtrHeartbeatRequest()
	r.Version = 4
	r.Group, r.MemberID, r.Generation = group, member, gen
	return e.do(r).(*kmsg.HeartbeatResponse).ErrorCode
}

// stableOne brings a one-member group to Stable and returns the member id
// and generation.
func (e *env) stableOne(group string, o joinOpts, assignment string) (string, int32) {
	e.t.Helper()
	id, ch := e.joinNew(group, o)
	jr := recv[*kmsg.JoinGroupResponse](e.t, ch)
	if jr.ErrorCode != 0 || jr.LeaderID != id {
		e.t.Fatalf("join: error %d leader %q, want leader %q", jr.ErrorCode, jr.LeaderID, id)
	}
	sr := e.do(syncReq(group, id, jr.Generation, map[string]string{id: assignment})).(*kmsg.SyncGroupResponse)
	if sr.ErrorCode != 0 || string(sr.MemberAssignment) != assignment {
		e.t.Fatalf("sync: error %d assignment %q", sr.ErrorCode, sr.MemberAssignment)
	}
	return id, jr.Generation
}

func TestJoinSyncHeartbeatOneMember(t *testing.T) {
	e := newEnv(t, Config{})
	id, ch := e.joinNew("g", joinOpts{meta: "m1"})
	jr := recv[*kmsg.JoinGroupResponse](t, ch)
	if jr.ErrorCode != 0 || jr.Generation != 1 || jr.LeaderID != id || jr.MemberID != id || str(jr.Protocol) != "range" {
		t.Fatalf("join = %+v", jr)
	}
	if len(jr.Members) != 1 || jr.Members[0].MemberID != id || string(jr.Members[0].ProtocolMetadata) != "m1" {
		t.Fatalf("leader's member list = %+v", jr.Members)
	}
	sr := e.do(syncReq("g", id, 1, map[string]string{id: "a1"})).(*kmsg.SyncGroupResponse)
	if sr.ErrorCode != 0 || string(sr.MemberAssignment) != "a1" || str(sr.Protocol) != "range" {
		t.Fatalf("sync = %+v", sr)
	}
	if ec := e.heartbeat("g", id, 1); ec != 0 {
		t.Fatalf("heartbeat: %v", kerr.ErrorForCode(ec))
	}
	if ec := e.heartbeat("g", id, 0); ec != kerr.IllegalGeneration.Code {
		t.Fatalf("heartbeat of an old generation: %v", kerr.ErrorForCode(ec))
	}
	if ec := e.heartbeat("g", "nobody", 1); ec != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat of an unknown member: %v", kerr.ErrorForCode(ec))
	}
	// Before KIP-394 (v3) a member without id joins directly.
	old := e.do(joinReq("g-old", joinOpts{version: 3})).(*kmsg.JoinGroupResponse)
	if old.ErrorCode != 0 || old.MemberID == "" || old.LeaderID != old.MemberID {
		t.Fatalf("v3 join = %+v", old)
	}
}

func TestJoinValidation(t *testing.T) {
	e := newEnv(t, Config{MinSessionTimeout: time.Second, MaxSessionTimeout: time.Minute})
	cases := []struct {
		name string
		req  *kmsg.JoinGroupRequest
		want int16
	}{
		{"empty group", joinReq("", joinOpts{}), kerr.InvalidGroupID.Code},
		{"short session", joinReq("g", joinOpts{session: 10 * time.Millisecond}), kerr.InvalidSessionTimeout.Code},
		{"long session", joinReq("g", joinOpts{session: time.Hour}), kerr.InvalidSessionTimeout.Code},
		{"no protocols", joinReq("g", joinOpts{protocols: []string{}}), kerr.InconsistentGroupProtocol.Code},
		{"unknown member", joinReq("g", joinOpts{member: "ghost"}), kerr.UnknownMemberID.Code},
	}
	for _, tc := range cases {
		if got := e.do(tc.req).(*kmsg.JoinGroupResponse).ErrorCode; got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, kerr.ErrorForCode(got), kerr.ErrorForCode(tc.want))
		}
	}
	// A member with no protocol in common with the group is refused.
	e.stableOne("g", joinOpts{}, "a")
	r := joinReq("g", joinOpts{version: 3, protocols: []string{"roundrobin"}})
	if got := e.do(r).(*kmsg.JoinGroupResponse).ErrorCode; got != kerr.InconsistentGroupProtocol.Code {
		t.Errorf("foreign protocol: %v", kerr.ErrorForCode(got))
	}
}

// TestRebalanceTwoMembers: a second member's join holds until the first
// learns of the rebalance from its heartbeat and rejoins; then both get the
// new generation, only the leader with the member list, and SyncGroup
// hands out the leader's assignment.
func TestRebalanceTwoMembers(t *testing.T) {
	e := newEnv(t, Config{})
	a, gen := e.stableOne("g", joinOpts{meta: "A"}, "all")
	b, bch := e.joinNew("g", joinOpts{meta: "B"})
	e.awaitRebalance("g", a, gen)
	if !pending(bch) {
		t.Fatal("second join answered before the first member rejoined")
	}
	ach := e.async(joinReq("g", joinOpts{member: a, meta: "A"}))
	ja, jb := recv[*kmsg.JoinGroupResponse](t, ach), recv[*kmsg.JoinGroupResponse](t, bch)
	if ja.Generation != gen+1 || jb.Generation != gen+1 || ja.LeaderID != a || jb.LeaderID != a {
		t.Fatalf("joins: a %+v b %+v", ja, jb)
	}
	if len(ja.Members) != 2 || len(jb.Members) != 0 {
		t.Fatalf("member lists: leader %d, follower %d", len(ja.Members), len(jb.Members))
	}
	// The follower syncs first and waits for the leader's assignment.
	sbch := e.async(syncReq("g", b, ja.Generation, nil))
	if !pending(sbch) {
		t.Fatal("follower's sync answered before the leader's")
	}
	sa := e.do(syncReq("g", a, ja.Generation, map[string]string{a: "p0", b: "p1"})).(*kmsg.SyncGroupResponse)
	sb := recv[*kmsg.SyncGroupResponse](t, sbch)
	if string(sa.MemberAssignment) != "p0" || string(sb.MemberAssignment) != "p1" {
		t.Fatalf("assignments: %q %q", sa.MemberAssignment, sb.MemberAssignment)
	}
	// A follower rejoining with unchanged metadata gets the generation
	// back without a rebalance.
	again := e.do(joinReq("g", joinOpts{member: b, meta: "B"})).(*kmsg.JoinGroupResponse)
	if again.ErrorCode != 0 || again.Generation != ja.Generation {
		t.Fatalf("unchanged rejoin = %+v", again)
	}
	if ec := e.heartbeat("g", a, ja.Generation); ec != 0 {
		t.Fatalf("heartbeat after: %v", kerr.ErrorForCode(ec))
	}
	// Changed metadata (a cooperative consumer after revoking) rebalances.
	bch = e.async(joinReq("g", joinOpts{member: b, meta: "B2"}))
	e.awaitRebalance("g", a, ja.Generation)
	ach = e.async(joinReq("g", joinOpts{member: a, meta: "A"}))
	ja, jb = recv[*kmsg.JoinGroupResponse](t, ach), recv[*kmsg.JoinGroupResponse](t, bch)
	if ja.Generation != gen+2 || jb.Generation != gen+2 {
		t.Fatalf("generations %d %d, want %d", ja.Generation, jb.Generation, gen+2)
	}
}

// TestSessionTimeoutEvicts: a member that stops heartbeating is removed
// after its session timeout and the other one rebalances alone.
func TestSessionTimeoutEvicts(t *testing.T) {
	e := newEnv(t, Config{})
	o := joinOpts{session: 300 * time.Millisecond, rebalance: 5 * time.Second}
	a, _ := e.stableOne("g", o, "x")
	b, bch := e.joinNew("g", o)
	ach := e.async(joinReq("g", joinOpts{member: a, session: o.session, rebalance: o.rebalance}))
	ja, jb := recv[*kmsg.JoinGroupResponse](t, ach), recv[*kmsg.JoinGroupResponse](t, bch)
	gen := ja.Generation
	if jb.Generation != gen {
		t.Fatal("generations differ")
	}
	sbch := e.async(syncReq("g", b, gen, nil))
	e.do(syncReq("g", a, gen, map[string]string{a: "0", b: "1"}))
	recv[*kmsg.SyncGroupResponse](t, sbch)
	// a heartbeats within its session, b goes silent: b expires, a is
	// asked to rejoin.
	e.clk.Advance(200 * time.Millisecond)
	if ec := e.heartbeat("g", a, gen); ec != 0 {
		t.Fatalf("heartbeat within the session: %v", kerr.ErrorForCode(ec))
	}
	if ec := e.heartbeat("g", b, gen); ec != 0 {
		t.Fatalf("b's heartbeat within the session: %v", kerr.ErrorForCode(ec))
	}
	e.clk.Advance(200 * time.Millisecond)
	if ec := e.heartbeat("g", a, gen); ec != 0 {
		t.Fatalf("heartbeat 400 ms in, b's session not yet over: %v", kerr.ErrorForCode(ec))
	}
	e.clk.Advance(200 * time.Millisecond) // b: 400 ms silent
	if ec := e.heartbeat("g", a, gen); ec != kerr.RebalanceInProgress.Code {
		t.Fatalf("heartbeat after b expired: %v, want REBALANCE_IN_PROGRESS", kerr.ErrorForCode(ec))
	}
	ja = e.do(joinReq("g", joinOpts{member: a, session: o.session, rebalance: o.rebalance})).(*kmsg.JoinGroupResponse)
	if ja.ErrorCode != 0 || len(ja.Members) != 1 || ja.Generation != gen+1 {
		t.Fatalf("rejoin alone = %+v", ja)
	}
	if ec := e.heartbeat("g", b, gen); ec != kerr.UnknownMemberID.Code {
		t.Fatalf("expired member's heartbeat: %v", kerr.ErrorForCode(ec))
	}
}

// TestRebalanceTimeoutDropsLaggard: a member that does not rejoin within
// the rebalance timeout is left out of the new generation, and not before.
func TestRebalanceTimeoutDropsLaggard(t *testing.T) {
	e := newEnv(t, Config{})
	o := joinOpts{session: 10 * time.Second, rebalance: 400 * time.Millisecond}
	a, _ := e.stableOne("g", o, "x")
	_, bch := e.joinNew("g", o) // a never rejoins
	e.until("PreparingRebalance", func() bool { return e.state("g") == "PreparingRebalance" })
	e.clk.Advance(399 * time.Millisecond)
	if !pending(bch) {
		t.Fatal("join completed before the rebalance timeout")
	}
	e.clk.Advance(time.Millisecond)
	jb := recv[*kmsg.JoinGroupResponse](t, bch)
	if jb.ErrorCode != 0 || len(jb.Members) != 1 || jb.LeaderID != jb.MemberID {
		t.Fatalf("join after timeout = %+v", jb)
	}
	if ec := e.heartbeat("g", a, jb.Generation); ec != kerr.UnknownMemberID.Code {
		t.Fatalf("dropped member's heartbeat: %v", kerr.ErrorForCode(ec))
	}
}

// TestLeaderNeverSyncs: followers waiting in SyncGroup are not stalled by
// a leader that never sends its assignment: the sync timeout (the
// rebalance timeout) answers them REBALANCE_IN_PROGRESS.
func TestLeaderNeverSyncs(t *testing.T) {
	e := newEnv(t, Config{})
	o := joinOpts{session: 10 * time.Second, rebalance: 400 * time.Millisecond}
	a, gen := e.stableOne("g", o, "x")
	b, bch := e.joinNew("g", o)
	ach := e.async(joinReq("g", joinOpts{member: a, session: o.session, rebalance: o.rebalance}))
	recv[*kmsg.JoinGroupResponse](t, ach)
	recv[*kmsg.JoinGroupResponse](t, bch)
	sbch := e.async(syncReq("g", b, gen+1, nil))
	if !pending(sbch) {
		t.Fatal("follower's sync answered before the leader's assignment or the timeout")
	}
	e.clk.Advance(400 * time.Millisecond)
	sb := recv[*kmsg.SyncGroupResponse](t, sbch)
	if sb.ErrorCode != kerr.RebalanceInProgress.Code {
		t.Fatalf("follower's sync: %v, want REBALANCE_IN_PROGRESS", kerr.ErrorForCode(sb.ErrorCode))
	}
	jb := e.do(joinReq("g", joinOpts{member: b, session: o.session, rebalance: o.rebalance})).(*kmsg.JoinGroupResponse)
	if jb.ErrorCode != 0 || jb.LeaderID != b || len(jb.Members) != 1 {
		t.Fatalf("rejoin without the silent leader = %+v", jb)
	}
}

// TestLeaveGroup: leaving (v0 single, v3+ batch) makes the rest rebalance;
// the last one leaving empties the group.
func TestLeaveGroup(t *testing.T) {
	e := newEnv(t, Config{})
	a, gen := e.stableOne("g", joinOpts{}, "x")
	lr := kmsg.NewPtrLeaveGroupRequest()
	lr.Version, lr.Group = 5, "g"
	lr.Members = []kmsg.LeaveGroupRequestMember{{MemberID: a}, {MemberID: "ghost"}}
	resp := e.do(lr).(*kmsg.LeaveGroupResponse)
	if resp.ErrorCode != 0 || len(resp.Members) != 2 || resp.Members[0].ErrorCode != 0 || resp.Members[1].ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("leave = %+v", resp)
	}
	if ec := e.heartbeat("g", a, gen); ec != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat after leaving: %v", kerr.ErrorForCode(ec))
	}
	d := e.describe("g")
	if d.State != "Dead" || len(d.Members) != 0 {
		t.Fatalf("group after the last member left = %+v", d)
	}
	old := kmsg.NewPtrLeaveGroupRequest()
	old.Version, old.Group, old.MemberID = 0, "g", "ghost"
	if ec := e.do(old).(*kmsg.LeaveGroupResponse).ErrorCode; ec != kerr.UnknownMemberID.Code {
		t.Fatalf("v0 leave of an unknown member: %v", kerr.ErrorForCode(ec))
	}
}

// TestStaticMembership: a restarted static member (same instance id, no
// member id) takes its old place without a rebalance and gets its old
// assignment; the old incarnation is fenced.
func TestStaticMembership(t *testing.T) {
	e := newEnv(t, Config{})
	o := joinOpts{instance: "i1", meta: "A"}
	// Static members skip MEMBER_ID_REQUIRED.
	jr := e.do(joinReq("g", o)).(*kmsg.JoinGroupResponse)
	if jr.ErrorCode != 0 || jr.LeaderID != jr.MemberID {
		t.Fatalf("static join = %+v", jr)
	}
	old, gen := jr.MemberID, jr.Generation
	e.do(syncReq("g", old, gen, map[string]string{old: "mine"}))
	re := e.do(joinReq("g", o)).(*kmsg.JoinGroupResponse)
	if re.ErrorCode != 0 || re.Generation != gen || re.MemberID == old || !re.SkipAssignment || re.LeaderID != re.MemberID {
		t.Fatalf("static rejoin = %+v (old member %s, generation %d)", re, old, gen)
	}
	sr := e.do(syncReq("g", re.MemberID, gen, nil)).(*kmsg.SyncGroupResponse)
	if sr.ErrorCode != 0 || string(sr.MemberAssignment) != "mine" {
		t.Fatalf("static member's sync = %+v", sr)
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = 4, "g", old, gen, &o.instance
	if ec := e.do(hb).(*kmsg.HeartbeatResponse).ErrorCode; ec != kerr.FencedInstanceID.Code {
		t.Fatalf("old incarnation's heartbeat: %v, want FENCED_INSTANCE_ID", kerr.ErrorForCode(ec))
	}
	// Leaving by instance id alone.
	lr := kmsg.NewPtrLeaveGroupRequest()
	lr.Version, lr.Group = 4, "g"
	lr.Members = []kmsg.LeaveGroupRequestMember{{InstanceID: &o.instance}}
	if r := e.do(lr).(*kmsg.LeaveGroupResponse); r.Members[0].ErrorCode != 0 {
		t.Fatalf("static leave: %v", kerr.ErrorForCode(r.Members[0].ErrorCode))
	}
	if d := e.describe("g"); len(d.Members) != 0 {
		t.Fatalf("members after static leave: %+v", d.Members)
	}
}

func (e *env) describe(group string) kmsg.DescribeGroupsResponseGroup {
	e.t.Helper()
	r := kmsg.NewPtrDescribeGroupsRequest()
	r.Version, r.Groups = 5, []string{group}
	return e.do(r).(*kmsg.DescribeGroupsResponse).Groups[0]
}

func commitReq(group, member string, gen int32, topic string, offsets map[int32]int64) *kmsg.OffsetCommitRequest {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Version = 8
	r.Group, r.MemberID, r.Generation = group, member, gen
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = topic
	for p, o := range offsets {
		meta := "m"
		t.Partitions = append(t.Partitions, kmsg.OffsetCommitRequestTopicPartition{Partition: p, Offset: o, LeaderEpoch: 3, Metadata: &meta})
	}
	r.Topics = append(r.Topics, t)
	return r
}

func commitErr(r kmsg.Response) int16 {
	for _, t := range r.(*kmsg.OffsetCommitResponse).Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return p.ErrorCode
			}
		}
	}
	return 0
}

// fetch returns the committed offsets of topic's partitions 0..n-1 (v7
// single group, v8 batched, alternately, so both encodings are covered).
func (e *env) fetch(group, topic string, n int32, version int16) map[int32]int64 {
	e.t.Helper()
	r := kmsg.NewPtrOffsetFetchRequest()
	r.Version = version
	var parts []int32
	for p := int32(0); p < n; p++ {
		parts = append(parts, p)
	}
	out := map[int32]int64{}
	if version >= 8 {
		r.Groups = []kmsg.OffsetFetchRequestGroup{{Group: group, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: topic, Partitions: parts}}}}
		g := e.do(r).(*kmsg.OffsetFetchResponse).Groups[0]
		if g.ErrorCode != 0 {
			e.t.Fatalf("fetch: %v", kerr.ErrorForCode(g.ErrorCode))
		}
		for _, p := range g.Topics[0].Partitions {
			out[p.Partition] = p.Offset
		}
		return out
	}
	r.Group = group
	r.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: topic, Partitions: parts}}
	resp := e.do(r).(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 {
		e.t.Fatalf("fetch: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	for _, p := range resp.Topics[0].Partitions {
		out[p.Partition] = p.Offset
	}
	return out
}

// TestCommitFetchSurvivesRestart: commits are validated against the
// membership, stored in the offsets stream, and a fresh coordinator after
// a restart of the stream service serves them again.
func TestCommitFetchSurvivesRestart(t *testing.T) {
	e := newEnv(t, Config{})
	// Simple commit: no members, generation -1.
	if ec := commitErr(e.do(commitReq("simple", "", -1, "t", map[int32]int64{0: 5, 1: 7}))); ec != 0 {
		t.Fatalf("simple commit: %v", kerr.ErrorForCode(ec))
	}
	a, gen := e.stableOne("g", joinOpts{}, "x")
	for _, tc := range []struct {
		member string
		gen    int32
		want   int16
	}{
		{a, gen + 1, kerr.IllegalGeneration.Code},
		{"ghost", gen, kerr.UnknownMemberID.Code},
		{"", -1, kerr.UnknownMemberID.Code}, // not simple: the group has members
		{a, gen, 0},
	} {
		if ec := commitErr(e.do(commitReq("g", tc.member, tc.gen, "t", map[int32]int64{0: 10, 2: 30}))); ec != tc.want {
			t.Fatalf("commit by %q gen %d: %v, want %v", tc.member, tc.gen, kerr.ErrorForCode(ec), kerr.ErrorForCode(tc.want))
		}
	}
	if ec := commitErr(e.do(commitReq("g", a, gen, "t", map[int32]int64{0: 11}))); ec != 0 {
		t.Fatal(kerr.ErrorForCode(ec))
	}
	want := map[int32]int64{0: 11, 1: -1, 2: 30}
	check := func(when string) {
		for _, v := range []int16{1, 7, 8} {
			if got := e.fetch("g", "t", 3, v); !equal(got, want) {
				t.Fatalf("%s, fetch v%d = %v, want %v", when, v, got, want)
			}
		}
		if got := e.fetch("simple", "t", 2, 8); !equal(got, map[int32]int64{0: 5, 1: 7}) {
			t.Fatalf("%s, simple group = %v", when, got)
		}
	}
	check("before restart")
	e.restart()
	check("after restart")
	// The restarted coordinator has no members: a commit of the old
	// generation is refused, the consumer rejoins.
	if ec := commitErr(e.do(commitReq("g", a, gen, "t", map[int32]int64{0: 12}))); ec != kerr.UnknownMemberID.Code {
		t.Fatalf("commit of a member from before the restart: %v", kerr.ErrorForCode(ec))
	}
	// All topics (Topics null).
	r := kmsg.NewPtrOffsetFetchRequest()
	r.Version, r.Group = 7, "g"
	resp := e.do(r).(*kmsg.OffsetFetchResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
		t.Fatalf("fetch of all topics = %+v", resp.Topics)
	}
	for _, p := range resp.Topics[0].Partitions {
		if p.LeaderEpoch != 3 || str(p.Metadata) != "m" {
			t.Fatalf("partition %d: epoch %d metadata %q", p.Partition, p.LeaderEpoch, str(p.Metadata))
		}
	}
}

func equal(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestCompaction: many commits keep the offsets stream short, and the
// latest offsets survive the rewrite and a restart.
func TestCompaction(t *testing.T) {
	e := newEnv(t, Config{CompactAfter: 20})
	for i := int64(1); i <= 100; i++ {
		if ec := commitErr(e.do(commitReq("g", "", -1, "t", map[int32]int64{0: i, 1: 1000 + i}))); ec != 0 {
			t.Fatal(kerr.ErrorForCode(ec))
		}
	}
	name, _ := streamName("g")
	info, err := e.st.Svc.Head(stream.WithSystemAccess(context.Background()), name)
	if err != nil {
		t.Fatal(err)
	}
	if live := info.NextOffset - info.StartOffset; live > 20+2+2 {
		t.Fatalf("offsets stream holds %d records after compaction (start %d)", live, info.StartOffset)
	}
	e.restart()
	if got := e.fetch("g", "t", 2, 8); !equal(got, map[int32]int64{0: 100, 1: 1100}) {
		t.Fatalf("after compaction and restart: %v", got)
	}
}

// TestNotCoordinator: a node that does not serve the group's offsets
// stream answers NOT_COORDINATOR and forgets the group; FindCoordinator
// names the serving broker.
func TestNotCoordinator(t *testing.T) {
	e := newEnv(t, Config{})
	a, gen := e.stableOne("g", joinOpts{}, "x")
	jch := e.async(joinReq("g2", joinOpts{version: 3})) // a lone member: answered at once
	recv[*kmsg.JoinGroupResponse](t, jch)
	e.loc.notSelf.Store(true)
	if ec := e.heartbeat("g", a, gen); ec != kerr.NotCoordinator.Code {
		t.Fatalf("heartbeat: %v", kerr.ErrorForCode(ec))
	}
	if ec := commitErr(e.do(commitReq("g", a, gen, "t", map[int32]int64{0: 1}))); ec != kerr.NotCoordinator.Code {
		t.Fatalf("commit: %v", kerr.ErrorForCode(ec))
	}
	for _, v := range []int16{0, 3, 4} {
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.Version, r.CoordinatorKey, r.CoordinatorKeys = v, "g", []string{"g", ""}
		resp := e.do(r).(*kmsg.FindCoordinatorResponse)
		if v < 4 {
			if resp.ErrorCode != 0 || resp.NodeID != 2 || resp.Host != "127.0.0.2" || resp.Port != 9092 {
				t.Fatalf("v%d: %+v", v, resp)
			}
			continue
		}
		if len(resp.Coordinators) != 2 || resp.Coordinators[0].NodeID != 2 || resp.Coordinators[1].ErrorCode != kerr.InvalidRequest.Code {
			t.Fatalf("v%d: %+v", v, resp.Coordinators)
		}
	}
	// Back as coordinator, the membership starts afresh.
	e.loc.notSelf.Store(false)
	if ec := e.heartbeat("g", a, gen); ec != kerr.UnknownMemberID.Code {
		t.Fatalf("heartbeat after the group came back: %v", kerr.ErrorForCode(ec))
	}
}

// TestCloseEndsLongPolls: a join waiting for a rebalance is answered
// NOT_COORDINATOR when the coordinator closes.
func TestCloseEndsLongPolls(t *testing.T) {
	e := newEnv(t, Config{})
	e.stableOne("g", joinOpts{}, "x")
	_, ch := e.joinNew("g", joinOpts{})
	if !pending(ch) {
		t.Fatal("join answered before the rebalance completed")
	}
	e.c.Close()
	if jr := recv[*kmsg.JoinGroupResponse](t, ch); jr.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("join after Close: %v", kerr.ErrorForCode(jr.ErrorCode))
	}
}

// TestAdmin: ListGroups, DescribeGroups, OffsetDelete, DeleteGroups.
func TestAdmin(t *testing.T) {
	e := newEnv(t, Config{})
	a, gen := e.stableOne("live", joinOpts{}, "x")
	if ec := commitErr(e.do(commitReq("live", a, gen, "t", map[int32]int64{0: 1}))); ec != 0 {
		t.Fatal(kerr.ErrorForCode(ec))
	}
	if ec := commitErr(e.do(commitReq("idle/with space", "", -1, "t", map[int32]int64{0: 4, 1: 5}))); ec != 0 {
		t.Fatal(kerr.ErrorForCode(ec))
	}
	lr := kmsg.NewPtrListGroupsRequest()
	lr.Version = 4
	got := map[string]string{}
	for _, g := range e.do(lr).(*kmsg.ListGroupsResponse).Groups {
		got[g.Group] = g.GroupState
	}
	if got["live"] != "Stable" || got["idle/with space"] != "Empty" || len(got) != 2 {
		t.Fatalf("ListGroups = %v", got)
	}
	lr.StatesFilter = []string{"Stable"}
	if gs := e.do(lr).(*kmsg.ListGroupsResponse).Groups; len(gs) != 1 || gs[0].Group != "live" {
		t.Fatalf("ListGroups filtered = %+v", gs)
	}
	d := e.describe("live")
	if d.State != "Stable" || d.Protocol != "range" || len(d.Members) != 1 || d.Members[0].ClientID != "cli" || string(d.Members[0].MemberAssignment) != "x" {
		t.Fatalf("DescribeGroups = %+v", d)
	}

	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Version, del.Groups = 2, []string{"live", "idle/with space", "never"}
	codes := map[string]int16{}
	for _, g := range e.do(del).(*kmsg.DeleteGroupsResponse).Groups {
		codes[g.Group] = g.ErrorCode
	}
	if codes["live"] != kerr.NonEmptyGroup.Code || codes["idle/with space"] != 0 || codes["never"] != kerr.GroupIDNotFound.Code {
		t.Fatalf("DeleteGroups = %v", codes)
	}
	if got := e.fetch("idle/with space", "t", 2, 8); !equal(got, map[int32]int64{0: -1, 1: -1}) {
		t.Fatalf("offsets of a deleted group = %v", got)
	}

	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "live"
	od.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
	// The member's metadata is not consumer-protocol bytes, so it is
	// subscribed to nothing and the delete goes through.
	if r := e.do(od).(*kmsg.OffsetDeleteResponse); r.ErrorCode != 0 || r.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("OffsetDelete = %+v", r)
	}
	if got := e.fetch("live", "t", 1, 8); got[0] != -1 {
		t.Fatalf("offset after OffsetDelete = %v", got)
	}
}

// TestOffsetDeleteSubscribed: a running consumer group's subscribed topic
// keeps its offsets.
func TestOffsetDeleteSubscribed(t *testing.T) {
	e := newEnv(t, Config{})
	md := kmsg.NewConsumerMemberMetadata()
	md.Topics = []string{"t"}
	a, gen := e.stableOne("g", joinOpts{meta: string(md.AppendTo(nil))}, "x")
	if ec := commitErr(e.do(commitReq("g", a, gen, "t", map[int32]int64{0: 1}))); ec != 0 {
		t.Fatal(kerr.ErrorForCode(ec))
	}
	od := kmsg.NewPtrOffsetDeleteRequest()
	od.Group = "g"
	od.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: 0}}}}
	if r := e.do(od).(*kmsg.OffsetDeleteResponse); r.Topics[0].Partitions[0].ErrorCode != kerr.GroupSubscribedToTopic.Code {
		t.Fatalf("OffsetDelete of a subscribed topic = %+v", r)
	}
}

func TestStreamNames(t *testing.T) {
	for _, id := range []string{"g", "my.group_1-x", ".", "..", "with space/slash~tilde", "ünï", "%41"} {
		name, err := streamName(id)
		if err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		if err := stream.ValidateName("/x" + name[len("/_sys"):]); err != nil {
			t.Fatalf("%q → %q is not a legal stream name: %v", id, name, err)
		}
		back, ok := groupID(name)
		if !ok || back != id {
			t.Fatalf("%q → %q → %q", id, name, back)
		}
	}
	long := make([]byte, 600)
	for i := range long {
		long[i] = 'a'
	}
	if _, err := streamName(string(long)); err == nil {
		t.Fatal("a 600-byte group id got a stream name")
	}
}

// TestListGroupsWithShareGroups: share groups from Config.ShareGroups are
// listed as type "share" under the same states and types filters as
// classic groups, and a share group's id is listed once, as a share group,
// even when offsets are stored under it.
func TestListGroupsWithShareGroups(t *testing.T) {
	e := newEnv(t, Config{ShareGroups: func() map[string]string {
		return map[string]string{"sg-empty": "Empty", "sg-live": "Stable", "both": "Stable"}
	}})
	e.stableOne("classic", joinOpts{}, "x")
	if ec := commitErr(e.do(commitReq("both", "", -1, "t", map[int32]int64{0: 1}))); ec != 0 {
		t.Fatal(kerr.ErrorForCode(ec))
	}
	list := func(states, types []string) map[string]string {
		lr := kmsg.NewPtrListGroupsRequest()
		lr.Version, lr.StatesFilter, lr.TypesFilter = 5, states, types
		got := map[string]string{}
		for _, g := range e.do(lr).(*kmsg.ListGroupsResponse).Groups {
			if _, dup := got[g.Group]; dup {
				t.Fatalf("group %q listed twice", g.Group)
			}
			got[g.Group] = g.GroupType + "/" + g.GroupState
		}
		return got
	}
	all := list(nil, nil)
	want := map[string]string{"classic": "classic/Stable", "sg-empty": "share/Empty", "sg-live": "share/Stable", "both": "share/Stable"}
	if fmt.Sprint(all) != fmt.Sprint(want) {
		t.Fatalf("ListGroups = %v, want %v", all, want)
	}
	if got := list(nil, []string{"Share"}); len(got) != 3 || got["classic"] != "" {
		t.Fatalf("ListGroups(types share) = %v", got)
	}
	if got := list([]string{"stable"}, []string{"share"}); len(got) != 2 || got["sg-empty"] != "" {
		t.Fatalf("ListGroups(stable share) = %v", got)
	}
	if got := list(nil, []string{"classic"}); len(got) != 1 || got["classic"] != "classic/Stable" {
		t.Fatalf("ListGroups(types classic) = %v", got)
	}
}
