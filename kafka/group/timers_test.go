package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestStateMachineTimers drives the group state machine through its timers
// (session, rebalance, sync, initial delay) on the fake clock: each case
// says where the group must be just before a timeout and just after it.
func TestStateMachineTimers(t *testing.T) {
	o := joinOpts{session: time.Second, rebalance: 3 * time.Second}
	for _, tc := range []struct {
		name string
		cfg  Config
		run  func(t *testing.T, e *env)
	}{
		{"the only member's session expires: no members left", Config{}, func(t *testing.T, e *env) {
			e.stableOne("g", o, "x")
			e.clk.Advance(o.session - time.Millisecond)
			if s := e.state("g"); s != "Stable" {
				t.Fatalf("just before the session timeout: %s, want Stable", s)
			}
			e.clk.Advance(time.Millisecond)
			// No members and no committed offsets: DescribeGroups says Dead.
			if s := e.state("g"); s != "Dead" {
				t.Fatalf("after the session timeout: %s, want Dead", s)
			}
		}},
		{"heartbeats keep a member past many session timeouts", Config{}, func(t *testing.T, e *env) {
			id, gen := e.stableOne("g", o, "x")
			for range 5 {
				e.clk.Advance(o.session - time.Millisecond)
				if ec := e.heartbeat("g", id, gen); ec != 0 {
					t.Fatalf("heartbeat: %d", ec)
				}
			}
			if s := e.state("g"); s != "Stable" {
				t.Fatalf("state %s, want Stable", s)
			}
		}},
		{"initial rebalance delay holds the first generation", Config{InitialRebalanceDelay: 2 * time.Second}, func(t *testing.T, e *env) {
			o := joinOpts{session: 10 * time.Second, rebalance: o.rebalance} // no session ends within the delay
			_, ach := e.joinNew("g", o)
			e.until("PreparingRebalance", func() bool { return e.state("g") == "PreparingRebalance" })
			_, bch := e.joinNew("g", o) // arrives within the delay: same generation
			e.until("two members", func() bool { return len(e.describe("g").Members) == 2 })
			e.clk.Advance(2*time.Second - time.Millisecond)
			if !pending(ach) || !pending(bch) {
				t.Fatal("join answered within the initial delay")
			}
			e.clk.Advance(time.Millisecond)
			ja, jb := recv[*kmsg.JoinGroupResponse](t, ach), recv[*kmsg.JoinGroupResponse](t, bch)
			if ja.ErrorCode != 0 || jb.ErrorCode != 0 || ja.Generation != jb.Generation || len(ja.Members)+len(jb.Members) != 2 {
				t.Fatalf("joins after the delay: %+v / %+v", ja, jb)
			}
		}},
		{"a member waiting in JoinGroup outlives its session", Config{}, func(t *testing.T, e *env) {
			a, _ := e.stableOne("g", o, "x")
			// b's first join only reserves an id (KIP-394): the pending id
			// holds the rebalance that a's rejoin starts until b is back.
			// Taken in this order so that a's rejoin cannot complete a
			// generation of its own first.
			bo := joinOpts{session: 10 * time.Second, rebalance: o.rebalance}
			first := e.do(joinReq("g", bo)).(*kmsg.JoinGroupResponse)
			if first.ErrorCode != kerr.MemberIDRequired.Code || first.MemberID == "" {
				t.Fatalf("b's first join: %+v", first)
			}
			ach := e.async(joinReq("g", joinOpts{member: a, session: o.session, rebalance: o.rebalance}))
			e.until("PreparingRebalance", func() bool { return e.state("g") == "PreparingRebalance" })
			e.clk.Advance(2 * o.session) // twice a's session, within the rebalance timeout
			if !pending(ach) {
				t.Fatal("a's join answered while b was still expected")
			}
			if n := len(e.describe("g").Members); n != 1 {
				t.Fatalf("%d members after a's session passed in JoinGroup, want a still there", n)
			}
			bo.member = first.MemberID
			bch := e.async(joinReq("g", bo))
			ja, jb := recv[*kmsg.JoinGroupResponse](t, ach), recv[*kmsg.JoinGroupResponse](t, bch)
			if ja.ErrorCode != 0 || jb.ErrorCode != 0 || ja.Generation != jb.Generation || len(ja.Members)+len(jb.Members) != 2 {
				t.Fatalf("joins: %+v / %+v", ja, jb)
			}
		}},
		{"a rebalance nobody rejoins ends at the rebalance timeout", Config{}, func(t *testing.T, e *env) {
			a, gen := e.stableOne("g", joinOpts{session: 10 * time.Second, rebalance: o.rebalance}, "x")
			_, bch := e.joinNew("g", joinOpts{session: 10 * time.Second, rebalance: o.rebalance})
			e.until("PreparingRebalance", func() bool { return e.state("g") == "PreparingRebalance" })
			e.clk.Advance(o.rebalance)
			jb := recv[*kmsg.JoinGroupResponse](t, bch)
			if jb.ErrorCode != 0 || jb.Generation != gen+1 || len(jb.Members) != 1 {
				t.Fatalf("join after the rebalance timeout: %+v", jb)
			}
			if ec := e.heartbeat("g", a, gen); ec == 0 {
				t.Fatal("the member that never rejoined still heartbeats")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			e.t = t
			tc.run(t, e)
		})
	}
}
