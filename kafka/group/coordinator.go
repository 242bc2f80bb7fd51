// Package group is the Kafka consumer-group coordinator: the classic
// protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), the KIP-848
// consumer protocol (ConsumerGroupHeartbeat with server-side assignment,
// consumer.go), committed offsets, and the admin keys around them.
//
// Where a group lives: every group has one offsets stream,
// /_sys/kafka/groups/<group> (offsets.go), and the node that serves that
// stream is the group's coordinator. The frontend tells which node that is
// (Locator); every other node answers NOT_COORDINATOR, so clients follow
// FindCoordinator to it. Membership (members, generation, assignments)
// lives in the coordinator's memory only, as it is rebuilt by the clients
// themselves within one rebalance; committed offsets are appended to the
// stream and so survive restarts and move with the stream when another
// node takes it over.
//
// Contract with the frontend (package kafka): New, Versions,
// Coordinator.Handle for the group keys, Close; the frontend implements
// Locator, lists topics for the server-side assignors (Config.Topics) and
// may tag the context with WithClient. Handle blocks for the
// long-poll keys (JoinGroup, SyncGroup) until the rebalance completes: the
// frontend must call it from the connection's own goroutine, so only that
// connection waits.
package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/internal/defaults"
	"github.com/PicoMQ/picomq/kafka/clock"
	"github.com/PicoMQ/picomq/node/stream"
)

// Broker is a node as Kafka clients see it.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
}

// Locator tells which broker serves a stream: its owner, or the node that
// will take it over (the same answer on every node). The coordinator of a
// group is the broker serving the group's offsets stream. self reports
// whether that is this node. The context carries stream.WithSystemAccess,
// as the offsets streams are under /_sys/.
type Locator interface {
	Locate(ctx context.Context, stream string) (b Broker, self bool, err error)
}

// Streams is what the coordinator needs of the stream service
// (*stream.Service implements it; the frontend passes its own handle).
type Streams interface {
	Create(ctx context.Context, name string, opts stream.CreateOptions) (stream.Info, bool, error)
	Head(ctx context.Context, name string) (stream.Info, error)
	ReadBatches(ctx context.Context, name string, offset int64, maxBytes int) (stream.BatchRead, error)
	Read(ctx context.Context, name string, opts stream.ReadOptions) (stream.ReadResult, error)
	AppendBatch(ctx context.Context, name string, req stream.AppendRequest) (stream.AppendResult, error)
	Configure(ctx context.Context, name string, ch stream.ConfigChange) (stream.Info, error)
	Delete(ctx context.Context, name string) error
	List(ctx context.Context, prefix, after string, limit int) ([]stream.Info, bool, error)
}

// Config tunes the coordinator. Zero values take the documented defaults
// (docs/kafka.md, "Consumer groups").
type Config struct {
	Streams Streams
	Locator Locator
	Logger  *slog.Logger
	// MinSessionTimeout / MaxSessionTimeout bound a member's session
	// timeout (Kafka's group.min/max.session.timeout.ms); outside them
	// JoinGroup answers INVALID_SESSION_TIMEOUT. Defaults 1 s and 30 min.
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// InitialRebalanceDelay holds the first rebalance of an empty group
	// this long so that consumers starting together land in one
	// generation (Kafka's group.initial.rebalance.delay.ms). Default 0.
	InitialRebalanceDelay time.Duration
	// Clock is the coordinator's time source (session, rebalance and
	// initial-delay timers; commit timestamps). Default the wall clock.
	Clock clock.Clock
	// LocateTxn answers FindCoordinator for transactional ids (key type
	// 1); nil: only group coordinators exist.
	LocateTxn func(ctx context.Context, id string) (Broker, error)
	// Topics lists every topic (name, id, partition count) for the
	// server-side assignors of consumer-protocol groups; nil: none exist.
	Topics func(ctx context.Context) ([]TopicInfo, error)
	// TopicsMaxAge bounds how stale the topic list a consumer-protocol
	// heartbeat assigns from may be: a topic created or deleted is
	// noticed within it. Default 1 s.
	TopicsMaxAge time.Duration
	// ShareGroups lists the share groups this node coordinates (KIP-932),
	// id to state, so that ListGroups answers them as type "share" under
	// the same filters as every other group; nil: none exist. A share
	// group's id shadows a classic entry of the same id (its stored
	// offsets).
	ShareGroups func() map[string]string
	// ConsumerSessionTimeout is the session timeout of consumer-protocol
	// members (Kafka's group.consumer.session.timeout.ms). Default 45 s.
	ConsumerSessionTimeout time.Duration
	// ConsumerHeartbeatInterval is the heartbeat interval told to
	// consumer-protocol members (group.consumer.heartbeat.interval.ms).
	// Default 5 s.
	ConsumerHeartbeatInterval time.Duration
	// CompactAfter: once the offsets stream holds this many records more
	// than the group has live offsets, the live offsets are rewritten as
	// one batch and everything before it is trimmed. Default 4096.
	CompactAfter int
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	defaults.Set(&c.MinSessionTimeout, time.Second)
	defaults.Set(&c.MaxSessionTimeout, 30*time.Minute)
	defaults.Set(&c.CompactAfter, 4096)
	defaults.Set(&c.TopicsMaxAge, time.Second)
	defaults.Set(&c.ConsumerSessionTimeout, 45*time.Second)
	defaults.Set(&c.ConsumerHeartbeatInterval, 5*time.Second)
	if c.Topics == nil {
		c.Topics = func(context.Context) ([]TopicInfo, error) { return nil, nil }
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
}

// Coordinator answers the group API keys of one node.
type Coordinator struct {
	cfg   Config
	svc   Streams
	loc   Locator
	log   *slog.Logger
	clock clock.Clock

	ctx    context.Context // cancelled by Close: ends long-polls
	cancel context.CancelFunc

	mu     sync.Mutex
	groups map[string]*group
	closed bool

	topicsMu sync.Mutex // held while the topic list is read
	topics   []TopicInfo
	topicsAt time.Time

	stats struct{ heartbeats, epochs, fenced atomic.Uint64 }
}

// New builds a coordinator over the stream service svc; loc says which node
// coordinates which group.
func New(svc Streams, loc Locator, log *slog.Logger) *Coordinator {
	return NewWithConfig(Config{Streams: svc, Locator: loc, Logger: log})
}

// NewWithConfig is New with the tunables of Config.
func NewWithConfig(cfg Config) *Coordinator {
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Coordinator{cfg: cfg, svc: cfg.Streams, loc: cfg.Locator, log: cfg.Logger, clock: cfg.Clock,
		ctx: ctx, cancel: cancel, groups: map[string]*group{}}
}

// versions are the keys the coordinator answers and the version ranges
// advertised for them (docs/kafka.md): every version real clients send,
// except the topic-id-addressed OffsetCommit/OffsetFetch v10.
var versions = map[int16][2]int16{
	kmsg.OffsetCommit.Int16():    {2, 9},
	kmsg.OffsetFetch.Int16():     {1, 9},
	kmsg.FindCoordinator.Int16(): {0, 5},
	kmsg.JoinGroup.Int16():       {0, 9},
	kmsg.Heartbeat.Int16():       {0, 4},
	kmsg.LeaveGroup.Int16():      {0, 5},
	kmsg.SyncGroup.Int16():       {0, 5},
	kmsg.DescribeGroups.Int16():  {0, 5},
	kmsg.ListGroups.Int16():      {0, 5},
	kmsg.DeleteGroups.Int16():    {0, 2},
	kmsg.OffsetDelete.Int16():    {0, 0},
	kmsg.TxnOffsetCommit.Int16(): {0, 3},
	// KIP-848 consumer-protocol groups.
	kmsg.ConsumerGroupHeartbeat.Int16(): {0, 1},
	kmsg.ConsumerGroupDescribe.Int16():  {0, 1},
}

// Versions returns the API keys the coordinator handles with their
// supported version ranges [min, max].
func Versions() map[int16][2]int16 {
	out := make(map[int16][2]int16, len(versions))
	for k, v := range versions {
		out[k] = v
	}
	return out
}

// errUnsupported is returned for a key or version the coordinator does
// not answer; the frontend never routes one here if it uses Versions.
var errUnsupported = errors.New("group: unsupported request")

// Handle answers one group request. JoinGroup and SyncGroup block until
// the rebalance they take part in completes (bounded by the rebalance
// timeout), ctx is done, or the coordinator closes. An error means the
// request could not be answered at all (unsupported key or version, ctx
// done): the frontend closes the connection.
func (c *Coordinator) Handle(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	v, ok := versions[req.Key()]
	if !ok || req.GetVersion() < v[0] || req.GetVersion() > v[1] {
		return nil, fmt.Errorf("%w: %s v%d", errUnsupported, kmsg.NameForKey(req.Key()), req.GetVersion())
	}
	ctx = stream.WithSystemAccess(ctx)
	switch r := req.(type) {
	case *kmsg.FindCoordinatorRequest:
		return c.findCoordinator(ctx, r), nil
	case *kmsg.JoinGroupRequest:
		return c.joinGroup(ctx, r)
	case *kmsg.SyncGroupRequest:
		return c.syncGroup(ctx, r)
	case *kmsg.HeartbeatRequest:
		return c.heartbeat(ctx, r), nil
	case *kmsg.LeaveGroupRequest:
		return c.leaveGroup(ctx, r), nil
	case *kmsg.OffsetCommitRequest:
		return c.offsetCommit(ctx, r), nil
	case *kmsg.OffsetFetchRequest:
		return c.offsetFetch(ctx, r), nil
	case *kmsg.DescribeGroupsRequest:
		return c.describeGroups(ctx, r), nil
	case *kmsg.ListGroupsRequest:
		return c.listGroups(ctx, r), nil
	case *kmsg.DeleteGroupsRequest:
		return c.deleteGroups(ctx, r), nil
	case *kmsg.OffsetDeleteRequest:
		return c.offsetDelete(ctx, r), nil
	case *kmsg.TxnOffsetCommitRequest:
		return c.txnOffsetCommit(ctx, r), nil
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return c.consumerGroupHeartbeat(ctx, r), nil
	case *kmsg.ConsumerGroupDescribeRequest:
		return c.consumerGroupDescribe(ctx, r), nil
	}
	return nil, fmt.Errorf("%w: %T", errUnsupported, req)
}

// Close ends every long-poll (answered with NOT_COORDINATOR, so clients
// look for the coordinator again) and stops every timer.
func (c *Coordinator) Close() {
	c.mu.Lock()
	c.closed = true
	gs := c.groups
	c.groups = map[string]*group{}
	c.mu.Unlock()
	c.cancel()
	for _, g := range gs {
		g.unload()
	}
}

// clientInfo is what the frontend knows of a connection.
type clientInfo struct{ id, host string }

type clientKey struct{}

// WithClient tags ctx with the request header's client id and the peer's
// host; JoinGroup uses them for member ids and DescribeGroups reports
// them.
func WithClient(ctx context.Context, clientID, host string) context.Context {
	return context.WithValue(ctx, clientKey{}, clientInfo{clientID, host})
}

func clientOf(ctx context.Context) clientInfo {
	ci, _ := ctx.Value(clientKey{}).(clientInfo)
	return ci
}

// errNotCoordinator: this node does not serve the group's offsets stream.
var errNotCoordinator = errors.New("group: not the coordinator")

// code maps an error of the coordinator or the stream service to a Kafka
// error code. Anything that says "the group is elsewhere" is
// NOT_COORDINATOR, so clients re-run FindCoordinator; anything transient
// is COORDINATOR_NOT_AVAILABLE, which clients retry.
func code(err error) int16 {
	var re *stream.RedirectError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errNotCoordinator), errors.As(err, &re):
		return kerr.NotCoordinator.Code
	case errors.Is(err, errGroupIDTooLong), errors.Is(err, stream.ErrInvalidName):
		return kerr.InvalidGroupID.Code
	default:
		return kerr.CoordinatorNotAvailable.Code
	}
}

// lockedGroup is group with g.mu held, or the error code to answer
// instead: a group unloaded meanwhile (its coordination moved) is
// NOT_COORDINATOR.
func (c *Coordinator) lockedGroup(ctx context.Context, id string) (*group, int16) {
	g, err := c.group(ctx, id)
	if err != nil {
		return nil, code(err)
	}
	g.mu.Lock()
	if g.unloaded {
		g.mu.Unlock()
		return nil, kerr.NotCoordinator.Code
	}
	return g, 0
}

// group returns the local state of group id if this node coordinates it,
// creating it if needed, with its committed offsets brought up to date
// with the offsets stream. A group this node used to coordinate and no
// longer does is dropped.
func (c *Coordinator) group(ctx context.Context, id string) (*group, error) {
	name, err := streamName(id)
	if err != nil {
		return nil, err
	}
	_, self, err := c.loc.Locate(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("group %q: locate coordinator: %w", id, err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: shutting down", errNotCoordinator)
	}
	g := c.groups[id]
	if !self {
		delete(c.groups, id)
		c.mu.Unlock()
		if g != nil {
			g.unload()
		}
		return nil, errNotCoordinator
	}
	if g == nil {
		g = newGroup(c, id, name)
		c.groups[id] = g
	}
	c.mu.Unlock()
	foreign, err := g.syncOffsets(ctx)
	if err != nil {
		if code(err) == kerr.NotCoordinator.Code {
			c.drop(g)
		}
		return nil, err
	}
	if foreign {
		// Another node coordinated the group meanwhile: whatever
		// membership this node remembers is stale.
		g.resetMembership()
	}
	return g, nil
}

// drop forgets g (it moved elsewhere or was deleted).
func (c *Coordinator) drop(g *group) {
	c.mu.Lock()
	if c.groups[g.id] == g {
		delete(c.groups, g.id)
	}
	c.mu.Unlock()
	g.unload()
}

// Committed is one committed offset of a group this node coordinates.
type Committed struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64
}

// Committed returns the committed offsets of the groups loaded on this
// node (the ones it coordinates and that were used since it started), for
// the lag metric. It reads the in-memory copies only: no stream I/O.
func (c *Coordinator) Committed() []Committed {
	c.mu.Lock()
	groups := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		groups = append(groups, g)
	}
	c.mu.Unlock()
	var out []Committed
	for _, g := range groups {
		for topic, parts := range g.offs.all() {
			for p, cm := range parts {
				out = append(out, Committed{Group: g.id, Topic: topic, Partition: p, Offset: cm.offset})
			}
		}
	}
	return out
}

// topicSnapshot returns the topic list, read again when older than
// TopicsMaxAge, or when a name in need is missing from it and it is older
// than a tenth of that (a consumer subscribing to a topic just created).
func (c *Coordinator) topicSnapshot(ctx context.Context, need []string) ([]TopicInfo, error) {
	c.topicsMu.Lock()
	defer c.topicsMu.Unlock()
	age := c.clock.Now().Sub(c.topicsAt)
	fresh := c.topics != nil && age < c.cfg.TopicsMaxAge
	if fresh && age >= c.cfg.TopicsMaxAge/10 {
		for _, n := range need {
			if !slices.ContainsFunc(c.topics, func(t TopicInfo) bool { return t.Name == n }) {
				fresh = false
				break
			}
		}
	}
	if fresh {
		return c.topics, nil
	}
	ts, err := c.cfg.Topics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	if ts == nil {
		ts = []TopicInfo{}
	}
	c.topics, c.topicsAt = ts, c.clock.Now()
	return ts, nil
}

// ConsumerStats counts consumer-protocol (KIP-848) activity since start.
type ConsumerStats struct {
	// Heartbeats: ConsumerGroupHeartbeat requests answered.
	Heartbeats uint64
	// Epochs: group epochs started (each a new target assignment).
	Epochs uint64
	// Fenced: members removed by the coordinator (session expired, or
	// partitions not revoked within the rebalance timeout).
	Fenced uint64
	// Members: consumer-protocol members of the groups loaded here.
	Members int
}

// ConsumerStats returns the counters of consumer-protocol groups (metrics).
func (c *Coordinator) ConsumerStats() ConsumerStats {
	st := ConsumerStats{Heartbeats: c.stats.heartbeats.Load(), Epochs: c.stats.epochs.Load(), Fenced: c.stats.fenced.Load()}
	c.mu.Lock()
	gs := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		gs = append(gs, g)
	}
	c.mu.Unlock()
	for _, g := range gs {
		g.mu.Lock()
		if g.cons != nil {
			st.Members += len(g.cons.members)
		}
		g.mu.Unlock()
	}
	return st
}
