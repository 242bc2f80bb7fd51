// Package group is the Kafka consumer-group coordinator (classic protocol).
//
// PLACEHOLDER: the real coordinator is being built in parallel (issue 13,
// consumer groups). This file fixes the contract the frontend in package
// kafka relies on: New, Coordinator.Handle for the group API keys, Close,
// Versions (what the frontend advertises for those keys) and the Locator
// the frontend implements. Until it lands, Versions is empty, so no group
// key is advertised and clients never send one.
package group

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kmsg"
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
// whether that is this node.
type Locator interface {
	Locate(ctx context.Context, stream string) (b Broker, self bool, err error)
}

// Coordinator answers the group API keys.
type Coordinator struct {
	loc Locator
	log *slog.Logger
}

// New builds a coordinator over the stream service svc.
func New(svc any, loc Locator, log *slog.Logger) *Coordinator {
	return &Coordinator{loc: loc, log: log}
}

// Versions returns the API keys the coordinator handles with their
// supported version ranges [min, max].
func Versions() map[int16][2]int16 { return nil }

// Handle answers one group request.
func (c *Coordinator) Handle(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	return nil, fmt.Errorf("group: %s is not implemented", kmsg.NameForKey(req.Key()))
}

// Close stops the coordinator.
func (c *Coordinator) Close() {}
