package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ScramCredential is the salted credential of one SCRAM user and
// mechanism (Kafka SASL SCRAM-SHA-256/512): never the password nor the
// salted password, only what a server needs to check a proof and sign
// its answer. The Kafka frontend writes it through
// AlterUserScramCredentials; every node reads it at login, so a user
// logs in on any node.
type ScramCredential struct {
	Salt       []byte `json:"salt"`
	Iterations int    `json:"iterations"`
	StoredKey  []byte `json:"storedKey"`
	ServerKey  []byte `json:"serverKey"`
}

// ScramStore keeps SCRAM credentials in etcd at
// P + "scram/" + mechanism + "/" + user (mechanism names have no "/"; a
// user name is kept verbatim after it, so a range over one mechanism is
// exactly its users).
type ScramStore struct {
	cli    *clientv3.Client
	prefix string // P + "scram/"
}

// NewScramStore returns the store under the registry prefix (as
// NewRegistry normalises it).
func NewScramStore(cli *clientv3.Client, prefix string) *ScramStore {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &ScramStore{cli: cli, prefix: prefix + "scram/"}
}

func (s *ScramStore) key(mechanism, user string) string {
	return s.prefix + mechanism + "/" + user
}

// Get returns user's credential for mechanism; ok is false when there is
// none.
func (s *ScramStore) Get(ctx context.Context, mechanism, user string) (ScramCredential, bool, error) {
	resp, err := s.cli.Get(ctx, s.key(mechanism, user))
	if err != nil {
		return ScramCredential{}, false, fmt.Errorf("meta: get scram credential: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return ScramCredential{}, false, nil
	}
	var c ScramCredential
	if err := json.Unmarshal(resp.Kvs[0].Value, &c); err != nil {
		return ScramCredential{}, false, fmt.Errorf("meta: scram credential %s: %w", resp.Kvs[0].Key, err)
	}
	return c, true, nil
}

// Put stores (or replaces) user's credential for mechanism.
func (s *ScramStore) Put(ctx context.Context, mechanism, user string, c ScramCredential) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, s.key(mechanism, user), string(b)); err != nil {
		return fmt.Errorf("meta: put scram credential: %w", err)
	}
	return nil
}

// Delete removes user's credential for mechanism; ok is false when there
// was none.
func (s *ScramStore) Delete(ctx context.Context, mechanism, user string) (bool, error) {
	resp, err := s.cli.Delete(ctx, s.key(mechanism, user))
	if err != nil {
		return false, fmt.Errorf("meta: delete scram credential: %w", err)
	}
	return resp.Deleted > 0, nil
}

// List returns, per user, the mechanisms and iteration counts of its
// credentials (never the keys).
func (s *ScramStore) List(ctx context.Context) (map[string]map[string]int, error) {
	resp, err := s.cli.Get(ctx, s.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("meta: list scram credentials: %w", err)
	}
	out := map[string]map[string]int{}
	for _, kv := range resp.Kvs {
		mech, user, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), s.prefix), "/")
		if !ok {
			continue
		}
		var c ScramCredential
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return nil, fmt.Errorf("meta: scram credential %s: %w", kv.Key, err)
		}
		if out[user] == nil {
			out[user] = map[string]int{}
		}
		out[user][mech] = c.Iterations
	}
	return out, nil
}
