// Package kafka is the Kafka wire-protocol frontend: a TCP listener that
// speaks the Kafka protocol (every request and response version encoded by
// franz-go's kmsg) and answers it from the stream service, the same one the
// HTTP frontends use. A topic partition is a stream (topics.go), a produce
// appends the client's RecordBatch verbatim, a fetch returns the stored
// batches. Consumer groups are the kafka/group package; this package routes
// their requests to it.
//
// One file per API key (NN_name.go) holds its handler; handlers.go is the
// table of keys, versions and handlers, and the ApiVersions answer is built
// from it, so what is advertised is exactly what is handled.
package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/internal/defaults"
	"github.com/PicoMQ/picomq/internal/netx"
	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/kafka/share"
	"github.com/PicoMQ/picomq/kafka/txn"
	"github.com/PicoMQ/picomq/node/stream"
)

// Streams is what the frontend needs from the stream service.
type Streams interface {
	Create(ctx context.Context, name string, opts stream.CreateOptions) (stream.Info, bool, error)
	Head(ctx context.Context, name string) (stream.Info, error)
	Delete(ctx context.Context, name string) error
	List(ctx context.Context, prefix, after string, limit int) ([]stream.Info, bool, error)
	Configure(ctx context.Context, name string, ch stream.ConfigChange) (stream.Info, error)
	AppendBatch(ctx context.Context, name string, req stream.AppendRequest) (stream.AppendResult, error) // group offsets
	SubmitBatch(ctx context.Context, name string, req stream.AppendRequest) (stream.Submitted, error)
	ReadBatches(ctx context.Context, name string, offset int64, maxBytes int) (stream.BatchRead, error)
	// ReadBatchPieces: Fetch, the page left where it lies (no copy).
	ReadBatchPieces(ctx context.Context, name string, offset int64, maxBytes int) (stream.BatchRead, error)
	Read(ctx context.Context, name string, opts stream.ReadOptions) (stream.ReadResult, error) // group offsets
	State(ctx context.Context, name string) ([]byte, error)                                    // transaction state
	PutState(ctx context.Context, name string, value []byte) error
	Members(ctx context.Context) ([]stream.Member, error)
	ServingNode(info stream.Info, members []stream.Member) string
	// ReplicaNodes: where a partition's copies are (Metadata replicas, ISR).
	ReplicaNodes(ctx context.Context, info stream.Info) (replicas, inSync []string, err error)
	LookupTopic(ctx context.Context, topic string) (stream.Info, error)
	Describe(ctx context.Context, name string) (stream.Info, error)
	KafkaProducers(ctx context.Context, name string) ([]stream.KafkaProducer, error) // DescribeProducers
	StaleTransactions(olderThan time.Duration) []stream.StaleTxn                     // abortStale
	NodeID() string
	HandOver(ctx context.Context, name, nodeID string) (stream.Info, error) // spread new partitions
	LocalBytes(name string) (int64, bool)                                   // DescribeLogDirs
}

// Config configures the frontend.
type Config struct {
	// ClusterID is what Metadata and DescribeCluster report; the same on
	// every node of a cluster.
	ClusterID string
	// AdvertiseAddr is this node's Kafka address for a service whose
	// members carry none (a service without a cluster, in tests); nodes
	// publish theirs in the membership record.
	AdvertiseAddr string
	// MaxFrameBytes bounds one request; a larger size prefix closes the
	// connection before anything is allocated. Default 100 MiB.
	MaxFrameBytes int32
	// AutoCreateTopics lets Metadata (when the client allows it) and
	// Produce create unknown topics with DefaultPartitions partitions.
	AutoCreateTopics  bool
	DefaultPartitions int32
	// Auth checks the bearer token carried by SASL PLAIN (the password)
	// or OAUTHBEARER, and its scopes authorise each topic operation. nil
	// = authentication is off: every connection may do everything, and
	// SASL exchanges succeed whatever they carry.
	Auth auth.Checker
	// OAuthUnsecuredJWT validates OAUTHBEARER tokens as unsecured JWTs
	// (oauth_jwt.go), as Kafka's default validator does: only with Auth
	// nil (the node refuses both together: such a token proves nothing).
	OAuthUnsecuredJWT bool
	// OAuthKeys, with Auth set, lets an OAUTHBEARER token also be a JWT
	// signed by one of these keys (oauth_jwks.go), its scope claim
	// granting the scopes; nil = only Auth's tokens.
	OAuthKeys *JWTKeys
	// Scram keeps SCRAM users' credentials (etcd); nil = SCRAM-SHA-256/512
	// are not offered. Users grants SCRAM users their scopes when Auth
	// is set.
	Scram ScramCredentials
	Users ScramUsers
	// ClusterSecret is the password of the internal SCRAM user nodes
	// present to each other (WriteTxnMarkers to a listener that requires
	// SASL); "" = none.
	ClusterSecret string
	// PeerTLS is the client TLS configuration of node-to-node Kafka
	// calls (the listeners speak TLS); nil = plaintext.
	PeerTLS *tls.Config
	// LogDir is the directory DescribeLogDirs names (the node's data
	// directory); LogDirSpace, when set, reports its filesystem's size
	// and the bytes still free there.
	LogDir      string
	LogDirSpace func() (total, usable int64, err error)
	// MaxMessageBytes bounds one produced record batch (Kafka's
	// max.message.bytes; default 1 MiB + 12, Kafka's default).
	MaxMessageBytes int32
	// MaxWait caps a fetch's MaxWaitMs (default 30 s).
	MaxWait time.Duration
	// IdleTimeout closes a connection that sends no request for this long
	// (default 10 min, Kafka's connections.max.idle.ms); AuthTimeout
	// bounds everything before SASL login, counted from the accept: a
	// connection not logged in by then is closed whatever it sent; with
	// Auth nil it bounds the first request (default 10 s); FrameTimeout bounds reading one request once its
	// size prefix arrived, after login (default 60 s).
	IdleTimeout, AuthTimeout, FrameTimeout time.Duration
	Logger                                 *slog.Logger
}

func (c *Config) setDefaults() {
	defaults.Set(&c.MaxFrameBytes, 100<<20)
	defaults.Set(&c.MaxMessageBytes, 1048588)
	defaults.Set(&c.DefaultPartitions, 1)
	defaults.Set(&c.MaxWait, 30*time.Second)
	defaults.Set(&c.IdleTimeout, 10*time.Minute)
	defaults.Set(&c.AuthTimeout, 10*time.Second)
	defaults.Set(&c.FrameTimeout, 60*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server is the Kafka frontend of one node.
type Server struct {
	cfg    Config
	svc    Streams
	groups *group.Coordinator
	txns   *txn.Coordinator
	share  *share.Manager // share groups (KIP-932)
	// shareUnpersisted counts share start offsets that could not be
	// stored (this node does not coordinate the group, or the store
	// failed).
	shareUnpersisted atomic.Int64
	peers            peerClients // WriteTxnMarkers and forwarded produces to other nodes
	// txnChecks count the KIP-890 checks of transactional produces.
	txnChecks txnChecks
	// forwards count forwarded produce partitions and those answered
	// with the new leader instead (produce_forward.go).
	forwards struct{ ok, failed, hinted atomic.Uint64 }
	jobs     sync.WaitGroup
	log      *slog.Logger
	topics   *topicCache
	// internal: the internal SCRAM user's credential per mechanism,
	// derived from Config.ClusterSecret (nil without it).
	internal map[string]auth.ScramCredential
	logins   loginCounts

	ctx    context.Context // cancelled by Close: ends long-polls
	cancel context.CancelFunc
	// hard is cancelled once Close gives up waiting (its context ended):
	// produces, which outlast the start of a Close (serveConn), end
	// there.
	hard     context.Context
	hardStop context.CancelFunc
	// lastRequest is when a request last arrived on any connection
	// (unix nanoseconds), for Idle.
	lastRequest atomic.Int64
	mu          sync.Mutex
	lns         []net.Listener
	conns       map[net.Conn]struct{}
	wg          sync.WaitGroup
	closed      bool
}

// New builds the frontend. The group coordinator is built with the server
// as its Locator.
func New(svc Streams, cfg Config) *Server {
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	hard, hardStop := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, svc: svc, log: cfg.Logger, topics: newTopicCache(), ctx: ctx, cancel: cancel, hard: hard, hardStop: hardStop,
		conns: map[net.Conn]struct{}{}, internal: internalCredentials(cfg.ClusterSecret),
		peers: peerClients{secret: cfg.ClusterSecret, tls: cfg.PeerTLS}}
	s.lastRequest.Store(time.Now().UnixNano())
	s.txns = txn.New(txn.Config{Streams: svc, Locator: s, Markers: s, Logger: cfg.Logger, NewProducerID: newProducerID})
	s.share = share.New(share.Config{Logger: cfg.Logger})
	s.groups = group.NewWithConfig(group.Config{Streams: svc, Locator: s, Logger: cfg.Logger, LocateTxn: s.txns.Locate,
		Topics: s.assignableTopics, ShareGroups: s.share.GroupIDs})
	s.jobs.Add(1)
	go func() {
		defer s.jobs.Done()
		_ = s.txns.Run(ctx) // takes over transactions of state streams this node comes to serve
	}()
	s.jobs.Add(1)
	go func() {
		defer s.jobs.Done()
		s.abortStale(ctx)
	}()
	return s
}

// Idle returns how long ago the last request arrived on any connection
// (since New, if none has).
func (s *Server) Idle() time.Duration {
	return time.Duration(time.Now().UnixNano() - s.lastRequest.Load())
}

// Serve accepts connections on ln until Close. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ln.Close()
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var backoff netx.Backoff
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			if netx.Temporary(err) {
				// Out of file descriptors, say: retry as net/http does;
				// the connections in the backlog are accepted later.
				if !backoff.Failing() {
					s.log.Error("kafka: accept failing; retrying with back-off", "err", err)
				}
				time.Sleep(backoff.Next())
				continue
			}
			return fmt.Errorf("kafka: accept: %w", err)
		}
		if backoff.Failing() {
			s.log.Info("kafka: accepting again")
			backoff.Reset()
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// Close stops the listeners, ends long-polls, closes every connection once
// its request in progress is answered (or ctx is done) and stops the group
// coordinator.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	for c := range s.conns {
		// Unblock reads; a request being handled still gets its answer.
		_ = c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.hardStop()
		s.mu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		<-done
		err = ctx.Err()
	}
	s.hardStop()
	s.groups.Close()
	s.txns.Close()
	s.jobs.Wait()
	s.peers.close()
	return err
}

// handle runs one decoded request through the handler table.
func (s *Server) handle(ctx context.Context, cc *connState, req kmsg.Request) (kmsg.Response, error) {
	h, ok := handlers[req.Key()]
	if !ok || (h.fn == nil && !h.group) {
		return nil, fmt.Errorf("no handler for key %d", req.Key())
	}
	if h.group {
		host, _, err := net.SplitHostPort(cc.remote)
		if err != nil {
			host = cc.remote
		}
		ctx = group.WithClient(ctx, cc.clientID, host)
		if s.cfg.Auth != nil {
			ctx = group.WithAuthorizer(ctx, groupAuthz{s, cc})
		}
		return s.handleGroup(ctx, cc, req)
	}
	return h.fn(s, ctx, cc, req)
}

// groupAuthz applies a connection's token to the group keys
// (group.Authorizer): a partition's committed offset is read and written
// with read access to the partition's stream.
type groupAuthz struct {
	s  *Server
	cc *connState
}

func (a groupAuthz) ReadPartition(ctx context.Context, topic string, p int32) bool {
	name, err := a.s.partitionName(ctx, topic, p, false)
	if err != nil {
		// A topic that does not exist (commits may name any topic): the
		// stream its partition would be if CreateTopics made it.
		name = partitionStream(topicStream(topic), p)
	}
	return a.s.allow(a.cc, auth.Read, name) == nil
}

func (a groupAuthz) AdminStream(name string) bool {
	return a.s.allow(a.cc, auth.Admin, name) == nil
}

// ConsumerGroupStats counts the consumer-protocol (KIP-848) group activity
// of this node's group coordinator, for the metrics.
func (s *Server) ConsumerGroupStats() group.ConsumerStats { return s.groups.ConsumerStats() }
