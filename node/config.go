package node

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/PicoMQ/picomq/wal"
)

// Config is the configuration of `picomq serve`. Every field has a flag, an
// environment twin PICOMQ_<FLAG_IN_UPPER_SNAKE> and a YAML key equal to the
// flag name; precedence is flag > env > file > default. docs/configuration.md
// is the reference.
type Config struct {
	NodeID       string
	DataDir      string
	HTTPAddr     string
	AdvertiseURL string
	// advertiseDefault: AdvertiseURL was not set, so the node derives it
	// from the bound listener (advertise.go).
	advertiseDefault bool
	Protocol         string
	KafkaAddr        string
	// KafkaAdvertiseAddr is what Metadata tells Kafka clients to connect
	// to (default: the bound Kafka address).
	KafkaAdvertiseAddr string
	KafkaAutoCreate    bool
	// KafkaOAuthUnsecuredJWT validates Kafka OAUTHBEARER tokens as
	// unsecured JWTs (alg none), as Kafka's default validator does; for
	// development, never with --auth-tokens (Validate).
	KafkaOAuthUnsecuredJWT bool
	// KafkaOAuthJWKS is a JWK Set file: OAUTHBEARER tokens may also be
	// JWTs signed by its keys, granting their scope claim (needs
	// --auth-tokens).
	KafkaOAuthJWKS     string
	KafkaMaxFrameBytes int64
	// KafkaMaxMessageBytes bounds one produced batch (max.message.bytes).
	KafkaMaxMessageBytes int64
	EtcdEndpoints        []string
	ObjectStore          string
	SealMaxBytes         int64
	SealMaxAge           time.Duration
	Durability           string
	// Replicated durability: this node's zone label, the default R and M
	// of a replicated stream, and how long an in-sync follower may lag
	// before the owner removes it from the in-sync set.
	Zone              string
	Replicas          int
	MinInSync         int
	ReplicaLagTimeout time.Duration
	// ReplicaAck is what this node's answer as a follower means: fsync
	// (its WAL copy is fdatasync'ed) or write (written to the WAL file,
	// in the OS page cache; docs/durability.md).
	ReplicaAck string
	// ReplicaSyncInterval, with ReplicaAck write: how long a follower may
	// put off the fdatasync of the copies it has confirmed (0: right
	// after the write; docs/durability.md#replica-sync).
	ReplicaSyncInterval time.Duration
	LeaseTTL            time.Duration
	// Periods of the passes that reclaim storage (docs/configuration.md).
	GCInterval         time.Duration
	CompactionInterval time.Duration
	// KeyCompactionInterval: how often compacted streams are checked for
	// a key compaction run (node/stream/keycompact.go).
	KeyCompactionInterval time.Duration
	RetentionInterval     time.Duration
	WALMaxBytes           int64
	CacheBytes            int64
	ReadAheadBytes        int64
	// CachePretouch fills the read cache's free list with touched memory
	// (--read-ahead-bytes of it) at start, before /readyz says ready.
	CachePretouch   bool
	LongPollTimeout time.Duration
	SSETimeout      time.Duration
	MaxAppendBytes  int64
	ShutdownTimeout time.Duration
	StartRetry      time.Duration // how long start-up retries an unavailable object store or etcd
	LogLevel        string
	LogFormat       string

	// Security (docs/security.md).
	AuthTokens     string // token file; empty = no authentication
	InsecureNoAuth bool   // allow a non-loopback listener without auth
	TLSCert        string // PEM certificate chain for the listeners
	TLSKey         string // PEM private key for the listeners
	H2C            Toggle // cleartext HTTP/2 (prior knowledge); auto = on when the HTTP listener is loopback
	EtcdCA         string // CA bundle to verify external etcd
	EtcdCert       string // client certificate presented to etcd
	EtcdKey        string // its key
	S3CA           string // CA bundle to verify an https S3 endpoint

	// Limits (docs/security.md#limits).
	MaxHeaderBytes         int
	MaxConnections         int
	MaxRecordBytes         int
	MaxBatchRecords        int
	MaxInflightAppendBytes int64
	ReadHeaderTimeout      time.Duration
	BodyTimeout            time.Duration
	IdleTimeout            time.Duration
	// HTTPFastPath serves simple HTTP/1.1 requests (appends) on the
	// node's own connection loop (api/h1lane) instead of net/http.
	HTTPFastPath bool

	// PprofAddr is the loopback debug listener serving Go's runtime
	// profiles (node/pprof.go); empty = off.
	PprofAddr string

	// walFS replaces the real filesystem under the WAL; only this
	// package's tests set it (to inject disk faults).
	walFS wal.FS
}

// Toggle is a boolean flag with a third state, auto (not given), whose
// meaning the flag's documentation defines. `--h2c` alone means on.
type Toggle struct {
	set, on bool
}

// On resolves the toggle, with auto meaning def.
func (t Toggle) On(def bool) bool {
	if !t.set {
		return def
	}
	return t.on
}

// IsBoolFlag lets the flag package accept `--h2c` without a value.
func (t *Toggle) IsBoolFlag() bool { return true }

func (t *Toggle) String() string {
	if t == nil || !t.set {
		return "auto"
	}
	return strconv.FormatBool(t.on)
}

// Set parses true/false (any strconv.ParseBool form) or auto.
func (t *Toggle) Set(v string) error {
	if v == "auto" {
		*t = Toggle{}
		return nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true, false or auto")
	}
	*t = Toggle{set: true, on: b}
	return nil
}

// Protocols a stream listener can serve.
const (
	ProtocolPico            = "pico"
	ProtocolDurableStreams  = "durable-streams"
	defaultHTTPAddr         = "127.0.0.1:4437"
	defaultKafkaAddr        = "127.0.0.1:9092"
	defaultLongPollTimeout  = 25 * time.Second
	defaultSSETimeout       = 55 * time.Second
	defaultMaxAppendBytes   = 4 << 20
	defaultShutdownTimeout  = 30 * time.Second
	envPrefix               = "PICOMQ_"
	maxLongPollTimeoutLimit = 5 * time.Minute

	defaultMaxHeaderBytes        = 64 << 10
	defaultKafkaMaxFrameBytes    = 100 << 20
	defaultKafkaMaxMessageBytes  = 1048588 // Kafka's own max.message.bytes default
	defaultMaxConnections        = 4096
	defaultMaxRecordBytes        = 1 << 20
	defaultGCInterval            = time.Minute
	defaultCompactionInterval    = 10 * time.Second
	defaultKeyCompactionInterval = time.Second
	defaultRetentionInterval     = 10 * time.Second
	defaultMaxBatchRecords       = 10000
	// The floor of the three intervals above: a GC pass lists every
	// manifest and every stream record in etcd, compaction and retention
	// walk this node's objects and streams, so more often than once a
	// second would load etcd for storage reclaimed at most a second
	// sooner. The ceiling keeps a typo from turning reclamation off.
	minJobInterval                = time.Second
	maxJobInterval                = 24 * time.Hour
	defaultMaxInflightAppendBytes = 256 << 20
	defaultReadHeaderTimeout      = 10 * time.Second
	defaultBodyTimeout            = 60 * time.Second
	defaultIdleTimeout            = 120 * time.Second
)

// ErrHelp is returned when -h/--help was asked for; usage has been printed.
var ErrHelp = flag.ErrHelp

// ParseServeFlags parses `picomq serve` arguments. getenv is os.Getenv in
// production and a map lookup in tests. Usage goes to out.
func ParseServeFlags(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	host, _ := os.Hostname()
	var (
		cfg        Config
		etcd       string
		configFile string
	)
	fs := flag.NewFlagSet("picomq serve", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&configFile, "config", "", "YAML config file (keys are flag names)")
	fs.StringVar(&cfg.NodeID, "node-id", host, "unique node name in the cluster")
	fs.StringVar(&cfg.DataDir, "data-dir", "./data", "directory for the WAL, caches and the embedded etcd")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", defaultHTTPAddr, "stream listener address")
	fs.StringVar(&cfg.AdvertiseURL, "advertise-url", "", "URL other nodes redirect clients to (default http://<http-addr>)")
	fs.StringVar(&cfg.Protocol, "protocol", ProtocolPico, "stream listener protocol: pico or durable-streams")
	fs.StringVar(&cfg.KafkaAddr, "kafka-addr", defaultKafkaAddr, "Kafka listener address, or off")
	fs.StringVar(&cfg.KafkaAdvertiseAddr, "kafka-advertise-addr", "", "host:port Kafka clients are told to connect to (default: the bound --kafka-addr)")
	fs.BoolVar(&cfg.KafkaAutoCreate, "kafka-auto-create-topics", false, "create unknown topics (1 partition) on Kafka Metadata and Produce")
	fs.BoolVar(&cfg.KafkaOAuthUnsecuredJWT, "kafka-oauth-unsecured-jwt", false, "development only: accept a Kafka OAUTHBEARER token only if it is a valid unexpired unsecured JWT (alg none, sub, exp); not with --auth-tokens")
	fs.StringVar(&cfg.KafkaOAuthJWKS, "kafka-oauth-jwks", "", "JWK Set file: a Kafka OAUTHBEARER token may also be a JWT signed (RS256, ES256) by one of its keys, its scope claim granting PicoMQ scopes; needs --auth-tokens")
	fs.Int64Var(&cfg.KafkaMaxMessageBytes, "kafka-max-message-bytes", defaultKafkaMaxMessageBytes, "largest record batch a Kafka producer may send (Kafka's max.message.bytes)")
	fs.Int64Var(&cfg.KafkaMaxFrameBytes, "kafka-max-frame-bytes", defaultKafkaMaxFrameBytes, "largest Kafka request accepted; larger ones close the connection")
	fs.StringVar(&etcd, "etcd-endpoints", "", "comma-separated external etcd endpoints (empty = embedded etcd in the data dir)")
	fs.StringVar(&cfg.ObjectStore, "object-store", "", "object store URL: file:///path or s3://bucket?endpoint=…&region=… (default file://<data-dir>/objects)")
	fs.Int64Var(&cfg.SealMaxBytes, "seal-max-bytes", 8<<20, "flush pending stream data to object storage once this many bytes are pending")
	fs.DurationVar(&cfg.SealMaxAge, "seal-max-age", time.Second, "flush pending stream data at least this often (bounds the local-durability loss window)")
	fs.StringVar(&cfg.Durability, "durability", "local", "default ack level: local (after WAL fsync), replicated (after the fsyncs of --min-insync copies on as many nodes) or object (after upload + commit)")
	fs.StringVar(&cfg.Zone, "zone", "", "failure-domain label of this node (e.g. an availability zone); copies of replicated streams go to other zones first")
	fs.IntVar(&cfg.Replicas, "replicas", 3, "copies of a replicated stream, the owner's included (Kafka's replication.factor), unless the stream sets its own")
	fs.IntVar(&cfg.MinInSync, "min-insync", 2, "copies a replicated append needs before it is acknowledged (Kafka's min.insync.replicas), unless the stream sets its own")
	fs.DurationVar(&cfg.ReplicaLagTimeout, "replica-lag-timeout", time.Second, "an in-sync follower that has not confirmed an append this long is removed from the in-sync set")
	fs.StringVar(&cfg.ReplicaAck, "replica-ack", "fsync", "when this node, as a follower, confirms a replicated append: fsync (after its WAL fdatasync) or write (after its WAL write, before the fdatasync that follows: a copy in the OS page cache, as Kafka's acks=all)")
	fs.DurationVar(&cfg.ReplicaSyncInterval, "replica-sync-interval", 0, "with --replica-ack write: a follower fdatasyncs the copies it confirmed at most this long after writing them, one fdatasync for all of them, instead of right after each write (Kafka's flush.ms); 0 keeps the fdatasync right after the write")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", 5*time.Second, "etcd membership lease; a node silent this long is considered dead")
	fs.DurationVar(&cfg.GCInterval, "gc-interval", defaultGCInterval, "how often unreferenced objects (of deleted streams, below a trim point, replaced by compaction) are deleted from object storage")
	fs.DurationVar(&cfg.CompactionInterval, "compaction-interval", defaultCompactionInterval, "how often small flush objects are merged into larger ones")
	fs.DurationVar(&cfg.KeyCompactionInterval, "key-compaction-interval", defaultKeyCompactionInterval, "how often compacted streams (cleanup.policy=compact) are checked for a key compaction run")
	fs.DurationVar(&cfg.RetentionInterval, "retention-interval", defaultRetentionInterval, "how often streams' retention (age and size) advances their start offsets")
	fs.Int64Var(&cfg.WALMaxBytes, "wal-max-bytes", 4<<30, "un-uploaded bytes allowed in the WAL while object storage is down; above it appends get 503")
	fs.Int64Var(&cfg.CacheBytes, "cache-bytes", 256<<20, "size of the object read cache in bytes")
	fs.Int64Var(&cfg.ReadAheadBytes, "read-ahead-bytes", 64<<20, "node-wide budget of object bytes fetched ahead of readers (GETs in flight plus bytes fetched and not yet read)")
	fs.BoolVar(&cfg.CachePretouch, "cache-pretouch", false, "at start, before ready, touch --read-ahead-bytes of memory for the read cache's GET buffers, so the first reads after a restart or takeover do not wait for page faults")
	fs.DurationVar(&cfg.LongPollTimeout, "long-poll-timeout", defaultLongPollTimeout, "cap of a long-poll read")
	fs.DurationVar(&cfg.SSETimeout, "sse-timeout", defaultSSETimeout, "cap of one SSE connection")
	fs.Int64Var(&cfg.MaxAppendBytes, "max-append-bytes", defaultMaxAppendBytes, "largest accepted append body in bytes")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long SIGTERM waits for in-flight requests")
	fs.DurationVar(&cfg.StartRetry, "start-retry", 10*time.Minute, "how long start-up retries an object store or etcd that does not answer yet before exiting 1")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.LogFormat, "log-format", "text", "text or json")
	fs.StringVar(&cfg.AuthTokens, "auth-tokens", "", "token file (hashes and scopes, docs/security.md); reloaded on SIGHUP")
	fs.BoolVar(&cfg.InsecureNoAuth, "insecure-no-auth", false, "serve a non-loopback listener without authentication")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate (chain) for the HTTP and Kafka listeners; reloaded on SIGHUP")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.Var(&cfg.H2C, "h2c", "cleartext HTTP/2 with prior knowledge: true, false or auto (on when --http-addr is loopback)")
	fs.StringVar(&cfg.EtcdCA, "etcd-ca", "", "PEM CA bundle to verify external etcd (https endpoints)")
	fs.StringVar(&cfg.EtcdCert, "etcd-cert", "", "PEM client certificate presented to etcd")
	fs.StringVar(&cfg.EtcdKey, "etcd-key", "", "PEM key of --etcd-cert")
	fs.StringVar(&cfg.S3CA, "s3-ca", "", "PEM CA bundle to verify an https S3 endpoint")
	fs.IntVar(&cfg.MaxHeaderBytes, "max-header-bytes", defaultMaxHeaderBytes, "largest request header block in bytes (431 above it)")
	fs.IntVar(&cfg.MaxConnections, "max-connections", defaultMaxConnections, "concurrent connections per listener; more are closed at accept")
	fs.IntVar(&cfg.MaxRecordBytes, "max-record-bytes", defaultMaxRecordBytes, "largest record (key + value + headers) in bytes")
	fs.IntVar(&cfg.MaxBatchRecords, "max-batch-records", defaultMaxBatchRecords, "most records in one append")
	fs.Int64Var(&cfg.MaxInflightAppendBytes, "max-inflight-append-bytes", defaultMaxInflightAppendBytes, "memory all appends being received may hold; beyond it appends wait, then get 503")
	fs.DurationVar(&cfg.ReadHeaderTimeout, "read-header-timeout", defaultReadHeaderTimeout, "time a client has to send its request headers (and TLS handshake)")
	fs.DurationVar(&cfg.BodyTimeout, "body-timeout", defaultBodyTimeout, "time a client has to send a request body")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", defaultIdleTimeout, "how long an idle keep-alive connection stays open")
	fs.BoolVar(&cfg.HTTPFastPath, "http-fast-path", true, "serve simple HTTP/1.1 requests (appends) on a lighter loop than net/http; cleartext only")
	fs.StringVar(&cfg.PprofAddr, "pprof-addr", "", "loopback host:port serving Go profiles under /debug/pprof/ (empty = off)")

	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if !set["config"] {
		configFile = getenv(envPrefix + "CONFIG")
	}
	var raw map[string]any
	if configFile != "" {
		b, err := os.ReadFile(configFile)
		if err != nil {
			return Config{}, fmt.Errorf("config file: %w", err)
		}
		if err := yaml.Unmarshal(b, &raw); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", configFile, err)
		}
	}
	// Keys are flag names; snake_case spellings (auth_tokens) are accepted
	// too, since most YAML tooling writes those.
	file := make(map[string]any, len(raw))
	for key, v := range raw {
		name := strings.ReplaceAll(key, "_", "-")
		if name == "config" || fs.Lookup(name) == nil {
			return Config{}, fmt.Errorf("config file %s: unknown key %q", configFile, key)
		}
		if _, dup := file[name]; dup {
			return Config{}, fmt.Errorf("config file %s: key %q given twice (as %s and with underscores)", configFile, key, name)
		}
		file[name] = v
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] || f.Name == "config" {
			return
		}
		env := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %v", env, v, e)
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			s := yamlScalar(v)
			if e := fs.Set(f.Name, s); e != nil {
				err = fmt.Errorf("config file key %s=%q: %v", f.Name, s, e)
			}
		}
	})
	if err != nil {
		return Config{}, err
	}
	for _, e := range strings.Split(etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.EtcdEndpoints = append(cfg.EtcdEndpoints, e)
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// yamlScalar is the flag text of a YAML value. A YAML number is written
// as a number a flag parses: 1e6 or 8.0e6 (floats to YAML) become
// 1000000 and 8000000, so integer flags take them; fractions keep their
// digits without an exponent (1.5, 0.001).
func yamlScalar(v any) string {
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = yamlScalar(p)
		}
		return strings.Join(parts, ",")
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	default:
		return fmt.Sprint(x)
	}
}

// Validate checks values and fills derived defaults (advertise URL, object
// store). Errors are one line naming the flag.
func (c *Config) Validate() error {
	if c.NodeID == "" {
		return errors.New("--node-id: must not be empty")
	}
	if c.DataDir == "" {
		return errors.New("--data-dir: must not be empty")
	}
	if err := checkHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("--http-addr %q: %v", c.HTTPAddr, err)
	}
	switch c.Protocol {
	case ProtocolPico, ProtocolDurableStreams:
	default:
		return fmt.Errorf("--protocol %q: want pico or durable-streams", c.Protocol)
	}
	if c.KafkaAddr != "off" {
		if err := checkHostPort(c.KafkaAddr); err != nil {
			return fmt.Errorf("--kafka-addr %q: %v (or off)", c.KafkaAddr, err)
		}
	}
	if c.KafkaAdvertiseAddr != "" {
		if err := checkHostPort(c.KafkaAdvertiseAddr); err != nil {
			return fmt.Errorf("--kafka-advertise-addr %q: want host:port: %v", c.KafkaAdvertiseAddr, err)
		}
	}
	if c.KafkaMaxFrameBytes == 0 {
		c.KafkaMaxFrameBytes = defaultKafkaMaxFrameBytes
	}
	if c.KafkaMaxMessageBytes == 0 {
		c.KafkaMaxMessageBytes = defaultKafkaMaxMessageBytes
	}
	if c.KafkaMaxMessageBytes < 1<<10 || c.KafkaMaxMessageBytes > c.KafkaMaxFrameBytes {
		return fmt.Errorf("--kafka-max-message-bytes %d: want between %d and --kafka-max-frame-bytes (%d)", c.KafkaMaxMessageBytes, 1<<10, c.KafkaMaxFrameBytes)
	}
	if c.KafkaMaxFrameBytes < 1<<20 || c.KafkaMaxFrameBytes > 1<<30 {
		return fmt.Errorf("--kafka-max-frame-bytes %d: want between %d and %d", c.KafkaMaxFrameBytes, 1<<20, 1<<30)
	}
	for _, e := range c.EtcdEndpoints {
		if err := checkHostPort(strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://")); err != nil {
			return fmt.Errorf("--etcd-endpoints: %q is not host:port or a URL", e)
		}
	}
	if c.AdvertiseURL == "" || c.advertiseDefault {
		// The bound address replaces it once the listener is bound
		// (Node.takeSettings): an unspecified host or port 0 is no
		// address to advertise.
		scheme := "http://"
		if c.TLSCert != "" {
			scheme = "https://"
		}
		c.AdvertiseURL, c.advertiseDefault = scheme+c.HTTPAddr, true
	} else if u, err := url.Parse(c.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--advertise-url %q: want an absolute http(s) URL", c.AdvertiseURL)
	}
	if c.ObjectStore == "" {
		abs, err := filepath.Abs(filepath.Join(c.DataDir, "objects"))
		if err != nil {
			return fmt.Errorf("--data-dir %q: %v", c.DataDir, err)
		}
		c.ObjectStore = "file://" + abs
	} else if u, err := url.Parse(c.ObjectStore); err != nil || (u.Scheme != "file" && u.Scheme != "s3") {
		return fmt.Errorf("--object-store %q: want file:///path or s3://bucket?endpoint=…", c.ObjectStore)
	} else if u.Scheme == "s3" && u.Host == "" {
		return fmt.Errorf("--object-store %q: missing bucket", c.ObjectStore)
	}
	if c.SealMaxBytes < 4<<10 || c.SealMaxBytes > 1<<30 {
		return fmt.Errorf("--seal-max-bytes %d: want between 4096 and %d", c.SealMaxBytes, 1<<30)
	}
	if c.SealMaxAge < 10*time.Millisecond || c.SealMaxAge > time.Hour {
		return fmt.Errorf("--seal-max-age %s: want between 10ms and 1h", c.SealMaxAge)
	}
	if c.Durability != "local" && c.Durability != "object" && c.Durability != "replicated" {
		return fmt.Errorf("--durability %q: want local, replicated or object", c.Durability)
	}
	if c.Replicas < 1 || c.Replicas > 16 || c.MinInSync < 1 || c.MinInSync > c.Replicas {
		return fmt.Errorf("--replicas %d --min-insync %d: want 1 <= min-insync <= replicas <= 16", c.Replicas, c.MinInSync)
	}
	if c.ReplicaAck != "fsync" && c.ReplicaAck != "write" {
		return fmt.Errorf("--replica-ack %q: want fsync or write", c.ReplicaAck)
	}
	if c.ReplicaSyncInterval < 0 || c.ReplicaSyncInterval > 10*time.Second {
		return fmt.Errorf("--replica-sync-interval %s: want between 0 and 10s", c.ReplicaSyncInterval)
	}
	if c.ReplicaSyncInterval > 0 && c.ReplicaAck != "write" {
		return fmt.Errorf("--replica-sync-interval %s needs --replica-ack write (with fsync a follower answers after its fdatasync)", c.ReplicaSyncInterval)
	}
	if c.ReplicaLagTimeout < 10*time.Millisecond || c.ReplicaLagTimeout > time.Minute {
		return fmt.Errorf("--replica-lag-timeout %s: want between 10ms and 1m", c.ReplicaLagTimeout)
	}
	if c.LeaseTTL < 2*time.Second || c.LeaseTTL > time.Minute {
		return fmt.Errorf("--lease-ttl %s: want between 2s and 1m", c.LeaseTTL)
	}
	for _, iv := range []struct {
		flag string
		v    time.Duration
	}{
		{"--gc-interval", c.GCInterval},
		{"--compaction-interval", c.CompactionInterval},
		{"--key-compaction-interval", c.KeyCompactionInterval},
		{"--retention-interval", c.RetentionInterval},
	} {
		if iv.v < minJobInterval || iv.v > maxJobInterval {
			return fmt.Errorf("%s %s: want between %s and %s", iv.flag, iv.v, minJobInterval, maxJobInterval)
		}
	}
	if c.WALMaxBytes < c.SealMaxBytes {
		return fmt.Errorf("--wal-max-bytes %d: must be at least --seal-max-bytes (%d)", c.WALMaxBytes, c.SealMaxBytes)
	}
	if c.CacheBytes < 0 {
		return fmt.Errorf("--cache-bytes %d: must not be negative", c.CacheBytes)
	}
	if c.ReadAheadBytes < 0 {
		return fmt.Errorf("--read-ahead-bytes %d: must not be negative", c.ReadAheadBytes)
	}
	if c.LongPollTimeout <= 0 || c.LongPollTimeout > maxLongPollTimeoutLimit {
		return fmt.Errorf("--long-poll-timeout %s: want > 0 and <= %s", c.LongPollTimeout, maxLongPollTimeoutLimit)
	}
	if c.SSETimeout <= 0 || c.SSETimeout > maxLongPollTimeoutLimit {
		return fmt.Errorf("--sse-timeout %s: want > 0 and <= %s", c.SSETimeout, maxLongPollTimeoutLimit)
	}
	if c.MaxAppendBytes < 1024 || c.MaxAppendBytes > 256<<20 {
		return fmt.Errorf("--max-append-bytes %d: want between 1024 and %d", c.MaxAppendBytes, 256<<20)
	}
	if c.StartRetry < 0 {
		return fmt.Errorf("--start-retry %s: want >= 0 (0 = the default, 10m)", c.StartRetry)
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("--shutdown-timeout %s: want > 0", c.ShutdownTimeout)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	return c.validateSecurity()
}

// validateSecurity checks the security settings: paired files, limits, and
// that a listener reachable from other hosts has authentication.
func (c *Config) validateSecurity() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key: give both or neither")
	}
	if (c.EtcdCert == "") != (c.EtcdKey == "") {
		return errors.New("--etcd-cert and --etcd-key: give both or neither")
	}
	if (c.EtcdCA != "" || c.EtcdCert != "") && len(c.EtcdEndpoints) == 0 {
		return errors.New("--etcd-ca/--etcd-cert: only for external etcd (--etcd-endpoints); the embedded etcd listens on loopback")
	}
	if c.AuthTokens != "" && c.InsecureNoAuth {
		return errors.New("--insecure-no-auth: contradicts --auth-tokens; give one")
	}
	if c.AuthTokens != "" && c.KafkaOAuthUnsecuredJWT {
		// An unsigned token is written by anyone: it must never stand
		// for a token with scopes.
		return errors.New("--kafka-oauth-unsecured-jwt: contradicts --auth-tokens (an unsigned JWT proves nothing and must not grant scopes); give one")
	}
	if c.KafkaOAuthJWKS != "" && c.AuthTokens == "" {
		return errors.New("--kafka-oauth-jwks: needs --auth-tokens (without authentication a token's scopes mean nothing)")
	}
	if c.AuthTokens == "" && !c.InsecureNoAuth {
		if !isLoopbackAddr(c.HTTPAddr) {
			return fmt.Errorf("--http-addr %s is not loopback and authentication is off: give --auth-tokens FILE (docs/security.md), or --insecure-no-auth to serve anyone who can reach it", c.HTTPAddr)
		}
		if c.KafkaAddr != "off" && !isLoopbackAddr(c.KafkaAddr) {
			return fmt.Errorf("--kafka-addr %s is not loopback and authentication is off: give --auth-tokens FILE (docs/security.md), or --insecure-no-auth to serve anyone who can reach it", c.KafkaAddr)
		}
	}
	if c.MaxHeaderBytes < 4<<10 || c.MaxHeaderBytes > 16<<20 {
		return fmt.Errorf("--max-header-bytes %d: want between 4096 and %d", c.MaxHeaderBytes, 16<<20)
	}
	if c.MaxConnections < 1 {
		return fmt.Errorf("--max-connections %d: want at least 1", c.MaxConnections)
	}
	if c.MaxRecordBytes < 1<<10 || int64(c.MaxRecordBytes) > c.MaxAppendBytes {
		return fmt.Errorf("--max-record-bytes %d: want between 1024 and --max-append-bytes (%d)", c.MaxRecordBytes, c.MaxAppendBytes)
	}
	if c.MaxBatchRecords < 1 || c.MaxBatchRecords > 1_000_000 {
		return fmt.Errorf("--max-batch-records %d: want between 1 and 1000000", c.MaxBatchRecords)
	}
	if c.MaxInflightAppendBytes < c.MaxAppendBytes {
		return fmt.Errorf("--max-inflight-append-bytes %d: must be at least --max-append-bytes (%d)", c.MaxInflightAppendBytes, c.MaxAppendBytes)
	}
	if c.ReadHeaderTimeout <= 0 {
		return fmt.Errorf("--read-header-timeout %s: want > 0", c.ReadHeaderTimeout)
	}
	if c.BodyTimeout < 0 || c.IdleTimeout < 0 {
		return errors.New("--body-timeout/--idle-timeout: must not be negative (0 = no limit)")
	}
	return validatePprofAddr(c.PprofAddr)
}

// checkHostPort accepts host:port with a numeric port (0–65535) and an
// optional host. net.SplitHostPort alone accepts ":http" or ":U", which
// net.Listen may resolve as a service name but which makes no usable
// advertise URL (url.Parse rejects a non-numeric port), so the derived
// http://<http-addr> default would fail later, far from the flag.
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	return nil
}

// isLoopbackAddr reports whether a host:port listens on loopback only:
// a loopback IP or "localhost". An empty host or 0.0.0.0 is every
// interface.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
