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
	case kmsg.ConfigResourceTypeBroker:
		return fmt.Errorf("%w: broker configs are the node's command-line flags (docs/configuration.md); they cannot be altered over Kafka", kerr.InvalidConfig)
	default:
		return fmt.Errorf("%w: config resource type %d", kerr.InvalidRequest, typ)
	}
	t, err := s.resolveTopic(ctx, name)
	if err != nil {
		return err
	}
	base := t.partitions[0]
	current := map[string]string{
		"retention.ms":           limit(base.RetentionMs),
		"retention.bytes":        limit(base.RetentionBytes),
		"max.message.bytes":      strconv.FormatInt(base.MaxBatchBytes, 10),
		"min.insync.replicas":    strconv.Itoa(max(base.MinInSync, 1)),
		"message.timestamp.type": timestampType(base.LogAppendTime),
	}
	if base.MaxBatchBytes == 0 {
		current["max.message.bytes"] = "-1"
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
	for k, v := range desired {
		if alterableConfigs[k] || v == nil {
			continue
		}
		if k == "min.insync.replicas" && *v != current[k] {
			return fmt.Errorf("%w: min.insync.replicas is set when the topic is created (it is %s)", kerr.InvalidConfig, current[k])
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
	defer s.topics.forget(name)
	for _, n := range names {
		ch := stream.ConfigChange{RetentionMs: &tc.retentionMs, RetentionBytes: &tc.retentionBytes, MaxBatchBytes: &tc.maxBatchBytes,
			LogAppendTime: &tc.logAppendTime}
		if _, err := s.svc.Configure(ctx, n, ch); err != nil {
			return fmt.Errorf("configure %s: %w", n, err)
		}
	}
	return nil
}
