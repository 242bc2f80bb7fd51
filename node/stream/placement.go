package stream

// What a frontend that presents the cluster itself (Kafka Metadata) needs
// from routing: the live nodes, which node serves a stream, and streams by
// Kafka topic alias. HTTP frontends never need these: they follow
// redirects.

import (
	"context"
	"errors"
	"fmt"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// Member is a live node of the cluster.
type Member struct {
	NodeID       string
	AdvertiseURL string
	// KafkaAddr is the node's Kafka advertise address ("" = no Kafka
	// listener).
	KafkaAddr string
	// TxnVersion is the Kafka transaction.version the node's build
	// serves (metadata.Member.TxnVersion).
	TxnVersion int
}

// Members returns the live nodes sorted by node id (at most a few hundred
// milliseconds old). A service without a cluster is a single node: itself.
func (s *Service) Members(ctx context.Context) ([]Member, error) {
	if s.cluster == nil {
		return []Member{{NodeID: s.cfg.NodeID}}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	ms, err := s.liveMembers(rctx)
	if err != nil {
		return nil, fmt.Errorf("%w: registry unreachable: %v", ErrUnavailable, err)
	}
	out := make([]Member, len(ms))
	for i, m := range ms {
		out[i] = Member{NodeID: m.NodeID, AdvertiseURL: m.AdvertiseURL, KafkaAddr: m.KafkaAddr, TxnVersion: m.TxnVersion}
	}
	return out, nil
}

// NodeID is this node's id.
func (s *Service) NodeID() string { return s.cfg.NodeID }

// ServingNode is the node that serves (or will serve, on the next request)
// the stream's appends: its owner while that node is live, else the node
// routing hands it to (the same answer on every node). members is what
// Members returned.
func (s *Service) ServingNode(info Info, members []Member) string {
	for _, m := range members {
		if m.NodeID == info.Owner {
			return m.NodeID
		}
	}
	if info.Owner == "" && s.cluster == nil {
		return s.cfg.NodeID
	}
	ms := make([]metadata.Member, len(members))
	for i, m := range members {
		ms[i] = metadata.Member{NodeID: m.NodeID}
	}
	return placement(info.Name, ms).NodeID
}

// LookupTopic returns the registry description of the stream whose Kafka
// topic alias is topic (no offsets: use Head on the owner for those), or
// ErrNotFound.
func (s *Service) LookupTopic(ctx context.Context, topic string) (Info, error) {
	l, ok := s.reg.(interface {
		LookupTopic(ctx context.Context, topic string) (metadata.Stream, error)
	})
	if !ok {
		return Info{}, fmt.Errorf("%w: the registry has no topic index", ErrUnavailable)
	}
	rctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	m, err := l.LookupTopic(rctx, topic)
	switch {
	case errors.Is(err, metadata.ErrNotFound):
		return Info{}, fmt.Errorf("%w: kafka topic %q", ErrNotFound, topic)
	case err != nil:
		return Info{}, fmt.Errorf("%w: registry: %v", ErrUnavailable, err)
	case listHidden(m):
		return Info{}, fmt.Errorf("%w: kafka topic %q", ErrNotFound, topic)
	}
	return infoFromMeta(m), nil
}
