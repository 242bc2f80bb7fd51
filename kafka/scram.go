package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/PicoMQ/picomq/auth"
)

// ScramCredentials is where SCRAM users' salted credentials live (etcd,
// shared by every node: meta.ScramStore through node). Keys are the
// mechanism name ("SCRAM-SHA-256") and the user name.
type ScramCredentials interface {
	GetScram(ctx context.Context, mechanism, user string) (auth.ScramCredential, bool, error)
	PutScram(ctx context.Context, mechanism, user string, c auth.ScramCredential) error
	DeleteScram(ctx context.Context, mechanism, user string) (bool, error)
	// ListScram: user -> mechanism -> iterations.
	ListScram(ctx context.Context) (map[string]map[string]int, error)
}

// ScramUsers grants scopes to SCRAM users (the token file's users: list,
// auth.Store): a credential proves who a user is, the token file says
// what it may do, as it does for tokens.
type ScramUsers interface {
	ScramUser(name string) (*auth.Principal, error)
}

// loginCounts counts finished SASL exchanges by mechanism and outcome
// (picomq_kafka_sasl_logins_total).
type loginCounts struct {
	mu sync.Mutex
	m  map[LoginKey]uint64
}

// LoginKey is a mechanism and whether the login succeeded.
type LoginKey struct {
	Mechanism string
	OK        bool
}

func (l *loginCounts) count(mech string, ok bool) {
	if _, known := auth.ScramByName(mech); !known && mech != mechPlain && mech != mechOAuthBearer {
		mech = "other" // bounded label values
	}
	l.mu.Lock()
	if l.m == nil {
		l.m = map[LoginKey]uint64{}
	}
	l.m[LoginKey{mech, ok}]++
	l.mu.Unlock()
}

// SASLLogins returns the SASL exchanges finished so far, by mechanism and
// outcome.
func (s *Server) SASLLogins() map[LoginKey]uint64 {
	s.logins.mu.Lock()
	defer s.logins.mu.Unlock()
	out := make(map[LoginKey]uint64, len(s.logins.m))
	for k, v := range s.logins.m {
		out[k] = v
	}
	return out
}

// mechanismNames is what SaslHandshake offers: SCRAM only when there is a
// credential store.
func (s *Server) mechanismNames() []string {
	out := []string{mechPlain, mechOAuthBearer}
	if s.cfg.Scram != nil {
		for _, m := range auth.ScramMechanisms {
			out = append(out, m.Name)
		}
	}
	return out
}

// scramStep runs one message of a SCRAM login: the client-first message
// starts the conversation (answered with server-first), the client-final
// one ends it (answered with server-final, which carries the server's
// signature). The connection is logged in only after the final one.
func (s *Server) scramStep(ctx context.Context, cc *connState, m auth.ScramMechanism, b []byte) ([]byte, bool, error) {
	if s.cfg.Scram == nil {
		return nil, false, errors.New("SCRAM is not configured")
	}
	if cc.scram == nil {
		conv, serverFirst, err := m.StartScram(b, func(user string) (auth.ScramCredential, bool, error) {
			if c, ok := s.internalScram(m, user); ok {
				return c, true, nil
			}
			return s.cfg.Scram.GetScram(ctx, m.Name, user)
		})
		if err != nil {
			return nil, false, err
		}
		cc.scram = conv
		return serverFirst, false, nil
	}
	conv := cc.scram
	cc.scram = nil
	serverFinal, err := conv.Finish(b)
	if err != nil {
		return nil, false, err
	}
	p, err := s.scramPrincipal(conv.User())
	if err != nil {
		return nil, false, fmt.Errorf("user %q: %w", conv.User(), err)
	}
	cc.principal = p
	cc.authenticated.Store(true)
	return serverFinal, true, nil
}

// scramPrincipal is what a SCRAM user may do: its scopes in the token
// file (nil with authentication off: everything).
func (s *Server) scramPrincipal(user string) (*auth.Principal, error) {
	if s.cfg.Auth == nil {
		return nil, nil
	}
	if p := s.internalPrincipal(user); p != nil {
		return p, nil
	}
	if s.cfg.Users == nil {
		return nil, auth.ErrNoScopes
	}
	return s.cfg.Users.ScramUser(user)
}

// internalUser is the SCRAM identity nodes present to each other's Kafka
// listeners (WriteTxnMarkers): its password is the cluster secret, which
// every node reads from etcd, so the secret itself never crosses the
// wire. It cannot be created or altered through
// AlterUserScramCredentials.
const internalUser = "__picomq_node"

// internalCredentials derives the internal user's credential for each
// mechanism from the cluster secret (nil without one).
func internalCredentials(secret string) map[string]auth.ScramCredential {
	if secret == "" {
		return nil
	}
	out := map[string]auth.ScramCredential{}
	for _, m := range auth.ScramMechanisms {
		salt := []byte("picomq-internal-" + m.Name) // a salt need not be secret
		salted, err := m.Hi(secret, salt, auth.ScramMinIterations)
		if err != nil {
			continue
		}
		if c, err := m.CredentialFromSalted(salted, salt, auth.ScramMinIterations); err == nil {
			out[m.Name] = c
		}
	}
	return out
}

func (s *Server) internalScram(m auth.ScramMechanism, user string) (auth.ScramCredential, bool) {
	if user != internalUser {
		return auth.ScramCredential{}, false
	}
	c, ok := s.internal[m.Name]
	return c, ok
}

// internalPrincipal: a node may do everything on every stream (it only
// sends what its own transaction coordinator decided).
func (s *Server) internalPrincipal(user string) *auth.Principal {
	if user != internalUser || s.internal == nil {
		return nil
	}
	return &auth.Principal{Name: internalUser, Scopes: []auth.Scope{{Level: auth.Admin, Prefix: "/"}}}
}
