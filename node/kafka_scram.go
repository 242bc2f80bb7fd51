package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"

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

// peerClientTLS is how a node verifies another node's Kafka listener
// (transaction markers, forwarded config alters): against the system
// roots and every certificate of its own --tls-cert file, so a cluster
// whose nodes share a certificate, or whose chain files include their
// private CA, verifies without another flag.
func peerClientTLS(certFile string) (*tls.Config, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	b, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %w", err)
	}
	for len(b) > 0 {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert: %w", err)
		}
		pool.AddCert(c)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
