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
// max.message.bytes, stored with every partition stream. Other configs are
// accepted and not kept (docs/kafka.md).
type topicConfig struct {
	retentionMs, retentionBytes, maxBatchBytes int64
}

// parseTopicConfig reads the configs PicoMQ keeps; -1 (Kafka's "no limit")
// is 0 here.
func parseTopicConfig(get func(yield func(name string, value *string) bool)) (topicConfig, error) {
	var tc topicConfig
	var err error
	get(func(name string, value *string) bool {
		if value == nil {
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
		default:
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
	none := ""
	for p := int32(1); p < partitions; p++ {
		if _, err := s.createPartition(ctx, partitionStream(base, p), &none, tc); err != nil {
			return topic{}, err
		}
	}
	alias := name
	info, err := s.createPartition(ctx, base, &alias, tc)
	if err != nil {
		return topic{}, err
	}
	return s.resolveTopicFrom(ctx, name, info)
}

// createPartition creates one partition stream; one that exists already
// with the same configuration is taken as is (a retried create).
func (s *Server) createPartition(ctx context.Context, name string, alias *string, tc topicConfig) (stream.Info, error) {
	info, _, err := s.svc.Create(ctx, name, stream.CreateOptions{
		ContentType: kafkaContentType, KafkaTopic: alias,
		RetentionMs: tc.retentionMs, RetentionBytes: tc.retentionBytes, MaxBatchBytes: tc.maxBatchBytes,
	})
	if err != nil {
		return stream.Info{}, fmt.Errorf("create partition stream %s: %w", name, err)
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
		switch {
		case err != nil:
		case rt.ReplicationFactor == 0 || rt.ReplicationFactor < -1:
			err = fmt.Errorf("%w: replication factor %d", kerr.InvalidReplicationFactor, rt.ReplicationFactor)
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
			st.NumPartitions, st.ReplicationFactor = n, 1
			st.TopicID = t.id
			st.Configs = []kmsg.CreateTopicsResponseTopicConfig{}
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}
