package group

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumerGroupHeartbeat handles ConsumerGroupHeartbeat (KIP-848): join
// (member epoch 0), heartbeat, leave (-1) and static leave (-2); see
// consumer.go and docs/kafka.md, "Consumer groups".
func (c *Coordinator) consumerGroupHeartbeat(ctx context.Context, r *kmsg.ConsumerGroupHeartbeatRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	fail := func(code int16, msg string) kmsg.Response {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		return resp
	}
	c.stats.heartbeats.Add(1)
	inst := str(r.InstanceID)
	var re = struct {
		set bool
		s   string
	}{r.SubscribedTopicRegex != nil, str(r.SubscribedTopicRegex)}
	switch {
	case r.Group == "":
		return fail(kerr.InvalidRequest.Code, "GroupId can't be empty.")
	case r.Version >= 1 && r.MemberID == "":
		return fail(kerr.InvalidRequest.Code, "MemberId can't be empty.")
	case r.MemberEpoch < epochLeftStatic:
		return fail(kerr.InvalidRequest.Code, "MemberEpoch is invalid.")
	case r.InstanceID != nil && inst == "":
		return fail(kerr.InvalidRequest.Code, "InstanceId can't be empty.")
	case r.RackID != nil && *r.RackID == "":
		return fail(kerr.InvalidRequest.Code, "RackId can't be empty.")
	case r.MemberEpoch == 0 && r.RebalanceTimeoutMillis == -1:
		return fail(kerr.InvalidRequest.Code, "RebalanceTimeoutMs must be provided in first request.")
	case r.MemberEpoch == 0 && len(r.Topics) > 0:
		return fail(kerr.InvalidRequest.Code, "TopicPartitions must be empty when (re-)joining.")
	case r.MemberEpoch == 0 && r.SubscribedTopicNames == nil && !re.set:
		return fail(kerr.InvalidRequest.Code, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
	case re.set && re.s == "":
		return fail(kerr.InvalidRequest.Code, "SubscribedTopicRegex can't be empty.")
	case r.ServerAssignor != nil && *r.ServerAssignor != assignorUniform && *r.ServerAssignor != assignorRange:
		return fail(kerr.UnsupportedAssignor.Code, "ServerAssignor "+*r.ServerAssignor+" is not supported. Supported assignors: uniform, range.")
	}
	reCompiled, err := compileSubscription(re.s)
	if re.set && err != nil {
		return fail(kerr.InvalidRegularExpression.Code, "SubscribedTopicRegex is not a valid RE2 regular expression.")
	}
	memberID := r.MemberID
	if memberID == "" {
		if r.MemberEpoch != 0 {
			return fail(kerr.UnknownMemberID.Code, "")
		}
		memberID = newConsumerMemberID() // v0: the server names the member
	}

	// Topics are read before the group is locked: a slow registry must
	// not hold up the group's other members.
	var snapshot []TopicInfo
	if r.MemberEpoch >= 0 {
		need := r.SubscribedTopicNames
		if snapshot, err = c.topicSnapshot(ctx, need); err != nil {
			c.log.Warn("kafka consumer group heartbeat: list topics", "group", r.Group, "err", err)
			return fail(kerr.CoordinatorNotAvailable.Code, "")
		}
	}

	g, ec := c.lockedGroup(ctx, r.Group)
	if ec != 0 {
		return fail(ec, "")
	}
	defer g.mu.Unlock()
	if len(g.members) > 0 || len(g.pending) > 0 {
		return fail(kerr.GroupIDNotFound.Code, "Group "+r.Group+" is not a consumer group.")
	}
	if g.cons == nil {
		if r.MemberEpoch != 0 {
			return fail(kerr.UnknownMemberID.Code, "")
		}
		g.cons = newCgroup()
		g.state, g.protocol, g.protocolType = stateEmpty, "", ""
	}
	cg := g.cons
	resp.MemberID = &memberID
	resp.HeartbeatIntervalMillis = int32(c.cfg.ConsumerHeartbeatInterval / time.Millisecond)

	if r.MemberEpoch < 0 {
		return g.consumerLeave(r, memberID, inst, resp)
	}

	m := cg.members[memberID]
	changed := false // what the target depends on changed: new epoch
	switch {
	case r.MemberEpoch == 0 && inst != "" && cg.static[inst] != "" && cg.static[inst] != memberID:
		old := cg.members[cg.static[inst]]
		if old.epoch != epochLeftStatic {
			return fail(kerr.UnreleasedInstanceID.Code, "Static member "+inst+" is still in use by another member.")
		}
		// A restarted static member takes its previous incarnation's
		// place and assignment; nothing rebalances.
		m = &cmember{id: memberID, instanceID: inst, epoch: old.prevEpoch, prevEpoch: old.prevEpoch,
			names: old.names, regex: old.regex, re: old.re, assignor: old.assignor, rebalance: old.rebalance,
			assigned: old.assigned, revoking: old.revoking, state: old.state}
		target := cg.target[old.id]
		g.removeConsumer(old)
		cg.members[m.id], cg.static[inst], cg.target[m.id] = m, m.id, target
		if m.state == memberUnrevoked {
			g.armRevocation(m)
		}
	case m == nil && r.MemberEpoch == 0:
		if inst != "" && cg.static[inst] == "" {
			cg.static[inst] = memberID
		}
		m = &cmember{id: memberID, instanceID: inst, assigned: assignment{}}
		cg.members[memberID] = m
		changed = true
		c.log.Debug("kafka consumer group member joins", "group", g.id, "member", memberID)
	case m == nil:
		return fail(kerr.UnknownMemberID.Code, "")
	case inst != "" && m.instanceID != inst:
		return fail(kerr.FencedInstanceID.Code, "")
	case r.MemberEpoch == 0:
		// Rejoin of a known member (it lost its state or a response):
		// it keeps its place and gets its assignment again.
		if m.epoch == epochLeftStatic {
			m.epoch = m.prevEpoch
		}
	case r.MemberEpoch > m.epoch:
		return fail(kerr.FencedMemberEpoch.Code, "The consumer group member has a greater member epoch than expected.")
	case r.MemberEpoch < m.epoch && (r.MemberEpoch != m.prevEpoch || (r.Topics != nil && !ownedFrom(r.Topics).minusEmpty(m.assigned))):
		return fail(kerr.FencedMemberEpoch.Code, "The consumer group member has a smaller member epoch than expected.")
	}
	g.touchConsumer(m)
	ci := clientOf(ctx)
	m.clientID, m.host = ci.id, ci.host

	// The subscription, as this request updates it.
	if r.RackID != nil {
		m.rack = *r.RackID
	}
	if r.RebalanceTimeoutMillis >= 0 {
		m.rebalance = time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond
	}
	if r.SubscribedTopicNames != nil {
		names := slices.Clone(r.SubscribedTopicNames)
		slices.Sort(names)
		if !slices.Equal(names, m.names) {
			m.names, changed = names, true
		}
	}
	if re.set && re.s != m.regex {
		m.regex, m.re, changed = re.s, reCompiled, true
	}
	if r.ServerAssignor != nil && *r.ServerAssignor != m.assignor {
		m.assignor, changed = *r.ServerAssignor, true
	}
	if snapshot != nil {
		if topics := cg.subscribedTopics(snapshot); !sameTopics(topics, cg.topics) {
			cg.topics, changed = topics, true
		}
	}
	if changed {
		g.bumpEpoch()
	}

	before := m.assigned.clone()
	var owned assignment
	if r.Topics != nil {
		owned = ownedFrom(r.Topics)
	}
	g.reconcile(m, owned)
	resp.MemberEpoch = m.epoch
	full := r.MemberEpoch == 0 || (r.RebalanceTimeoutMillis != -1 && (r.SubscribedTopicNames != nil || re.set) && r.Topics != nil)
	if full || !before.equal(m.assigned) {
		resp.Assignment = responseAssignment(m.assigned)
	}
	return resp
}

// consumerLeave handles a heartbeat with epoch -1 (leave) or -2 (a static
// member leaves for now, keeping its assignment until it comes back or
// its session expires).
func (g *group) consumerLeave(r *kmsg.ConsumerGroupHeartbeatRequest, memberID, inst string, resp *kmsg.ConsumerGroupHeartbeatResponse) kmsg.Response {
	cg := g.cons
	m := cg.members[memberID]
	if m == nil && inst != "" && cg.static[inst] != "" {
		m = cg.members[cg.static[inst]]
	}
	resp.MemberEpoch = r.MemberEpoch
	switch {
	case m == nil:
		resp.ErrorCode = kerr.UnknownMemberID.Code
	case inst != "" && m.instanceID != inst:
		resp.ErrorCode = kerr.FencedInstanceID.Code
	case r.MemberEpoch == epochLeftStatic && m.instanceID != "":
		if m.epoch != epochLeftStatic {
			m.prevEpoch, m.epoch = m.epoch, epochLeftStatic
		}
	default:
		g.removeConsumer(m)
		g.bumpEpoch()
		g.c.log.Debug("kafka consumer group member leaves", "group", g.id, "member", m.id)
	}
	return resp
}

// ownedFrom is the assignment a heartbeat reports owning.
func ownedFrom(ts []kmsg.ConsumerGroupHeartbeatRequestTopic) assignment {
	out := assignment{}
	for _, t := range ts {
		out[t.TopicID] = append(out[t.TopicID], t.Partitions...)
	}
	return out
}

// minusEmpty reports whether a is a subset of b.
func (a assignment) minusEmpty(b assignment) bool { return a.minus(b) == nil }
