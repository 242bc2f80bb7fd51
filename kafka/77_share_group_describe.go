package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleShareGroupDescribe reports share groups' members and assignments.
func handleShareGroupDescribe(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ShareGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ShareGroupDescribeResponse)
	for _, id := range req.GroupIDs {
		if c := s.shareCoordinator(ctx, cc, id); c != 0 {
			dg := kmsg.NewShareGroupDescribeResponseGroup()
			dg.GroupID, dg.ErrorCode = id, c
			resp.Groups = append(resp.Groups, dg)
			continue
		}
		resp.Groups = append(resp.Groups, s.share.Describe(id))
	}
	return resp, nil
}
