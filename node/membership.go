package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/sdk/retry"
)

// membership keeps the node's etcd session alive and replaces it when it is
// lost. While there is no live session the stream service is fenced: the node
// may have been declared dead, so it must not acknowledge or commit anything.
type membership struct {
	reg       *meta.Registry
	cli       *clientv3.Client
	member    metadata.Member
	ttl       time.Duration
	leaseLog  string // file remembering our lease, so a restart can revoke it
	log       *slog.Logger
	sess      atomic.Pointer[meta.Session]
	onLost    func(error)
	onJoined  func() // new lease: streams may have been taken over
	onResumed func() // same lease: nothing changed hands

	// For picomq_membership_lease_lost and _losses_total: whether the
	// node is fenced for lack of a live session right now, and how often
	// that happened.
	lost   atomic.Bool
	losses atomic.Int64
}

// join registers the node, first revoking the lease a previous run of this
// same data dir left behind (after kill -9 it would otherwise block the node
// id for a whole TTL). A lease held by another process is never touched: it
// is only revoked if the file in our own data dir names it.
func (m *membership) join(ctx context.Context) error {
	if b, err := os.ReadFile(m.leaseLog); err == nil {
		if id, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 16, 64); perr == nil {
			if _, err := m.cli.Revoke(ctx, clientv3.LeaseID(id)); err == nil {
				m.log.Info("revoked the lease of this node's previous run", "lease", fmt.Sprintf("%x", id))
			}
		}
	}
	deadline := time.Now().Add(2*m.ttl + 5*time.Second)
	for {
		sess, err := m.reg.Join(ctx, m.member, m.ttl)
		if err == nil {
			m.sess.Store(sess)
			if werr := writeFileSync(m.leaseLog, []byte(fmt.Sprintf("%x\n", int64(sess.LeaseID())))); werr != nil {
				m.log.Warn("cannot record the node lease", "err", werr)
			}
			return nil
		}
		if !errors.Is(err, metadata.ErrConflict) || time.Now().After(deadline) {
			return err
		}
		m.log.Warn("node id still registered by a live lease; waiting for it to expire", "node_id", m.member.NodeID)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// run watches the session until ctx is done. When the keep-alive stream
// breaks it first tries to resume the same lease (after an etcd outage the
// lease usually survived, and then nothing changed hands); only if the lease
// is really gone does it join afresh and re-check stream ownership. It is
// one of the node's jobs (see jobs) and never fails.
func (m *membership) run(ctx context.Context) error {
	for {
		sess := m.sess.Load()
		select {
		case <-ctx.Done():
			return nil
		case <-sess.Done():
		}
		if ctx.Err() != nil {
			return nil
		}
		m.lost.Store(true)
		m.losses.Add(1)
		m.onLost(metadata.ErrLeaseLost)
		// Rejoin attempts back off by the repository's one rule (sdk/retry).
		backoff := retry.Policy{Initial: 200 * time.Millisecond, Max: 2 * time.Second}.Backoff()
		for ctx.Err() == nil {
			wait := backoff.Next()
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resumed, err := m.reg.Resume(rctx, sess)
			cancel()
			if err == nil {
				m.sess.Store(resumed)
				m.log.Info("etcd reachable again; resumed the same lease")
				m.lost.Store(false)
				m.onResumed()
				break
			}
			if errors.Is(err, metadata.ErrLeaseLost) {
				if err := m.join(ctx); err == nil {
					m.log.Info("rejoined the cluster with a new lease")
					m.onJoined()
					m.lost.Store(false)
					break
				} else {
					m.log.Warn("rejoin failed; retrying", "err", err, "retry_in", wait)
				}
			} else {
				m.log.Warn("etcd unreachable; node stays fenced", "err", err, "retry_in", wait)
			}
			if retry.Sleep(ctx, wait) != nil {
				return nil
			}
		}
	}
}

// leave revokes the lease so the node disappears from membership at once.
func (m *membership) leave(ctx context.Context) {
	if s := m.sess.Load(); s != nil {
		if err := s.Close(ctx); err != nil {
			m.log.Warn("leaving the cluster", "err", err)
		}
	}
	_ = os.Remove(m.leaseLog)
}

func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
