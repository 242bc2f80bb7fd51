package node

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func parseWith(t *testing.T, yaml string, args ...string) (Config, error) {
	t.Helper()
	if yaml != "" {
		f := filepath.Join(t.TempDir(), "picomq.yaml")
		if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", f)
	}
	return ParseServeFlags(append(args, "--data-dir", t.TempDir()), func(string) string { return "" }, io.Discard)
}

// TestConfigSecurityKeys: the security settings are read from flags and
// from YAML under both the flag name and its snake_case spelling.
func TestConfigSecurityKeys(t *testing.T) {
	for _, style := range []string{"-", "_"} {
		k := func(s string) string { return strings.ReplaceAll(s, "-", style) }
		y := k("auth-tokens") + ": /etc/picomq/tokens.yaml\n" +
			k("tls-cert") + ": /c.pem\n" + k("tls-key") + ": /k.pem\n" +
			"h2c: false\n" +
			k("etcd-endpoints") + ": [https://10.0.0.1:2379]\n" +
			k("etcd-ca") + ": /ca.pem\n" + k("etcd-cert") + ": /ec.pem\n" + k("etcd-key") + ": /ek.pem\n" +
			k("s3-ca") + ": /s3ca.pem\n" + k("http-addr") + ": 0.0.0.0:4437\n" +
			k("max-connections") + ": 100\n"
		cfg, err := parseWith(t, y)
		if err != nil {
			t.Fatalf("style %q: %v", style, err)
		}
		if cfg.AuthTokens != "/etc/picomq/tokens.yaml" || cfg.TLSCert != "/c.pem" || cfg.TLSKey != "/k.pem" ||
			cfg.EtcdCA != "/ca.pem" || cfg.EtcdCert != "/ec.pem" || cfg.EtcdKey != "/ek.pem" || cfg.S3CA != "/s3ca.pem" ||
			cfg.H2C.On(true) || cfg.MaxConnections != 100 {
			t.Fatalf("style %q: config not read: %+v", style, cfg)
		}
		if cfg.AdvertiseURL != "https://0.0.0.0:4437" {
			t.Fatalf("default advertise URL with TLS = %q, want https", cfg.AdvertiseURL)
		}
	}
	if _, err := parseWith(t, "auth-tokens: a\nauth_tokens: b\nhttp-addr: 127.0.0.1:1\n"); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("both spellings of one key: err = %v", err)
	}
}

// TestConfigRefusesOpenListenerWithoutAuth: a listener other hosts can
// reach needs --auth-tokens or an explicit --insecure-no-auth.
func TestConfigRefusesOpenListenerWithoutAuth(t *testing.T) {
	cases := []struct {
		args []string
		ok   bool
	}{
		{[]string{"--http-addr", "127.0.0.1:4437"}, true},
		{[]string{"--http-addr", "localhost:4437"}, true},
		{[]string{"--http-addr", "[::1]:4437"}, true},
		{[]string{"--http-addr", "0.0.0.0:4437"}, false},
		{[]string{"--http-addr", ":4437"}, false},
		{[]string{"--http-addr", "127.0.0.1:4437", "--kafka-addr", "0.0.0.0:9092"}, false},
		{[]string{"--http-addr", "0.0.0.0:4437", "--insecure-no-auth"}, true},
		{[]string{"--http-addr", "0.0.0.0:4437", "--auth-tokens", "/t.yaml"}, true},
		{[]string{"--auth-tokens", "/t.yaml", "--insecure-no-auth"}, false},
		{[]string{"--tls-cert", "/c.pem"}, false},
		{[]string{"--etcd-ca", "/ca.pem"}, false},
	}
	for _, c := range cases {
		_, err := parseWith(t, "", c.args...)
		if (err == nil) != c.ok {
			t.Errorf("%v: err = %v, want ok=%v", c.args, err, c.ok)
		}
	}
}

// TestConfigOAuthUnsecuredJWT: --kafka-oauth-unsecured-jwt is read from
// flags and YAML, and refused together with --auth-tokens (an unsigned
// token must never stand for one with scopes).
func TestConfigOAuthUnsecuredJWT(t *testing.T) {
	if cfg, err := parseWith(t, "", "--kafka-oauth-unsecured-jwt"); err != nil || !cfg.KafkaOAuthUnsecuredJWT {
		t.Fatalf("flag: %v %v", cfg.KafkaOAuthUnsecuredJWT, err)
	}
	if cfg, err := parseWith(t, "kafka_oauth_unsecured_jwt: true\n"); err != nil || !cfg.KafkaOAuthUnsecuredJWT {
		t.Fatalf("YAML: %v %v", cfg.KafkaOAuthUnsecuredJWT, err)
	}
	if cfg, err := parseWith(t, ""); err != nil || cfg.KafkaOAuthUnsecuredJWT {
		t.Fatalf("default: %v %v", cfg.KafkaOAuthUnsecuredJWT, err)
	}
	_, err := parseWith(t, "", "--kafka-oauth-unsecured-jwt", "--auth-tokens", "/t.yaml")
	if err == nil || !strings.Contains(err.Error(), "--auth-tokens") {
		t.Fatalf("with --auth-tokens: err = %v, want a refusal", err)
	}
}

// TestConfigOAuthJWKS: --kafka-oauth-jwks is read from flags and YAML and
// needs --auth-tokens (scopes mean nothing without authentication).
func TestConfigOAuthJWKS(t *testing.T) {
	if cfg, err := parseWith(t, "", "--kafka-oauth-jwks", "/k.json", "--auth-tokens", "/t.yaml"); err != nil || cfg.KafkaOAuthJWKS != "/k.json" {
		t.Fatalf("flag: %q %v", cfg.KafkaOAuthJWKS, err)
	}
	if cfg, err := parseWith(t, "kafka_oauth_jwks: /k.json\nauth_tokens: /t.yaml\n"); err != nil || cfg.KafkaOAuthJWKS != "/k.json" {
		t.Fatalf("YAML: %q %v", cfg.KafkaOAuthJWKS, err)
	}
	if _, err := parseWith(t, "", "--kafka-oauth-jwks", "/k.json"); err == nil || !strings.Contains(err.Error(), "--auth-tokens") {
		t.Fatalf("without --auth-tokens: err = %v, want a refusal", err)
	}
}

func TestToggleH2C(t *testing.T) {
	for _, c := range []struct {
		args     []string
		loopback bool
		want     bool
	}{
		{nil, true, true}, {nil, false, false},
		{[]string{"--h2c"}, false, true}, {[]string{"--h2c=false"}, true, false}, {[]string{"--h2c=auto"}, true, true},
	} {
		cfg, err := parseWith(t, "", c.args...)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.H2C.On(c.loopback); got != c.want {
			t.Errorf("%v loopback=%v: h2c %v, want %v", c.args, c.loopback, got, c.want)
		}
	}
}

// TestConfigDocExample: the example file in docs/configuration.md is
// accepted as printed, with authentication and TLS in force.
func TestConfigDocExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "Example file")
	if !ok {
		t.Fatal("no example in docs/configuration.md")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	example, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("example block not closed")
	}
	f := filepath.Join(t.TempDir(), "picomq.yaml")
	if err := os.WriteFile(f, []byte(example), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseServeFlags([]string{"--config", f}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("docs/configuration.md example: %v", err)
	}
	if cfg.AuthTokens == "" || cfg.TLSCert == "" || cfg.EtcdCert == "" || !strings.HasPrefix(cfg.AdvertiseURL, "https://") {
		t.Fatalf("example lacks auth or TLS: %+v", cfg)
	}
	if _, err := parseWith(t, strings.ReplaceAll(example, "auth-tokens:", "# auth-tokens:")); err == nil {
		t.Fatal("the example without auth-tokens must be refused (it binds 0.0.0.0)")
	}
}

// TestConfigJobIntervals: the reclamation passes' periods default to the
// documented values, are read from flags and YAML, and are refused below
// the floor (a pass per second at most) and above a day.
func TestConfigJobIntervals(t *testing.T) {
	cfg, err := parseWith(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GCInterval != time.Minute || cfg.CompactionInterval != 10*time.Second || cfg.RetentionInterval != 10*time.Second {
		t.Fatalf("defaults: gc %s compaction %s retention %s", cfg.GCInterval, cfg.CompactionInterval, cfg.RetentionInterval)
	}
	cfg, err = parseWith(t, "compaction_interval: 3s\n", "--gc-interval", "2s", "--retention-interval", "1s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GCInterval != 2*time.Second || cfg.CompactionInterval != 3*time.Second || cfg.RetentionInterval != time.Second {
		t.Fatalf("set: gc %s compaction %s retention %s", cfg.GCInterval, cfg.CompactionInterval, cfg.RetentionInterval)
	}
	for _, bad := range [][]string{
		{"--gc-interval", "500ms"}, {"--compaction-interval", "0s"}, {"--retention-interval", "25h"}, {"--gc-interval", "-1s"},
	} {
		if _, err := parseWith(t, "", bad...); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: err = %v, want a refusal naming %s", bad, err, bad[0])
		}
	}
}

// TestConfigYAMLNumbers: numbers in the config file reach integer flags
// as numbers, whichever way YAML spells them (1e6 is a float to YAML, and
// was handed to the flag as "1e+06").
func TestConfigYAMLNumbers(t *testing.T) {
	cfg, err := parseWith(t, "seal-max-bytes: 1e6\ncache_bytes: 2.5e8\nwal-max-bytes: 0x100000\nkafka-max-message-bytes: 1048576\n")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SealMaxBytes != 1_000_000 || cfg.CacheBytes != 250_000_000 || cfg.WALMaxBytes != 1<<20 || cfg.KafkaMaxMessageBytes != 1<<20 {
		t.Errorf("seal %d, cache %d, wal %d, kafka %d", cfg.SealMaxBytes, cfg.CacheBytes, cfg.WALMaxBytes, cfg.KafkaMaxMessageBytes)
	}
	if _, err := parseWith(t, "seal-max-bytes: 1.5\n"); err == nil || !strings.Contains(err.Error(), `"1.5"`) {
		t.Errorf("a fraction for an integer flag: %v, want an error naming 1.5", err)
	}
}

// TestConfigReplicaAck: --replica-ack defaults to fsync (the contract
// before the flag existed), is read from flags and YAML, and anything but
// fsync or write is refused.
func TestConfigReplicaAck(t *testing.T) {
	cfg, err := parseWith(t, "")
	if err != nil || cfg.ReplicaAck != "fsync" {
		t.Fatalf("default: %q, %v; want fsync", cfg.ReplicaAck, err)
	}
	if cfg, err = parseWith(t, "replica_ack: write\n"); err != nil || cfg.ReplicaAck != "write" {
		t.Fatalf("YAML replica_ack: write: %q, %v", cfg.ReplicaAck, err)
	}
	if cfg, err = parseWith(t, "replica-ack: write\n", "--replica-ack", "fsync"); err != nil || cfg.ReplicaAck != "fsync" {
		t.Fatalf("flag over YAML: %q, %v; want fsync", cfg.ReplicaAck, err)
	}
	if _, err := parseWith(t, "", "--replica-ack", "memory"); err == nil || !strings.Contains(err.Error(), "--replica-ack") {
		t.Fatalf("--replica-ack memory: err = %v, want a refusal naming the flag", err)
	}
}

// TestConfigReplicaSyncInterval: --replica-sync-interval defaults to 0
// (the follower's fdatasync right after its write), is read from flags
// and YAML, and is refused without --replica-ack write or out of range.
func TestConfigReplicaSyncInterval(t *testing.T) {
	cfg, err := parseWith(t, "")
	if err != nil || cfg.ReplicaSyncInterval != 0 {
		t.Fatalf("default: %s, %v; want 0", cfg.ReplicaSyncInterval, err)
	}
	if cfg, err = parseWith(t, "replica_ack: write\nreplica_sync_interval: 20ms\n"); err != nil || cfg.ReplicaSyncInterval != 20*time.Millisecond {
		t.Fatalf("YAML: %s, %v; want 20ms", cfg.ReplicaSyncInterval, err)
	}
	if cfg, err = parseWith(t, "", "--replica-ack", "write", "--replica-sync-interval", "5ms"); err != nil || cfg.ReplicaSyncInterval != 5*time.Millisecond {
		t.Fatalf("flags: %s, %v; want 5ms", cfg.ReplicaSyncInterval, err)
	}
	for _, args := range [][]string{
		{"--replica-sync-interval", "10ms"}, // fsync mode: nothing to put off
		{"--replica-ack", "write", "--replica-sync-interval", "-1ms"},
		{"--replica-ack", "write", "--replica-sync-interval", "11s"},
	} {
		if _, err := parseWith(t, "", args...); err == nil || !strings.Contains(err.Error(), "--replica-sync-interval") {
			t.Errorf("%v: err = %v, want a refusal naming the flag", args, err)
		}
	}
}
