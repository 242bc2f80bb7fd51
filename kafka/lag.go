package kafka

import (
	"context"
)

// GroupLag is how far one consumer group is behind on one topic: the sum
// over the topic's partitions of (log end offset - committed offset).
type GroupLag struct {
	Group    string
	Topic    string
	Messages int64
}

// GroupLags computes the lag of every group this node coordinates, for
// the picomq_kafka_group_lag metric (docs/operations.md). A partition
// whose end offset this node cannot read now (another node owns it, etcd
// unreachable, ctx done) is left out rather than guessed, so in a cluster
// the figure is a lower bound; a committed offset past the end (the
// partition was trimmed or recreated) counts as no lag.
func (s *Server) GroupLags(ctx context.Context) []GroupLag {
	type key struct{ group, topic string }
	sum := map[key]int64{}
	var order []key
	for _, c := range s.groups.Committed() {
		if ctx.Err() != nil {
			break
		}
		name, err := s.partitionName(ctx, c.Topic, c.Partition, false)
		if err != nil {
			continue
		}
		info, err := s.svc.Head(ctx, name)
		if err != nil {
			continue
		}
		k := key{c.Group, c.Topic}
		if _, seen := sum[k]; !seen {
			order = append(order, k)
		}
		sum[k] += max(0, info.NextOffset-c.Offset)
	}
	out := make([]GroupLag, 0, len(order))
	for _, k := range order {
		out = append(out, GroupLag{Group: k.group, Topic: k.topic, Messages: sum[k]})
	}
	return out
}
