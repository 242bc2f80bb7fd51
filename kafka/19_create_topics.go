package kafka

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/node/stream"
)

// maxPartitions bounds one topic's partition count (each is a stream).
const maxPartitions = 10000

// topicConfig is what PicoMQ keeps of a topic's configs: retention and
// max.message.bytes, stored with every partition stream.
type topicConfig struct {
	retentionMs, retentionBytes, maxBatchBytes int64
	// minInSync is min.insync.replicas (0 = the node's --min-insync);
	// replicas the replication factor asked for (0 or 1: one copy).
	minInSync, replicas int64
	// logAppendTime: message.timestamp.type=LogAppendTime.
	logAppendTime bool
	// compaction: cleanup.policy=compact and its tuning configs
	// (stream.ParseCompaction); nil: delete.
	compaction *stream.Compaction
}

// fixedConfigs are the topic configs PicoMQ honours only at one value: its
// own fixed behaviour. A different value is refused (INVALID_CONFIG), never
// accepted and ignored. cleanup.policy and the compaction configs are
// applied (stream.ParseCompaction).
var fixedConfigs = map[string]string{
	"compression.type":               "producer",
	"unclean.leader.election.enable": "false", // nothing acknowledged is ever given up
}

// parseTopicConfig reads a topic's configs: the ones PicoMQ keeps
// (-1, Kafka's "no limit", is 0 here), the ones it honours at one value
// (fixedConfigs), and flush.messages/flush.ms, which every value is
// honoured for (every acknowledged batch is already fsynced). Any other
// name, or another value, is INVALID_CONFIG: a config accepted is a
// config applied (docs/kafka.md, "Topic configs").
func parseTopicConfig(get func(yield func(name string, value *string) bool)) (topicConfig, error) {
	var tc topicConfig
	var err error
	compaction := map[string]string{}
	get(func(name string, value *string) bool {
		if value == nil {
			return true // a null value asks for the default
		}
		if stream.IsCompactionConfig(name) {
			compaction[name] = *value
			return true
		}
		var dst *int64
		switch name {
		case "retention.ms":
			dst = &tc.retentionMs
		case "retention.bytes":
			dst = &tc.retentionBytes
		case "max.message.bytes":
			dst = &tc.maxBatchBytes
		case "min.insync.replicas":
			dst = &tc.minInSync
		case "message.timestamp.type":
			switch *value {
			case "CreateTime", "LogAppendTime":
				tc.logAppendTime = *value == "LogAppendTime"
				return true
			}
			err = fmt.Errorf("%w: config message.timestamp.type=%q (CreateTime or LogAppendTime)", kerr.InvalidConfig, *value)
			return false
		case "flush.messages", "flush.ms":
			var ignored int64
			dst = &ignored
		default:
			want, ok := fixedConfigs[name]
			switch {
			case !ok:
				err = fmt.Errorf("%w: config %s is not supported by PicoMQ", kerr.InvalidConfig, name)
				return false
			case *value != want:
				err = fmt.Errorf("%w: config %s=%q is not supported by PicoMQ (only %q)", kerr.InvalidConfig, name, *value, want)
				return false
			}
			return true
		}
		v, perr := strconv.ParseInt(*value, 10, 64)
		if perr != nil || v < -1 {
			err = fmt.Errorf("%w: config %s=%q", kerr.InvalidConfig, name, *value)
			return false
		}
		*dst = max(v, 0)
		return true
	})
	if err == nil {
		if tc.compaction, err = stream.ParseCompaction(nil, compaction); err != nil {
			err = fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
		}
	}
	if err == nil && tc.minInSync > 16 {
		err = fmt.Errorf("%w: min.insync.replicas %d", kerr.InvalidConfig, tc.minInSync)
	}
	return tc, err
}

// createTopic creates the streams of a new topic: partitions 1..n-1 first,
// then partition 0 with the alias, so the topic becomes visible (and its
// partition count readable) only once all of its partitions exist.
func (s *Server) createTopic(ctx context.Context, name string, partitions int32, tc topicConfig) (topic, error) {
	if err := stream.ValidateTopic(name); err != nil {
		return topic{}, err
	}
	if partitions < 1 || partitions > maxPartitions {
		return topic{}, fmt.Errorf("%w: %d partitions (want 1 to %d)", kerr.InvalidPartitions, partitions, maxPartitions)
	}
	base := topicStream(name)
	if err := stream.ValidateName(base); err != nil {
		return topic{}, err
	}
	if _, err := s.svc.LookupTopic(ctx, name); err == nil {
		return topic{}, fmt.Errorf("%w: topic %q exists", stream.ErrTopicConflict, name)
	}
	leaders := s.spread(ctx, name, partitions)
	none := ""
	for p := int32(1); p < partitions; p++ {
		if _, err := s.createPartition(ctx, partitionStream(base, p), &none, tc, leaders(p)); err != nil {
			return topic{}, err
		}
	}
	alias := name
	info, err := s.createPartition(ctx, base, &alias, tc, leaders(0))
	if err != nil {
		return topic{}, err
	}
	return s.resolveTopicFrom(ctx, name, info)
}

// spread chooses the node that leads each partition of a new topic: the
// live Kafka nodes in node-id order, round robin, starting at a node picked
// by the topic name's hash (so one-partition topics spread too). Without
// other live nodes every partition stays here.
func (s *Server) spread(ctx context.Context, name string, partitions int32) func(p int32) string {
	self := s.svc.NodeID()
	b, err := s.brokers(ctx)
	if err != nil {
		return func(int32) string { return self }
	}
	var nodes []string
	for _, m := range b.members { // sorted by node id
		if _, ok := b.byNode[m.NodeID]; ok {
			nodes = append(nodes, m.NodeID)
		}
	}
	if len(nodes) < 2 {
		return func(int32) string { return self }
	}
	first := int(uint32(brokerID(name)) % uint32(len(nodes)))
	return func(p int32) string { return nodes[(first+int(p))%len(nodes)] }
}

// createPartition creates one partition stream and hands it to its
// leader node when that is another node; one that exists already with the
// same configuration is taken as is (a retried create). A hand-over that
// fails leaves the partition here, where it works as well.
func (s *Server) createPartition(ctx context.Context, name string, alias *string, tc topicConfig, leader string) (stream.Info, error) {
	opts := stream.CreateOptions{
		ContentType: kafkaContentType, KafkaTopic: alias,
		RetentionMs: tc.retentionMs, RetentionBytes: tc.retentionBytes, MaxBatchBytes: tc.maxBatchBytes,
		LogAppendTime: tc.logAppendTime,
		Compaction:    tc.compaction,
	}
	if tc.replicas >= 2 {
		// replication.factor >= 2: copies on that many nodes, acks=all
		// after min.insync.replicas of them (docs/kafka.md).
		opts.Durability, opts.Replicas, opts.MinInSync = stream.DurabilityReplicated, int(tc.replicas), int(tc.minInSync)
	}
	info, created, err := s.svc.Create(ctx, name, opts)
	if err != nil {
		return stream.Info{}, fmt.Errorf("create partition stream %s: %w", name, err)
	}
	if created && leader != s.svc.NodeID() {
		moved, err := s.svc.HandOver(ctx, name, leader)
		if err != nil {
			s.log.Warn("new partition stays on this node", "stream", name, "leader", leader, "err", err)
			return info, nil
		}
		return moved, nil
	}
	return info, nil
}

func handleCreateTopics(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		n := rt.NumPartitions
		if n == -1 {
			n = s.cfg.DefaultPartitions
		}
		if len(rt.ReplicaAssignment) > 0 {
			n = int32(len(rt.ReplicaAssignment))
		}
		tc, err := parseTopicConfig(func(yield func(string, *string) bool) {
			for _, c := range rt.Configs {
				if !yield(c.Name, c.Value) {
					return
				}
			}
		})
		var t topic
		rf := int64(rt.ReplicationFactor)
		if len(rt.ReplicaAssignment) > 0 {
			rf = int64(len(rt.ReplicaAssignment[0].Replicas))
		}
		tc.replicas = max(rf, 1)
		switch {
		case err != nil:
		case rt.ReplicationFactor == 0 || rt.ReplicationFactor < -1:
			err = fmt.Errorf("%w: replication factor %d", kerr.InvalidReplicationFactor, rt.ReplicationFactor)
		case tc.replicas >= 2 && tc.minInSync > tc.replicas:
			err = fmt.Errorf("%w: min.insync.replicas %d above the replication factor %d", kerr.InvalidConfig, tc.minInSync, tc.replicas)
		case tc.replicas >= 2 && !s.enoughBrokers(ctx, tc.replicas):
			err = fmt.Errorf("%w: replication factor %d is more than the live nodes", kerr.InvalidReplicationFactor, tc.replicas)
		case req.ValidateOnly:
			if err = stream.ValidateTopic(rt.Topic); err == nil && (n < 1 || n > maxPartitions) {
				err = fmt.Errorf("%w: %d partitions", kerr.InvalidPartitions, n)
			}
			if err == nil {
				if _, lerr := s.svc.LookupTopic(ctx, rt.Topic); lerr == nil {
					err = fmt.Errorf("%w: topic %q exists", kerr.TopicAlreadyExists, rt.Topic)
				}
			}
		default:
			if err = s.allow(cc, auth.Admin, topicStream(rt.Topic)); err == nil {
				t, err = s.createTopic(ctx, rt.Topic, n, tc)
			}
		}
		if err != nil {
			st.ErrorCode, st.ErrorMessage = errCode(err), errMessage(err)
		} else {
			st.NumPartitions, st.ReplicationFactor = n, int16(tc.replicas)
			st.TopicID = t.id
			st.Configs = []kmsg.CreateTopicsResponseTopicConfig{}
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

// enoughBrokers reports whether the cluster has at least n live nodes to
// hold n copies of a partition (Kafka refuses a larger replication factor).
func (s *Server) enoughBrokers(ctx context.Context, n int64) bool {
	ms, err := s.svc.Members(ctx)
	return err == nil && int64(len(ms)) >= n
}
