//go:build tools

// Package bench pins the benchmark peers that `make bench` builds from the
// Go module proxy, in this module of their own so the product's go.mod
// stays free of them: the NATS server (JetStream, the HTTP-append peer).
package bench

import _ "github.com/nats-io/nats-server/v2"
