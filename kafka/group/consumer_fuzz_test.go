package group

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
)

// FuzzConsumerHeartbeats drives a consumer-protocol group with arbitrary
// sequences of joins, heartbeats (full and keepalive), leaves, topic
// changes and clock moves, played by clients that take whatever
// assignment they are answered. Whatever the sequence: nothing panics, no
// partition is owned by two members on the server, and no two clients
// that are still members believe they own the same partition.
func FuzzConsumerHeartbeats(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 1, 0, 1, 1, 1, 0})
	f.Add([]byte{0, 0, 0, 1, 0, 2, 1, 0, 2, 1, 2, 2, 5, 0, 1, 0, 1, 1, 1, 2})
	f.Add([]byte{0, 0, 0, 1, 4, 20, 1, 1, 3, 0, 1, 1})
	f.Add([]byte{0, 3, 0, 2, 0, 1, 1, 3, 1, 2, 4, 50, 1, 1, 1, 2, 2, 1, 3, 2, 1, 1})
	// One coordinator for every input (a fresh one per input would cost
	// a stream service each): each input gets its own group.
	e, l := cenv(f)
	n := 0
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			ops = ops[:200]
		}
		e.t = t
		n++
		grp := "g" + strconv.Itoa(n)
		l.set(TopicInfo{"a", tid(1), 4}, TopicInfo{"b", tid(2), 2})
		type client struct {
			epoch int32
			owned assignment
			in    bool
		}
		clients := [4]*client{}
		ids := [4]string{"A", "B", "C", "D"}
		names := [][]string{{"a"}, {"a", "b"}, {"b"}, {"a", "b"}}
		assignors := []string{"uniform", "range"}
		next := func(i *int) byte {
			if *i >= len(ops) {
				return 0
			}
			b := ops[*i]
			*i++
			return b
		}
		parts := int32(4)
		for i := 0; i < len(ops); {
			op, arg := next(&i)%6, next(&i)
			k := int(arg) % 4
			c := clients[k]
			switch op {
			case 0: // join
				r := e.cgh(joinCGH(grp, ids[k], names[k], assignors[k%2]))
				if r.ErrorCode == 0 {
					clients[k] = &client{epoch: r.MemberEpoch, owned: got(r), in: true}
				}
			case 1, 2: // full heartbeat reporting what it owns, or keepalive
				if c == nil || !c.in {
					continue
				}
				owned := c.owned
				if op == 2 {
					owned = nil
				}
				r := e.cgh(beatCGH(grp, ids[k], c.epoch, owned))
				if r.ErrorCode != 0 {
					c.in, c.owned = false, nil // the client abandons its partitions
					continue
				}
				c.epoch = r.MemberEpoch
				if a := got(r); a != nil {
					c.owned = a
				}
			case 3: // leave
				if c != nil && c.in {
					e.cgh(beatCGH(grp, ids[k], -1, nil))
					c.in, c.owned = false, nil
				}
			case 4: // time passes
				e.clk.Advance(time.Duration(arg) * time.Second)
			case 5: // topic a grows
				parts++
				l.set(TopicInfo{"a", tid(1), parts}, TopicInfo{"b", tid(2), 2})
				e.clk.Advance(time.Second)
			}
			noDoubleOwners(t, e, grp)
			// Clients still in the group own disjoint partitions.
			g, ec := e.c.lockedGroup(stream.WithSystemAccess(context.Background()), grp)
			if ec != 0 {
				t.Fatalf("group: %d", ec)
			}
			members := map[string]bool{}
			if g.cons != nil {
				for id := range g.cons.members {
					members[id] = true
				}
			}
			g.mu.Unlock()
			seen := assignment{}
			for j, c := range clients {
				if c == nil || !c.in || !members[ids[j]] {
					continue
				}
				if overlap := seen.intersect(c.owned); overlap.count() > 0 {
					t.Fatalf("client %s owns %v, owned by another client too", ids[j], overlap)
				}
				for id, ps := range c.owned {
					seen[id] = append(seen[id], ps...)
				}
			}
		}
	})
}
