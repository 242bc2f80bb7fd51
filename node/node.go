// Package node wires one PicoMQ node: etcd (embedded or external), the
// write-ahead log, the stream service, and the stream listener with its
// health and metrics endpoints. It owns the lifecycle: Start brings the
// pieces up in dependency order, Shutdown takes them down in reverse so that
// in-flight appends finish and are fsynced before the process exits.
//
// Only cmd/ and e2e/ import this package.
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/api/console"
	"github.com/PicoMQ/picomq/api/ds"
	"github.com/PicoMQ/picomq/api/h1lane"
	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/api/pico"
	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/kafka"
	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/embedded"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/node/replication"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/retry"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/wal"
)

// registryPrefix is the etcd key prefix of everything PicoMQ stores.
const registryPrefix = "/picomq/"

// Node is one running PicoMQ node.
type Node struct {
	cfg     Config
	log     *slog.Logger
	metrics *prometheus.Registry // served on /metrics
	embed   *embedded.Server
	etcd    *clientv3.Client
	reg     *meta.Registry
	wal     *wal.WAL
	svc     *stream.Service
	repl    *replication.Transport
	// freshWAL: the WAL held no segment at start (stream.Config.FreshLog).
	freshWAL bool
	ln       net.Listener
	server   *http.Server
	lane     *h1lane.Server // nil when --http-fast-path is off or under TLS
	lock     *dataDirLock
	served   chan error

	tokens    *auth.Store   // nil when authentication is off
	certs     *certReloader // nil without --tls-cert
	etcdCerts *certReloader // etcd client certificate; nil without --etcd-cert
	tlsCfg    *tls.Config   // the listeners' TLS (Kafka uses it too); nil without --tls-cert

	connRefused  *prometheus.CounterVec // connections closed at accept, by listener
	acceptErrors *prometheus.CounterVec // failed accepts, by listener
	// The listeners' accept state for /readyz (nil when not listening).
	httpLimit, kafkaLimit *limitListener
	kafkaStopped          atomic.Pointer[error] // the Kafka accept loop returned with this error

	members *membership
	tier    *tiering.Tier
	jobs    *jobs // background loops, one supervisor

	kafkaLn        net.Listener // nil when --kafka-addr off
	kafkaAdvertise string       // the Kafka address the membership record carries
	kafka          *kafka.Server
	// peers asks other nodes for the console's cluster-wide views
	// (node/peers.go); figures keeps their last figures.
	peers       *http.Client
	figures     figuresCache
	kafkaServed chan error

	pprof *pprofServer // nil without --pprof-addr
	boot  *bootServer  // answers /readyz while start-up waits; nil once serving

	// closers undo the start-up steps that succeeded, in the order they
	// ran; unwind runs them backwards (on a failed start and at Shutdown).
	closers []closer
}

// closer undoes one start-up step.
type closer struct {
	what  string
	close func(ctx context.Context) error
}

// onClose registers how to undo what a start-up step just opened.
func (n *Node) onClose(what string, close func(ctx context.Context) error) {
	n.closers = append(n.closers, closer{what, close})
}

// unwind closes everything start-up opened, last opened first: the
// listeners stop before the background jobs (the flusher's last flush),
// those before the membership lease, the WAL and etcd, and the data dir
// lock is released last, when nothing in the data dir is open any more.
func (n *Node) unwind(ctx context.Context) error {
	var errs []error
	for i := len(n.closers) - 1; i >= 0; i-- {
		if err := n.closers[i].close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", n.closers[i].what, err))
		}
	}
	n.closers = nil
	return errors.Join(errs...)
}

// NewLogger builds the process logger from the config.
func NewLogger(cfg Config, out *os.File) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(out, opts))
	}
	return slog.New(slog.NewTextHandler(out, opts))
}

// Start brings up a node and begins serving. On error everything already
// started is closed again, and the error is one line: a *SettingError when a
// setting is at fault (an invalid value, a port in use, an object store that
// cannot be opened, a data dir in use by another node). The resources named
// by settings are taken first, so such failures are immediate.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, &SettingError{Setting: "config", Err: err}
	}
	n := &Node{cfg: cfg, log: log, served: make(chan error, 1), metrics: prometheus.NewRegistry(),
		connRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "picomq_connections_refused_total",
			Help: "Connections closed at accept because --max-connections were open on the listener.",
		}, []string{"listener"}),
		acceptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "picomq_accept_errors_total",
			Help: "Failed accepts by listener (e.g. out of file descriptors); the accept loop retries with a back-off.",
		}, []string{"listener"})}
	if err := n.start(ctx); err != nil {
		_ = n.unwind(ctx)
		var se *SettingError
		if errors.As(err, &se) {
			return nil, err
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("start-up interrupted (%v): %w", context.Cause(ctx), err)
		}
		return nil, lineError{err}
	}
	return n, nil
}

// start runs the start-up steps in dependency order. Each step gives its
// errors their context and registers (onClose) how to undo what it opened,
// so a failed start closes exactly what was opened, in reverse.
func (n *Node) start(ctx context.Context) error {
	for _, step := range []func(context.Context) error{
		n.loadCredentials, // first: a bad token file or certificate fails before anything is opened
		n.takeSettings,    // data dir, listeners, object store: failures name their setting
		n.connectEtcd,
		n.openWAL,
		n.joinCluster,
		n.openService,
		n.startJobs,
		n.serveKafka,
		n.serveHTTP,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	// Start-up (etcd restoring its index, the registry load, the WAL
	// replay) leaves garbage in proportion to the streams, which an idle
	// node would keep resident until the runtime's scavenger got round
	// to it: hand it back now, for one collection, beside serving.
	go debug.FreeOSMemory()
	n.log.Info("picomq node serving", "node_id", n.cfg.NodeID, "http", n.ln.Addr().String(),
		"protocol", n.cfg.Protocol, "advertise_url", n.cfg.AdvertiseURL, "data_dir", n.cfg.DataDir)
	return nil
}

// loadCredentials reads the token file and the TLS certificate.
func (n *Node) loadCredentials(context.Context) (err error) {
	if n.cfg.AuthTokens != "" {
		if n.tokens, err = auth.Load(n.cfg.AuthTokens); err != nil {
			return settingErr("--auth-tokens", err)
		}
	}
	if n.cfg.TLSCert != "" {
		if n.certs, err = newCertReloader(n.cfg.TLSCert, n.cfg.TLSKey); err != nil {
			return &SettingError{Err: err} // names --tls-cert/--tls-key
		}
		n.tlsCfg = n.certs.serverTLS()
	}
	return nil
}

// takeSettings takes the resources the settings name: the data dir, the
// listeners and the object store. The Kafka listener is bound before
// joining, so the membership record carries the address it really got
// (port 0 in tests).
func (n *Node) takeSettings(ctx context.Context) (err error) {
	cfg := n.cfg
	if n.lock, err = lockDataDir(cfg.DataDir); err != nil {
		return settingErr("--data-dir", err)
	}
	n.onClose("data dir lock", func(context.Context) error { n.lock.release(); return nil })
	if n.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return settingErr("--http-addr", err)
	}
	ln := n.ln
	n.onClose("http listener", func(context.Context) error { _ = ln.Close(); return nil })
	if cfg.advertiseDefault {
		hostPort, derived := advertisedHostPort(cfg.HTTPAddr, ln.Addr())
		scheme := "http://"
		if cfg.TLSCert != "" {
			scheme = "https://"
		}
		n.cfg.AdvertiseURL = scheme + hostPort
		if derived {
			n.log.Warn("--http-addr binds an unspecified address; advertising an address of this host instead (set --advertise-url to choose)",
				"http_addr", cfg.HTTPAddr, "advertise_url", n.cfg.AdvertiseURL)
		}
	}
	if n.pprof, err = listenPprof(cfg.PprofAddr); err != nil {
		return settingErr("--pprof-addr", err)
	}
	n.onClose("pprof listener", func(ctx context.Context) error { n.pprof.close(ctx); return nil })
	if n.kafkaAdvertise, err = n.listenKafka(); err != nil {
		return &SettingError{Err: err} // names --kafka-addr
	}
	if n.kafkaLn != nil {
		n.onClose("kafka listener", func(context.Context) error { _ = n.kafkaLn.Close(); return nil })
	}
	n.startBootServer()
	err = n.untilAvailable(ctx, "object store", func(err error) bool { return errors.Is(err, objstore.ErrUnavailable) },
		func(ctx context.Context) (err error) {
			actx, cancel := context.WithTimeout(ctx, startAttemptTimeout)
			defer cancel()
			n.tier, err = openTier(actx, cfg, n.log)
			return err
		})
	if err != nil {
		if errors.Is(err, objstore.ErrUnavailable) || ctx.Err() != nil {
			return fmt.Errorf("--object-store: %w", err) // may pass later: exit 1, the unit restarts
		}
		return settingErr("--object-store", err)
	}
	n.onClose("object store", func(context.Context) error { return n.tier.Close() })
	return nil
}

// connectEtcd starts the embedded etcd when no endpoints are configured
// and dials the registry.
func (n *Node) connectEtcd(ctx context.Context) (err error) {
	cfg := n.cfg
	endpoints := cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		n.embed, err = embedded.Start(ctx, embedded.Config{
			Dir:    filepath.Join(cfg.DataDir, "etcd"),
			Name:   cfg.NodeID,
			Logger: n.log,
		})
		if err != nil {
			return fmt.Errorf("embedded etcd: %w", err)
		}
		n.onClose("embedded etcd", func(context.Context) error { return n.embed.Close() })
		endpoints = n.embed.Endpoints()
		n.log.Info("embedded etcd started", "endpoints", endpoints)
	}
	var dialOpts []meta.DialOption
	if len(cfg.EtcdEndpoints) > 0 {
		tc, certs, err := etcdTLS(cfg)
		if err != nil {
			return &SettingError{Err: err} // names the --etcd-* flag
		}
		if tc != nil {
			dialOpts = append(dialOpts, meta.WithTLS(tc))
		}
		n.etcdCerts = certs
	}
	dial := func(ctx context.Context) (err error) {
		n.etcd, err = meta.Dial(ctx, endpoints, dialOpts...)
		return err
	}
	if len(cfg.EtcdEndpoints) > 0 {
		// An external cluster may not answer yet (peers booting, DNS, a
		// security group): retry. The embedded one is this process.
		err = n.untilAvailable(ctx, "etcd", func(err error) bool { return !errors.Is(err, metadata.ErrInvalid) }, dial)
	} else {
		err = dial(ctx)
	}
	if err != nil {
		if len(cfg.EtcdEndpoints) > 0 {
			return fmt.Errorf("--etcd-endpoints %v: %w", endpoints, err)
		}
		return fmt.Errorf("embedded etcd %v: %w", endpoints, err)
	}
	n.onClose("etcd client", func(context.Context) error { _ = n.etcd.Close(); return nil })
	n.reg = meta.NewRegistry(n.etcd, registryPrefix)
	if n.embed != nil {
		n.reg.UseKV(n.embed.KV()) // creates without gRPC (docs/benchmarks.md)
	}
	return nil
}

// openWAL opens the write-ahead log and recovers what it holds.
func (n *Node) openWAL(context.Context) error {
	fs := n.cfg.walFS
	if fs == nil {
		fs = testWALFS(n.cfg.DataDir) // nil outside test-only builds
	}
	// Only a follower's confirmed copies are lazy (stream.Service uses
	// EnqueueLazy for them with --replica-ack write); every other entry
	// is fdatasync'ed before it is acknowledged, as always.
	w, report, err := wal.Open(wal.Options{Dir: filepath.Join(n.cfg.DataDir, "wal"), Logger: n.log, FS: fs,
		LazySync: n.cfg.ReplicaSyncInterval})
	if err != nil {
		return fmt.Errorf("write-ahead log: %w", err)
	}
	n.wal = w
	n.freshWAL = report.Segments == 0 // a new data dir, or a lost disk
	n.onClose("WAL", func(context.Context) error { return w.Close() })
	n.log.Info("write-ahead log opened", "segments", report.Segments, "entries", report.Entries,
		"torn_segment", report.TornSegment, "torn_bytes", report.TornBytes)
	return nil
}

// joinCluster registers the node in etcd under its lease.
func (n *Node) joinCluster(ctx context.Context) error {
	cfg := n.cfg
	n.members = &membership{
		reg: n.reg, cli: n.etcd, ttl: cfg.LeaseTTL, log: n.log,
		member:   metadata.Member{NodeID: cfg.NodeID, AdvertiseURL: cfg.AdvertiseURL, KafkaAddr: n.kafkaAdvertise, Protocol: cfg.Protocol, Zone: cfg.Zone, TxnVersion: kafka.TxnVersion, StartedAt: time.Now().UTC()},
		leaseLog: filepath.Join(cfg.DataDir, "node-lease"),
	}
	if err := n.untilAvailable(ctx, "cluster membership", func(error) bool { return true }, n.members.join); err != nil {
		return fmt.Errorf("join cluster as %q: %w", cfg.NodeID, err)
	}
	n.onClose("membership", func(context.Context) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n.members.leave(ctx)
		return nil
	})
	return nil
}

// openService opens the stream service over the WAL, the registry and the
// object tier, fences it while the membership lease is lost, and registers
// the process, WAL and cache metrics.
func (n *Node) openService(ctx context.Context) (err error) {
	cfg := n.cfg
	// Replication between nodes authenticates with the cluster's shared
	// secret, kept in etcd (node/replication).
	secret, err := n.reg.ClusterSecret(ctx)
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	n.repl = replication.New(secret)
	n.repl.Log = n.log
	n.svc, err = stream.Open(ctx, stream.Config{
		NodeID:            cfg.NodeID,
		Protocol:          cfg.Protocol,
		Logger:            n.log,
		DefaultDurability: cfg.Durability,
		FreshLog:          n.freshWAL,
		Registerer:        n.metrics,
		Cluster:           n.reg,
		Replication: stream.ReplicationConfig{
			Transport:  n.repl,
			Zone:       cfg.Zone,
			Replicas:   cfg.Replicas,
			MinInSync:  cfg.MinInSync,
			LagTimeout: cfg.ReplicaLagTimeout,
			Ack:        cfg.ReplicaAck,
		},
		Jobs: stream.JobIntervals{GC: cfg.GCInterval, Compaction: cfg.CompactionInterval, KeyCompaction: cfg.KeyCompactionInterval, Retention: cfg.RetentionInterval},
		Tier: stream.TierConfig{
			Tier:         n.tier,
			Manifests:    n.reg,
			Session:      func() metadata.Lease { return meta.LeaseOf(n.members.sess.Load()) },
			SealMaxAge:   cfg.SealMaxAge,
			SealMaxBytes: cfg.SealMaxBytes,
			MaxWALBytes:  cfg.WALMaxBytes,
		},
	}, n.wal, n.reg)
	if err != nil {
		return fmt.Errorf("stream service: %w", err)
	}
	n.repl.SetService(n.svc)
	n.metrics.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "picomq_replication_sent_bytes_total",
			Help: "Bytes of replication request bodies this node sent to followers (and pulls at takeovers)."},
			func() float64 { return float64(n.repl.SentBytes.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "picomq_replication_received_bytes_total",
			Help: "Bytes of answers to this node's replication requests."},
			func() float64 { return float64(n.repl.ReceivedBytes.Load()) }))
	n.onClose("stream service", func(context.Context) error { n.svc.Close(); n.repl.Close(); return nil })
	n.members.onLost = n.svc.Fence
	n.members.onResumed = n.svc.Unfence
	n.members.onJoined = func() {
		// Until Rejoined succeeds the node stays fenced: no appends, and
		// reads stop at what object storage holds (the streams it still
		// holds may have been taken over). An etcd hiccup here must not
		// leave it so for good: retry for a while.
		backoff := retry.Policy{Initial: 200 * time.Millisecond, Max: 2 * time.Second}.Backoff()
		deadline := time.Now().Add(time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := n.svc.Rejoined(ctx)
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				n.log.Error("re-checking stream ownership after rejoin failed; staying fenced", "err", err)
				return
			}
			wait := backoff.Next()
			n.log.Warn("re-checking stream ownership after rejoin failed; retrying", "err", err, "retry_in", wait)
			time.Sleep(wait)
		}
	}
	n.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerWALMetrics(n.metrics, n.wal)
	n.registerOpsMetrics()
	if n.tier != nil {
		registerTierMetrics(n.metrics, n.tier)
	}
	return nil
}

// startJobs repairs what a crash left half done in the registry, then
// starts the background jobs under one supervisor (see jobs).
func (n *Node) startJobs(ctx context.Context) error {
	if err := n.svc.Reconcile(ctx); err != nil {
		return fmt.Errorf("stream lifecycle: %w", err)
	}
	n.jobs = newJobs(n.log)
	for _, j := range n.svc.Jobs() {
		n.jobs.start(j.Name, j.Run)
	}
	n.jobs.start("membership", n.members.run)
	// Stopping waits for the flusher's last flush, so a clean shutdown
	// leaves nothing that exists only in the WAL.
	n.onClose("background jobs", func(context.Context) error { n.jobs.stop(); return nil })
	return nil
}

// serveHTTP builds the HTTP handler (the node's own paths, the protocol
// handler, limits, authentication, metrics) and starts serving.
func (n *Node) serveHTTP(ctx context.Context) error {
	cfg, log := n.cfg, n.log
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	n.stopBootServer(sctx) // the listener is the real server's from here
	cancel()
	own := nodeHandlers{
		metrics: httpx.Allow(promhttp.HandlerFor(n.metrics, promhttp.HandlerOpts{Registry: n.metrics}), http.MethodGet, http.MethodHead),
		healthz: httpx.Allow(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("ok\n"))
		}), http.MethodGet, http.MethodHead),
		readyz:  httpx.Allow(http.HandlerFunc(n.readyz), http.MethodGet, http.MethodHead),
		drain:   httpx.Allow(http.HandlerFunc(n.drain), http.MethodPost),
		cluster: httpx.Allow(http.HandlerFunc(n.clusterInfo), http.MethodGet, http.MethodHead),
		groups:  httpx.Allow(http.HandlerFunc(n.kafkaGroups), http.MethodGet, http.MethodHead),
		console: httpx.Allow(console.Handler(), http.MethodGet, http.MethodHead),
		sysNode: httpx.Allow(http.HandlerFunc(n.nodeInfo), http.MethodGet, http.MethodHead),
		replica: n.repl.Route(http.NotFoundHandler()), // serves every /_sys/replica/ path itself
	}
	var proto http.Handler
	if cfg.Protocol == ProtocolDurableStreams {
		proto = ds.New(n.svc, ds.Config{
			BaseURL:         cfg.AdvertiseURL,
			MaxAppendBytes:  cfg.MaxAppendBytes,
			LongPollTimeout: cfg.LongPollTimeout,
			SSETimeout:      cfg.SSETimeout,
			Logger:          log,
		})
	} else {
		proto = pico.New(n.svc, pico.Config{MaxAppendBytes: cfg.MaxAppendBytes, LongPollTimeout: cfg.LongPollTimeout,
			MaxRecordBytes: cfg.MaxRecordBytes, MaxBatchRecords: cfg.MaxBatchRecords,
			SSETimeout: cfg.SSETimeout, Logger: log})
	}
	n.peers = newPeerClient(cfg.LongPollTimeout + 5*time.Second)
	own.follow = httpx.Allow(n.follow(proto), http.MethodGet, http.MethodHead)
	// One table of reserved routes for routing and authorisation.
	router := newRouteTable(cfg.Protocol, own, proto)
	var inner http.Handler = newAppendBudget(cfg.MaxInflightAppendBytes, cfg.MaxAppendBytes).wrap(router)
	if n.tokens != nil {
		inner = newGuard(n.tokens, router, n.metrics).wrap(inner)
	}
	// Replication requests bypass the append budget and the client
	// tokens: they carry the cluster secret (node/replication); the
	// route table says so (direct routes).
	inner = router.Direct(inner)
	bounds := cfg.connBounds()
	inner = bounds.bodyDeadline(inner)    // before the guard: a 401 does not wait for a body either
	servedByValue := []string{cfg.NodeID} // shared, read-only: no allocation per response
	servedBy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Which node answered: history reads may be served by any node.
		w.Header()["Pico-Served-By"] = servedByValue
		inner.ServeHTTP(w, r)
	})
	handler := httpx.Instrument(servedBy, routeLabel, httpx.NewMetrics(n.metrics), log)

	n.metrics.MustRegister(n.connRefused, n.acceptErrors)
	n.httpLimit = newLimitListener(n.ln, cfg.MaxConnections, n.connRefused.WithLabelValues("http"), n.acceptErrors.WithLabelValues("http"))
	n.ln = n.httpLimit
	// net/http serves what it accepts from serverLn: with the fast path,
	// only the connections the lane hands off (docs/configuration.md).
	serverLn := n.ln
	if cfg.HTTPFastPath && n.tlsCfg == nil {
		n.lane = h1lane.New(h1lane.Config{Handler: handler, MaxHeaderBytes: cfg.MaxHeaderBytes,
			ReadHeaderTimeout: bounds.readHeader, IdleTimeout: bounds.idle, BodyTimeout: bounds.body, Logger: log})
		serverLn = n.lane.HandOff()
	}
	h2c := cfg.H2C.On(isLoopbackAddr(cfg.HTTPAddr))
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(h2c && n.tlsCfg == nil)
	n.server = &http.Server{
		Handler:           handler,
		Protocols:         protocols,
		TLSConfig:         n.tlsCfg,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ReadHeaderTimeout: bounds.readHeader,
		IdleTimeout:       bounds.idle,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     1 << 20,
			MaxReceiveBufferPerConnection: 4 << 20,
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	logSecurity(log, cfg, h2c && n.tlsCfg == nil)
	go func() {
		switch {
		case n.tlsCfg != nil:
			n.served <- n.server.ServeTLS(serverLn, "", "")
		case n.lane != nil:
			go func() {
				// The lane's listener closes only when the lane stops, after
				// which this result is of no interest.
				if err := n.server.Serve(serverLn); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
					select {
					case n.served <- err:
					default:
					}
				}
			}()
			n.served <- n.lane.Serve(n.ln)
		default:
			n.served <- n.server.Serve(serverLn)
		}
	}()
	n.onClose("http server", n.closeHTTP)
	return nil
}

// closeHTTP stops accepting connections and waits for in-flight requests
// (so appends finish and are acknowledged); long-polls are cut by the
// context deadline, after which the rest is closed.
func (n *Node) closeHTTP(ctx context.Context) error {
	laneDone := make(chan error, 1)
	if n.lane != nil {
		go func() { laneDone <- n.lane.Shutdown(ctx) }() // closes idle lane connections, waits for the busy ones
	} else {
		laneDone <- nil
	}
	err := n.server.Shutdown(ctx)
	if err != nil {
		n.log.Warn("in-flight requests did not finish in time; closing", "err", err)
		_ = n.server.Close()
	}
	return errors.Join(err, <-laneDone)
}

// routeLabel keeps metric cardinality bounded: stream names never become
// label values.
func routeLabel(r *http.Request) string {
	switch r.URL.Path {
	case "/metrics", "/healthz", "/readyz":
		return r.URL.Path
	}
	if len(r.URL.Path) > 1 && r.URL.Path[1] == '_' {
		return "/_"
	}
	return "stream"
}

// listenersReady reports the listeners that cannot take connections now:
// their accept keeps failing (out of file descriptors) or their loop
// stopped.
func (n *Node) listenersReady() error {
	var errs []error
	if n.httpLimit != nil {
		if err := n.httpLimit.acceptErr(); err != nil {
			errs = append(errs, fmt.Errorf("http listener cannot accept connections: %w", err))
		}
	}
	if n.kafkaLimit != nil {
		if err := n.kafkaLimit.acceptErr(); err != nil {
			errs = append(errs, fmt.Errorf("kafka listener cannot accept connections: %w", err))
		}
	}
	if err := n.kafkaStopped.Load(); err != nil {
		errs = append(errs, fmt.Errorf("kafka listener stopped: %w", *err))
	}
	return errors.Join(errs...)
}

func (n *Node) readyz(w http.ResponseWriter, r *http.Request) {
	if err := n.listenersReady(); err != nil {
		httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeServiceUnavailable, err.Error())
		return
	}
	if err := n.svc.Ready(); err != nil {
		httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeServiceUnavailable, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	if _, err := n.etcd.Get(ctx, registryPrefix+"ready-probe", clientv3.WithCountOnly()); err != nil {
		httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeServiceUnavailable, "etcd unreachable: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ready\n"))
}

// Addr is the address the stream listener is bound to.
func (n *Node) Addr() string { return n.ln.Addr().String() }

// Served reports the HTTP server's exit (nil after a clean Shutdown).
func (n *Node) Served() <-chan error { return n.served }

// Shutdown hands the owned streams to other nodes, then closes in reverse
// start order: stops accepting connections and waits for in-flight requests
// (so appends finish and are acknowledged), stops the background jobs (the
// flusher's last flush), then leaves the cluster and syncs and closes the
// WAL and etcd. Long-polls are cut by the context deadline.
func (n *Node) Shutdown(ctx context.Context) error {
	n.log.Info("shutting down")
	// Hand owned streams to other live nodes first, while the listener
	// still answers (with redirects) — a rolling restart loses nothing and
	// clients move on at once. Alone in the cluster, the final flush at
	// close is all there is to do.
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	if moved, derr := n.svc.Drain(dctx); derr != nil {
		n.log.Info("drain on shutdown incomplete; streams stay owned by this node until it returns or its lease expires", "moved", moved, "reason", derr)
	} else {
		n.log.Info("drained", "moved", moved)
		n.lingerForKafka(ctx)
	}
	dcancel()
	err := n.unwind(ctx)
	if err == nil {
		n.log.Info("shutdown complete")
	}
	return err
}

// A drained node keeps answering Kafka until no request has come for
// kafkaLingerQuiet, at most kafkaLingerMost (lingerForKafka).
const (
	kafkaLingerQuiet = 500 * time.Millisecond
	kafkaLingerMost  = 2 * time.Second
)

// lingerForKafka keeps a drained node's Kafka listener answering while
// clients still ask it. A producer told that a partition moved (the
// KIP-951 hint) refreshes its metadata next, often from this node; a
// node that has stopped answers that refresh with EOF, and franz-go
// retries it with a back-off during which the move of the partition
// waits too (its metadata refresh and the move take turns): 1.2-1.9 s
// producer pauses in the rolling drill. It costs the shutdown at most
// kafkaLingerMost, and nothing when no client has asked for
// kafkaLingerQuiet.
func (n *Node) lingerForKafka(ctx context.Context) {
	if n.kafka == nil {
		return
	}
	most := time.NewTimer(kafkaLingerMost)
	defer most.Stop()
	for {
		idle := n.kafka.Idle()
		if idle >= kafkaLingerQuiet {
			return
		}
		select {
		case <-time.After(kafkaLingerQuiet - idle):
		case <-most.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Run starts a node and serves until ctx is cancelled (SIGTERM/SIGINT in
// cmd/picomq), then shuts down gracefully within cfg.ShutdownTimeout.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	n, err := Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for serving := true; serving; {
		select {
		case <-hup:
			// SIGHUP re-reads the token file and the TLS certificate.
			if err := n.Reload(); err != nil {
				log.Error("reload on SIGHUP failed; the previous tokens/certificate stay in force", "err", err)
			}
		case <-ctx.Done():
			serving = false
		case err := <-n.served:
			sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			_ = n.unwind(sctx)
			cancel()
			return fmt.Errorf("http server: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	return n.Shutdown(sctx)
}
