package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
)

// handleDescribeUserSCRAMCredentials lists SCRAM users with their
// mechanisms and iteration counts (never salts or keys). It needs the
// admin scope on every stream ("admin:/"), as altering does. Users null or
// empty = every user; a named user without credentials is
// RESOURCE_NOT_FOUND, a name given twice DUPLICATE_RESOURCE (Kafka's
// answers).
func handleDescribeUserSCRAMCredentials(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	fail := func(err *kerr.Error, msg string) (kmsg.Response, error) {
		resp.ErrorCode, resp.ErrorMessage = err.Code, &msg
		return resp, nil
	}
	if s.cfg.Scram == nil {
		return fail(kerr.UnsupportedSaslMechanism, "SCRAM is not configured on this node")
	}
	if s.allow(cc, auth.Admin, "/") != nil {
		return fail(kerr.ClusterAuthorizationFailed, "describing SCRAM credentials needs admin:/")
	}
	all, err := s.cfg.Scram.ListScram(ctx)
	if err != nil {
		return fail(kerr.UnknownServerError, err.Error())
	}
	infos := func(user string) []kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo {
		var out []kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo
		for _, m := range auth.ScramMechanisms {
			if it, ok := all[user][m.Name]; ok {
				ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
				ci.Mechanism, ci.Iterations = m.KafkaType, int32(it)
				out = append(out, ci)
			}
		}
		return out
	}
	if len(req.Users) == 0 { // null or empty: every user (KIP-554)
		users := make([]string, 0, len(all))
		for u := range all {
			users = append(users, u)
		}
		slices.Sort(users)
		for _, u := range users {
			r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
			r.User, r.CredentialInfos = u, infos(u)
			resp.Results = append(resp.Results, r)
		}
		return resp, nil
	}
	seen := map[string]int{}
	for _, u := range req.Users {
		seen[u.Name]++
	}
	for _, u := range req.Users {
		r := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		r.User = u.Name
		switch {
		case seen[u.Name] > 1:
			r.ErrorCode = kerr.DuplicateResource.Code
			msg := "user named more than once"
			r.ErrorMessage = &msg
		case len(all[u.Name]) == 0:
			r.ErrorCode = kerr.ResourceNotFound.Code
			msg := "no SCRAM credentials for this user"
			r.ErrorMessage = &msg
		default:
			r.CredentialInfos = infos(u.Name)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}
