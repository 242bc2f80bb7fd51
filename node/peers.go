package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/meta/metadata"
)

// The console's cluster-wide views (docs/console.md) ask the other live
// nodes over their HTTP listeners, with the caller's own token: a node
// answers a peer's request exactly as it would the operator's, so a view
// built from several nodes shows nothing the token could not read on
// each of them. Each peer gets its own deadline; a slow or dead peer is a
// row with an error, never a hung page.
const (
	// peerTimeout bounds one peer's answer to a fan-out request.
	peerTimeout = 2 * time.Second
	// peerAnswerLimit caps a peer's JSON answer.
	peerAnswerLimit = 8 << 20
)

// newPeerClient is the HTTP client for requests to other nodes:
// bounded dials and headers; a request's context bounds the rest.
// headerTimeout must cover a long-poll read answered through the node
// (follow).
func newPeerClient(headerTimeout time.Duration) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: peerTimeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   peerTimeout,
			ResponseHeaderTimeout: headerTimeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			DisableCompression:    true,
		},
		// follow handles redirects itself; a fan-out answer is never one.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// peerAnswer is one node's part of a fan-out: its decoded answer or why
// there is none.
type peerAnswer[T any] struct {
	node    metadata.Member
	val     T
	err     error
	elapsed time.Duration
}

// fanOut asks every member for path (self answers through local, without
// HTTP), all at once, each within peerTimeout, forwarding the caller's
// Authorization header. The answers come in the members' order.
func fanOut[T any](ctx context.Context, n *Node, r *http.Request, ms []metadata.Member, path string, local func(context.Context) (T, error)) []peerAnswer[T] {
	out := make([]peerAnswer[T], len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, peerTimeout)
			defer cancel()
			start := time.Now()
			a := peerAnswer[T]{node: m}
			if m.NodeID == n.cfg.NodeID {
				a.val, a.err = local(pctx)
			} else {
				a.err = n.getPeerJSON(pctx, r, m, path, &a.val)
			}
			a.elapsed = time.Since(start)
			out[i] = a
		}()
	}
	wg.Wait()
	return out
}

// getPeerJSON GETs path from member m into v.
func (n *Node) getPeerJSON(ctx context.Context, r *http.Request, m metadata.Member, path string, v any) error {
	if m.AdvertiseURL == "" {
		return fmt.Errorf("node %s has no advertise URL", m.NodeID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(m.AdvertiseURL, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("node %s: %w", m.NodeID, err)
	}
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := n.peers.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("node %s: no answer within %s", m.NodeID, peerTimeout)
		}
		return fmt.Errorf("node %s: %w", m.NodeID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, peerAnswerLimit))
	if err != nil {
		return fmt.Errorf("node %s: reading the answer: %w", m.NodeID, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error.Code != "" {
			return fmt.Errorf("node %s: %d %s: %s", m.NodeID, resp.StatusCode, e.Error.Code, e.Error.Message)
		}
		return fmt.Errorf("node %s: %s", m.NodeID, resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("node %s: bad answer: %w", m.NodeID, err)
	}
	return nil
}
