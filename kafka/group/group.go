package group

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/clock"
)

// state is a classic group's state, as Kafka names them (DescribeGroups
// and ListGroups report these strings).
type state int

const (
	stateEmpty state = iota
	statePreparingRebalance
	stateCompletingRebalance
	stateStable
	stateDead
)

func (s state) String() string {
	return [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}[s]
}

// group is one consumer group coordinated by this node. mu guards the
// membership; offMu (offsets.go) the committed offsets, so a slow append
// never holds up heartbeats.
type group struct {
	c      *Coordinator
	id     string
	stream string // the offsets stream

	mu           sync.Mutex
	state        state
	gen          int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	static       map[string]string      // group.instance.id → member id
	pending      map[string]clock.Timer // KIP-394 ids handed out, awaiting their rejoin
	joinNotUntil time.Time              // initial rebalance delay of a group that was empty
	timers       map[string]clock.Timer // "rebalance", "sync", "delay"
	tseq         map[string]uint64      // arm sequence of each running timer: stale firings are ignored
	seq          uint64
	unloaded     bool
	cons         *cgroup // consumer-protocol (KIP-848) state; nil: classic or unused

	offs offsets
}

// member is one member of the group.
type member struct {
	id, instanceID     string
	clientID, host     string
	protocolType       string
	protocols          []kmsg.JoinGroupRequestProtocol
	session, rebalance time.Duration
	assignment         []byte

	join    *waiter // set while the member waits in JoinGroup
	joinVer int16
	sync    *waiter // set while the member waits in SyncGroup
	timer   clock.Timer
	seq     uint64 // session timer generation
}

// waiter is a long-poll in progress: the response is filled by whoever
// completes the rebalance, then done is closed.
type waiter struct {
	done chan struct{}
	resp kmsg.Response
}

func newWaiter() *waiter { return &waiter{done: make(chan struct{})} }

func (w *waiter) finish(resp kmsg.Response) {
	w.resp = resp
	close(w.done)
}

func newGroup(c *Coordinator, id, stream string) *group {
	return &group{c: c, id: id, stream: stream, members: map[string]*member{}, static: map[string]string{},
		pending: map[string]clock.Timer{}, timers: map[string]clock.Timer{}, tseq: map[string]uint64{}}
}

func newMemberID(clientID string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	if clientID == "" {
		clientID = "member"
	}
	return clientID + "-" + hex.EncodeToString(b[:])
}

// wait blocks until w is finished, ctx is done or the coordinator closes.
func (c *Coordinator) wait(ctx context.Context, w *waiter) (kmsg.Response, error) {
	select {
	case <-w.done:
		return w.resp, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		select {
		case <-w.done: // unload finished it with NOT_COORDINATOR
			return w.resp, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// unload ends the group on this node: waiters are answered
// NOT_COORDINATOR (clients look for the coordinator again) and every timer
// stops.
func (g *group) unload() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unloaded = true
	g.seq++
	for _, t := range g.timers {
		t.Stop()
	}
	for _, t := range g.pending {
		t.Stop()
	}
	for _, m := range g.members {
		if m.timer != nil {
			m.timer.Stop()
		}
		g.failWaits(m, kerr.NotCoordinator.Code)
	}
	g.members, g.pending, g.static = map[string]*member{}, map[string]clock.Timer{}, map[string]string{}
	g.dropConsumers()
	g.state = stateDead
}

// resetMembership forgets every member (they rejoin) but keeps the group.
func (g *group) resetMembership() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.c.log.Info("kafka group was coordinated elsewhere meanwhile; members must rejoin", "group", g.id)
	for _, name := range []string{"rebalance", "sync", "delay"} {
		g.stop(name)
	}
	for _, m := range g.members {
		g.remove(m, kerr.UnknownMemberID.Code)
	}
	g.dropConsumers()
	g.state, g.protocol, g.leader = stateEmpty, "", ""
}

// failWaits answers m's pending JoinGroup/SyncGroup with an error.
// awaitJoin makes m wait in the join phase: a rebalance in preparation
// may complete with it, otherwise one starts. The waiter is answered when
// the join completes.
func (g *group) awaitJoin(m *member, version int16) *waiter {
	w := newWaiter()
	m.join, m.joinVer = w, version
	if g.state == statePreparingRebalance {
		g.maybeCompleteJoin()
	} else {
		g.prepareRebalance()
	}
	return w
}

func (g *group) failWaits(m *member, code int16) {
	if m.join != nil {
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.Version = m.joinVer
		resp.ErrorCode, resp.Generation, resp.MemberID = code, -1, m.id
		m.join.finish(resp)
		m.join = nil
	}
	if m.sync != nil {
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.ErrorCode = code
		m.sync.finish(resp)
		m.sync = nil
	}
}

// arm (re)starts the named group timer; fn runs under g.mu unless the
// timer was re-armed or stopped, or the group unloaded, meanwhile.
func (g *group) arm(name string, d time.Duration, fn func()) {
	g.stop(name)
	g.seq++
	seq := g.seq
	g.tseq[name] = seq
	g.timers[name] = g.c.clock.AfterFunc(d, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.unloaded || g.tseq[name] != seq {
			return
		}
		delete(g.timers, name)
		delete(g.tseq, name)
		fn()
	})
}

func (g *group) stop(name string) {
	if t := g.timers[name]; t != nil {
		t.Stop()
	}
	delete(g.timers, name)
	delete(g.tseq, name)
}

// touch restarts m's session timer: if neither a heartbeat nor any other
// request of m arrives within its session timeout, m is removed. A member
// waiting in JoinGroup or SyncGroup is kept alive by the rebalance and
// sync timers instead.
func (g *group) touch(m *member) {
	if m.timer != nil {
		m.timer.Stop()
	}
	m.seq++
	seq := m.seq
	m.timer = g.c.clock.AfterFunc(m.session, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.unloaded || g.members[m.id] != m || m.seq != seq || m.join != nil || m.sync != nil {
			return
		}
		g.c.log.Info("kafka group member session expired", "group", g.id, "member", m.id)
		g.remove(m, kerr.UnknownMemberID.Code)
		g.afterRemoval()
	})
}

// remove takes m out of the group, answering its waits with code.
func (g *group) remove(m *member, code int16) {
	if m.timer != nil {
		m.timer.Stop()
	}
	m.seq++
	g.failWaits(m, code)
	delete(g.members, m.id)
	if m.instanceID != "" && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	if g.leader == m.id {
		g.leader = ""
	}
}

// afterRemoval moves the group on once members left: the others rejoin.
func (g *group) afterRemoval() {
	switch g.state {
	case stateStable, stateCompletingRebalance:
		g.prepareRebalance()
	case statePreparingRebalance:
		g.maybeCompleteJoin()
	}
}

// rebalanceTimeout is the longest rebalance timeout of the members: the
// time the group waits for everyone to rejoin.
func (g *group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalance)
	}
	return d
}

// prepareRebalance starts a rebalance: members learn it from their next
// heartbeat (REBALANCE_IN_PROGRESS) or SyncGroup and rejoin; the join
// completes when all have, or when the rebalance timeout expires.
func (g *group) prepareRebalance() {
	if g.state == stateCompletingRebalance {
		for _, m := range g.members {
			if m.sync != nil {
				resp := kmsg.NewPtrSyncGroupResponse()
				resp.ErrorCode = kerr.RebalanceInProgress.Code
				m.sync.finish(resp)
				m.sync = nil
			}
			m.assignment = nil
		}
	}
	g.stop("sync")
	if g.state == stateEmpty && g.c.cfg.InitialRebalanceDelay > 0 {
		d := min(g.c.cfg.InitialRebalanceDelay, g.rebalanceTimeout())
		g.joinNotUntil = g.c.clock.Now().Add(d)
		g.arm("delay", d, g.maybeCompleteJoin)
	}
	g.state = statePreparingRebalance
	g.arm("rebalance", g.rebalanceTimeout(), g.completeJoin)
	g.maybeCompleteJoin()
}

// maybeCompleteJoin completes the join once every member and every
// pending new member has (re)joined.
func (g *group) maybeCompleteJoin() {
	if g.state != statePreparingRebalance || len(g.pending) > 0 || g.c.clock.Now().Before(g.joinNotUntil) {
		return
	}
	for _, m := range g.members {
		if m.join == nil {
			return
		}
	}
	g.completeJoin()
}

// completeJoin ends the join phase: dynamic members that did not rejoin
// are dropped (static ones keep their place until their session expires),
// a new generation starts with a protocol every member supports, and each
// waiting member gets its JoinGroup response, the leader with everyone's
// metadata.
func (g *group) completeJoin() {
	if g.state != statePreparingRebalance {
		return
	}
	g.stop("rebalance")
	g.stop("delay")
	for _, m := range g.members {
		if m.join == nil && m.instanceID == "" {
			g.remove(m, kerr.UnknownMemberID.Code)
		}
	}
	g.gen++
	if len(g.members) == 0 {
		g.state, g.protocol, g.leader = stateEmpty, "", ""
		return
	}
	g.protocol = g.selectProtocol()
	if g.members[g.leader] == nil || g.members[g.leader].join == nil {
		g.leader = ""
		for id, m := range g.members {
			if m.join != nil && (g.leader == "" || id < g.leader) {
				g.leader = id
			}
		}
	}
	g.state = stateCompletingRebalance
	for _, m := range g.members {
		if m.join == nil {
			continue
		}
		m.join.finish(g.joinResponse(m, m.joinVer))
		m.join = nil
		g.touch(m)
	}
	// Members that never send SyncGroup (e.g. a leader that died after
	// its join) must not stall the others: drop them after the rebalance
	// timeout and rebalance again.
	gen := g.gen
	g.arm("sync", g.rebalanceTimeout(), func() {
		if g.state != stateCompletingRebalance || g.gen != gen {
			return
		}
		for _, m := range g.members {
			if m.sync == nil {
				g.remove(m, kerr.UnknownMemberID.Code)
			}
		}
		g.prepareRebalance()
	})
}

// joinResponse is m's JoinGroup answer for the current generation.
func (g *group) joinResponse(m *member, version int16) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.Version = version
	resp.Generation = g.gen
	pt, p := g.protocolType, g.protocol
	resp.ProtocolType, resp.Protocol = &pt, &p
	resp.LeaderID = g.leader
	resp.MemberID = m.id
	if m.id == g.leader {
		resp.Members = g.memberList()
	}
	return resp
}

func (g *group) memberList() []kmsg.JoinGroupResponseMember {
	out := make([]kmsg.JoinGroupResponseMember, 0, len(g.members))
	for _, o := range g.members {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = o.id
		if o.instanceID != "" {
			inst := o.instanceID
			jm.InstanceID = &inst
		}
		jm.ProtocolMetadata = o.metadata(g.protocol)
		out = append(out, jm)
	}
	return out
}

func (m *member) speaks(protocol string) bool {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return true
		}
	}
	return false
}

func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// candidates are the protocols every member supports.
func (g *group) candidates() map[string]bool {
	var out map[string]bool
	for _, m := range g.members {
		mine := map[string]bool{}
		for _, p := range m.protocols {
			if out == nil || out[p.Name] {
				mine[p.Name] = true
			}
		}
		out = mine
	}
	return out
}

// selectProtocol: each member votes for the first protocol of its own
// preference order that every member supports; the most votes win (ties
// go to the name that sorts first, so the choice is deterministic).
func (g *group) selectProtocol() string {
	cands := g.candidates()
	votes := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			if cands[p.Name] {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for name, n := range votes {
		if best == "" || n > votes[best] || (n == votes[best] && name < best) {
			best = name
		}
	}
	return best
}

// supports: a joining member must speak the group's protocol type and
// share a protocol with everyone already in it.
func (g *group) supports(protocolType string, protocols []kmsg.JoinGroupRequestProtocol) bool {
	if len(g.members) == 0 {
		return protocolType != "" && len(protocols) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	cands := g.candidates()
	for _, p := range protocols {
		if cands[p.Name] {
			return true
		}
	}
	return false
}

// sameProtocols: a rejoin with unchanged metadata need not rebalance.
func sameProtocols(a, b []kmsg.JoinGroupRequestProtocol) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || string(a[i].Metadata) != string(b[i].Metadata) {
			return false
		}
	}
	return true
}

// copyProtocols copies the request's protocols: request bytes may alias
// the connection's read buffer.
func copyProtocols(ps []kmsg.JoinGroupRequestProtocol) []kmsg.JoinGroupRequestProtocol {
	out := make([]kmsg.JoinGroupRequestProtocol, len(ps))
	for i, p := range ps {
		out[i] = kmsg.JoinGroupRequestProtocol{Name: p.Name, Metadata: append([]byte(nil), p.Metadata...)}
	}
	return out
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
