//go:build soak

// The long soak is built only with the tag soak: `make soak` runs it for
// DURATION (10 minutes by default); every `make test` runs the same soak
// for two minutes (TestSoakShort, soak_test.go).

package e2e

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestSoak runs concurrent idempotent producers and tailing readers over
// Pico HTTP against a 3-node cluster (real etcd and MinIO) while every kind
// of soakFaults is injected at random — kill -9 and restart of a node,
// SIGSTOP of a node for longer than the lease TTL then SIGCONT (a zombie
// owner), etcd stopped and restarted, object storage down, slow or
// answering 500s, a node's disk full — beside the deletion workload
// (creates, forks, trims, retention, deletes, with GC every 2 s), then
// reads every stream from every node and checks the whole history
// (package e2e/history).
//
// Environment: PICOMQ_SOAK_DURATION (default 90s), PICOMQ_SOAK_FAULT_EVERY
// (mean time between faults, default 10s), PICOMQ_SOAK_DURABILITY (comma
// list, default "local,replicated,object"), PICOMQ_SOAK_NODE_FLAGS (serve
// flags added to every node, space-separated, e.g. "--replica-ack write
// --replica-sync-interval 10ms").
func TestSoak(t *testing.T) {
	res := runSoak(t, soakOpts{
		nodeFlags:    strings.Fields(os.Getenv("PICOMQ_SOAK_NODE_FLAGS")),
		duration:     envDuration(t, "PICOMQ_SOAK_DURATION", 90*time.Second),
		faultEvery:   envDuration(t, "PICOMQ_SOAK_FAULT_EVERY", 10*time.Second),
		durabilities: strings.Split(envOr("PICOMQ_SOAK_DURABILITY", "local,replicated,object"), ","),
		faults:       soakFaults,
		deletion:     true,
	})
	failOnViolations(t, res)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, v, err)
	}
	return d
}
