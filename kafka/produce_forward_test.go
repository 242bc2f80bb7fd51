package kafka

import (
	"errors"
	"fmt"
	"testing"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

type denyAll struct{}

func (denyAll) Authenticate(string) (*auth.Principal, error) { return nil, auth.ErrInvalidToken }

// TestForwardable: which refused partitions wait for their stream's move
// and go to the new owner, and which are answered NOT_LEADER at once. The
// forwarding itself runs against real nodes in e2e
// TestKafkaProduceThroughDrain (with and without authentication) and
// TestLocalClusterRollingUpgrade.
func TestForwardable(t *testing.T) {
	redirect := fmt.Errorf("submit: %w", &stream.RedirectError{Name: "/t/0", NodeID: "b"})
	moving := fmt.Errorf("submit: %w", &stream.MovingError{Name: "/t/0"})
	plain := []splitBatch{{h: record.BatchHeader{ProducerID: -1}}}
	txnal := []splitBatch{{h: record.BatchHeader{ProducerID: 7, Attributes: 0x10}}}
	open, withAuth := &Server{}, &Server{cfg: Config{Auth: denyAll{}}}
	withAuthAndSecret := &Server{cfg: Config{Auth: denyAll{}}, internal: internalCredentials("cluster-secret")}
	client, peer := &connState{clientID: "kgo"}, &connState{clientID: peerClientID}
	for _, c := range []struct {
		desc    string
		s       *Server
		cc      *connState
		err     error
		batches []splitBatch
		want    bool
	}{
		{"moved", open, client, redirect, plain, true},
		{"moving", open, client, moving, plain, true},
		{"other unavailability (shutting down, log failed)", open, client, fmt.Errorf("%w: log failed", stream.ErrUnavailable), plain, false},
		{"not found", open, client, stream.ErrNotFound, plain, false},
		{"transactional", open, client, redirect, txnal, false},
		{"authentication on, no cluster secret (no identity to forward as)", withAuth, client, redirect, plain, false},
		{"authentication on, forwarded as the internal identity", withAuthAndSecret, client, redirect, plain, true},
		{"authentication on, already forwarded", withAuthAndSecret, peer, moving, plain, false},
		{"already forwarded", open, peer, redirect, plain, false},
	} {
		if got := c.s.forwardable(c.cc, c.err, c.batches); got != c.want {
			t.Errorf("%s: forwardable = %v, want %v", c.desc, got, c.want)
		}
	}
	if idempotent(plain) || !idempotent(txnal) {
		t.Error("idempotent: only batches with a producer id are sent to the owner a second time")
	}
	if !errors.Is(moving, stream.ErrUnavailable) || stream.KindOf(moving) != stream.KindUnavailable {
		t.Error("a MovingError is not ErrUnavailable: the HTTP frontends would stop answering 503 for it")
	}
}
