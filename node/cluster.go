package node

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/kafka"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// drain hands every stream this node owns to other live nodes
// (POST /_sys/drain). The node keeps running and keeps serving history reads.
func (n *Node) drain(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	moved, err := n.svc.Drain(ctx)
	if err != nil {
		httpx.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{
			"moved": moved,
			"error": wire.ErrorDetail{Code: wire.CodeUnavailable, Message: err.Error()},
		})
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"moved": moved})
}

type clusterNode struct {
	NodeID       string `json:"nodeId"`
	AdvertiseURL string `json:"advertiseUrl"`
	KafkaAddr    string `json:"kafkaAddr,omitempty"`
	Zone         string `json:"zone,omitempty"`
	// TxnVersion is the Kafka transaction.version the node's build
	// serves (absent: a build before it): during a rolling upgrade it
	// shows which nodes still hold level 2 back.
	TxnVersion int `json:"txnVersion,omitempty"`
	// StartedAt is when the node wrote its membership record (joined
	// under its current lease): the console shows its age.
	StartedAt time.Time `json:"startedAt"`
	// With ?figures=true: the node's own figures (GET /_sys/node), or
	// the last ones this node got from it with their age, and why there
	// are no fresh ones.
	Figures      *nodeFigures `json:"figures,omitempty"`
	FiguresAgeMs *int64       `json:"figuresAgeMs,omitempty"`
	FiguresError string       `json:"figuresError,omitempty"`
}

// nodeFigures is what a node says about its own storage (GET /_sys/node):
// the numbers of its /metrics gauges of the same names.
type nodeFigures struct {
	NodeID string `json:"nodeId"`
	// UnflushedBytes: picomq_unflushed_bytes.
	UnflushedBytes int64 `json:"unflushedBytes"`
	// FlushLagMs: picomq_flush_lag_seconds, the age of the oldest append
	// not yet in object storage (0 when nothing waits).
	FlushLagMs int64 `json:"flushLagMs"`
	// WALDiskBytes: picomq_wal_disk_bytes.
	WALDiskBytes int64 `json:"walDiskBytes"`
	// ObjectBytes: picomq_object_bytes.
	ObjectBytes int64 `json:"objectBytes"`
	// StreamsOwned: picomq_streams.
	StreamsOwned int `json:"streamsOwned"`
}

// ownFigures measures this node's figures now.
func (n *Node) ownFigures() nodeFigures {
	f := n.svc.Figures()
	out := nodeFigures{NodeID: n.cfg.NodeID, UnflushedBytes: f.UnflushedBytes, ObjectBytes: f.ObjectBytes,
		StreamsOwned: f.Streams, WALDiskBytes: n.wal.Stats().DiskBytes}
	if !f.OldestUnflushed.IsZero() {
		out.FlushLagMs = time.Since(f.OldestUnflushed).Milliseconds()
	}
	return out
}

// figuresCache keeps the last figures each peer sent, so a node that does
// not answer in time still has a row, marked with the figures' age.
type figuresCache struct {
	mu   sync.Mutex
	last map[string]cachedFigures
}

type cachedFigures struct {
	f  nodeFigures
	at time.Time
}

func (c *figuresCache) put(f nodeFigures, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]cachedFigures{}
	}
	c.last[f.NodeID] = cachedFigures{f: f, at: at}
}

// get returns the last figures of node.
func (c *figuresCache) get(node string) (cachedFigures, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.last[node]
	return f, ok
}

// retain forgets the nodes not in live: they left the cluster, and the
// cache holds no more entries than there are members.
func (c *figuresCache) retain(live []metadata.Member) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.last {
		if !slices.ContainsFunc(live, func(m metadata.Member) bool { return m.NodeID == id }) {
			delete(c.last, id)
		}
	}
}

// clusterInfo lists the live members (GET /_sys/cluster); with
// ?figures=true it asks each of them for its figures, every node within
// peerTimeout (fanOut).
func (n *Node) clusterInfo(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	ms, err := n.reg.Members(ctx)
	if err != nil {
		httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "etcd unreachable: "+err.Error())
		return
	}
	out := struct {
		Nodes []clusterNode `json:"nodes"`
		Self  string        `json:"self"`
	}{Self: n.cfg.NodeID, Nodes: []clusterNode{}}
	for _, m := range ms {
		out.Nodes = append(out.Nodes, clusterNode{NodeID: m.NodeID, AdvertiseURL: m.AdvertiseURL, KafkaAddr: m.KafkaAddr,
			Zone: m.Zone, TxnVersion: m.TxnVersion, StartedAt: m.StartedAt})
	}
	if r.URL.Query().Get("figures") == "true" {
		answers := fanOut(r.Context(), n, r, ms, "/_sys/node", func(context.Context) (nodeFigures, error) { return n.ownFigures(), nil })
		now := time.Now()
		n.figures.retain(ms)
		for i, a := range answers {
			cn := &out.Nodes[i]
			if a.err == nil && a.val.NodeID == a.node.NodeID {
				n.figures.put(a.val, now)
				f, age := a.val, int64(0)
				cn.Figures, cn.FiguresAgeMs = &f, &age
				continue
			}
			if a.err == nil {
				a.err = fmt.Errorf("node %s answered as %q", a.node.NodeID, a.val.NodeID)
			}
			cn.FiguresError = a.err.Error()
			if c, ok := n.figures.get(a.node.NodeID); ok {
				f, age := c.f, now.Sub(c.at).Milliseconds()
				cn.Figures, cn.FiguresAgeMs = &f, &age
			}
		}
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// maxHeads bounds the streams one GET /_sys/node?head=… asks about.
const maxHeads = 1000

// nodeInfo answers this node's figures (GET /_sys/node), for the Cluster
// page of any node's console; with head=<stream> (repeated) also the next
// offsets of those of the streams this node serves, which a cluster-wide
// group view needs for the lag of partitions its coordinator cannot read.
func (n *Node) nodeInfo(w http.ResponseWriter, r *http.Request) {
	names := r.URL.Query()["head"]
	if len(names) > maxHeads {
		httpx.WriteError(w, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("at most %d head parameters", maxHeads))
		return
	}
	out := struct {
		nodeFigures
		Heads map[string]int64 `json:"heads,omitempty"`
	}{nodeFigures: n.ownFigures()}
	if len(names) > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), peerTimeout)
		defer cancel()
		out.Heads = map[string]int64{}
		for _, name := range names {
			if info, err := n.svc.Head(ctx, name); err == nil {
				out.Heads[name] = info.NextOffset
			}
		}
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// clusterGroup is a consumer group with the node coordinating it.
type clusterGroup struct {
	kafka.GroupView
	Coordinator string `json:"coordinator"`
}

// groupsNode is one node's part of GET /_sys/groups: how many groups it
// coordinates, or why it did not say.
type groupsNode struct {
	NodeID string `json:"nodeId"`
	Groups int    `json:"groups"`
	Error  string `json:"error,omitempty"`
}

type groupsAnswer struct {
	Groups []clusterGroup `json:"groups"`
	Self   string         `json:"self"`
	// Nodes: which nodes were asked (absent with ?local=true).
	Nodes []groupsNode `json:"nodes,omitempty"`
}

// localGroups describes the groups this node coordinates. A node without
// a Kafka listener has none.
func (n *Node) localGroups(ctx context.Context) (groupsAnswer, error) {
	out := groupsAnswer{Groups: []clusterGroup{}, Self: n.cfg.NodeID}
	if n.kafka == nil {
		return out, nil
	}
	gs, err := n.kafka.Groups(ctx)
	if err != nil {
		return out, err
	}
	for _, g := range gs {
		out.Groups = append(out.Groups, clusterGroup{GroupView: g, Coordinator: n.cfg.NodeID})
	}
	return out, nil
}

// kafkaGroups describes the Kafka consumer groups of the cluster, with
// members and lag per partition (GET /_sys/groups, read by the web
// console): every live node is asked for the groups it coordinates
// (?local=true), each within peerTimeout; the lag of a partition the
// coordinator cannot read is asked of the node serving its stream.
func (n *Node) kafkaGroups(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("local") == "true" {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		out, err := n.localGroups(ctx)
		if err != nil {
			httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error())
			return
		}
		httpx.WriteJSON(w, http.StatusOK, out)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	ms, err := n.reg.Members(ctx)
	cancel()
	if err != nil {
		httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "etcd unreachable: "+err.Error())
		return
	}
	out := groupsAnswer{Groups: []clusterGroup{}, Self: n.cfg.NodeID, Nodes: []groupsNode{}}
	seen := map[string]int{} // group -> index in out.Groups
	for _, a := range fanOut(r.Context(), n, r, ms, "/_sys/groups?local=true", n.localGroups) {
		gn := groupsNode{NodeID: a.node.NodeID, Groups: len(a.val.Groups)}
		if a.err != nil {
			gn.Error = a.err.Error()
		}
		out.Nodes = append(out.Nodes, gn)
		for _, g := range a.val.Groups {
			// While a coordinator moves, two nodes may both describe
			// a group for a moment: the one with members is current.
			if i, dup := seen[g.Group]; dup {
				if len(out.Groups[i].Members) == 0 && len(g.Members) > 0 {
					out.Groups[i] = g
				}
				continue
			}
			seen[g.Group] = len(out.Groups)
			out.Groups = append(out.Groups, g)
		}
	}
	n.fillGroupEnds(r, ms, out.Groups)
	slices.SortFunc(out.Groups, func(a, b clusterGroup) int { return strings.Compare(a.Group, b.Group) })
	httpx.WriteJSON(w, http.StatusOK, out)
}

// fillGroupEnds completes the end offset and lag of the partitions whose
// coordinator could not read them, asking every live node for the heads
// of those streams (only the one serving a stream answers for it).
func (n *Node) fillGroupEnds(r *http.Request, ms []metadata.Member, gs []clusterGroup) {
	var names []string
	for _, g := range gs {
		for _, p := range g.Partitions {
			if p.End < 0 && p.Stream != "" && !slices.Contains(names, p.Stream) && len(names) < maxHeads {
				names = append(names, p.Stream)
			}
		}
	}
	if len(names) == 0 {
		return
	}
	q := url.Values{"head": names}
	type heads struct {
		Heads map[string]int64 `json:"heads"`
	}
	ends := map[string]int64{}
	local := func(ctx context.Context) (heads, error) {
		h := heads{Heads: map[string]int64{}}
		for _, name := range names {
			if info, err := n.svc.Head(ctx, name); err == nil {
				h.Heads[name] = info.NextOffset
			}
		}
		return h, nil
	}
	for _, a := range fanOut(r.Context(), n, r, ms, "/_sys/node?"+q.Encode(), local) {
		for name, end := range a.val.Heads {
			ends[name] = max(ends[name], end)
		}
	}
	for _, g := range gs {
		for i := range g.Partitions {
			p := &g.Partitions[i]
			if end, ok := ends[p.Stream]; ok && p.End < 0 {
				p.End, p.Lag, p.Stream = end, max(0, end-p.Committed), ""
			}
		}
	}
}
