package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleDescribeCluster lists the live Kafka brokers, as Metadata does.
func handleDescribeCluster(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	b, err := s.brokers(ctx)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		return resp, nil
	}
	resp.ClusterID = s.cfg.ClusterID
	resp.ControllerID = b.controller()
	for _, mb := range b.metadataBrokers() {
		resp.Brokers = append(resp.Brokers, kmsg.DescribeClusterResponseBroker{NodeID: mb.NodeID, Host: mb.Host, Port: mb.Port})
	}
	return resp, nil
}
