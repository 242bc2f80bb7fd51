package kafka

import (
	"context"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/kafka/share"
)

// handleDescribeShareGroupOffsets reports share-partition start offsets:
// the live one where this node serves the share-partition, else the stored
// one; -1 for a partition the group has not started. Null topics: every
// partition with a start offset.
func handleDescribeShareGroupOffsets(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeShareGroupOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
	for _, rg := range req.Groups {
		og := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		og.GroupID = rg.GroupID
		offs, c := s.shareOffsets(ctx, cc, rg.GroupID)
		if c != 0 {
			og.ErrorCode = c
			resp.Groups = append(resp.Groups, og)
			continue
		}
		want := rg.Topics
		if want == nil {
			for _, topic := range slices.Sorted(maps.Keys(offs)) {
				want = append(want, kmsg.DescribeShareGroupOffsetsRequestGroupTopic{Topic: topic, Partitions: slices.Sorted(maps.Keys(offs[topic]))})
			}
		}
		for _, rt := range want {
			ot := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
			ot.Topic = rt.Topic
			t, err := s.resolveTopic(ctx, rt.Topic)
			if err == nil {
				ot.TopicID = t.id
			}
			for _, p := range rt.Partitions {
				op := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
				op.Partition, op.LeaderEpoch, op.StartOffset, op.Lag = p, -1, -1, -1
				switch {
				case err != nil:
					op.ErrorCode, op.ErrorMessage = errCode(err), errMessage(err)
				case p < 0 || int(p) >= len(t.partitions):
					op.ErrorCode = kerr.UnknownTopicOrPartition.Code
				default:
					if off, ok := offs[rt.Topic][p]; ok {
						op.StartOffset = off
						if head, herr := s.svc.Head(ctx, t.partitions[p].Name); herr == nil {
							op.Lag = max(head.NextOffset-off, 0)
						}
					}
				}
				ot.Partitions = append(ot.Partitions, op)
			}
			og.Topics = append(og.Topics, ot)
		}
		resp.Groups = append(resp.Groups, og)
	}
	return resp, nil
}

// shareOffsets returns a share group's start offsets, live where this node
// has the share-partition, or the error code for the group.
func (s *Server) shareOffsets(ctx context.Context, cc *connState, gid string) (map[string]map[int32]int64, int16) {
	if c := s.shareCoordinator(ctx, cc, gid); c != 0 {
		return nil, c
	}
	if !s.shareGroupAdmin(cc, gid) {
		return nil, kerr.GroupAuthorizationFailed.Code
	}
	offs, err := s.groups.ShareOffsets(ctx, gid)
	if err != nil {
		return nil, group.Code(err)
	}
	for k, sp := range s.share.Partitions(gid) {
		if !sp.Loaded() {
			continue
		}
		topic := s.share.TopicName(k.TopicID)
		if topic == "" {
			continue
		}
		if offs[topic] == nil {
			offs[topic] = map[int32]int64{}
		}
		offs[topic][k.Partition] = sp.StartOffset()
	}
	return offs, 0
}

// shareGroupIdle is the error code for changing the offsets of a group
// that has members (NON_EMPTY_GROUP), else 0.
func (s *Server) shareGroupIdle(gid string) int16 {
	if n, _ := s.share.Members(gid); n > 0 {
		return kerr.NonEmptyGroup.Code
	}
	return 0
}

// forgetSharePartitions drops this node's share-partitions of a topic, so
// their next fetch starts from the stored offsets.
func (s *Server) forgetSharePartitions(gid string, tid [16]byte, only map[int32]bool) {
	for k := range s.share.Partitions(gid) {
		if k.TopicID == tid && (only == nil || only[k.Partition]) {
			s.share.Forget(share.PartKey{Group: gid, TopicID: tid, Partition: k.Partition})
		}
	}
}
