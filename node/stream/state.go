package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// State returns the state record kept beside stream name (nil when it has
// none); only its owner answers (a *RedirectError elsewhere), so a reader
// that goes on to PutState reads what the last owner wrote.
//
// A state record is the cheap takeover-safe alternative to appending a
// small, often rewritten value to a stream with object durability: one
// etcd transaction conditioned on this node's ownership of the stream,
// instead of a wait for a whole flush to object storage. The Kafka
// transaction coordinator keeps each transactional id's state in one.
func (s *Service) State(ctx context.Context, name string) ([]byte, error) {
	st, err := s.lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	v, err := s.reg.StreamState(ctx, st.info.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: state of %s: %v", ErrUnavailable, name, err)
	}
	return v, nil
}

// PutState replaces stream name's state record, conditioned on this node
// still owning the stream at the epoch it serves it under: after a
// takeover the write fails (ErrUnavailable) rather than overwrite what the
// new owner may have read.
func (s *Service) PutState(ctx context.Context, name string, value []byte) error {
	st, err := s.lookup(ctx, name)
	if err != nil {
		return err
	}
	st.mu.Lock()
	id, owner, epoch, rev := st.info.ID, st.info.Owner, st.info.Epoch, st.stateRev
	st.mu.Unlock()
	rev, err = s.reg.PutStreamState(ctx, name, id, owner, epoch, rev, value)
	if err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		return fmt.Errorf("%w: state of %s: %v", ErrUnavailable, name, err)
	}
	st.mu.Lock()
	st.stateRev = rev
	st.mu.Unlock()
	return nil
}
