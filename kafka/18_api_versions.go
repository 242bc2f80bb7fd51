package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleApiVersions never fails: a client that cannot learn our versions
// falls back to ancient message formats (librdkafka) or gives up. The
// client software name and version (v3+) are not checked.
func handleApiVersions(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ApiVersionsRequest)
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = apiVersionKeys()
	return resp, nil
}
