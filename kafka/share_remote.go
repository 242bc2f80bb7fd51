package kafka

// Share-partition start offsets when the group's coordinator is another
// node: the node serving the share-partition reads and writes them there,
// as an admin-style OffsetFetch / OffsetCommit (generation -1, no member)
// over the peer connections (txn_markers.go). The coordinator stores such
// a commit exactly as a local CommitShareOffsets (offset, leader epoch -1,
// no metadata), in the group's offsets stream.

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/node/stream"
)

// storeShareOffset stores one share-partition start offset on the group's
// coordinator: here when this node coordinates the group, else on the
// coordinating node.
func (s *Server) storeShareOffset(ctx context.Context, gid, topic string, p int32, off int64) error {
	err := s.groups.CommitShareOffsets(ctx, gid, []group.ShareOffset{{Topic: topic, Partition: p, Offset: off}})
	if err == nil || group.Code(err) != kerr.NotCoordinator.Code {
		return err
	}
	b, seed, err := s.shareCoordinatorPeer(ctx, gid)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation, req.MemberID = gid, -1, ""
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = p, off, -1
	rt.Partitions = []kmsg.OffsetCommitRequestTopicPartition{rp}
	req.Topics = []kmsg.OffsetCommitRequestTopic{rt}
	resp, err := req.RequestWith(ctx, seed)
	if err != nil && ctx.Err() == nil {
		// Once more on a new connection: the pooled one may be to the
		// coordinator's previous process. Storing the same offset twice
		// is harmless.
		resp, err = req.RequestWith(ctx, seed)
	}
	if err != nil {
		return fmt.Errorf("%w: share start offset to node %d: %v", stream.ErrUnavailable, b, err)
	}
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if t.Topic != topic || rp.Partition != p {
				continue
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("node %d answered the share start offset commit of %s[%d]: %w", b, topic, p, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: node %d did not answer for %s[%d]", stream.ErrUnavailable, b, topic, p)
}

// fetchShareOffset reads one stored share-partition start offset from the
// group's coordinating node (ok false: none stored).
func (s *Server) fetchShareOffset(ctx context.Context, gid, topic string, p int32) (int64, bool, error) {
	b, seed, err := s.shareCoordinatorPeer(ctx, gid)
	if err != nil {
		return 0, false, err
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = gid
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{p}
	req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
	// From v8 the request names groups in a list; kgo picks the version,
	// so fill both forms (each version encodes only its own fields).
	rg := kmsg.NewOffsetFetchRequestGroup()
	rg.Group = gid
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic, gt.Partitions = topic, []int32{p}
	rg.Topics = []kmsg.OffsetFetchRequestGroupTopic{gt}
	req.Groups = []kmsg.OffsetFetchRequestGroup{rg}
	resp, err := req.RequestWith(ctx, seed)
	if err != nil && ctx.Err() == nil {
		resp, err = req.RequestWith(ctx, seed) // a stale pooled connection, as above
	}
	if err != nil {
		return 0, false, fmt.Errorf("%w: share start offset from node %d: %v", stream.ErrUnavailable, b, err)
	}
	// An error answer (the group moving, say) reaches the share consumer
	// as the partition's error: retriable, as a lost connection, not the
	// coordinator's own code (NOT_COORDINATOR means nothing to ShareFetch).
	fail := func(c int16) error {
		return fmt.Errorf("%w: node %d answered the share start offset fetch of %s[%d]: %v", stream.ErrUnavailable, b, topic, p, kerr.ErrorForCode(c))
	}
	if resp.ErrorCode != 0 {
		return 0, false, fail(resp.ErrorCode)
	}
	for _, g := range resp.Groups {
		if g.ErrorCode != 0 {
			return 0, false, fail(g.ErrorCode)
		}
		for _, t := range g.Topics {
			for _, rp := range t.Partitions {
				if t.Topic == topic && rp.Partition == p {
					if rp.ErrorCode != 0 {
						return 0, false, fail(rp.ErrorCode)
					}
					return rp.Offset, rp.Offset >= 0, nil
				}
			}
		}
	}
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if t.Topic == topic && rp.Partition == p {
				if rp.ErrorCode != 0 {
					return 0, false, fail(rp.ErrorCode)
				}
				return rp.Offset, rp.Offset >= 0, nil
			}
		}
	}
	return 0, false, fmt.Errorf("%w: node %d did not answer for %s[%d]", stream.ErrUnavailable, b, topic, p)
}

// shareCoordinatorPeer finds the node coordinating group gid, when it is
// another node, and a connection to it.
func (s *Server) shareCoordinatorPeer(ctx context.Context, gid string) (int32, *kgo.Broker, error) {
	name, err := group.StreamName(gid)
	if err != nil {
		return 0, nil, err
	}
	b, self, err := s.Locate(stream.WithSystemAccess(ctx), name)
	if err != nil {
		return 0, nil, err
	}
	if self {
		return 0, nil, fmt.Errorf("%w: group %s is moving to this node", stream.ErrUnavailable, gid)
	}
	peer, err := s.peers.broker(b)
	if err != nil {
		return 0, nil, err
	}
	return b.NodeID, peer, nil
}
