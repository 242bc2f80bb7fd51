// Package embedded runs etcd in-process: the metadata store of the
// zero-config single node and of tests. It is its own package, apart from
// meta, because etcd's server brings the raft, bbolt and gRPC-server
// stacks; only the composition root (node, cmd, e2e) and tests import it,
// so the stream service and the frontends do not link them
// (internal/layers checks it).
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.etcd.io/etcd/server/v3/storage/wal"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// DefaultName is the etcd member name used when Config.Name is empty.
const DefaultName = "picomq"

// DefaultStartTimeout bounds how long Start waits for the server to
// become ready when the caller's context has no deadline of its own. A
// restart replays the WAL, which takes a while on a large data dir, so this
// is generous.
const DefaultStartTimeout = time.Minute

// History and raft-log settings of the embedded etcd (docs/operations.md
// gives the matching flags for an external etcd).
const (
	CompactionRetention    = "10m"
	SnapshotCount          = 1000
	SnapshotCatchUpEntries = 100
	// WALSegmentBytes and MaxWALFiles bound the raft log etcd
	// reads at start: it decodes every retained WAL file looking for
	// snapshot records, then the whole file holding its last snapshot. With
	// etcd's 64 MB segments and a snapshot every 1,000 entries that was the
	// registry's whole creation history (~15 MB at 100,000 streams, 0.23 CPU-s
	// of a restart); with 4 MiB segments and two kept it is a few MiB. The
	// files are preallocated, so the etcd directory shrinks from ~138 MiB
	// too. etcd only removes files older than its last snapshot.
	WALSegmentBytes = 4 << 20
	MaxWALFiles     = 2
)

// The WAL segment size is a package variable of etcd's, read by every
// server in the process; the node's embedded etcd is the only one, so it
// is set once, before any can start.
func init() { wal.SegmentSizeBytes = WALSegmentBytes }

// freePortAttempts is how often Start picks new ports when an
// automatically chosen port was taken between probing and binding it.
const freePortAttempts = 5

// Config configures an in-process etcd server.
type Config struct {
	// Dir is etcd's data directory (e.g. <data-dir>/etcd). Required: etcd's
	// own default is a directory relative to the working directory, which is
	// never what a node wants. Created with mode 0700 if missing; an existing
	// directory is restarted from, keeping its data.
	Dir string

	// Name is the etcd member name; default DefaultName.
	Name string

	// ClientAddr and PeerAddr are host:port to listen on. Empty means
	// 127.0.0.1 with a free port, re-picked if another process takes it
	// before etcd binds it. The zero-config node passes fixed addresses so
	// that its etcd is found at the same place after a restart.
	ClientAddr, PeerAddr string

	// Fast shortens raft timing further (10 ms ticks, 100 ms election
	// timeout, instead of 50 ms / 250 ms) so a single-member server is
	// ready in tens of milliseconds. For tests.
	Fast bool

	// Logger receives etcd's own logs. Only errors are forwarded unless the
	// logger is enabled for debug level; nil discards them.
	Logger *slog.Logger

	// StartTimeout bounds the wait for readiness when ctx has no deadline;
	// default DefaultStartTimeout.
	StartTimeout time.Duration
}

// Server is a running in-process etcd server.
type Server struct {
	etcd      *embed.Etcd
	endpoints []string
	closing   *atomic.Bool // shared with the log bridge, see slogCore

	closeOnce sync.Once
	closeErr  error
}

// Start starts an etcd server as configured and waits until it is
// ready to serve (it has elected itself leader and applied its log), ctx is
// done, or the start timeout passes. On an existing Dir it restarts from the
// stored data; a changed address is fine because a single-member cluster
// never needs to reach its own peer URL.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("meta: start embedded etcd: %w: no data dir", metadata.ErrInvalid)
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	for _, a := range []string{cfg.ClientAddr, cfg.PeerAddr} {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("meta: start embedded etcd: %w: address %q: %v", metadata.ErrInvalid, a, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("meta: start embedded etcd: %w", err)
	}
	if _, hasDeadline := ctx.Deadline(); !hasDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.StartTimeout)
		defer cancel()
	}
	// etcd would create the directory too, but only after binding its
	// listeners; doing it first turns a bad path into a plain error.
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("meta: start embedded etcd: create data dir: %w", err)
	}

	autoPorts := cfg.ClientAddr == "" || cfg.PeerAddr == ""
	for attempt := 1; ; attempt++ {
		e, err := startOnce(ctx, cfg)
		if err == nil {
			return e, nil
		}
		// Probing a free port and binding it are two steps; another process
		// may win the port in between. Only then is retrying meaningful.
		if autoPorts && lostAutoPort(err, cfg) && attempt < freePortAttempts && ctx.Err() == nil {
			continue
		}
		return nil, err
	}
}

func startOnce(ctx context.Context, cfg Config) (*Server, error) {
	clientAddr, peerAddr, err := pickAddrs(cfg.ClientAddr, cfg.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("meta: start embedded etcd: %w", err)
	}
	clientURL := url.URL{Scheme: "http", Host: clientAddr}
	peerURL := url.URL{Scheme: "http", Host: peerAddr}

	closing := new(atomic.Bool)
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	ec.ListenPeerUrls = []url.URL{peerURL}
	ec.AdvertisePeerUrls = []url.URL{peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(cfg.Name)
	ec.LogLevel = "error"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newEtcdZapLogger(cfg.Logger, closing))
	if !forwardsEtcdWarnings(cfg.Logger) {
		// etcd formats every request slower than these thresholds (300 ms
		// to serve, 100 ms to apply) into a text warning before asking the
		// logger whether it wants warnings, and the bridge drops them.
		// On a loaded machine many creates and registry scans are that
		// slow: formatting 60-create transactions nobody reads took 7.5%
		// of the node's CPU while streams were created (profile in
		// docs/benchmarks.md), which made the next ones slower still.
		ec.WarningUnaryRequestDuration = etcdNeverWarn
		ec.WarningApplyDuration = etcdNeverWarn
	}
	// Every registry update leaves an old revision behind; without compaction
	// the single node's bbolt file only grows. Ten minutes of history is far
	// more than any paged read here needs to finish (AllStreams starts over
	// if its revision is compacted away mid-scan).
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = CompactionRetention
	// etcd keeps every raft entry since its last snapshot in memory and
	// replays them from its WAL at start. With batched creates one entry
	// carries up to ~60 records, so etcd's defaults (a snapshot every
	// 10,000 entries, 5,000 kept for followers) held over 100 MiB and
	// added seconds to a restart. A single member has no follower to
	// catch up: snapshot often, keep few.
	ec.SnapshotCount = SnapshotCount
	ec.SnapshotCatchUpEntries = SnapshotCatchUpEntries
	ec.MaxWalFiles = MaxWALFiles
	// A single member elects itself, but only once its election timeout
	// ran out: etcd fast-forwards all but one tick of it at start and raft
	// draws the timeout between one and two times ElectionMs, so with
	// etcd's 100 ms ticks and 1 s timeout a restart waited 0.1-1.1 s
	// before etcd (and so the node) served. There is no other member to
	// hear from or to lose leadership to, so a short timeout costs
	// nothing but a tick every 50 ms.
	ec.TickMs = 50
	ec.ElectionMs = 250
	if cfg.Fast {
		ec.TickMs = 10
		ec.ElectionMs = 100
	}

	// On error StartEtcd closes the half-started server itself; closing it
	// again would panic.
	srv, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("meta: start embedded etcd in %s (client %s, peer %s): %w", cfg.Dir, clientAddr, peerAddr, err)
	}
	e := &Server{etcd: srv, endpoints: []string{clientURL.String()}, closing: closing}

	select {
	case <-srv.Server.ReadyNotify():
		return e, nil
	case <-srv.Server.StopNotify():
		err = errors.New("server stopped before becoming ready")
	case serr := <-srv.Err():
		err = fmt.Errorf("server failed before becoming ready: %w", serr)
	case <-ctx.Done():
		err = fmt.Errorf("waiting for readiness: %w", context.Cause(ctx))
	}
	_ = e.Close()
	return nil, fmt.Errorf("meta: start embedded etcd in %s: %w", cfg.Dir, err)
}

// lostAutoPort reports whether err is a failure to bind an address that
// Start picked itself. A fixed address that is in use stays in use,
// so that is returned to the caller at once.
func lostAutoPort(err error, cfg Config) bool {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return false
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Addr != nil {
		a := opErr.Addr.String()
		return a != cfg.ClientAddr && a != cfg.PeerAddr
	}
	return true
}

// pickAddrs fills in empty addresses with free loopback ports. Both probe
// listeners are held open together so the two picks cannot coincide.
func pickAddrs(client, peer string) (string, string, error) {
	var probes []net.Listener
	defer func() {
		for _, l := range probes {
			_ = l.Close()
		}
	}()
	pick := func(addr *string) error {
		if *addr != "" {
			return nil
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("pick a free port: %w", err)
		}
		probes = append(probes, l)
		*addr = l.Addr().String()
		return nil
	}
	if err := pick(&client); err != nil {
		return "", "", err
	}
	if err := pick(&peer); err != nil {
		return "", "", err
	}
	return client, peer, nil
}

// KV returns a key-value client that calls this etcd server in-process
// (etcd's own v3client adapter): the same server path as a gRPC request
// (quota, raft, apply), without gRPC's marshalling, HTTP/2 framing and
// loopback socket on both sides. The registry's create transactions use
// it (Registry.UseKV): those were a fifth of a create's CPU.
func (e *Server) KV() clientv3.KV {
	return clientv3.NewKVFromKVClient(adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(e.etcd.Server)), nil)
}

// Endpoints returns the client URLs to pass to Dial.
func (e *Server) Endpoints() []string {
	return append([]string(nil), e.endpoints...)
}

// Err reports fatal serving errors of the running server (a listener that
// stopped accepting, for instance). A node should treat a value here as its
// metadata store going away. The channel is closed by Close.
func (e *Server) Err() <-chan error {
	return e.etcd.Err()
}

// Close stops the server, waiting for in-flight requests (bounded by etcd's
// request timeout) and for its goroutines to exit. It is idempotent and safe
// to call concurrently: embed.Etcd.Close itself panics when called twice.
// It returns the first serving error etcd reported during its lifetime that
// nobody received from Err.
func (e *Server) Close() error {
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		e.etcd.Close()
		// Close closes the error channel after its goroutines exit, so this
		// drain terminates. Errors raised by the shutdown itself are dropped
		// by etcd, so anything left here happened while serving.
		if errc := e.etcd.Err(); errc != nil {
			for err := range errc {
				if err != nil && e.closeErr == nil {
					e.closeErr = fmt.Errorf("meta: embedded etcd: %w", err)
				}
			}
		}
	})
	return e.closeErr
}
