package node

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the configuration of `picomq serve`. Every field has a flag, an
// environment twin PICOMQ_<FLAG_IN_UPPER_SNAKE> and a YAML key equal to the
// flag name; precedence is flag > env > file > default. docs/configuration.md
// is the reference.
type Config struct {
	NodeID          string
	DataDir         string
	HTTPAddr        string
	AdvertiseURL    string
	Protocol        string
	KafkaAddr       string
	EtcdEndpoints   []string
	ObjectStore     string
	SealMaxBytes    int64
	SealMaxAge      time.Duration
	Durability      string
	LeaseTTL        time.Duration
	WALMaxBytes     int64
	CacheBytes      int64
	LongPollTimeout time.Duration
	SSETimeout      time.Duration
	MaxAppendBytes  int64
	ShutdownTimeout time.Duration
	LogLevel        string
	LogFormat       string
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
	fs.StringVar(&etcd, "etcd-endpoints", "", "comma-separated external etcd endpoints (empty = embedded etcd in the data dir)")
	fs.StringVar(&cfg.ObjectStore, "object-store", "", "object store URL: file:///path or s3://bucket?endpoint=…&region=… (default file://<data-dir>/objects)")
	fs.Int64Var(&cfg.SealMaxBytes, "seal-max-bytes", 8<<20, "flush pending stream data to object storage once this many bytes are pending")
	fs.DurationVar(&cfg.SealMaxAge, "seal-max-age", time.Second, "flush pending stream data at least this often (bounds the local-durability loss window)")
	fs.StringVar(&cfg.Durability, "durability", "local", "default ack level: local (after WAL fsync) or object (after upload + commit)")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", 5*time.Second, "etcd membership lease; a node silent this long is considered dead")
	fs.Int64Var(&cfg.WALMaxBytes, "wal-max-bytes", 4<<30, "un-uploaded bytes allowed in the WAL while object storage is down; above it appends get 503")
	fs.Int64Var(&cfg.CacheBytes, "cache-bytes", 256<<20, "size of the object read cache in bytes")
	fs.DurationVar(&cfg.LongPollTimeout, "long-poll-timeout", defaultLongPollTimeout, "cap of a long-poll read")
	fs.DurationVar(&cfg.SSETimeout, "sse-timeout", defaultSSETimeout, "cap of one SSE connection")
	fs.Int64Var(&cfg.MaxAppendBytes, "max-append-bytes", defaultMaxAppendBytes, "largest accepted append body in bytes")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long SIGTERM waits for in-flight requests")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.LogFormat, "log-format", "text", "text or json")

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
	var file map[string]any
	if configFile != "" {
		b, err := os.ReadFile(configFile)
		if err != nil {
			return Config{}, fmt.Errorf("config file: %w", err)
		}
		if err := yaml.Unmarshal(b, &file); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", configFile, err)
		}
	}
	for key := range file {
		if key == "config" || fs.Lookup(key) == nil {
			return Config{}, fmt.Errorf("config file %s: unknown key %q", configFile, key)
		}
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

func yamlScalar(v any) string {
	switch x := v.(type) {
	case []any:
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = fmt.Sprint(p)
		}
		return strings.Join(parts, ",")
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
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("--http-addr %q: %v", c.HTTPAddr, err)
	}
	switch c.Protocol {
	case ProtocolPico, ProtocolDurableStreams:
	default:
		return fmt.Errorf("--protocol %q: want pico or durable-streams", c.Protocol)
	}
	if c.KafkaAddr != "off" {
		if _, _, err := net.SplitHostPort(c.KafkaAddr); err != nil {
			return fmt.Errorf("--kafka-addr %q: %v (or off)", c.KafkaAddr, err)
		}
	}
	for _, e := range c.EtcdEndpoints {
		if _, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://")); err != nil {
			return fmt.Errorf("--etcd-endpoints: %q is not host:port or a URL", e)
		}
	}
	if c.AdvertiseURL == "" {
		c.AdvertiseURL = "http://" + c.HTTPAddr
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
	if c.Durability != "local" && c.Durability != "object" {
		return fmt.Errorf("--durability %q: want local or object", c.Durability)
	}
	if c.LeaseTTL < 2*time.Second || c.LeaseTTL > time.Minute {
		return fmt.Errorf("--lease-ttl %s: want between 2s and 1m", c.LeaseTTL)
	}
	if c.WALMaxBytes < c.SealMaxBytes {
		return fmt.Errorf("--wal-max-bytes %d: must be at least --seal-max-bytes (%d)", c.WALMaxBytes, c.SealMaxBytes)
	}
	if c.CacheBytes < 0 {
		return fmt.Errorf("--cache-bytes %d: must not be negative", c.CacheBytes)
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
	return nil
}
