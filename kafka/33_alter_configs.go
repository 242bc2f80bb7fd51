package kafka

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/node/stream"
)

// handleAlterConfigs replaces a topic's configs with the ones given (a
// config not named returns to its default, as in Kafka). The same configs
// as CreateTopics are accepted; retention.ms, retention.bytes,
// max.message.bytes and message.timestamp.type can change after create
// (alterableConfigs).
func handleAlterConfigs(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, rr := range req.Resources {
		or := kmsg.NewAlterConfigsResponseResource()
		or.ResourceType, or.ResourceName = rr.ResourceType, rr.ResourceName
		ops := make([]configOp, 0, len(rr.Configs))
		for _, c := range rr.Configs {
			ops = append(ops, configOp{name: c.Name, value: c.Value, op: kmsg.IncrementalAlterConfigOpSet})
		}
		err := s.alterConfigs(ctx, cc, rr.ResourceType, rr.ResourceName, ops, false, req.ValidateOnly)
		or.ErrorCode, or.ErrorMessage = errCode(err), errMessage(err)
		resp.Resources = append(resp.Resources, or)
	}
	return resp, nil
}

// configOp is one config change of AlterConfigs (always a set) or
// IncrementalAlterConfigs.
type configOp struct {
	name  string
	value *string
	op    kmsg.IncrementalAlterConfigOp
}

// alterableConfigs are the topic configs an alter may change: they live
// on the partition streams and apply at once. The other configs
// CreateTopics accepts are accepted here only at their current value.
var alterableConfigs = map[string]bool{"retention.ms": true, "retention.bytes": true, "max.message.bytes": true, "message.timestamp.type": true}

// alterConfigs applies ops to one resource. incremental: configs not named
// keep their value; otherwise they return to their default. Broker
// configs are the node's flags: refused (INVALID_CONFIG).
func (s *Server) alterConfigs(ctx context.Context, cc *connState, typ kmsg.ConfigResourceType, name string, ops []configOp, incremental, validateOnly bool) error {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
	case kmsg.ConfigResourceTypeGroupConfig:
		return s.alterGroupConfigs(cc, name, ops, incremental, validateOnly)
	case kmsg.ConfigResourceTypeBroker:
		return fmt.Errorf("%w: broker configs are the node's command-line flags (docs/configuration.md); they cannot be altered over Kafka", kerr.InvalidConfig)
	default:
		return fmt.Errorf("%w: config resource type %d", kerr.InvalidRequest, typ)
	}
	var t topic
	var err error
	streamName, forwarded := strings.CutPrefix(name, configStreamPrefix)
	if forwarded {
		t, err = s.forwardedConfigTarget(ctx, cc, streamName)
	} else {
		t, err = s.resolveTopic(ctx, name)
	}
	if err != nil {
		return err
	}
	base := t.partitions[0]
	current := map[string]string{
		"retention.ms":           limit(base.RetentionMs),
		"retention.bytes":        limit(base.RetentionBytes),
		"max.message.bytes":      limit(base.MaxBatchBytes),
		"message.timestamp.type": timestampType(base.LogAppendTime),
	}
	desired := map[string]*string{}
	if incremental {
		for k := range alterableConfigs {
			v := current[k]
			desired[k] = &v
		}
	}
	seen := map[string]bool{}
	for _, o := range ops {
		if seen[o.name] {
			return fmt.Errorf("%w: config %s named twice", kerr.InvalidRequest, o.name)
		}
		seen[o.name] = true
		switch o.op {
		case kmsg.IncrementalAlterConfigOpSet:
			desired[o.name] = o.value
		case kmsg.IncrementalAlterConfigOpDelete:
			delete(desired, o.name)
			_, fixed := fixedConfigs[o.name]
			if !alterableConfigs[o.name] && !fixed && o.name != "flush.messages" && o.name != "flush.ms" {
				return fmt.Errorf("%w: config %s is not supported by PicoMQ", kerr.InvalidConfig, o.name)
			}
		default: // APPEND, SUBTRACT: for list configs; PicoMQ's are scalars
			return fmt.Errorf("%w: %s of config %s: PicoMQ's topic configs are not lists", kerr.InvalidConfig, o.op, o.name)
		}
	}
	tc, err := parseTopicConfig(func(yield func(string, *string) bool) {
		for k, v := range desired {
			if !yield(k, v) {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	// A config CreateTopics takes but an alter cannot change is accepted
	// only at the value the topic has: never accepted and ignored.
	var described map[string]string
	for k, v := range desired {
		if alterableConfigs[k] || v == nil || k == "flush.messages" || k == "flush.ms" {
			continue
		}
		if want, fixed := fixedConfigs[k]; fixed && *v == want {
			continue
		}
		if described == nil && !forwarded {
			described = s.describedTopicConfigs(ctx, cc, name)
		}
		if cur, ok := described[k]; !ok || *v != cur {
			return fmt.Errorf("%w: config %s is set when the topic is created (it is %q); an alter cannot change it", kerr.InvalidConfig, k, cur)
		}
	}
	names := make([]string, len(t.partitions))
	for p, in := range t.partitions {
		names[p] = in.Name
		if err := s.allow(cc, auth.Admin, in.Name); err != nil {
			return err
		}
	}
	if validateOnly {
		return nil
	}
	if forwarded {
		defer s.topics.forgetAll()
	} else {
		defer s.topics.forget(name)
	}
	for _, n := range names {
		ch := stream.ConfigChange{RetentionMs: &tc.retentionMs, RetentionBytes: &tc.retentionBytes, MaxBatchBytes: &tc.maxBatchBytes,
			LogAppendTime: &tc.logAppendTime}
		_, err := s.svc.Configure(ctx, n, ch)
		if stream.KindOf(err) == stream.KindRedirect && !forwarded {
			// Another node leads this partition: it applies the change
			// there (its copy of the config is the one that counts).
			err = s.forwardConfig(ctx, n, tc)
		}
		if err != nil {
			return fmt.Errorf("configure %s: %w", n, err)
		}
	}
	return nil
}

// describedTopicConfigs is what DescribeConfigs reports for the topic.
func (s *Server) describedTopicConfigs(ctx context.Context, cc *connState, name string) map[string]string {
	req := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, name
	req.Resources = append(req.Resources, rr)
	out := map[string]string{}
	resp, err := handleDescribeConfigs(s, ctx, cc, req)
	if err != nil {
		return out
	}
	for _, r := range resp.(*kmsg.DescribeConfigsResponse).Resources {
		for _, c := range r.Configs {
			if c.Value != nil {
				out[c.Name] = *c.Value
			}
		}
	}
	return out
}

// configStreamPrefix names one partition stream as a config resource in
// an IncrementalAlterConfigs between nodes: a node that receives an alter
// of a topic whose partitions other nodes lead forwards each such
// partition's new values to its leader this way (Kafka clients send topic
// alters to any broker). Only the internal identity may use it when
// authentication is on; "__" topic names are never a client's.
const configStreamPrefix = "__picomq_stream:"

// forwardedConfigTarget is the one-partition "topic" a forwarded alter
// applies to.
func (s *Server) forwardedConfigTarget(ctx context.Context, cc *connState, name string) (topic, error) {
	if s.cfg.Auth != nil && (cc.principal == nil || cc.principal.Name != internalUser || s.internal == nil) {
		return topic{}, fmt.Errorf("%w: %s%s is for nodes only", kerr.TopicAuthorizationFailed, configStreamPrefix, name)
	}
	in, err := s.svc.Describe(ctx, name)
	if err != nil {
		return topic{}, err
	}
	return topic{name: name, partitions: []stream.Info{in}}, nil
}

// forwardConfig sends one partition stream's alterable configs to the
// node that leads it, as an IncrementalAlterConfigs SET of every one.
func (s *Server) forwardConfig(ctx context.Context, name string, tc topicConfig) error {
	b, self, err := s.Locate(ctx, name)
	if err != nil {
		return err
	}
	if self {
		return fmt.Errorf("%w: %s is moving to this node", stream.ErrUnavailable, name)
	}
	peer, err := s.peers.broker(b)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, configStreamPrefix+name
	for k, v := range map[string]string{
		"retention.ms":           limit(tc.retentionMs),
		"retention.bytes":        limit(tc.retentionBytes),
		"max.message.bytes":      limit(tc.maxBatchBytes),
		"message.timestamp.type": timestampType(tc.logAppendTime),
	} {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value, c.Op = k, kmsg.StringPtr(v), kmsg.IncrementalAlterConfigOpSet
		rr.Configs = append(rr.Configs, c)
	}
	req.Resources = append(req.Resources, rr)
	resp, err := req.RequestWith(ctx, peer)
	if err != nil {
		return fmt.Errorf("%w: IncrementalAlterConfigs to node %d: %v", stream.ErrUnavailable, b.NodeID, err)
	}
	if len(resp.Resources) != 1 {
		return fmt.Errorf("%w: IncrementalAlterConfigs to node %d: %d answers", stream.ErrUnavailable, b.NodeID, len(resp.Resources))
	}
	if err := kerr.ErrorForCode(resp.Resources[0].ErrorCode); err != nil {
		msg := ""
		if m := resp.Resources[0].ErrorMessage; m != nil {
			msg = ": " + *m
		}
		return fmt.Errorf("node %d%s: %w", b.NodeID, msg, err)
	}
	return nil
}
