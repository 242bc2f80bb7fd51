package group

import (
	"context"

	"github.com/PicoMQ/picomq/node/stream"
)

// Share groups (package share) keep their durable state, each share-
// partition's start offset (SPSO), in the group's offsets stream, as
// committed offsets: one record per partition, the latest wins, and
// deleting the group deletes them. The SPSO is where a node that comes to
// serve the partition starts delivering again.

// ShareOffset is one share-partition start offset; Delete removes it.
type ShareOffset struct {
	Topic     string
	Partition int32
	Offset    int64
	Delete    bool
}

// ShareOffsets returns the stored start offsets of share group id, by
// topic and partition. It fails with a NOT_COORDINATOR-coded error (Code)
// when this node does not coordinate the group.
func (c *Coordinator) ShareOffsets(ctx context.Context, id string) (map[string]map[int32]int64, error) {
	ctx = stream.WithSystemAccess(ctx)
	g, err := c.group(ctx, id)
	if err != nil {
		return nil, err
	}
	out := map[string]map[int32]int64{}
	for topic, parts := range g.offs.all() {
		for p, cm := range parts {
			if out[topic] == nil {
				out[topic] = map[int32]int64{}
			}
			out[topic][p] = cm.offset
		}
	}
	return out, nil
}

// CommitShareOffsets stores start offsets of share group id as one append
// (all or nothing), durable when it returns.
func (c *Coordinator) CommitShareOffsets(ctx context.Context, id string, offs []ShareOffset) error {
	ctx = stream.WithSystemAccess(ctx)
	g, err := c.group(ctx, id)
	if err != nil {
		return err
	}
	now := c.clock.Now().UnixMilli()
	changes := make([]change, 0, len(offs))
	for _, o := range offs {
		changes = append(changes, change{p: tp{o.Topic, o.Partition}, c: committed{offset: o.Offset, epoch: -1, at: now}, del: o.Delete})
	}
	return g.commit(ctx, changes)
}

// Code is the Kafka error code of an error of this package (NOT_COORDINATOR
// when the group is coordinated elsewhere, COORDINATOR_NOT_AVAILABLE when
// transient).
func Code(err error) int16 { return code(err) }
