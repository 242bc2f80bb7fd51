package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/kafka/txn"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// groupMarkerTopic prefixes the pseudo-topic that names a group's offsets
// stream in a WriteTxnMarkers request between nodes (a group's offsets
// are not a topic partition here, unlike Kafka's __consumer_offsets).
const groupMarkerTopic = "__picomq_group_offsets:"

// WriteMarkers implements txn.Markers: the marker goes to every partition
// of the transaction and to every group's offsets stream, through the
// streams' append path (AppendRequest.Control) where this node serves the
// stream, and as WriteTxnMarkers to the node that serves it otherwise. A
// partition or group deleted meanwhile needs no marker.
func (s *Server) WriteMarkers(ctx context.Context, pid int64, epoch int16, m record.Marker, parts []txn.Partition, groups []string) error {
	ctx = stream.WithSystemAccess(ctx)
	type target struct {
		topic string
		p     int32
	}
	targets := make([]target, 0, len(parts)+len(groups))
	for _, p := range parts {
		targets = append(targets, target{p.Topic, p.Partition})
	}
	for _, g := range groups {
		targets = append(targets, target{groupMarkerTopic + g, 0})
	}
	// Submit every local marker before waiting for any, so they share WAL
	// commits (as a produce to many partitions does).
	var errs []error
	subs := make([]stream.Submitted, 0, len(targets))
	names := make([]string, 0, len(targets))
	batch := record.AppendControlBatch(nil, 0, time.Now().UnixMilli(), pid, epoch, 0, m)
	for _, tg := range targets {
		name, err := s.markerStream(ctx, tg.topic, tg.p)
		if errors.Is(err, stream.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("marker for %s/%d: %w", tg.topic, tg.p, err))
			continue
		}
		sub, err := s.svc.SubmitBatch(ctx, name, markerRequest(batch, pid, epoch))
		if err != nil {
			errs = append(errs, s.markerDone(ctx, name, pid, epoch, m, err, true))
			continue
		}
		subs, names = append(subs, sub), append(names, name)
	}
	for i := range subs {
		_, err := subs[i].Wait(ctx)
		errs = append(errs, s.markerDone(ctx, names[i], pid, epoch, m, err, false))
	}
	return errors.Join(errs...)
}

func markerRequest(batch []byte, pid int64, epoch int16) stream.AppendRequest {
	return stream.AppendRequest{Control: true, Batch: batch,
		Producer: &stream.Producer{ID: stream.KafkaProducerID(pid), Epoch: uint64(epoch)}}
}

// markerDone judges a marker append's outcome: a stream deleted
// meanwhile, or one where a newer epoch of the producer already wrote,
// needs nothing more; one served by another node gets the marker by
// WriteTxnMarkers when forward is set.
func (s *Server) markerDone(ctx context.Context, name string, pid int64, epoch int16, m record.Marker, err error, forward bool) error {
	var re *stream.RedirectError
	switch {
	case err == nil, errors.Is(err, stream.ErrNotFound), errors.Is(err, stream.ErrProducerFenced):
		return nil
	case errors.As(err, &re) && forward:
		return s.forwardMarker(ctx, name, pid, epoch, m)
	}
	return fmt.Errorf("marker to %s: %w", name, err)
}

// markerStream is the stream a marker for topic/partition goes to.
func (s *Server) markerStream(ctx context.Context, topic string, p int32) (string, error) {
	if g, ok := strings.CutPrefix(topic, groupMarkerTopic); ok {
		return group.StreamName(g)
	}
	return s.partitionName(ctx, topic, p, false)
}

// appendMarker appends one marker to stream name and waits for it;
// forward sends it to the serving node when that is another one.
func (s *Server) appendMarker(ctx context.Context, name string, pid int64, epoch int16, m record.Marker, forward bool) error {
	batch := record.AppendControlBatch(nil, 0, time.Now().UnixMilli(), pid, epoch, 0, m)
	_, err := s.svc.AppendBatch(stream.WithSystemAccess(ctx), name, markerRequest(batch, pid, epoch))
	return s.markerDone(ctx, name, pid, epoch, m, err, forward)
}

// forwardMarker sends one marker to the node serving stream name.
func (s *Server) forwardMarker(ctx context.Context, name string, pid int64, epoch int16, m record.Marker) error {
	b, self, err := s.Locate(ctx, name)
	if err != nil {
		return err
	}
	if self {
		return fmt.Errorf("%w: %s is moving to this node", stream.ErrUnavailable, name)
	}
	topic, p, err := s.markerTarget(ctx, name)
	if err != nil {
		return err
	}
	peer, err := s.peers.broker(b)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	mk := kmsg.NewWriteTxnMarkersRequestMarker()
	mk.ProducerID, mk.ProducerEpoch, mk.Committed = pid, epoch, m == record.MarkerCommit
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = topic, []int32{p}
	mk.Topics = []kmsg.WriteTxnMarkersRequestMarkerTopic{mt}
	req.Markers = []kmsg.WriteTxnMarkersRequestMarker{mk}
	resp, err := req.RequestWith(ctx, peer)
	if err != nil {
		return fmt.Errorf("%w: WriteTxnMarkers to node %d: %v", stream.ErrUnavailable, b.NodeID, err)
	}
	for _, rm := range resp.Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return fmt.Errorf("WriteTxnMarkers to node %d for %s: %w", b.NodeID, name, err)
				}
			}
		}
	}
	return nil
}

// markerTarget names stream name as WriteTxnMarkers does: a topic
// partition, or a group's pseudo-topic.
func (s *Server) markerTarget(ctx context.Context, name string) (string, int32, error) {
	if g, ok := group.GroupOfStream(name); ok {
		return groupMarkerTopic + g, 0, nil
	}
	base, p := name, int32(0)
	if i := strings.LastIndexByte(name, '/'); i > 0 {
		if n, err := strconv.ParseInt(name[i+1:], 10, 32); err == nil {
			if in, err := s.svc.Describe(ctx, name[:i]); err == nil && in.KafkaTopic != "" {
				base, p = name[:i], int32(n)
			}
		}
	}
	in, err := s.svc.Describe(ctx, base)
	if err != nil {
		return "", 0, err
	}
	if in.KafkaTopic == "" {
		return "", 0, fmt.Errorf("%w: %s is not a topic partition", stream.ErrNotFound, name)
	}
	return in.KafkaTopic, p, nil
}

// peerClients are connections to the other nodes' Kafka listeners, for
// WriteTxnMarkers and forwarded produces. With a cluster secret they log in
// as the internal SCRAM user (scram.go), so they reach listeners that
// require SASL.
type peerClients struct {
	secret string
	tls    *tls.Config // nil: plaintext listeners
	mu     sync.Mutex
	m      map[string]*kgo.Client
}

// broker is the connection to node b that node-to-node requests are sent
// on (req.RequestWith): its client's seed broker, logged in as the node.
func (pc *peerClients) broker(b group.Broker) (*kgo.Broker, error) {
	cl, err := pc.client(net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	if err != nil {
		return nil, err
	}
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return nil, fmt.Errorf("%w: no connection to node %d", stream.ErrUnavailable, b.NodeID)
	}
	return seeds[0], nil
}

func (pc *peerClients) client(addr string) (*kgo.Client, error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if cl := pc.m[addr]; cl != nil {
		return cl, nil
	}
	opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.ClientID(peerClientID), kgo.RequestRetries(2), kgo.RequestTimeoutOverhead(10 * time.Second)}
	if pc.secret != "" {
		opts = append(opts, kgo.SASL(scram.Auth{User: internalUser, Pass: pc.secret}.AsSha512Mechanism()))
	}
	if pc.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(pc.tls)) // cloned per dial, ServerName = the peer's host
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: client for %s: %v", stream.ErrUnavailable, addr, err)
	}
	if pc.m == nil {
		pc.m = map[string]*kgo.Client{}
	}
	pc.m[addr] = cl
	return cl, nil
}

func (pc *peerClients) close() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, cl := range pc.m {
		cl.Close()
	}
	pc.m = nil
}

// staleAfter: a transaction open on a partition this long is one no
// coordinator will end (the longest transaction timeout is 15 minutes).
const staleAfter = 16 * time.Minute

// abortStale ends, once a minute, the transactions open on this node's
// partitions for longer than any transaction may last, with an abort
// marker of the producer's current epoch there: the partition list a
// coordinator kept was lost with its node, or the producer wrote without
// AddPartitionsToTxn. Without it such a partition's last stable offset
// would never move.
func (s *Server) abortStale(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, st := range s.svc.StaleTransactions(staleAfter) {
			s.log.Warn("kafka txn: aborting a transaction open past the longest timeout", "stream", st.Stream, "producer", st.ProducerID, "epoch", st.Epoch)
			if err := s.appendMarker(ctx, st.Stream, st.ProducerID, st.Epoch, record.MarkerAbort, false); err != nil {
				s.log.Warn("kafka txn: stale abort failed; retried", "stream", st.Stream, "err", err)
			}
		}
	}
}
