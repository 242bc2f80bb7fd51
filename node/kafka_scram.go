package node

import (
	"context"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/meta"
)

// scramCredentials adapts meta's etcd store of SCRAM credentials to the
// Kafka frontend (kafka.ScramCredentials), which may not import meta.
type scramCredentials struct{ st *meta.ScramStore }

func (s scramCredentials) GetScram(ctx context.Context, mech, user string) (auth.ScramCredential, bool, error) {
	c, ok, err := s.st.Get(ctx, mech, user)
	return auth.ScramCredential{Salt: c.Salt, Iterations: c.Iterations, StoredKey: c.StoredKey, ServerKey: c.ServerKey}, ok, err
}

func (s scramCredentials) PutScram(ctx context.Context, mech, user string, c auth.ScramCredential) error {
	return s.st.Put(ctx, mech, user, meta.ScramCredential{Salt: c.Salt, Iterations: c.Iterations, StoredKey: c.StoredKey, ServerKey: c.ServerKey})
}

func (s scramCredentials) DeleteScram(ctx context.Context, mech, user string) (bool, error) {
	return s.st.Delete(ctx, mech, user)
}

func (s scramCredentials) ListScram(ctx context.Context) (map[string]map[string]int, error) {
	return s.st.List(ctx)
}
