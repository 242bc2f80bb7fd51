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
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/api/ds"
	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/api/pico"
	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/kafka"
	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/wal"
)

// registryPrefix is the etcd key prefix of everything PicoMQ stores.
const registryPrefix = "/picomq/"

// Node is one running PicoMQ node.
type Node struct {
	cfg    Config
	log    *slog.Logger
	embed  *meta.Embedded
	etcd   *clientv3.Client
	reg    *meta.Registry
	wal    *wal.WAL
	svc    *stream.Service
	ln     net.Listener
	server *http.Server
	lock   *dataDirLock
	served chan error

	tokens *auth.Store   // nil when authentication is off
	certs  *certReloader // nil without --tls-cert
	tlsCfg *tls.Config   // the listeners' TLS (Kafka uses it too); nil without --tls-cert

	connRefused *prometheus.CounterVec // connections closed at accept, by listener

	members     *membership
	tier        *tiering.Tier
	bgCancel    context.CancelFunc
	flusherDone chan struct{}
	stopLife    func() // stops the stream expiry reaper
	stopRetain  func() // stops the retention loop

	kafkaLn     net.Listener // nil when --kafka-addr off
	kafka       *kafka.Server
	kafkaServed chan error

	pprof *pprofServer // nil without --pprof-addr
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
	n := &Node{cfg: cfg, log: log, served: make(chan error, 1), connRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "picomq_connections_refused_total",
		Help: "Connections closed at accept because --max-connections were open on the listener.",
	}, []string{"listener"})}
	if err := n.start(ctx); err != nil {
		if n.svc != nil {
			n.svc.Close()
		}
		_ = n.closeStorage()
		if n.ln != nil {
			_ = n.ln.Close()
		}
		n.pprof.close(ctx)
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

func (n *Node) start(ctx context.Context) (err error) {
	cfg, log := n.cfg, n.log
	// Credentials first: a bad token file or certificate fails start-up
	// before anything is opened.
	if cfg.AuthTokens != "" {
		if n.tokens, err = auth.Load(cfg.AuthTokens); err != nil {
			return settingErr("--auth-tokens", err)
		}
	}
	if cfg.TLSCert != "" {
		if n.certs, err = newCertReloader(cfg.TLSCert, cfg.TLSKey); err != nil {
			return &SettingError{Err: err} // names --tls-cert/--tls-key
		}
		n.tlsCfg = n.certs.serverTLS()
	}
	if n.lock, err = lockDataDir(cfg.DataDir); err != nil {
		return settingErr("--data-dir", err)
	}
	if n.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return settingErr("--http-addr", err)
	}
	if n.pprof, err = listenPprof(cfg.PprofAddr); err != nil {
		return settingErr("--pprof-addr", err)
	}
	// The Kafka listener is bound before joining, so the membership
	// record carries the address it really got (port 0 in tests).
	kafkaAdvertise, err := n.listenKafka()
	if err != nil {
		return &SettingError{Err: err} // names --kafka-addr
	}
	if n.tier, err = openTier(ctx, cfg, log); err != nil {
		return settingErr("--object-store", err)
	}

	endpoints := cfg.EtcdEndpoints
	if len(endpoints) == 0 {
		n.embed, err = meta.StartEmbedded(ctx, meta.EmbedConfig{
			Dir:    filepath.Join(cfg.DataDir, "etcd"),
			Name:   cfg.NodeID,
			Logger: log,
		})
		if err != nil {
			return fmt.Errorf("embedded etcd: %w", err)
		}
		endpoints = n.embed.Endpoints()
		log.Info("embedded etcd started", "endpoints", endpoints)
	}
	var dialOpts []meta.DialOption
	if len(cfg.EtcdEndpoints) > 0 {
		tc, err := etcdTLS(cfg)
		if err != nil {
			return &SettingError{Err: err} // names the --etcd-* flag
		}
		if tc != nil {
			dialOpts = append(dialOpts, meta.WithTLS(tc))
		}
	}
	n.etcd, err = meta.Dial(ctx, endpoints, dialOpts...)
	if err != nil {
		if len(cfg.EtcdEndpoints) > 0 {
			return fmt.Errorf("--etcd-endpoints %v: %w", endpoints, err)
		}
		return fmt.Errorf("embedded etcd %v: %w", endpoints, err)
	}
	reg := meta.NewRegistry(n.etcd, registryPrefix)
	n.reg = reg

	var report wal.RecoveryReport
	n.wal, report, err = wal.Open(wal.Options{Dir: filepath.Join(cfg.DataDir, "wal"), Logger: log, FS: cfg.walFS})
	if err != nil {
		return fmt.Errorf("write-ahead log: %w", err)
	}
	log.Info("write-ahead log opened", "segments", report.Segments, "entries", report.Entries,
		"torn_segment", report.TornSegment, "torn_bytes", report.TornBytes)

	n.members = &membership{
		reg: reg, cli: n.etcd, ttl: cfg.LeaseTTL, log: log,
		member:   meta.Member{NodeID: cfg.NodeID, AdvertiseURL: cfg.AdvertiseURL, KafkaAddr: kafkaAdvertise, Protocol: cfg.Protocol, StartedAt: time.Now().UTC()},
		leaseLog: filepath.Join(cfg.DataDir, "node-lease"),
	}
	if err := n.members.join(ctx); err != nil {
		return fmt.Errorf("join cluster as %q: %w", cfg.NodeID, err)
	}

	promReg := prometheus.NewRegistry()
	n.svc, err = stream.Open(ctx, stream.Config{
		NodeID:            cfg.NodeID,
		Protocol:          cfg.Protocol,
		Logger:            log,
		DefaultDurability: cfg.Durability,
		Registerer:        promReg,
		Cluster:           reg,
		Tier: stream.TierConfig{
			Tier:         n.tier,
			Manifests:    reg,
			Session:      n.members.sess.Load,
			SealMaxAge:   cfg.SealMaxAge,
			SealMaxBytes: cfg.SealMaxBytes,
			MaxWALBytes:  cfg.WALMaxBytes,
		},
	}, n.wal, reg)
	if err != nil {
		return fmt.Errorf("stream service: %w", err)
	}
	n.members.onLost = n.svc.Fence
	n.members.onResumed = n.svc.Unfence
	n.members.onJoined = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.svc.Rejoined(ctx); err != nil {
			log.Error("re-checking stream ownership after rejoin failed; staying fenced", "err", err)
		}
	}
	bg, cancel := context.WithCancel(context.Background())
	n.bgCancel = cancel
	n.flusherDone = make(chan struct{})
	go func() { n.svc.RunFlusher(bg); close(n.flusherDone) }()
	go n.svc.RunGC(bg, stream.GCConfig{})
	go n.svc.RunCompactor(bg, 10*time.Second, stream.CompactConfig{})
	go n.members.run(bg)
	if n.stopLife, err = n.svc.StartLifecycle(ctx, stream.LifecycleOptions{}); err != nil {
		return fmt.Errorf("stream lifecycle: %w", err)
	}
	n.stopRetain = n.svc.StartRetention(stream.RetentionOptions{})

	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerWALMetrics(promReg, n.wal)
	if n.tier != nil {
		registerTierMetrics(promReg, n.tier)
	}

	// The node's own paths are matched exactly; everything else goes to
	// the protocol handler, which never rewrites ("cleans") a path: stream
	// names are validated, not silently turned into another name.
	router := rootRoutes{fixed: map[string]http.Handler{
		"/metrics": httpx.Allow(promhttp.HandlerFor(promReg, promhttp.HandlerOpts{Registry: promReg}), http.MethodGet, http.MethodHead),
		"/healthz": httpx.Allow(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("ok\n"))
		}), http.MethodGet, http.MethodHead),
		"/readyz":       httpx.Allow(http.HandlerFunc(n.readyz), http.MethodGet, http.MethodHead),
		"/_sys/drain":   httpx.Allow(http.HandlerFunc(n.drain), http.MethodPost),
		"/_sys/cluster": httpx.Allow(http.HandlerFunc(n.clusterInfo), http.MethodGet, http.MethodHead),
	}}
	if cfg.Protocol == ProtocolDurableStreams {
		router.proto = ds.New(n.svc, ds.Config{
			BaseURL:         cfg.AdvertiseURL,
			MaxAppendBytes:  cfg.MaxAppendBytes,
			LongPollTimeout: cfg.LongPollTimeout,
			SSETimeout:      cfg.SSETimeout,
			Logger:          log,
		})
	} else {
		router.proto = pico.New(n.svc, pico.Config{MaxAppendBytes: cfg.MaxAppendBytes, LongPollTimeout: cfg.LongPollTimeout,
			MaxRecordBytes: cfg.MaxRecordBytes, MaxBatchRecords: cfg.MaxBatchRecords,
			SSETimeout: cfg.SSETimeout, Logger: log})
	}
	var inner http.Handler = newAppendBudget(cfg.MaxInflightAppendBytes, cfg.MaxAppendBytes, cfg.BodyTimeout).wrap(router)
	if n.tokens != nil {
		inner = newGuard(n.tokens, cfg.Protocol, promReg).wrap(inner)
	}
	servedByValue := []string{cfg.NodeID} // shared, read-only: no allocation per response
	servedBy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Which node answered: history reads may be served by any node.
		w.Header()["Pico-Served-By"] = servedByValue
		inner.ServeHTTP(w, r)
	})
	handler := httpx.Instrument(servedBy, routeLabel, httpx.NewMetrics(promReg), log)

	promReg.MustRegister(n.connRefused)
	n.ln = newLimitListener(n.ln, cfg.MaxConnections, n.connRefused.WithLabelValues("http"))
	if n.tlsCfg == nil {
		n.ln = httpx.JSONErrorListener(n.ln) // net/http's own 400/431 answers as JSON errors
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
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     1 << 20,
			MaxReceiveBufferPerConnection: 4 << 20,
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	logSecurity(log, cfg, h2c && n.tlsCfg == nil)
	go func() {
		if n.tlsCfg != nil {
			n.served <- n.server.ServeTLS(n.ln, "", "")
			return
		}
		n.served <- n.server.Serve(n.ln)
	}()
	if err := n.serveKafka(ctx); err != nil {
		return err
	}
	log.Info("picomq node serving", "node_id", cfg.NodeID, "http", n.ln.Addr().String(),
		"protocol", cfg.Protocol, "advertise_url", cfg.AdvertiseURL, "data_dir", cfg.DataDir)
	return nil
}

// rootRoutes serves the node's own paths (exact matches) and hands every
// other request to the protocol handler: one map lookup per request, no
// router, no request copy.
type rootRoutes struct {
	fixed map[string]http.Handler
	proto http.Handler
}

func (rt rootRoutes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := rt.fixed[r.URL.Path]; ok {
		h.ServeHTTP(w, r)
		return
	}
	rt.proto.ServeHTTP(w, r)
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

func (n *Node) readyz(w http.ResponseWriter, r *http.Request) {
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

// Shutdown stops accepting connections, waits for in-flight requests (so
// appends finish and are acknowledged), then syncs and closes the WAL and
// etcd. Long-polls are cut by the context deadline.
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
	}
	dcancel()
	err := n.server.Shutdown(ctx)
	if err != nil {
		n.log.Warn("in-flight requests did not finish in time; closing", "err", err)
		_ = n.server.Close()
	}
	n.closeKafka(ctx)
	n.pprof.close(ctx)
	n.svc.Close()
	if cerr := n.closeStorage(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err == nil {
		n.log.Info("shutdown complete")
	}
	return err
}

func (n *Node) closeStorage() error {
	var errs []error
	if n.kafka == nil && n.kafkaLn != nil {
		_ = n.kafkaLn.Close() // bound but never served (start-up failed)
	}
	if n.stopLife != nil {
		n.stopLife()
		n.stopLife = nil
	}
	if n.stopRetain != nil {
		n.stopRetain()
		n.stopRetain = nil
	}
	if n.bgCancel != nil {
		// Stops the flusher after one last flush, so a clean shutdown
		// leaves nothing that exists only in the WAL.
		n.bgCancel()
		<-n.flusherDone
		n.bgCancel = nil
	}
	if n.members != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n.members.leave(ctx)
		cancel()
	}
	if n.tier != nil {
		if err := n.tier.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close object store: %w", err))
		}
	}
	if n.wal != nil {
		if err := n.wal.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close WAL: %w", err))
		}
		n.wal = nil
	}
	if n.etcd != nil {
		_ = n.etcd.Close()
		n.etcd = nil
	}
	if n.embed != nil {
		if err := n.embed.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close embedded etcd: %w", err))
		}
		n.embed = nil
	}
	n.lock.release() // last: everything in the data dir is closed
	return errors.Join(errs...)
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
			_ = n.closeStorage()
			return fmt.Errorf("http server: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	return n.Shutdown(sctx)
}
