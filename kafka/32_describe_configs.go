package kafka

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/node/stream"
)

// handleDescribeConfigs reports a small fixed set per topic (retention from
// the stream, the rest PicoMQ's fixed behaviour) and per broker.
func handleDescribeConfigs(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range req.Resources {
		or := kmsg.NewDescribeConfigsResponseResource()
		or.ResourceType, or.ResourceName = rr.ResourceType, rr.ResourceName
		var configs [][2]string
		set := map[string]bool{} // set on the topic, not a default
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			t, err := s.resolveTopic(ctx, rr.ResourceName)
			if err != nil {
				or.ErrorCode, or.ErrorMessage = errCode(err), errMessage(err)
				break
			}
			base := t.partitions[0]
			set["retention.ms"], set["retention.bytes"], set["max.message.bytes"] = base.RetentionMs > 0, base.RetentionBytes > 0, base.MaxBatchBytes > 0
			set["message.timestamp.type"] = base.LogAppendTime
			configs = [][2]string{
				{"retention.ms", limit(base.RetentionMs)},
				{"retention.bytes", limit(base.RetentionBytes)},
				{"compression.type", "producer"},
				{"message.timestamp.type", timestampType(base.LogAppendTime)},
				{"max.message.bytes", strconv.Itoa(maxBatch(base.MaxBatchBytes, s.cfg.MaxMessageBytes))},
				{"min.insync.replicas", strconv.Itoa(max(base.MinInSync, 1))},
			}
			configs = append(configs, stream.CompactionConfigs(base.Compaction)...)
		case kmsg.ConfigResourceTypeBroker:
			configs = [][2]string{
				{"auto.create.topics.enable", strconv.FormatBool(s.cfg.AutoCreateTopics)},
				{"num.partitions", strconv.Itoa(int(s.cfg.DefaultPartitions))},
				{"default.replication.factor", "1"},
				{"socket.request.max.bytes", strconv.Itoa(int(s.cfg.MaxFrameBytes))},
				{"message.max.bytes", strconv.Itoa(int(s.cfg.MaxMessageBytes))},
			}
		case kmsg.ConfigResourceTypeGroupConfig:
			if !s.shareGroupAdmin(cc, rr.ResourceName) {
				or.ErrorCode = kerr.GroupAuthorizationFailed.Code
				break
			}
			configs, set = s.describeGroupConfigs(rr.ResourceName)
		default:
			or.ErrorCode = kerr.InvalidRequest.Code
		}
		for _, c := range configs {
			if !wantConfig(rr.ConfigNames, c[0]) {
				continue
			}
			oc := kmsg.NewDescribeConfigsResponseResourceConfig()
			oc.Name = c[0]
			v := c[1]
			oc.Value = &v
			oc.Source = kmsg.ConfigSourceDefaultConfig
			oc.IsDefault = true
			if set[c[0]] {
				oc.Source, oc.IsDefault = kmsg.ConfigSourceDynamicTopicConfig, false
				if rr.ResourceType == kmsg.ConfigResourceTypeGroupConfig {
					oc.Source = kmsg.ConfigSourceGroupConfig
				}
			}
			or.Configs = append(or.Configs, oc)
		}
		resp.Resources = append(resp.Resources, or)
	}
	return resp, nil
}

func timestampType(logAppend bool) string {
	if logAppend {
		return "LogAppendTime"
	}
	return "CreateTime"
}

// limit renders a retention limit; 0 (none) is Kafka's -1.
func limit(v int64) string {
	if v == 0 {
		return "-1"
	}
	return strconv.FormatInt(v, 10)
}

func wantConfig(names []string, name string) bool {
	if names == nil {
		return true
	}
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}
