package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/node/stream"
)

// deleteTopic deletes partition 0 first (the alias goes with it, so the
// topic is gone for every client at once), then the other partitions.
func (s *Server) deleteTopic(ctx context.Context, t topic) error {
	s.topics.forget(t.name)
	var errs []error
	for p := range t.partitions {
		name := t.partitions[p].Name
		if err := s.svc.Delete(ctx, name); err != nil && !errors.Is(err, stream.ErrNotFound) {
			if p == 0 {
				return fmt.Errorf("delete %s: %w", name, err)
			}
			errs = append(errs, fmt.Errorf("delete %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func handleDeleteTopics(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	wanted := req.Topics
	for _, name := range req.TopicNames {
		wanted = append(wanted, kmsg.DeleteTopicsRequestTopic{Topic: &name})
	}
	var byID map[[16]byte]topic
	for _, rt := range wanted {
		rs := kmsg.NewDeleteTopicsResponseTopic()
		rs.Topic, rs.TopicID = rt.Topic, rt.TopicID
		var t topic
		var err error
		if rt.Topic != nil {
			t, err = s.resolveTopic(ctx, *rt.Topic)
		} else {
			if byID == nil {
				byID, err = s.topicsByID(ctx)
			}
			var ok bool
			if t, ok = byID[rt.TopicID]; !ok && err == nil {
				err = kerr.UnknownTopicID
			}
			if err == nil {
				rs.Topic = &t.name
			}
		}
		if err == nil {
			err = s.allow(cc, auth.Admin, t.partitions[0].Name)
		}
		if err == nil {
			err = s.deleteTopic(ctx, t)
		}
		rs.ErrorCode, rs.ErrorMessage = errCode(err), errMessage(err)
		resp.Topics = append(resp.Topics, rs)
	}
	return resp, nil
}
