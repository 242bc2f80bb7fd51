package group

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/node/stream"
)

// deleteGroups handles DeleteGroups: a group without members loses its
// offsets stream and so every committed offset.
func (c *Coordinator) deleteGroups(ctx context.Context, r *kmsg.DeleteGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, id := range r.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group = id
		dg.ErrorCode = c.deleteGroup(ctx, id)
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

func (c *Coordinator) deleteGroup(ctx context.Context, id string) int16 {
	if name, err := streamName(id); err == nil && !adminStream(ctx, name) {
		return kerr.GroupAuthorizationFailed.Code
	}
	g, err := c.group(ctx, id)
	if err != nil {
		return code(err)
	}
	g.mu.Lock()
	busy := len(g.members) > 0 || len(g.pending) > 0 || g.cons != nil && len(g.cons.members) > 0
	g.mu.Unlock()
	if busy {
		return kerr.NonEmptyGroup.Code
	}
	if !g.offs.exists() {
		c.drop(g)
		return kerr.GroupIDNotFound.Code
	}
	g.offs.mu.Lock()
	err = c.svc.Delete(ctx, g.stream)
	g.offs.reset(0, 0)
	g.offs.mu.Unlock()
	c.drop(g)
	switch {
	case errors.Is(err, stream.ErrNotFound):
		return kerr.GroupIDNotFound.Code
	case err != nil:
		c.log.Warn("kafka delete group failed", "group", id, "err", err)
		return code(err)
	}
	return 0
}
