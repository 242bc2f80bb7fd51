package meta

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// DialOption adjusts the etcd client configuration of Dial.
type DialOption func(*clientv3.Config)

// WithTLS dials etcd over TLS: tc carries the CA that verifies etcd and,
// for clusters that require client certificates, this node's certificate.
func WithTLS(tc *tls.Config) DialOption {
	return func(c *clientv3.Config) { c.TLS = tc }
}

// DialTimeout bounds establishing a connection to an etcd endpoint, and the
// health probe in Dial when the caller's context has no deadline.
const DialTimeout = 5 * time.Second

// Dial connects to etcd and checks that the cluster answers a linearizable
// read, i.e. that it is reachable and has a leader, so that a node started
// against a dead or quorum-less cluster fails at startup with a clear error
// instead of on its first request.
//
// ctx bounds only the dial and probe; the client lives until its Close.
// Keepalives are on so a half-open connection (peer gone without a FIN) is
// noticed within seconds: ownership leases depend on it. The client's own
// zap logging is discarded; its retry warnings would otherwise go to stderr
// on every transient failure, and every failure is returned to the caller
// anyway.
func Dial(ctx context.Context, endpoints []string, opts ...DialOption) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("meta: dial etcd: %w: no endpoints", metadata.ErrInvalid)
	}
	cfg := clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          DialTimeout,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		PermitWithoutStream:  true,
		Logger:               zap.NewNop(),
		// Reconnect fast after an etcd outage: gRPC's default backoff
		// grows to minutes, but leases are only seconds long. etcd gives
		// every lease a fresh TTL when it comes back; a node must renew
		// within it to keep its membership (and so its streams).
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})},
	}
	for _, o := range opts {
		o(&cfg)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("meta: dial etcd %v: %w", endpoints, err)
	}
	if _, hasDeadline := ctx.Deadline(); !hasDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DialTimeout)
		defer cancel()
	}
	// The same probe as `etcdctl endpoint health`: any answer, including a
	// permission error on a cluster with auth enabled, proves a quorum.
	if _, err := cli.Get(ctx, "health", clientv3.WithCountOnly()); err != nil && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		_ = cli.Close()
		return nil, fmt.Errorf("meta: dial etcd %v: health probe: %w", endpoints, err)
	}
	return cli, nil
}
