package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
)

// handleAlterUserSCRAMCredentials upserts and deletes SCRAM credentials.
// An upsertion carries the salted password (the client ran PBKDF2), from
// which the stored and server keys are derived; only those, the salt and
// the iteration count are stored (etcd), never the salted password. It
// needs the admin scope on every stream ("admin:/"). A user gets its
// scopes from the token file's users: list, not from here
// (docs/security.md). Answers follow Kafka: one result per user, a user
// named in two operations is DUPLICATE_RESOURCE for all of them, a bad
// credential UNACCEPTABLE_CREDENTIAL, an unknown mechanism
// UNSUPPORTED_SASL_MECHANISM, deleting what does not exist
// RESOURCE_NOT_FOUND.
func handleAlterUserSCRAMCredentials(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	type op struct {
		user   string
		mech   int8
		upsert *kmsg.AlterUserSCRAMCredentialsRequestUpsertion
	}
	var ops []op
	for _, d := range req.Deletions {
		ops = append(ops, op{user: d.Name, mech: d.Mechanism})
	}
	for i := range req.Upsertions {
		u := &req.Upsertions[i]
		ops = append(ops, op{user: u.Name, mech: u.Mechanism, upsert: u})
	}
	// One result per user, in first-seen order; a user's first error wins.
	var order []string
	results := map[string]*kmsg.AlterUserSCRAMCredentialsResponseResult{}
	setErr := func(user string, e *kerr.Error, msg string) {
		r := results[user]
		if r.ErrorCode == 0 {
			r.ErrorCode, r.ErrorMessage = e.Code, &msg
		}
	}
	seenMech := map[string]bool{}
	for _, o := range ops {
		if results[o.user] == nil {
			r := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
			r.User = o.user
			results[o.user] = &r
			order = append(order, o.user)
		}
		key := fmt.Sprintf("%d\x00%s", o.mech, o.user)
		if seenMech[key] {
			setErr(o.user, kerr.DuplicateResource, "the same user and mechanism more than once")
		}
		seenMech[key] = true
	}
	authorized := s.allow(cc, auth.Admin, "/") == nil
	for _, o := range ops {
		if results[o.user].ErrorCode != 0 {
			continue
		}
		m, ok := auth.ScramByKafkaType(o.mech)
		switch {
		case !authorized:
			setErr(o.user, kerr.ClusterAuthorizationFailed, "altering SCRAM credentials needs admin:/")
		case s.cfg.Scram == nil:
			setErr(o.user, kerr.UnsupportedSaslMechanism, "SCRAM is not configured on this node")
		case o.user == "":
			setErr(o.user, kerr.UnacceptableCredential, "empty user name")
		case o.user == internalUser:
			setErr(o.user, kerr.UnacceptableCredential, "reserved user name (the nodes' internal identity)")
		case !ok:
			setErr(o.user, kerr.UnsupportedSaslMechanism, fmt.Sprintf("unknown SCRAM mechanism %d", o.mech))
		case o.upsert != nil:
			cred, err := m.CredentialFromSalted(o.upsert.SaltedPassword, o.upsert.Salt, int(o.upsert.Iterations))
			if err != nil {
				setErr(o.user, kerr.UnacceptableCredential, err.Error())
				continue
			}
			if err := s.cfg.Scram.PutScram(ctx, m.Name, o.user, cred); err != nil {
				setErr(o.user, kerr.UnknownServerError, err.Error())
			}
		default:
			found, err := s.cfg.Scram.DeleteScram(ctx, m.Name, o.user)
			if err != nil {
				setErr(o.user, kerr.UnknownServerError, err.Error())
			} else if !found {
				setErr(o.user, kerr.ResourceNotFound, "no "+m.Name+" credential for this user")
			}
		}
	}
	for _, u := range order {
		resp.Results = append(resp.Results, *results[u])
	}
	return resp, nil
}
