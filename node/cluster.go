package node

import (
	"context"
	"net/http"
	"time"

	"github.com/PicoMQ/picomq/api/httpx"
	"github.com/PicoMQ/picomq/kafka"
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
	// StartedAt is when the node wrote its membership record (joined
	// under its current lease): the console shows its age.
	StartedAt time.Time `json:"startedAt"`
}

// clusterInfo lists the live members (GET /_sys/cluster).
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
			Zone: m.Zone, StartedAt: m.StartedAt})
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}

// kafkaGroups describes the Kafka consumer groups this node coordinates,
// with members and lag per partition (GET /_sys/groups, read by the web
// console). A node without a Kafka listener has none.
func (n *Node) kafkaGroups(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Groups []kafka.GroupView `json:"groups"`
		Self   string            `json:"self"`
	}{Groups: []kafka.GroupView{}, Self: n.cfg.NodeID}
	if n.kafka != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		gs, err := n.kafka.Groups(ctx)
		if err != nil {
			httpx.WriteError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error())
			return
		}
		out.Groups = gs
	}
	httpx.WriteJSON(w, http.StatusOK, out)
}
