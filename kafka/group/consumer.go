package group

// Consumer-protocol groups (KIP-848, "group.protocol=consumer"): the
// coordinator computes the assignment itself and hands it out through
// ConsumerGroupHeartbeat (68_consumer_group_heartbeat.go). The moving
// parts, as Kafka names them:
//
//   - The group epoch is bumped whenever what the assignment depends on
//     changes: a member joins or leaves, a subscription changes, or a
//     subscribed topic is created, deleted or grows partitions.
//   - The target assignment is computed by the server-side assignor
//     (uniform or range, assignor.go) for every group epoch; here it is
//     computed at once, so the assignment epoch always equals the group
//     epoch.
//   - Each member moves towards its target on its own heartbeats
//     (reconcile): partitions it must give up are revoked first, with the
//     member epoch unchanged; once the member reports them gone it moves to
//     the target epoch and receives the partitions no other member still
//     owns; the rest follow on later heartbeats once released. So no
//     partition is ever owned by two members.
//
// Membership lives in the coordinator's memory, as for classic groups;
// committed offsets go to the same offsets stream (offsets.go).

import (
	"crypto/rand"
	"encoding/base64"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/clock"
)

// TopicInfo is a topic as the server-side assignors see it.
type TopicInfo struct {
	Name       string
	ID         [16]byte
	Partitions int32
}

// Assignors are the server-side assignors (ServerAssignor): uniform is
// Kafka's default.
const (
	assignorUniform = "uniform"
	assignorRange   = "range"
)

// memberState is where a member is in its reconciliation.
type memberState int

const (
	// memberStable: the member owns its whole target assignment.
	memberStable memberState = iota
	// memberUnrevoked: the member must first give up partitions.
	memberUnrevoked
	// memberUnreleased: the member is at the target epoch but waits for
	// partitions another member still owns.
	memberUnreleased
)

// epochLeftStatic is the member epoch of a static member that left
// temporarily (heartbeat with epoch -2): it keeps its assignment until a
// new incarnation takes its place or its session expires.
const epochLeftStatic = -2

// assignment is partitions by topic id.
type assignment map[[16]byte][]int32

func (a assignment) clone() assignment {
	out := make(assignment, len(a))
	for id, ps := range a {
		out[id] = slices.Clone(ps)
	}
	return out
}

func (a assignment) has(id [16]byte, p int32) bool { return slices.Contains(a[id], p) }

func (a assignment) count() int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

func (a assignment) equal(b assignment) bool {
	if a.count() != b.count() {
		return false
	}
	for id, ps := range a {
		for _, p := range ps {
			if !b.has(id, p) {
				return false
			}
		}
	}
	return true
}

// minus is a without b (nil: nothing left).
func (a assignment) minus(b assignment) assignment {
	var out assignment
	for id, ps := range a {
		for _, p := range ps {
			if !b.has(id, p) {
				if out == nil {
					out = assignment{}
				}
				out[id] = append(out[id], p)
			}
		}
	}
	return out
}

// intersect is a and b.
func (a assignment) intersect(b assignment) assignment {
	out := assignment{}
	for id, ps := range a {
		for _, p := range ps {
			if b.has(id, p) {
				out[id] = append(out[id], p)
			}
		}
	}
	return out
}

// cgroup is the consumer-protocol state of a group (group.cons); nil for a
// group that never used the protocol on this node, or whose membership was
// reset (coordinator change) or that became classic.
type cgroup struct {
	epoch    int32 // group epoch (= assignment epoch)
	assignor string
	members  map[string]*cmember
	static   map[string]string // group.instance.id → member id
	target   map[string]assignment
	topics   map[string]TopicInfo // subscribed topics by name, as of the last epoch
}

// cmember is one member of a consumer-protocol group.
type cmember struct {
	id, instanceID, rack string
	clientID, host       string
	epoch, prevEpoch     int32
	state                memberState
	names                []string
	regex                string
	re                   *regexp.Regexp
	assignor             string
	rebalance            time.Duration

	assigned assignment // what the member owns now
	revoking assignment // what it must give up before moving on

	timer       clock.Timer // session
	revokeTimer clock.Timer // rebalance timeout of a pending revocation
	seq         uint64
}

func newCgroup() *cgroup {
	return &cgroup{members: map[string]*cmember{}, static: map[string]string{}, target: map[string]assignment{},
		topics: map[string]TopicInfo{}}
}

// newConsumerMemberID is a member id for v0 clients (v1 clients choose
// their own): a random UUID, URL-safe base64 as Kafka makes them.
func newConsumerMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// compileSubscription compiles a SubscribedTopicRegex: RE2, matched
// against the whole topic name as Kafka does.
func compileSubscription(re string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?:" + re + ")$")
}

// subscribes reports whether m subscribes to topic.
func (m *cmember) subscribes(topic string) bool {
	return slices.Contains(m.names, topic) || (m.re != nil && m.re.MatchString(topic))
}

// subscribedTopics is every topic of snapshot some member subscribes to.
func (cg *cgroup) subscribedTopics(snapshot []TopicInfo) map[string]TopicInfo {
	out := map[string]TopicInfo{}
	for _, t := range snapshot {
		for _, m := range cg.members {
			if m.subscribes(t.Name) {
				out[t.Name] = t
				break
			}
		}
	}
	return out
}

// subscribedNames are the topics the members subscribe to: their names,
// and the known topics their regexes match (OffsetDelete refuses them).
func (cg *cgroup) subscribedNames() map[string]bool {
	out := map[string]bool{}
	for _, m := range cg.members {
		for _, n := range m.names {
			out[n] = true
		}
	}
	for n := range cg.topics {
		out[n] = true
	}
	return out
}

func sameTopics(a, b map[string]TopicInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for n, t := range a {
		if b[n] != t {
			return false
		}
	}
	return true
}

// state is the group state as ConsumerGroupDescribe and ListGroups report
// it: Empty, Reconciling while some member moves to its target, Stable.
func (cg *cgroup) state() string {
	if len(cg.members) == 0 {
		return "Empty"
	}
	for _, m := range cg.members {
		if m.epoch != epochLeftStatic && (m.epoch != cg.epoch || m.state != memberStable) {
			return "Reconciling"
		}
	}
	return "Stable"
}

// bumpEpoch starts a new group epoch: the target assignment is recomputed.
func (g *group) bumpEpoch() {
	cg := g.cons
	cg.epoch++
	cg.assignor = cg.chooseAssignor()
	members := make([]*cmember, 0, len(cg.members))
	for _, m := range cg.members {
		members = append(members, m)
	}
	topics := make([]TopicInfo, 0, len(cg.topics))
	for _, t := range cg.topics {
		topics = append(topics, t)
	}
	cg.target = assign(cg.assignor, members, topics, cg.target)
	g.c.stats.epochs.Add(1)
}

// chooseAssignor: the assignor most members ask for (ties: the name that
// sorts first), uniform when none asks.
func (cg *cgroup) chooseAssignor() string {
	votes := map[string]int{}
	for _, m := range cg.members {
		if m.assignor != "" {
			votes[m.assignor]++
		}
	}
	best := ""
	for name, n := range votes {
		if best == "" || n > votes[best] || (n == votes[best] && name < best) {
			best = name
		}
	}
	if best == "" {
		best = assignorUniform
	}
	return best
}

// ownedByOther reports whether a member other than m owns partition p of
// topic id (assigned, or pending revocation).
func (cg *cgroup) ownedByOther(m *cmember, id [16]byte, p int32) bool {
	for _, o := range cg.members {
		if o != m && (o.assigned.has(id, p) || o.revoking.has(id, p)) {
			return true
		}
	}
	return false
}

// reconcile moves m towards its target assignment. owned is what the
// member reported owning (nil: a heartbeat that did not say).
func (g *group) reconcile(m *cmember, owned assignment) {
	cg := g.cons
	if m.state == memberUnrevoked {
		if owned == nil || owned.intersect(m.revoking).count() > 0 {
			return // still revoking
		}
		m.revoking = nil
		m.state = memberStable
		if m.revokeTimer != nil {
			m.revokeTimer.Stop()
			m.revokeTimer = nil
		}
	}
	if m.epoch == cg.epoch && m.state == memberStable {
		return
	}
	target := cg.target[m.id]
	keep := m.assigned.intersect(target)
	if revoke := m.assigned.minus(target); revoke != nil {
		m.assigned, m.revoking, m.state = keep, revoke, memberUnrevoked
		g.armRevocation(m)
		return
	}
	for id, ps := range target {
		for _, p := range ps {
			if !keep.has(id, p) && !cg.ownedByOther(m, id, p) {
				keep[id] = append(keep[id], p)
			}
		}
	}
	for id := range keep {
		slices.Sort(keep[id])
	}
	m.assigned = keep
	if m.epoch != cg.epoch {
		m.prevEpoch, m.epoch = m.epoch, cg.epoch
	}
	m.state = memberStable
	if target.minus(keep) != nil {
		m.state = memberUnreleased
	}
}

// armRevocation fences m if it does not give up its revoked partitions
// within its rebalance timeout, so they do not stay stuck with it.
func (g *group) armRevocation(m *cmember) {
	if m.revokeTimer != nil {
		m.revokeTimer.Stop()
	}
	seq := m.seq
	m.revokeTimer = g.c.clock.AfterFunc(m.rebalance, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.unloaded || g.cons == nil || g.cons.members[m.id] != m || m.seq != seq || m.state != memberUnrevoked {
			return
		}
		g.c.log.Info("kafka consumer group member did not revoke within its rebalance timeout", "group", g.id, "member", m.id)
		g.c.stats.fenced.Add(1)
		g.removeConsumer(m)
		g.bumpEpoch()
	})
}

// touchConsumer restarts m's session timer.
func (g *group) touchConsumer(m *cmember) {
	if m.timer != nil {
		m.timer.Stop()
	}
	m.seq++
	seq := m.seq
	m.timer = g.c.clock.AfterFunc(g.c.cfg.ConsumerSessionTimeout, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.unloaded || g.cons == nil || g.cons.members[m.id] != m || m.seq != seq {
			return
		}
		g.c.log.Info("kafka consumer group member session expired", "group", g.id, "member", m.id)
		g.c.stats.fenced.Add(1)
		g.removeConsumer(m)
		g.bumpEpoch()
	})
}

// removeConsumer takes m out of the group (no epoch bump: the caller
// decides).
func (g *group) removeConsumer(m *cmember) {
	cg := g.cons
	m.stopTimers()
	delete(cg.members, m.id)
	delete(cg.target, m.id)
	if m.instanceID != "" && cg.static[m.instanceID] == m.id {
		delete(cg.static, m.instanceID)
	}
}

func (m *cmember) stopTimers() {
	m.seq++
	if m.timer != nil {
		m.timer.Stop()
	}
	if m.revokeTimer != nil {
		m.revokeTimer.Stop()
	}
}

// dropConsumers forgets the consumer-protocol state (the group moved or
// was reset); members learn it as UNKNOWN_MEMBER_ID and rejoin.
func (g *group) dropConsumers() {
	if g.cons == nil {
		return
	}
	for _, m := range g.cons.members {
		m.stopTimers()
	}
	g.cons = nil
}

// responseAssignment is m's assignment as the heartbeat answers it.
func responseAssignment(a assignment) *kmsg.ConsumerGroupHeartbeatResponseAssignment {
	out := new(kmsg.ConsumerGroupHeartbeatResponseAssignment)
	out.Topics = []kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{}
	for _, id := range sortedIDs(a) {
		t := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
		t.TopicID, t.Partitions = id, slices.Clone(a[id])
		out.Topics = append(out.Topics, t)
	}
	return out
}

func sortedIDs(a assignment) [][16]byte {
	ids := make([][16]byte, 0, len(a))
	for id, ps := range a {
		if len(ps) > 0 {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	return ids
}

// consumerCommitAllowed validates an OffsetCommit or TxnOffsetCommit of
// a consumer-protocol group, as Kafka does: the generation is the member
// epoch; a commit without member (epoch < 0) is allowed only while the
// group is empty.
func (g *group) consumerCommitAllowed(epoch int32, memberID string, version int16, txn bool) int16 {
	cg := g.cons
	if epoch < 0 && len(cg.members) == 0 {
		return 0
	}
	m := cg.members[memberID]
	switch {
	case m == nil:
		return kerr.UnknownMemberID.Code
	case !txn && version < 9:
		// Only v9 carries the member epoch semantics.
		return kerr.UnsupportedVersion.Code
	case epoch != m.epoch && txn:
		return kerr.IllegalGeneration.Code
	case epoch != m.epoch:
		return kerr.StaleMemberEpoch.Code
	}
	return 0
}

// consumerFetchAllowed validates the member of an OffsetFetch v9+ of a
// consumer-protocol group (no member id: an admin read, always allowed).
func (g *group) consumerFetchAllowed(memberID *string, epoch int32) int16 {
	if memberID == nil || g.cons == nil || len(g.cons.members) == 0 && epoch < 0 {
		return 0
	}
	m := g.cons.members[*memberID]
	switch {
	case m == nil:
		return kerr.UnknownMemberID.Code
	case epoch != m.epoch:
		return kerr.StaleMemberEpoch.Code
	}
	return 0
}
