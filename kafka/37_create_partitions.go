package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
)

// handleCreatePartitions adds partition streams to a topic. Keys hash to
// other partitions afterwards, as in Kafka.
func handleCreatePartitions(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, rt := range req.Topics {
		rs := kmsg.NewCreatePartitionsResponseTopic()
		rs.Topic = rt.Topic
		err := s.addPartitions(ctx, cc, rt.Topic, rt.Count, req.ValidateOnly)
		rs.ErrorCode, rs.ErrorMessage = errCode(err), errMessage(err)
		resp.Topics = append(resp.Topics, rs)
	}
	return resp, nil
}

func (s *Server) addPartitions(ctx context.Context, cc *connState, name string, count int32, validateOnly bool) error {
	t, err := s.resolveTopic(ctx, name)
	if err != nil {
		return err
	}
	if err := s.allow(cc, auth.Admin, t.partitions[0].Name); err != nil {
		return err
	}
	have := int32(len(t.partitions))
	if count <= have || count > maxPartitions {
		return fmt.Errorf("%w: topic %q has %d partitions; asked for %d (at most %d)", kerr.InvalidPartitions, name, have, count, maxPartitions)
	}
	if validateOnly {
		return nil
	}
	base := t.partitions[0]
	none := ""
	tc := topicConfig{retentionMs: base.RetentionMs, retentionBytes: base.RetentionBytes, maxBatchBytes: base.MaxBatchBytes,
		logAppendTime: base.LogAppendTime, compaction: base.Compaction}
	leaders := s.spread(ctx, name, count)
	for p := have; p < count; p++ {
		if _, err := s.createPartition(ctx, partitionStream(base.Name, p), &none, tc, leaders(p)); err != nil {
			return err
		}
	}
	s.topics.forget(name)
	return nil
}
