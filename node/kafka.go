package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/kafka"
	"github.com/PicoMQ/picomq/meta"
)

// listenKafka binds the Kafka listener (unless --kafka-addr off) and
// returns the address Metadata advertises for this node ("" when off).
func (n *Node) listenKafka() (string, error) {
	if n.cfg.KafkaAddr == "off" {
		return "", nil
	}
	ln, err := net.Listen("tcp", n.cfg.KafkaAddr)
	if err != nil {
		return "", fmt.Errorf("--kafka-addr %s: %w", n.cfg.KafkaAddr, err)
	}
	// Connection limit on the raw sockets, TLS on top: a flood of
	// handshakes costs no more than --max-connections sockets.
	n.kafkaLimit = newLimitListener(ln, n.cfg.MaxConnections, n.connRefused.WithLabelValues("kafka"), n.acceptErrors.WithLabelValues("kafka"))
	ln = n.kafkaLimit
	if n.tlsCfg != nil {
		tc := n.tlsCfg.Clone()
		tc.NextProtos = nil // no ALPN: Kafka clients do not send any
		ln = tls.NewListener(ln, tc)
	}
	n.kafkaLn = ln
	if n.cfg.KafkaAdvertiseAddr != "" {
		return n.cfg.KafkaAdvertiseAddr, nil
	}
	hostPort, derived := advertisedHostPort(n.cfg.KafkaAddr, ln.Addr())
	if derived {
		n.log.Warn("--kafka-addr binds an unspecified address; advertising an address of this host instead (set --kafka-advertise-addr to choose)",
			"kafka_addr", n.cfg.KafkaAddr, "advertised", hostPort)
	}
	return hostPort, nil
}

// serveKafka starts the Kafka frontend on the bound listener.
func (n *Node) serveKafka(ctx context.Context) error {
	if n.kafkaLn == nil {
		return nil
	}
	id, err := n.clusterID(ctx)
	if err != nil {
		return err
	}
	var checker auth.Checker
	var users kafka.ScramUsers
	if n.tokens != nil { // a nil *auth.Store must not become a non-nil Checker
		checker, users = n.tokens, n.tokens
	}
	// The cluster secret is the password of the internal SCRAM identity
	// nodes use with each other's Kafka listeners (transaction markers).
	secret, err := n.reg.ClusterSecret(ctx)
	if err != nil {
		return fmt.Errorf("kafka: cluster secret: %w", err)
	}
	var jwtKeys *kafka.JWTKeys
	if n.cfg.KafkaOAuthJWKS != "" {
		if jwtKeys, err = kafka.LoadJWKS(n.cfg.KafkaOAuthJWKS); err != nil {
			return settingErr("--kafka-oauth-jwks", err)
		}
	}
	var peerTLS *tls.Config
	if n.tlsCfg != nil {
		if peerTLS, err = peerClientTLS(n.cfg.TLSCert); err != nil {
			return err
		}
	}
	n.kafka = kafka.New(n.svc, kafka.Config{
		ClusterID:         id,
		Auth:              checker,
		OAuthUnsecuredJWT: n.cfg.KafkaOAuthUnsecuredJWT,
		OAuthKeys:         jwtKeys,
		Scram:             scramCredentials{meta.NewScramStore(n.etcd, registryPrefix)},
		Users:             users,
		ClusterSecret:     secret,
		PeerTLS:           peerTLS,
		LogDir:            n.cfg.DataDir,
		LogDirSpace: func() (int64, int64, error) {
			size, avail, err := fsSpace(n.cfg.DataDir)
			return int64(size), int64(avail), err
		},
		MaxFrameBytes:    int32(n.cfg.KafkaMaxFrameBytes),
		MaxMessageBytes:  int32(n.cfg.KafkaMaxMessageBytes),
		AutoCreateTopics: n.cfg.KafkaAutoCreate,
		MaxWait:          n.cfg.LongPollTimeout,
		AuthTimeout:      n.cfg.ReadHeaderTimeout,
		FrameTimeout:     n.cfg.BodyTimeout,
		Logger:           n.log.With("listener", "kafka"),
	})
	n.registerKafkaMetrics(n.kafka)
	n.kafkaServed = make(chan error, 1)
	ln := n.kafkaLn
	go func() {
		err := n.kafka.Serve(ln)
		if err != nil {
			n.log.Error("kafka listener stopped", "err", err)
			n.kafkaStopped.Store(&err)
		}
		n.kafkaServed <- err
	}()
	n.onClose("kafka server", func(ctx context.Context) error { n.closeKafka(ctx); return nil })
	if n.cfg.KafkaOAuthUnsecuredJWT {
		n.log.Warn("kafka: OAUTHBEARER takes unsecured JWTs (--kafka-oauth-unsecured-jwt): anyone can write one; authentication is off, for development only")
	}
	n.log.Info("kafka listener serving", "kafka", ln.Addr().String(), "advertised", n.members.member.KafkaAddr,
		"auto_create_topics", n.cfg.KafkaAutoCreate)
	return nil
}

// clusterID is the Kafka cluster id: the etcd cluster's id, the same on
// every node that shares the registry.
func (n *Node) clusterID(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := n.etcd.Get(cctx, registryPrefix+"cluster-id-probe")
	if err != nil {
		return "", fmt.Errorf("kafka cluster id: etcd: %w", err)
	}
	return fmt.Sprintf("picomq-%016x", resp.Header.ClusterId), nil
}

// closeKafka stops the Kafka frontend: no new connections, requests in
// progress answered, long-polls ended.
func (n *Node) closeKafka(ctx context.Context) {
	if n.kafka == nil {
		return
	}
	if err := n.kafka.Close(ctx); err != nil {
		n.log.Warn("kafka connections did not finish in time; closed", "err", err)
	}
	if err := <-n.kafkaServed; err != nil {
		n.log.Warn("kafka listener", "err", err)
	}
	n.kafka = nil
}
