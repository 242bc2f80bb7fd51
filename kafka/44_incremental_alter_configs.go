package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleIncrementalAlterConfigs changes the named topic configs and keeps
// the others (KIP-339): SET and DELETE (back to the default); APPEND and
// SUBTRACT are for list configs, which PicoMQ's are not (INVALID_CONFIG).
func handleIncrementalAlterConfigs(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, rr := range req.Resources {
		or := kmsg.NewIncrementalAlterConfigsResponseResource()
		or.ResourceType, or.ResourceName = rr.ResourceType, rr.ResourceName
		ops := make([]configOp, 0, len(rr.Configs))
		for _, c := range rr.Configs {
			ops = append(ops, configOp{name: c.Name, value: c.Value, op: c.Op})
		}
		err := s.alterConfigs(ctx, cc, rr.ResourceType, rr.ResourceName, ops, true, req.ValidateOnly)
		or.ErrorCode, or.ErrorMessage = errCode(err), errMessage(err)
		resp.Resources = append(resp.Resources, or)
	}
	return resp, nil
}
