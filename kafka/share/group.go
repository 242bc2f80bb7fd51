package share

import (
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Topic is what assignment needs of a topic.
type Topic struct {
	ID         [16]byte
	Partitions int32
}

// Group is one share group's membership.
type Group struct {
	id      string
	epoch   int32 // bumped when membership, subscriptions or topics change
	members map[string]*member
	names   map[[16]byte]string
}

type member struct {
	id, clientID, host string
	rack               *string
	epoch              int32
	topics             []string // sorted
	assigned           map[[16]byte][]int32
	unsent             bool // assigned changed since the last response
	seen               time.Time
}

// Client is who sent a heartbeat, for ShareGroupDescribe.
type Client struct{ ID, Host string }

// Heartbeat answers ShareGroupHeartbeat. resolve returns the topics of the
// given names that exist. The caller has checked that this node
// coordinates the group.
func (m *Manager) Heartbeat(r *kmsg.ShareGroupHeartbeatRequest, cl Client, resolve func([]string) map[string]Topic) *kmsg.ShareGroupHeartbeatResponse {
	resp := r.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
	fail := func(e *kerr.Error, msg string) *kmsg.ShareGroupHeartbeatResponse {
		resp.ErrorCode, resp.ErrorMessage = e.Code, &msg
		return resp
	}
	switch {
	case r.GroupID == "":
		return fail(kerr.InvalidGroupID, "group id is empty")
	case r.MemberID == "":
		return fail(kerr.InvalidRequest, "member id is empty (the client generates it)")
	case r.MemberEpoch == 0 && len(r.SubscribedTopicNames) == 0:
		return fail(kerr.InvalidRequest, "joining needs subscribed topic names")
	case r.MemberEpoch < -1:
		return fail(kerr.InvalidRequest, "member epoch below -1")
	}
	if r.MemberEpoch == -1 {
		m.leave(r.GroupID, r.MemberID)
		id := r.MemberID
		resp.MemberID, resp.MemberEpoch = &id, -1
		return resp
	}

	// Resolve every subscribed topic of the group without the lock.
	m.mu.Lock()
	names := map[string]bool{}
	for _, n := range r.SubscribedTopicNames {
		names[n] = true
	}
	if g := m.groups[r.GroupID]; g != nil {
		for _, mb := range g.members {
			for _, n := range mb.topics {
				names[n] = true
			}
		}
	}
	m.mu.Unlock()
	metas := resolve(slices.Sorted(maps.Keys(names)))

	now := m.cfg.Clock.Now()
	m.mu.Lock()
	for n, t := range metas {
		m.names[t.ID] = n
	}
	g := m.groups[r.GroupID]
	if g == nil {
		if r.MemberEpoch != 0 {
			m.mu.Unlock()
			return fail(kerr.UnknownMemberID, "no such member: the group is empty")
		}
		g = &Group{id: r.GroupID, members: map[string]*member{}, names: map[[16]byte]string{}}
		m.groups[r.GroupID] = g
	}
	gone := g.expireLocked(m, now)
	mb := g.members[r.MemberID]
	switch {
	case r.MemberEpoch == 0:
		if mb == nil {
			mb = &member{id: r.MemberID, assigned: map[[16]byte][]int32{}}
			g.members[r.MemberID] = mb
			g.epoch++
		}
		mb.unsent = true // a (re)joining member gets its whole assignment
	case mb == nil:
		m.mu.Unlock()
		m.releaseGone(r.GroupID, gone)
		return fail(kerr.UnknownMemberID, "no such member")
	case r.MemberEpoch != mb.epoch:
		m.mu.Unlock()
		m.releaseGone(r.GroupID, gone)
		return fail(kerr.FencedMemberEpoch, "member epoch is not the current one")
	}
	mb.seen, mb.clientID, mb.host = now, cl.ID, cl.Host
	if r.RackID != nil {
		rack := *r.RackID
		mb.rack = &rack
	}
	if r.SubscribedTopicNames != nil {
		t := slices.Sorted(slices.Values(r.SubscribedTopicNames))
		t = slices.Compact(t)
		if !slices.Equal(t, mb.topics) {
			mb.topics = t
			g.epoch++
		}
	}
	g.assignLocked(metas)
	id := r.MemberID
	resp.MemberID = &id
	resp.HeartbeatIntervalMillis = int32(m.cfg.Heartbeat.Milliseconds())
	if mb.unsent {
		mb.unsent = false
		mb.epoch = g.epoch
		a := &kmsg.ShareGroupHeartbeatResponseAssignment{}
		for _, tid := range sortedIDs(mb.assigned) {
			a.TopicPartitions = append(a.TopicPartitions, kmsg.ShareGroupHeartbeatResponseAssignmentTopicPartition{
				TopicID: tid, Partitions: slices.Clone(mb.assigned[tid])})
		}
		resp.Assignment = a
	}
	resp.MemberEpoch = mb.epoch
	m.mu.Unlock()
	m.releaseGone(r.GroupID, gone)
	return resp
}

func sortedIDs(m map[[16]byte][]int32) [][16]byte {
	ids := slices.Collect(maps.Keys(m))
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	return ids
}

// assignLocked computes the assignment (docs/kafka.md, "Share groups"):
// per topic, with P partitions and S subscribed members in member id
// order, partition p goes to member p mod S when S <= P; when there are
// more members than partitions, member i gets partition i mod P, so a
// partition is shared. A member whose partitions change gets them in its
// next heartbeat response.
func (g *Group) assignLocked(metas map[string]Topic) {
	want := map[string]map[[16]byte][]int32{}
	subs := map[string][]string{}
	for _, mb := range g.members {
		want[mb.id] = map[[16]byte][]int32{}
		for _, t := range mb.topics {
			subs[t] = append(subs[t], mb.id)
		}
	}
	for name, ids := range subs {
		t, ok := metas[name]
		if !ok || t.Partitions <= 0 {
			continue
		}
		g.names[t.ID] = name
		sort.Strings(ids)
		n := int32(len(ids))
		if n <= t.Partitions {
			for p := int32(0); p < t.Partitions; p++ {
				id := ids[p%n]
				want[id][t.ID] = append(want[id][t.ID], p)
			}
			continue
		}
		for i, id := range ids {
			want[id][t.ID] = []int32{int32(i) % t.Partitions}
		}
	}
	changed := false
	for id, a := range want {
		mb := g.members[id]
		if !maps.EqualFunc(a, mb.assigned, slices.Equal) {
			mb.assigned, mb.unsent = a, true
			changed = true
		}
	}
	if changed {
		g.epoch++
	}
}

// expireLocked drops members whose session timed out and returns them.
func (g *Group) expireLocked(m *Manager, now time.Time) []string {
	var gone []string
	for id, mb := range g.members {
		if now.Sub(mb.seen) > m.cfg.SessionTimeout {
			delete(g.members, id)
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		g.epoch++
	}
	return gone
}

// releaseGone releases the records and sessions of members that left.
func (m *Manager) releaseGone(group string, gone []string) {
	for _, id := range gone {
		m.closeSessions(group, id)
		m.releaseMember(group, id, nil)
	}
}

// leave removes a member (heartbeat with epoch -1).
func (m *Manager) leave(group, id string) {
	m.mu.Lock()
	if g := m.groups[group]; g != nil {
		if _, ok := g.members[id]; ok {
			delete(g.members, id)
			g.epoch++
		}
	}
	m.mu.Unlock()
	m.releaseGone(group, []string{id})
}

// Members returns the number of live members of group and whether this
// node knows it as a share group.
func (m *Manager) Members(group string) (int, bool) {
	m.mu.Lock()
	g := m.groups[group]
	if g == nil {
		m.mu.Unlock()
		return 0, false
	}
	gone := g.expireLocked(m, m.cfg.Clock.Now())
	n := len(g.members)
	m.mu.Unlock()
	m.releaseGone(group, gone)
	return n, true
}

// GroupIDs lists the share groups this node coordinates, with their state
// (Empty or Stable).
func (m *Manager) GroupIDs() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for id, g := range m.groups {
		out[id] = state(g)
	}
	return out
}

func state(g *Group) string {
	if len(g.members) == 0 {
		return "Empty"
	}
	return "Stable"
}

// Describe answers ShareGroupDescribe for one group this node coordinates.
func (m *Manager) Describe(id string) kmsg.ShareGroupDescribeResponseGroup {
	dg := kmsg.NewShareGroupDescribeResponseGroup()
	dg.GroupID = id
	dg.AuthorizedOperations = -2147483648 // not computed
	m.mu.Lock()
	g := m.groups[id]
	if g == nil {
		m.mu.Unlock()
		msg := "no such share group"
		dg.ErrorCode, dg.ErrorMessage = kerr.GroupIDNotFound.Code, &msg
		return dg
	}
	gone := g.expireLocked(m, m.cfg.Clock.Now())
	defer m.releaseGone(id, gone)
	defer m.mu.Unlock()
	dg.GroupState, dg.GroupEpoch, dg.AssignmentEpoch, dg.Assignor = state(g), g.epoch, g.epoch, "simple"
	ids := slices.Sorted(maps.Keys(g.members))
	for _, mid := range ids {
		mb := g.members[mid]
		dm := kmsg.NewShareGroupDescribeResponseGroupMember()
		dm.MemberID, dm.RackID, dm.MemberEpoch, dm.ClientID, dm.ClientHost = mb.id, mb.rack, mb.epoch, mb.clientID, mb.host
		dm.SubscribedTopicNames = slices.Clone(mb.topics)
		for _, tid := range sortedIDs(mb.assigned) {
			dm.Assignment.TopicPartitions = append(dm.Assignment.TopicPartitions,
				kmsg.ShareGroupDescribeResponseGroupMemberAssignmentTopicPartition{TopicID: tid, Topic: g.names[tid], Partitions: slices.Clone(mb.assigned[tid])})
		}
		dg.Members = append(dg.Members, dm)
	}
	return dg
}

// Touch makes group known here as a share group (its offsets were set by
// an admin before any member joined).
func (m *Manager) Touch(group string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.groups[group] == nil {
		m.groups[group] = &Group{id: group, members: map[string]*member{}, names: map[[16]byte]string{}}
	}
}
