package kafka

import (
	"context"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/node/stream"
)

// handleMetadata answers from the registry, so every node gives the same
// brokers, topic ids, partition counts, leaders and leader epochs.
func handleMetadata(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	b, err := s.brokers(ctx)
	if err != nil {
		// Never fail the request: answer with no brokers and the error
		// on every topic, so the client retries.
		b = brokers{}
	}
	resp.Brokers = b.metadataBrokers()
	resp.ClusterID = &s.cfg.ClusterID
	resp.ControllerID = b.controller()

	var topics []topic
	var terrs []kmsg.MetadataResponseTopic
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		topics, err = s.allTopics(ctx)
		if err != nil {
			s.log.Warn("kafka metadata: listing topics failed", "err", err)
		}
		if groupsServed() {
			resp.Topics = append(resp.Topics, offsetsTopic(b))
		}
	} else {
		var byID map[[16]byte]topic
		for _, rt := range req.Topics {
			var t topic
			var err error
			switch {
			case rt.Topic != nil && *rt.Topic == offsetsTopicName && groupsServed():
				resp.Topics = append(resp.Topics, offsetsTopic(b))
				continue
			case rt.Topic != nil:
				t, err = s.resolveTopic(ctx, *rt.Topic)
				autoCreate := req.Version < 4 || req.AllowAutoTopicCreation
				if errors.Is(err, stream.ErrNotFound) && autoCreate && s.cfg.AutoCreateTopics {
					t, err = s.createTopic(ctx, *rt.Topic, s.cfg.DefaultPartitions, topicConfig{})
					if errors.Is(err, stream.ErrConflict) || errors.Is(err, stream.ErrTopicConflict) {
						t, err = s.resolveTopic(ctx, *rt.Topic)
					}
				}
			default:
				if byID == nil {
					byID, err = s.topicsByID(ctx)
				}
				var ok bool
				if t, ok = byID[rt.TopicID]; !ok && err == nil {
					err = kerr.UnknownTopicID
				}
			}
			if err != nil {
				mt := kmsg.NewMetadataResponseTopic()
				mt.Topic, mt.TopicID = rt.Topic, rt.TopicID
				mt.ErrorCode = errCode(err)
				if mt.ErrorCode == kerr.NotLeaderForPartition.Code {
					mt.ErrorCode = kerr.LeaderNotAvailable.Code // retriable at topic level
				}
				terrs = append(terrs, mt)
				continue
			}
			topics = append(topics, t)
		}
	}
	for _, t := range topics {
		resp.Topics = append(resp.Topics, s.metadataTopic(ctx, b, t))
	}
	resp.Topics = append(resp.Topics, terrs...)
	return resp, nil
}

func (s *Server) metadataTopic(ctx context.Context, b brokers, t topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := t.name
	mt.Topic, mt.TopicID = &name, t.id
	for p, in := range t.partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = int32(p)
		mp.Leader = s.leader(b, in)
		mp.LeaderEpoch = int32(in.Epoch)
		if mp.Leader < 0 {
			mp.ErrorCode = kerr.LeaderNotAvailable.Code
			mp.Replicas, mp.ISR = []int32{}, []int32{}
		} else {
			mp.Replicas, mp.ISR = []int32{mp.Leader}, []int32{mp.Leader}
		}
		mp.OfflineReplicas = []int32{}
		if mp.Leader >= 0 {
			s.replicaFields(ctx, b, in, &mp)
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// replicaFields reports a replicated partition's copies: replicas are its
// owner and followers (and the leader, if a takeover is under way), the
// ISR the live ones among the owner and its in-sync followers, offline
// replicas the copies on nodes that are not live (docs/kafka.md). A
// partition that is not replicated keeps its one copy, the leader's.
func (s *Server) replicaFields(ctx context.Context, b brokers, in stream.Info, mp *kmsg.MetadataResponseTopicPartition) {
	replicas, inSync, err := s.svc.ReplicaNodes(ctx, in)
	if err != nil || len(replicas) <= 1 {
		return
	}
	live := map[string]bool{}
	for _, m := range b.members {
		live[m.NodeID] = true
	}
	leaderNode := s.svc.ServingNode(in, b.members)
	if !slices.Contains(replicas, leaderNode) {
		replicas = append([]string{leaderNode}, replicas...)
	}
	mp.Replicas, mp.ISR, mp.OfflineReplicas = []int32{}, []int32{}, []int32{}
	for _, n := range replicas {
		id := brokerID(n)
		mp.Replicas = append(mp.Replicas, id)
		switch {
		case !live[n]:
			mp.OfflineReplicas = append(mp.OfflineReplicas, id)
		case slices.Contains(inSync, n) || n == leaderNode:
			mp.ISR = append(mp.ISR, id)
		}
	}
}

func (b brokers) metadataBrokers() []kmsg.MetadataResponseBroker {
	out := []kmsg.MetadataResponseBroker{}
	for _, m := range b.members {
		if br, ok := b.byNode[m.NodeID]; ok {
			out = append(out, kmsg.MetadataResponseBroker{NodeID: br.NodeID, Host: br.Host, Port: br.Port})
		}
	}
	return out
}

// topicsByID indexes every topic by its id (requests of versions that name
// topics by id).
func (s *Server) topicsByID(ctx context.Context) (map[[16]byte]topic, error) {
	all, err := s.allTopics(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[[16]byte]topic, len(all))
	for _, t := range all {
		m[t.id] = t
	}
	return m, nil
}

// offsetsTopicName is Kafka's internal topic of committed offsets. PicoMQ
// keeps offsets in streams under /_sys/ instead; Metadata still lists this
// name as an internal topic (one partition, led by the controller) once
// groups are served, because clients and tools look for it to tell internal
// topics apart. It holds no data here.
const offsetsTopicName = "__consumer_offsets"

func groupsServed() bool { return len(group.Versions()) > 0 }

func offsetsTopic(b brokers) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := offsetsTopicName
	mt.Topic, mt.IsInternal = &name, true
	mt.TopicID = topicID(0)
	mp := kmsg.NewMetadataResponseTopicPartition()
	mp.Leader, mp.LeaderEpoch = b.controller(), 0
	mp.Replicas, mp.ISR, mp.OfflineReplicas = []int32{mp.Leader}, []int32{mp.Leader}, []int32{}
	mt.Partitions = []kmsg.MetadataResponseTopicPartition{mp}
	return mt
}
