package group

import (
	"slices"
	"sort"
)

// assign computes the target assignment of a consumer-protocol group with
// the named server-side assignor. Every partition of a topic at least one
// member subscribes to goes to exactly one member subscribed to it.
func assign(assignor string, members []*cmember, topics []TopicInfo, prev map[string]assignment) map[string]assignment {
	sort.Slice(members, func(i, j int) bool { return members[i].id < members[j].id })
	sort.Slice(topics, func(i, j int) bool { return topics[i].Name < topics[j].Name })
	if assignor == assignorRange {
		return assignRange(members, topics)
	}
	return assignUniform(members, topics, prev)
}

// assignRange is Kafka's range assignor, per topic: the members subscribed
// to it, sorted by id, get consecutive ranges of its partitions, the first
// ones one partition more when they do not divide evenly.
func assignRange(members []*cmember, topics []TopicInfo) map[string]assignment {
	out := make(map[string]assignment, len(members))
	for _, m := range members {
		out[m.id] = assignment{}
	}
	for _, t := range topics {
		var subs []*cmember
		for _, m := range members {
			if m.subscribes(t.Name) {
				subs = append(subs, m)
			}
		}
		if len(subs) == 0 {
			continue
		}
		per, extra := int(t.Partitions)/len(subs), int(t.Partitions)%len(subs)
		p := int32(0)
		for i, m := range subs {
			n := per
			if i < extra {
				n++
			}
			for range n {
				out[m.id][t.ID] = append(out[m.id][t.ID], p)
				p++
			}
		}
	}
	return out
}

// assignUniform spreads all partitions evenly over the members subscribed
// to them, keeping each member's previous partitions where the balance
// allows (it is sticky, so a rebalance moves few partitions): first every
// member keeps what it had and may still have, then free partitions go to
// the least loaded member that may take them, then partitions move from
// the most to the least loaded until no move would even things out.
func assignUniform(members []*cmember, topics []TopicInfo, prev map[string]assignment) map[string]assignment {
	out := make(map[string]assignment, len(members))
	load := make(map[string]int, len(members))
	for _, m := range members {
		out[m.id] = assignment{}
	}
	type part struct {
		t TopicInfo
		p int32
	}
	var all []part
	total := 0
	for _, t := range topics {
		for p := range t.Partitions {
			all = append(all, part{t, p})
		}
		total += int(t.Partitions)
	}
	// Quota: nobody keeps more than an even share would give it.
	quota := 1
	if len(members) > 0 {
		quota = (total + len(members) - 1) / len(members)
	}
	owner := map[part]string{}
	for _, m := range members {
		for _, pt := range all {
			if load[m.id] >= quota {
				break
			}
			if _, taken := owner[pt]; !taken && prev[m.id].has(pt.t.ID, pt.p) && m.subscribes(pt.t.Name) {
				owner[pt] = m.id
				load[m.id]++
			}
		}
	}
	eligible := func(pt part) []*cmember {
		var es []*cmember
		for _, m := range members {
			if m.subscribes(pt.t.Name) {
				es = append(es, m)
			}
		}
		return es
	}
	for _, pt := range all {
		if _, ok := owner[pt]; ok {
			continue
		}
		var best *cmember
		for _, m := range eligible(pt) {
			if best == nil || load[m.id] < load[best.id] {
				best = m
			}
		}
		if best != nil {
			owner[pt] = best.id
			load[best.id]++
		}
	}
	// Even out (subscriptions that differ can leave the greedy pass
	// uneven); each move lowers the spread, so this ends, and it is
	// bounded anyway.
	for range total * len(members) {
		moved := false
		for _, pt := range all {
			from, ok := owner[pt]
			if !ok {
				continue
			}
			for _, m := range eligible(pt) {
				if load[m.id] < load[from]-1 {
					owner[pt] = m.id
					load[from]--
					load[m.id]++
					moved = true
					break
				}
			}
		}
		if !moved {
			break
		}
	}
	for pt, id := range owner {
		out[id][pt.t.ID] = append(out[id][pt.t.ID], pt.p)
	}
	for _, a := range out {
		for id := range a {
			slices.Sort(a[id])
		}
	}
	return out
}
