package kafka

import (
	"context"
	"net"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/share"
)

// handleShareGroupHeartbeat joins, keeps and leaves share group members and
// hands out their assignments (package share). Answered by the group's
// coordinator only.
func handleShareGroupHeartbeat(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ShareGroupHeartbeatRequest)
	if c := s.shareCoordinator(ctx, cc, req.GroupID); c != 0 {
		resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
		resp.ErrorCode = c
		return resp, nil
	}
	host, _, err := net.SplitHostPort(cc.remote)
	if err != nil {
		host = cc.remote
	}
	return s.share.Heartbeat(req, share.Client{ID: cc.clientID, Host: host}, s.shareResolve(ctx)), nil
}
