package kafka

import (
	"context"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
)

// handleDescribeLogDirs reports one log directory per node, the node's
// data directory, holding the partitions this node serves (as Kafka
// clients ask every broker): each partition's size is the stored bytes of
// its retained history, in the WAL and in object storage alike (a
// partition's history is not split by tier here). Offset lag is 0 (no
// future replicas); total and usable bytes are those of the data
// directory's filesystem (the WAL's; object storage has no such bound).
// Partitions the client may not read are
// left out. Topics nil = every topic.
func handleDescribeLogDirs(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeLogDirsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir, dir.TotalBytes, dir.UsableBytes = s.cfg.LogDir, -1, -1
	if dir.Dir == "" {
		dir.Dir = "picomq"
	}
	if f := s.cfg.LogDirSpace; f != nil {
		if total, usable, err := f(); err == nil {
			dir.TotalBytes, dir.UsableBytes = total, usable
		}
	}
	var topics []topic
	if req.Topics == nil {
		all, err := s.allTopics(ctx)
		if err != nil {
			dir.ErrorCode = errCode(err)
		}
		topics = all
	} else {
		for _, rt := range req.Topics {
			if t, err := s.resolveTopic(ctx, rt.Topic); err == nil {
				topics = append(topics, t)
			}
		}
	}
	want := map[string]map[int32]bool{}
	for _, rt := range req.Topics {
		if want[rt.Topic] == nil {
			want[rt.Topic] = map[int32]bool{}
		}
		for _, p := range rt.Partitions {
			want[rt.Topic][p] = true
		}
	}
	sort.Slice(topics, func(i, j int) bool { return topics[i].name < topics[j].name })
	for _, t := range topics {
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic = t.name
		for p, in := range t.partitions {
			if req.Topics != nil && !want[t.name][int32(p)] {
				continue
			}
			if s.allow(cc, auth.Read, in.Name) != nil {
				continue
			}
			size, here := s.svc.LocalBytes(in.Name)
			if !here {
				continue
			}
			dp := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			dp.Partition, dp.Size = int32(p), size
			dt.Partitions = append(dt.Partitions, dp)
		}
		if len(dt.Partitions) > 0 {
			dir.Topics = append(dir.Topics, dt)
		}
	}
	resp.Dirs = append(resp.Dirs, dir)
	return resp, nil
}
