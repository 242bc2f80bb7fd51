package group

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/node/stream"
)

// topicList is a topic source a test changes (Config.Topics).
type topicList struct {
	mu sync.Mutex
	ts []TopicInfo
}

func (l *topicList) get(context.Context) ([]TopicInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]TopicInfo(nil), l.ts...), nil
}

func (l *topicList) set(ts ...TopicInfo) {
	l.mu.Lock()
	l.ts = ts
	l.mu.Unlock()
}

func tid(b byte) [16]byte { return [16]byte{15: b} }

// cenv is a coordinator serving consumer-protocol groups over topics
// "a" (4 partitions) and "b" (2), on the fake clock.
func cenv(t testing.TB) (*env, *topicList) {
	l := &topicList{}
	l.set(TopicInfo{"a", tid(1), 4}, TopicInfo{"b", tid(2), 2})
	return newEnv(t, Config{Topics: l.get}), l
}

func joinCGH(group, member string, names []string, assignor string) *kmsg.ConsumerGroupHeartbeatRequest {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Version, r.Group, r.MemberID, r.MemberEpoch = 1, group, member, 0
	r.RebalanceTimeoutMillis = 10_000
	r.SubscribedTopicNames = names
	if assignor != "" {
		r.ServerAssignor = &assignor
	}
	r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	return r
}

// beatCGH is a heartbeat that reports owned (nil: a keepalive that does
// not say).
func beatCGH(group, member string, epoch int32, owned assignment) *kmsg.ConsumerGroupHeartbeatRequest {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.Version, r.Group, r.MemberID, r.MemberEpoch = 1, group, member, epoch
	r.RebalanceTimeoutMillis = -1
	if owned != nil {
		r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		for id, ps := range owned {
			r.Topics = append(r.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: id, Partitions: ps})
		}
	}
	return r
}

func (e *env) cgh(r *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	e.t.Helper()
	return e.do(r).(*kmsg.ConsumerGroupHeartbeatResponse)
}

// got is the assignment a heartbeat response carries (nil: none).
func got(r *kmsg.ConsumerGroupHeartbeatResponse) assignment {
	if r.Assignment == nil {
		return nil
	}
	out := assignment{}
	for _, t := range r.Assignment.Topics {
		out[t.TopicID] = append([]int32(nil), t.Partitions...)
	}
	return out
}

func (e *env) cdescribe(group string) kmsg.ConsumerGroupDescribeResponseGroup {
	e.t.Helper()
	r := kmsg.NewPtrConsumerGroupDescribeRequest()
	r.Version, r.Groups = 1, []string{group}
	return e.do(r).(*kmsg.ConsumerGroupDescribeResponse).Groups[0]
}

// noDoubleOwners fails if a partition is owned (assigned or pending
// revocation) by two members.
func noDoubleOwners(t *testing.T, e *env, group string) {
	t.Helper()
	g, ec := e.c.lockedGroup(stream.WithSystemAccess(context.Background()), group)
	if ec != 0 {
		t.Fatalf("group %s: error %d", group, ec)
	}
	defer g.mu.Unlock()
	if g.cons == nil {
		return
	}
	seen := map[[16]byte]map[int32]string{}
	for _, m := range g.cons.members {
		for _, a := range []assignment{m.assigned, m.revoking} {
			for id, ps := range a {
				for _, p := range ps {
					if seen[id] == nil {
						seen[id] = map[int32]string{}
					}
					if o, ok := seen[id][p]; ok {
						t.Fatalf("partition %v/%d owned by %s and %s", id, p, o, m.id)
					}
					seen[id][p] = m.id
				}
			}
		}
	}
}

// TestConsumerReconcileRevokesBeforeReassigning: a second member joins a
// group whose only member owns everything. The first member is told to
// give up half (its epoch stays), the second moves to the new epoch but
// gets nothing until the first reports the partitions gone; no partition
// is ever owned twice.
func TestConsumerReconcileRevokesBeforeReassigning(t *testing.T) {
	e, _ := cenv(t)
	ra := e.cgh(joinCGH("g", "A", []string{"a"}, "uniform"))
	if ra.ErrorCode != 0 || ra.MemberEpoch != 1 || got(ra).count() != 4 {
		t.Fatalf("first join: %+v, assignment %v", ra, got(ra))
	}
	if ra.HeartbeatIntervalMillis != 5000 {
		t.Fatalf("heartbeat interval %d, want the 5 s default", ra.HeartbeatIntervalMillis)
	}
	if d := e.cdescribe("g"); d.State != "Stable" || d.Epoch != 1 {
		t.Fatalf("describe after one join: %s epoch %d", d.State, d.Epoch)
	}
	ownedA := got(ra)

	rb := e.cgh(joinCGH("g", "B", []string{"a"}, "uniform"))
	if rb.ErrorCode != 0 || rb.MemberEpoch != 2 || got(rb) == nil || got(rb).count() != 0 {
		t.Fatalf("second join: %+v, assignment %v (nothing is free yet)", rb, got(rb))
	}
	noDoubleOwners(t, e, "g")
	if d := e.cdescribe("g"); d.State != "Reconciling" || d.Epoch != 2 {
		t.Fatalf("describe mid-rebalance: %s epoch %d", d.State, d.Epoch)
	}

	// A learns to revoke: epoch unchanged, two partitions kept.
	ra = e.cgh(beatCGH("g", "A", 1, ownedA))
	if ra.ErrorCode != 0 || ra.MemberEpoch != 1 || got(ra).count() != 2 {
		t.Fatalf("A's heartbeat: %+v, assignment %v, want 2 partitions at epoch 1", ra, got(ra))
	}
	kept := got(ra)
	// A keepalive does not tell that A revoked: B still waits.
	if r := e.cgh(beatCGH("g", "A", 1, nil)); r.ErrorCode != 0 || r.MemberEpoch != 1 {
		t.Fatalf("A's keepalive: %+v", r)
	}
	if r := e.cgh(beatCGH("g", "B", 2, assignment{})); got(r) != nil && got(r).count() != 0 {
		t.Fatalf("B got %v before A revoked", got(r))
	}
	noDoubleOwners(t, e, "g")

	// A reports the revocation done: it moves to epoch 2; then B gets
	// the released partitions.
	ra = e.cgh(beatCGH("g", "A", 1, kept))
	if ra.ErrorCode != 0 || ra.MemberEpoch != 2 {
		t.Fatalf("A after revoking: %+v", ra)
	}
	rb = e.cgh(beatCGH("g", "B", 2, assignment{}))
	if rb.ErrorCode != 0 || got(rb).count() != 2 || got(rb).intersect(kept).count() != 0 {
		t.Fatalf("B after A revoked: %+v, assignment %v (A kept %v)", rb, got(rb), kept)
	}
	noDoubleOwners(t, e, "g")
	if d := e.cdescribe("g"); d.State != "Stable" || len(d.Members) != 2 || d.AssignorName != "uniform" || d.Members[0].MemberType != 1 {
		t.Fatalf("describe when done: %+v", d)
	}
}

// TestConsumerEpochErrors: the errors Kafka answers for wrong epochs and
// members.
func TestConsumerEpochErrors(t *testing.T) {
	e, _ := cenv(t)
	ra := e.cgh(joinCGH("g", "A", []string{"a"}, ""))
	for _, tc := range []struct {
		name string
		req  *kmsg.ConsumerGroupHeartbeatRequest
		want int16
	}{
		{"epoch ahead of the member's", beatCGH("g", "A", ra.MemberEpoch+1, nil), kerr.FencedMemberEpoch.Code},
		{"unknown member", beatCGH("g", "Z", 1, nil), kerr.UnknownMemberID.Code},
		{"leave of an unknown member", beatCGH("g", "Z", -1, nil), kerr.UnknownMemberID.Code},
		{"join without subscription", func() *kmsg.ConsumerGroupHeartbeatRequest {
			r := joinCGH("g", "C", nil, "")
			return r
		}(), kerr.InvalidRequest.Code},
		{"join with owned partitions", func() *kmsg.ConsumerGroupHeartbeatRequest {
			r := joinCGH("g", "C", []string{"a"}, "")
			r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: tid(1), Partitions: []int32{0}}}
			return r
		}(), kerr.InvalidRequest.Code},
		{"unknown assignor", joinCGH("g", "C", []string{"a"}, "sticky"), kerr.UnsupportedAssignor.Code},
		{"bad regex", func() *kmsg.ConsumerGroupHeartbeatRequest {
			r := joinCGH("g", "C", nil, "")
			re := "a("
			r.SubscribedTopicRegex = &re
			return r
		}(), kerr.InvalidRegularExpression.Code},
	} {
		if r := e.cgh(tc.req); r.ErrorCode != tc.want {
			t.Errorf("%s: error %d, want %d", tc.name, r.ErrorCode, tc.want)
		}
	}
	// A lost response: the member retries with its previous epoch and
	// owns no more than it is assigned: accepted.
	e.cgh(joinCGH("g", "B", []string{"a"}, ""))
	owned := got(ra)
	r := e.cgh(beatCGH("g", "A", ra.MemberEpoch, owned)) // revocation
	kept := got(r)
	r = e.cgh(beatCGH("g", "A", ra.MemberEpoch, kept)) // → epoch 2
	if r.MemberEpoch != 2 {
		t.Fatalf("A did not reach epoch 2: %+v", r)
	}
	if r := e.cgh(beatCGH("g", "A", 1, kept)); r.ErrorCode != 0 || r.MemberEpoch != 2 {
		t.Fatalf("retry at the previous epoch: %+v", r)
	}
	// At the previous epoch but still owning what it gave up: fenced.
	if r := e.cgh(beatCGH("g", "A", 1, owned)); r.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Fatalf("previous epoch owning revoked partitions: %+v", r)
	}
}

// TestConsumerSessionTimeout: a member that stops heartbeating is removed
// after group.consumer.session.timeout.ms (45 s) and its partitions go to
// the others.
func TestConsumerSessionTimeout(t *testing.T) {
	e, _ := cenv(t)
	ra := e.cgh(joinCGH("g", "A", []string{"a", "b"}, "range"))
	e.cgh(joinCGH("g", "B", []string{"a", "b"}, "range"))
	r := e.cgh(beatCGH("g", "A", ra.MemberEpoch, got(ra)))
	kept := got(r)
	r = e.cgh(beatCGH("g", "A", ra.MemberEpoch, kept))
	if r.MemberEpoch != 2 || kept.count() != 3 {
		t.Fatalf("A at epoch 2 with 3 of 6 partitions (range): %+v %v", r, kept)
	}
	for range 3 { // A keeps heartbeating, B does not
		e.clk.Advance(15 * time.Second)
		if r = e.cgh(beatCGH("g", "A", 2, nil)); r.ErrorCode != 0 {
			t.Fatalf("A's heartbeat: %+v", r)
		}
	}
	if n := len(e.cdescribe("g").Members); n != 1 {
		t.Fatalf("%d members after B's session ran out, want 1", n)
	}
	// A's heartbeat after B expired moved it to epoch 3 with everything.
	d := e.cdescribe("g")
	n := 0
	for _, tp := range d.Members[0].Assignment.TopicPartitions {
		n += len(tp.Partitions)
	}
	if d.Epoch != 3 || d.Members[0].MemberEpoch != 3 || n != 6 {
		t.Fatalf("A after B expired: %+v", d)
	}
	// Nothing heartbeats: the last member goes after 45 s, not before.
	e.clk.Advance(45*time.Second - time.Millisecond)
	if n := len(e.cdescribe("g").Members); n != 1 {
		t.Fatalf("just before the session timeout: %d members", n)
	}
	e.clk.Advance(time.Millisecond)
	if d := e.cdescribe("g"); len(d.Members) != 0 || d.State != "Empty" {
		t.Fatalf("after the session timeout: %+v", d)
	}
}

// TestConsumerRevocationTimeout: a member that never reports its revoked
// partitions gone is fenced after its rebalance timeout, so the others
// get them.
func TestConsumerRevocationTimeout(t *testing.T) {
	e, _ := cenv(t)
	ra := e.cgh(joinCGH("g", "A", []string{"a"}, ""))
	e.cgh(joinCGH("g", "B", []string{"a"}, ""))
	e.cgh(beatCGH("g", "A", ra.MemberEpoch, got(ra))) // told to revoke; never does
	e.clk.Advance(10*time.Second - time.Millisecond)
	if r := e.cgh(beatCGH("g", "B", 2, assignment{})); got(r) != nil {
		t.Fatalf("B got %v before A's rebalance timeout", got(r))
	}
	e.clk.Advance(time.Millisecond)
	if r := e.cgh(beatCGH("g", "A", 1, nil)); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("A after its rebalance timeout: %+v, want UNKNOWN_MEMBER_ID", r)
	}
	r := e.cgh(beatCGH("g", "B", 2, assignment{}))
	if r.MemberEpoch != 3 || got(r).count() != 4 {
		t.Fatalf("B after A was fenced: %+v %v", r, got(r))
	}
}

// TestConsumerStaticMember: a static member that leaves with epoch -2
// keeps its place; its next incarnation (new member id, same instance
// id) takes over its assignment without a new epoch. While the first is
// active, another with its instance id gets UNRELEASED_INSTANCE_ID.
func TestConsumerStaticMember(t *testing.T) {
	e, _ := cenv(t)
	join := func(member string) *kmsg.ConsumerGroupHeartbeatResponse {
		r := joinCGH("g", member, []string{"a"}, "")
		inst := "i1"
		r.InstanceID = &inst
		return e.cgh(r)
	}
	r1 := join("m1")
	if r1.ErrorCode != 0 || got(r1).count() != 4 {
		t.Fatalf("join: %+v", r1)
	}
	if r := join("m2"); r.ErrorCode != kerr.UnreleasedInstanceID.Code {
		t.Fatalf("second incarnation while the first is active: %+v", r)
	}
	leave := beatCGH("g", "m1", -2, nil)
	inst := "i1"
	leave.InstanceID = &inst
	if r := e.cgh(leave); r.ErrorCode != 0 || r.MemberEpoch != -2 {
		t.Fatalf("static leave: %+v", r)
	}
	r2 := join("m2")
	if r2.ErrorCode != 0 || r2.MemberEpoch != r1.MemberEpoch || !got(r2).equal(got(r1)) {
		t.Fatalf("rejoin: %+v %v, want epoch %d and %v", r2, got(r2), r1.MemberEpoch, got(r1))
	}
	if d := e.cdescribe("g"); len(d.Members) != 1 || d.Members[0].MemberID != "m2" || d.Epoch != 1 {
		t.Fatalf("describe: %+v", d)
	}
	// A full leave (-1) removes it.
	leave = beatCGH("g", "m2", -1, nil)
	if r := e.cgh(leave); r.ErrorCode != 0 || r.MemberEpoch != -1 {
		t.Fatalf("leave: %+v", r)
	}
	if d := e.cdescribe("g"); len(d.Members) != 0 {
		t.Fatalf("members after leave: %+v", d.Members)
	}
}

// TestConsumerRegexFollowsTopics: a regex subscription is matched against
// whole topic names and re-resolved when topics are created.
func TestConsumerRegexFollowsTopics(t *testing.T) {
	e, l := cenv(t)
	r := joinCGH("g", "A", nil, "")
	re := "a|c"
	r.SubscribedTopicRegex = &re
	ra := e.cgh(r)
	if ra.ErrorCode != 0 || got(ra).count() != 4 || got(ra)[tid(1)] == nil {
		t.Fatalf("regex join: %+v %v", ra, got(ra))
	}
	l.set(TopicInfo{"a", tid(1), 4}, TopicInfo{"b", tid(2), 2}, TopicInfo{"c", tid(3), 3}, TopicInfo{"cc", tid(4), 1})
	if r := e.cgh(beatCGH("g", "A", 1, got(ra))); got(r) != nil {
		t.Fatalf("the topic list was re-read before TopicsMaxAge: %v", got(r))
	}
	e.clk.Advance(time.Second)
	r2 := e.cgh(beatCGH("g", "A", 1, got(ra)))
	if r2.MemberEpoch != 2 || got(r2).count() != 7 || got(r2)[tid(4)] != nil {
		t.Fatalf("after topic c was created: %+v %v", r2, got(r2))
	}
}

// TestConsumerGroupProtocolsExclude: a group id in use by one protocol
// refuses the other, as Kafka does.
func TestConsumerGroupProtocolsExclude(t *testing.T) {
	e, _ := cenv(t)
	e.stableOne("classic", joinOpts{session: 10 * time.Second, rebalance: 10 * time.Second}, "x")
	if r := e.cgh(joinCGH("classic", "A", []string{"a"}, "")); r.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("consumer heartbeat to a classic group: %+v", r)
	}
	if d := e.cdescribe("classic"); d.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("ConsumerGroupDescribe of a classic group: %+v", d)
	}
	e.cgh(joinCGH("cons", "A", []string{"a"}, ""))
	j := recv[*kmsg.JoinGroupResponse](t, e.async(joinReq("cons", joinOpts{session: 10 * time.Second, rebalance: 10 * time.Second})))
	if j.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("JoinGroup to a consumer group: %+v", j)
	}
	lg := kmsg.NewPtrListGroupsRequest()
	lg.Version, lg.TypesFilter = 5, []string{"consumer"}
	resp := e.do(lg).(*kmsg.ListGroupsResponse)
	if len(resp.Groups) != 1 || resp.Groups[0].Group != "cons" || resp.Groups[0].GroupType != "consumer" || resp.Groups[0].ProtocolType != "consumer" {
		t.Fatalf("ListGroups of type consumer: %+v", resp.Groups)
	}
	d := e.describe("cons")
	if d.ProtocolType != "consumer" || d.State != "Stable" || len(d.Members) != 1 {
		t.Fatalf("DescribeGroups of a consumer group: %+v", d)
	}
	var ca kmsg.ConsumerMemberAssignment
	var cm kmsg.ConsumerMemberMetadata
	if err := ca.ReadFrom(d.Members[0].MemberAssignment); err != nil || len(ca.Topics) != 1 || ca.Topics[0].Topic != "a" || len(ca.Topics[0].Partitions) != 4 {
		t.Fatalf("DescribeGroups assignment of a consumer member: %v %+v", err, ca)
	}
	if err := cm.ReadFrom(d.Members[0].ProtocolMetadata); err != nil || len(cm.Topics) != 1 || cm.Topics[0] != "a" {
		t.Fatalf("DescribeGroups metadata of a consumer member: %v %+v", err, cm)
	}
	// A member in the group cannot be deleted; once gone it can.
	dreq := kmsg.NewPtrDeleteGroupsRequest()
	dreq.Groups = []string{"cons"}
	commit := commitReq("cons", "A", 1, "a", map[int32]int64{0: 5})
	commit.Version = 9
	if ec := commitErr(e.do(commit)); ec != 0 {
		t.Fatalf("commit at the member epoch: %d", ec)
	}
	if ec := e.do(dreq).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode; ec != kerr.NonEmptyGroup.Code {
		t.Fatalf("delete with a member: %d", ec)
	}
	e.cgh(beatCGH("cons", "A", -1, nil))
	if ec := e.do(dreq).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode; ec != 0 {
		t.Fatalf("delete after the member left: %d", ec)
	}
}

// TestConsumerCommitEpoch: OffsetCommit v9 and OffsetFetch v9 check the
// member epoch (STALE_MEMBER_EPOCH); older OffsetCommit versions are
// refused for consumer-protocol members; committed offsets are the same
// durable offsets as classic groups'.
func TestConsumerCommitEpoch(t *testing.T) {
	e, _ := cenv(t)
	ra := e.cgh(joinCGH("g", "A", []string{"a"}, ""))
	for _, tc := range []struct {
		name    string
		version int16
		member  string
		epoch   int32
		want    int16
	}{
		{"current epoch", 9, "A", ra.MemberEpoch, 0},
		{"stale epoch", 9, "A", ra.MemberEpoch + 1, kerr.StaleMemberEpoch.Code},
		{"unknown member", 9, "Z", 1, kerr.UnknownMemberID.Code},
		{"v8 by a consumer member", 8, "A", ra.MemberEpoch, kerr.UnsupportedVersion.Code},
		{"no member while the group has members", 9, "", -1, kerr.UnknownMemberID.Code},
	} {
		r := commitReq("g", tc.member, tc.epoch, "a", map[int32]int64{0: 7})
		r.Version = tc.version
		if ec := commitErr(e.do(r)); ec != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, ec, tc.want)
		}
	}
	fetch := func(member string, epoch int32) int16 {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.Version = 9
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group, rg.MemberID, rg.MemberEpoch = "g", &member, epoch
		r.Groups = append(r.Groups, rg)
		return e.do(r).(*kmsg.OffsetFetchResponse).Groups[0].ErrorCode
	}
	if ec := fetch("A", ra.MemberEpoch+1); ec != kerr.StaleMemberEpoch.Code {
		t.Fatalf("OffsetFetch at a stale epoch: %d", ec)
	}
	if ec := fetch("A", ra.MemberEpoch); ec != 0 {
		t.Fatalf("OffsetFetch at the member epoch: %d", ec)
	}
	e.restart()
	if got := e.fetch("g", "a", 1, 8); got[0] != 7 {
		t.Fatalf("committed offset after a restart: %v", got)
	}
}

// TestAssignors: range gives consecutive ranges per topic; uniform is
// balanced across topics and sticky.
func TestAssignors(t *testing.T) {
	ms := func(ids ...string) []*cmember {
		var out []*cmember
		for _, id := range ids {
			out = append(out, &cmember{id: id, names: []string{"a", "b"}})
		}
		return out
	}
	topics := []TopicInfo{{"a", tid(1), 3}, {"b", tid(2), 3}}
	r := assign(assignorRange, ms("x", "y"), topics, nil)
	if !r["x"].equal(assignment{tid(1): {0, 1}, tid(2): {0, 1}}) || !r["y"].equal(assignment{tid(1): {2}, tid(2): {2}}) {
		t.Fatalf("range: %v", r)
	}
	u := assign(assignorUniform, ms("x", "y"), topics, nil)
	if u["x"].count() != 3 || u["y"].count() != 3 {
		t.Fatalf("uniform is not balanced: %v", u)
	}
	// A third member: each of the others gives up one partition and
	// keeps the rest.
	u3 := assign(assignorUniform, ms("x", "y", "z"), topics, u)
	for _, id := range []string{"x", "y"} {
		if u3[id].count() != 2 || u3[id].minus(u[id]) != nil {
			t.Fatalf("uniform with a third member is not sticky: before %v, after %v", u, u3)
		}
	}
	if u3["z"].count() != 2 {
		t.Fatalf("the new member: %v", u3["z"])
	}
	// Different subscriptions: only subscribers get a topic.
	mixed := []*cmember{{id: "x", names: []string{"a"}}, {id: "y", names: []string{"a", "b"}}}
	um := assign(assignorUniform, mixed, topics, nil)
	if um["x"][tid(2)] != nil || um["x"].count()+um["y"].count() != 6 || um["x"].count() != 3 {
		t.Fatalf("uniform with different subscriptions: %v", um)
	}
}
