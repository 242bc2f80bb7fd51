package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/node/stream"
)

// peerClientID is the client id of the requests one node sends another
// (forwarded produces, transaction markers). A node never forwards a
// produce that arrived with it, so a partition that moved twice costs
// the client one NOT_LEADER instead of a forwarding loop.
const peerClientID = "picomq-peer"

// forwardedPartition is one partition of a produce request whose stream
// is moving away from this node, or has just moved, when the request
// arrives: instead of a NOT_LEADER, finish waits out the move and sends
// the partition on to the new owner (forwardProduce).
type forwardedPartition struct {
	topic, stream string
	rp            kmsg.ProduceRequestTopicPartition
	batches       []splitBatch // rp's batches, as submitPartition split them
	op            *kmsg.ProduceResponseTopicPartition
	cause         error // why it was not written here: the answer if all else fails
	// hint is the new owner's endpoint when op names it as the
	// partition's current leader (KIP-951) instead of a forward.
	hint *group.Broker
}

// moveWait bounds how long a produce waits for its partition's move to
// finish (a drain flushes and hands over every stream of the node, about
// a second) before it is answered NOT_LEADER; the request's own timeout
// bounds it too.
const moveWait = 10 * time.Second

// forwardable reports whether a partition refused with err is kept for
// forwarding rather than answered NOT_LEADER.
//
// Why: a Kafka client learns a partition's new leader only from a
// metadata refresh, and clients rate-limit those (franz-go: one per 5 s,
// MetadataMinAge), so a NOT_LEADER right after a refresh stalled a
// franz-go producer for up to 5 s, and a rolling restart moves partitions
// several times in a row: the drill's producer got 5 to 33 records
// through a 3-node upgrade instead of hundreds. A move is transparent
// instead: the produce waits while its stream is moving (ErrUnavailable)
// and is forwarded once it has moved (a redirect).
//
// With authentication the forward goes as the nodes' internal SCRAM
// identity (peerClients, scram.go), not as the client: this node has
// already authenticated the client and authorised the write with its
// scopes (submitPartition checks them before submitting), so the owner
// needs only to know the request comes from a node. Without a cluster
// secret there is no such identity and the owner would refuse the
// connection: then nothing is forwarded.
//
// Not forwarded: transactional batches (the transaction's partitions are
// tracked with their leader) and requests that were themselves forwarded.
// Nor, once the move is done, a produce of v10+ (KIP-951): settle answers
// it NOT_LEADER_OR_FOLLOWER naming the new owner (leaderHint), and the
// client moves the partition there at once, without the rate-limited
// metadata refresh. A forward hides the move from the client, which keeps
// producing to the node that gave the partition away; when that node then
// stops (a rolling restart drains it and stops it a moment later), the
// client learns of the move only from a metadata refresh, up to its 5 s
// back-off after the last one: the rolling drill measured 2.9-4.6 s
// pauses. Clients below v10 cannot read the hint and are still forwarded.
func (s *Server) forwardable(cc *connState, err error, batches []splitBatch) bool {
	var re *stream.RedirectError
	if s.cfg.Auth != nil && s.internal == nil {
		return false
	}
	if cc.clientID == peerClientID || !(errors.As(err, &re) || isMoving(err)) {
		return false
	}
	for _, b := range batches {
		if b.h.Transactional() {
			return false
		}
	}
	return true
}

// isMoving: the stream is being handed to another node (appends pause).
func isMoving(err error) bool {
	var me *stream.MovingError
	return errors.As(err, &me)
}

// forwardAll settles every deferred partition of pc, concurrently, and
// writes each answer into its response partition.
func (pc *produceCall) forwardAll(version int16) {
	var wg sync.WaitGroup
	for i := range pc.forwards {
		f := &pc.forwards[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			pc.srv.settle(pc.ctx, version, f)
		}()
	}
	wg.Wait()
	// The response's node endpoints (KIP-951) name every hinted leader,
	// once: a client uses a hint only with its leader's endpoint.
	for i := range pc.forwards {
		h := pc.forwards[i].hint
		if h == nil || slices.ContainsFunc(pc.resp.Brokers, func(b kmsg.ProduceResponseBroker) bool { return b.NodeID == h.NodeID }) {
			continue
		}
		b := kmsg.NewProduceResponseBroker()
		b.NodeID, b.Host, b.Port = h.NodeID, h.Host, h.Port
		pc.resp.Brokers = append(pc.resp.Brokers, b)
	}
}

// leaderHintVersion is the first Produce version whose response carries
// the current leader of a NOT_LEADER_OR_FOLLOWER partition and the
// leaders' endpoints (KIP-951).
const leaderHintVersion = 10

// leaderHint is the node that owns stream name now and its ownership
// epoch (the partition's leader epoch in Metadata), for a KIP-951 hint.
// Only a live registry owner other than this node is named: its epoch was
// raised when it took the stream over, so a client that produced here
// knows an older one and moves. A node that serves the stream only as the
// placement's pick for a dead owner is not named (the epoch is not raised
// until it adopts the stream): the client refreshes metadata instead.
func (s *Server) leaderHint(ctx context.Context, name string) (group.Broker, int32, bool) {
	b, err := s.brokers(ctx)
	if err != nil {
		return group.Broker{}, 0, false
	}
	in, err := s.svc.Describe(ctx, name)
	if err != nil || in.Owner == "" || in.Owner == b.self || s.svc.ServingNode(in, b.members) != in.Owner {
		return group.Broker{}, 0, false
	}
	br, ok := b.byNode[in.Owner]
	return br, int32(in.Epoch), ok
}

// settle writes f here if the move it waited for did not happen after
// all, or forwards it to the stream's new owner, or, for a produce of
// v10+, answers it NOT_LEADER_OR_FOLLOWER naming the new owner as the
// current leader (forwardable says why). While the stream is still
// moving here, or the new owner answers with a retriable error (it is
// still adopting the stream, or its registry view is a moment behind), it
// tries again every 50 ms, for at most moveWait; then the partition is
// answered NOT_LEADER, as without forwarding.
func (s *Server) settle(ctx context.Context, version int16, f *forwardedPartition) {
	// Not cancelled by the listener's Close: a draining node closes its
	// listener right after the hand-over, and the request in progress is
	// still answered (Close waits for it, within the shutdown timeout).
	deadline := time.Now().Add(moveWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d // the produce request's own timeout
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	var re *stream.RedirectError
	for err := f.cause; ; {
		switch {
		case errors.As(err, &re):
			if version >= leaderHintVersion {
				if br, epoch, ok := s.leaderHint(ctx, f.stream); ok {
					failPartition(f.op, version, err)
					f.op.CurrentLeader.LeaderID, f.op.CurrentLeader.LeaderEpoch = br.NodeID, epoch
					f.hint = &br
					s.forwards.hinted.Add(1)
					return
				}
			}
			ferr := s.forwardProduce(ctx, f)
			if ferr == nil {
				s.forwards.ok.Add(1)
				return
			}
			if !kerr.IsRetriable(ferr) || ctx.Err() != nil {
				s.forwards.failed.Add(1)
				s.log.Info("kafka: produce not forwarded; answering NOT_LEADER", "topic", f.topic, "partition", f.rp.Partition, "err", ferr)
				failPartition(f.op, version, err)
				return
			}
		case !isMoving(err):
			failPartition(f.op, version, err) // not a move: answered as without forwarding
			return
		}
		select {
		case <-ctx.Done():
			s.forwards.failed.Add(1)
			s.log.Info("kafka: produce not forwarded within the move's time; answering NOT_LEADER", "topic", f.topic, "partition", f.rp.Partition, "err", err)
			failPartition(f.op, version, err)
			return
		case <-time.After(50 * time.Millisecond):
		}
		err = s.writeHere(ctx, version, f)
		if err == nil {
			return
		}
	}
}

// writeHere submits f's batches to this node again and awaits them,
// answering f.op; an error of the first batch is returned unanswered (the
// caller decides), a later one is answered.
func (s *Server) writeHere(ctx context.Context, version int16, f *forwardedPartition) error {
	for i, sb := range f.batches {
		ar := stream.AppendRequest{Batch: sb.b}
		if h := sb.h; h.ProducerID >= 0 {
			ar.Producer = &stream.Producer{ID: stream.KafkaProducerID(h.ProducerID), Epoch: uint64(h.ProducerEpoch), Seq: uint64(h.BaseSequence), PerRecord: true}
		}
		sub, err := s.svc.SubmitBatch(ctx, f.stream, ar)
		if err == nil {
			var res stream.AppendResult
			res, err = sub.Wait(ctx)
			if err == nil && res.Duplicate && res.FirstOffset < 0 {
				err = kerr.DuplicateSequenceNumber
			}
			if err == nil && i == 0 {
				f.op.BaseOffset = res.FirstOffset
			}
		}
		if err != nil && i == 0 {
			return err
		}
		if err != nil {
			failPartition(f.op, version, err)
			return nil
		}
	}
	return nil
}

// forwardProduce produces f's batches on the node now serving its stream,
// as one acks=all produce request (acks 1 and all are answered alike), and
// copies the owner's answer into f.op. Any failure, including an error
// answer, is returned (an error answer as its kerr error): in the end the
// client gets NOT_LEADER and retries after its metadata refresh; an
// idempotent batch the owner did write is then recognised as a duplicate.
func (s *Server) forwardProduce(ctx context.Context, f *forwardedPartition) error {
	b, self, err := s.Locate(ctx, f.stream)
	if err != nil {
		return err
	}
	if self {
		return fmt.Errorf("%w: %s is moving to this node", stream.ErrUnavailable, f.stream)
	}
	peer, err := s.peers.broker(b)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 30_000
	if d, ok := ctx.Deadline(); ok {
		req.TimeoutMillis = int32(max(time.Until(d).Milliseconds(), 1))
	}
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.Partitions = f.topic, []kmsg.ProduceRequestTopicPartition{f.rp}
	req.Topics = []kmsg.ProduceRequestTopic{rt}
	resp, err := req.RequestWith(ctx, peer)
	if err != nil && ctx.Err() == nil && idempotent(f.batches) {
		// Once more on a new connection: the pooled one may be to the
		// node's previous process (a restart closes it; the first request
		// on it reads EOF). Whether the first try was written is unknown,
		// so only batches the owner deduplicates are sent again; others
		// are left to the client's own retry, as without forwarding.
		resp, err = req.RequestWith(ctx, peer)
	}
	if err != nil {
		return fmt.Errorf("%w: produce forwarded to node %d: %v", stream.ErrUnavailable, b.NodeID, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if t.Topic != f.topic || p.Partition != f.rp.Partition {
				continue
			}
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				// Wrapping the kerr error keeps kerr.IsRetriable working.
				return fmt.Errorf("node %d answered the forwarded produce: %w (%s)", b.NodeID, err, strOr(p.ErrorMessage))
			}
			f.op.BaseOffset, f.op.LogAppendTime, f.op.LogStartOffset = p.BaseOffset, p.LogAppendTime, p.LogStartOffset
			return nil
		}
	}
	return fmt.Errorf("node %d did not answer for %s[%d]", b.NodeID, f.topic, f.rp.Partition)
}

// ForwardedProduces counts the produce partitions this node forwarded to
// their new owner (ok), those it answered NOT_LEADER after a failed
// forward (failed) and those it answered NOT_LEADER naming the new owner
// (hinted, KIP-951), for the metrics.
func (s *Server) ForwardedProduces() (ok, failed, hinted uint64) {
	return s.forwards.ok.Load(), s.forwards.failed.Load(), s.forwards.hinted.Load()
}

// idempotent: every batch carries a producer id, so the owner recognises a
// repeat by its sequence.
func idempotent(batches []splitBatch) bool {
	for _, b := range batches {
		if b.h.ProducerID < 0 {
			return false
		}
	}
	return true
}

func strOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
