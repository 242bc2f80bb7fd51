package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// findCoordinator answers with the broker serving each group's offsets
// stream. Transaction coordinators are not offered: PicoMQ has no
// transactions.
func (c *Coordinator) findCoordinator(ctx context.Context, r *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := r.CoordinatorKeys
	if r.Version < 4 {
		keys = []string{r.CoordinatorKey}
	}
	for _, key := range keys {
		rc := kmsg.NewFindCoordinatorResponseCoordinator()
		rc.Key = key
		rc.NodeID = -1
		var msg string
		switch {
		case r.CoordinatorType == 1 && c.cfg.LocateTxn != nil && key != "":
			b, err := c.cfg.LocateTxn(ctx, key)
			if err != nil {
				rc.ErrorCode, msg = code(err), err.Error()
				if rc.ErrorCode == kerr.NotCoordinator.Code {
					rc.ErrorCode = kerr.CoordinatorNotAvailable.Code
				}
			} else {
				rc.NodeID, rc.Host, rc.Port = b.NodeID, b.Host, b.Port
			}
		case r.CoordinatorType != 0:
			rc.ErrorCode, msg = kerr.InvalidRequest.Code, "coordinator type must be 0 (group) or 1 (transaction)"
		case key == "":
			rc.ErrorCode, msg = kerr.InvalidRequest.Code, "empty group id"
		default:
			b, err := c.locate(ctx, key)
			if err != nil {
				rc.ErrorCode, msg = code(err), err.Error()
				if rc.ErrorCode == kerr.NotCoordinator.Code {
					rc.ErrorCode = kerr.CoordinatorNotAvailable.Code
				}
			} else {
				rc.NodeID, rc.Host, rc.Port = b.NodeID, b.Host, b.Port
			}
		}
		if msg != "" {
			rc.ErrorMessage = &msg
		}
		resp.Coordinators = append(resp.Coordinators, rc)
	}
	if r.Version < 4 {
		rc := resp.Coordinators[0]
		resp.Coordinators = nil
		resp.ErrorCode, resp.ErrorMessage = rc.ErrorCode, rc.ErrorMessage
		resp.NodeID, resp.Host, resp.Port = rc.NodeID, rc.Host, rc.Port
	}
	return resp
}

func (c *Coordinator) locate(ctx context.Context, id string) (Broker, error) {
	name, err := streamName(id)
	if err != nil {
		return Broker{}, err
	}
	b, _, err := c.loc.Locate(ctx, name)
	return b, err
}
