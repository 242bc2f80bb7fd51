package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/kafka/share"
	"github.com/PicoMQ/picomq/node/stream"
)

// defaultShareMaxRecords is what a ShareFetch without MaxRecords (v0) gets.
const defaultShareMaxRecords = 500

// handleShareFetch applies the piggy-backed acknowledgements, then acquires
// records of the session's partitions for the member and returns them
// with their acquired ranges. It long-polls like Fetch: with nothing to
// acquire it waits until a partition grows, records are released, a lock
// runs out, or MaxWaitMillis passes. ShareFetch goes to the partition's
// node, which keeps the share-partition (package share).
func handleShareFetch(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.ShareFetchRequest)
	resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
	gid, member := deref(req.GroupID), deref(req.MemberID)
	if gid == "" || member == "" {
		msg := "group id and member id are required"
		resp.ErrorCode, resp.ErrorMessage = kerr.InvalidRequest.Code, &msg
		return resp, nil
	}
	lim := s.share.Limits(gid)
	resp.AcquisitionLockTimeoutMillis = int32(lim.Lock.Milliseconds())

	var add, forget []share.TP
	hasAcks := false
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			add = append(add, share.TP{TopicID: rt.TopicID, Partition: rp.Partition})
			hasAcks = hasAcks || len(rp.AcknowledgementBatches) > 0
		}
	}
	for _, ft := range req.ForgottenTopicsData {
		for _, p := range ft.Partitions {
			forget = append(forget, share.TP{TopicID: ft.TopicID, Partition: p})
		}
	}
	parts, forgotten, final, kerrCode := s.share.FetchSession(gid, member, req.ShareSessionEpoch, add, forget, hasAcks)
	if kerrCode != nil {
		resp.ErrorCode = kerrCode.Code
		return resp, nil
	}

	out := newShareFetchOut(resp)
	acked := false
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if len(rp.AcknowledgementBatches) == 0 {
				continue
			}
			batches := make([]share.AckBatch, 0, len(rp.AcknowledgementBatches))
			for _, b := range rp.AcknowledgementBatches {
				batches = append(batches, share.AckBatch{First: b.FirstOffset, Last: b.LastOffset, Types: b.AcknowledgeTypes})
			}
			op := out.partition(rt.TopicID, rp.Partition)
			op.AcknowledgeErrorCode, op.AcknowledgeErrorMessage = s.shareAck(ctx, cc, gid, member, rt.TopicID, rp.Partition, batches)
			acked = true
		}
	}
	s.share.ReleaseParts(gid, member, forgotten)
	if final {
		s.share.CloseSession(gid, member)
		return resp, nil
	}

	maxRecs := int(req.MaxRecords)
	if maxRecs <= 0 {
		maxRecs = defaultShareMaxRecords
	}
	budget := int(req.MaxBytes)
	if budget <= 0 {
		budget = defaultFetchMaxBytes
	}
	wait := min(time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond, s.cfg.MaxWait)
	deadline := time.Now().Add(wait)
	for {
		got, wake, expiry := s.shareFetchOnce(ctx, cc, gid, member, parts, maxRecs, budget, lim, out)
		if got > 0 || acked || out.errs || !time.Now().Before(deadline) {
			return resp, nil
		}
		until := deadline
		if !expiry.IsZero() {
			// A lock running out makes records available: look again
			// then (the share clock and the wall clock agree in
			// production).
			if at := time.Now().Add(max(time.Until(expiry), 10*time.Millisecond)); at.Before(until) {
				until = at
			}
		}
		if !waitAny(ctx, wake, until) && ctx.Err() != nil {
			return resp, nil
		}
	}
}

// shareFetchOut builds a ShareFetch response partition by partition.
type shareFetchOut struct {
	resp   *kmsg.ShareFetchResponse
	topics map[[16]byte]int
	parts  map[share.TP]*kmsg.ShareFetchResponseTopicPartition
	errs   bool
}

func newShareFetchOut(resp *kmsg.ShareFetchResponse) *shareFetchOut {
	return &shareFetchOut{resp: resp, topics: map[[16]byte]int{}, parts: map[share.TP]*kmsg.ShareFetchResponseTopicPartition{}}
}

// partition returns the response entry of a partition, adding it.
func (o *shareFetchOut) partition(tid [16]byte, p int32) *kmsg.ShareFetchResponseTopicPartition {
	k := share.TP{TopicID: tid, Partition: p}
	if op := o.parts[k]; op != nil {
		return op
	}
	ti, ok := o.topics[tid]
	if !ok {
		ti = len(o.resp.Topics)
		o.topics[tid] = ti
		t := kmsg.NewShareFetchResponseTopic()
		t.TopicID = tid
		o.resp.Topics = append(o.resp.Topics, t)
	}
	op := kmsg.NewShareFetchResponseTopicPartition()
	op.Partition = p
	op.CurrentLeader.LeaderID, op.CurrentLeader.LeaderEpoch = -1, -1
	t := &o.resp.Topics[ti]
	t.Partitions = append(t.Partitions, op)
	// Pointers into t.Partitions move when it grows: index again.
	for i := range t.Partitions {
		o.parts[share.TP{TopicID: tid, Partition: t.Partitions[i].Partition}] = &t.Partitions[i]
	}
	return o.parts[k]
}

// shareFetchOnce acquires records of each partition of the session, up to
// maxRecs in all. It returns how many it acquired, the channels that
// signal more (log growth, releases) and the earliest lock expiry.
func (s *Server) shareFetchOnce(ctx context.Context, cc *connState, gid, member string, parts []share.TP, maxRecs, budget int, lim share.Limits, out *shareFetchOut) (int, []<-chan struct{}, time.Time) {
	got, used := 0, 0
	var wake []<-chan struct{}
	var expiry time.Time
	readCommitted := s.share.Configs(gid)[share.ConfigIsolation] == "read_committed"
	for _, tp := range parts {
		if got >= maxRecs || used >= budget {
			break
		}
		fail := func(err error) {
			op := out.partition(tp.TopicID, tp.Partition)
			op.ErrorCode, op.ErrorMessage = errCode(err), errMessage(err)
			out.errs = true
		}
		topic, err := s.shareTopicName(ctx, tp.TopicID)
		if err != nil {
			fail(err)
			continue
		}
		name, err := s.partitionName(ctx, topic, tp.Partition, false)
		if err == nil {
			err = s.allow(cc, auth.Read, name)
		}
		if err != nil {
			s.forgetOnMissing(topic, err)
			fail(err)
			continue
		}
		sp := s.share.Partition(share.PartKey{Group: gid, TopicID: tp.TopicID, Partition: tp.Partition})
		if !sp.Loaded() {
			if err := s.loadShare(ctx, gid, topic, tp.Partition, name, sp); err != nil {
				fail(err)
				continue
			}
			s.shareFlush(gid, topic, tp.Partition, sp)
		}
		now := s.share.Now()
		from, ok := sp.NextOffset(now, lim)
		if e := sp.NextExpiry(); !e.IsZero() && (expiry.IsZero() || e.Before(expiry)) {
			expiry = e
		}
		if !ok {
			wake = append(wake, sp.Wake())
			continue
		}
		br, err := s.svc.ReadBatches(ctx, name, from, max(budget-used, 1))
		if errors.Is(err, stream.ErrOffsetTrimmed) {
			// Retention removed records the group had not finished:
			// they are gone, start at the log's start.
			if head, herr := s.svc.Head(ctx, name); herr == nil {
				sp.Init(head.StartOffset, false)
				s.shareFlush(gid, topic, tp.Partition, sp)
			}
			wake = append(wake, sp.Wake())
			continue
		}
		if err != nil {
			s.forgetOnMissing(topic, err)
			fail(err)
			continue
		}
		end := br.HighWatermark
		if readCommitted {
			end = br.LastStable
		}
		ranges := sp.Acquire(member, now, spans(br.Batches, br.Aborted, readCommitted), end, maxRecs-got, lim)
		s.shareFlush(gid, topic, tp.Partition, sp) // skipped records may have moved the start offset
		if len(ranges) == 0 {
			wake = append(wake, br.Changed, sp.Wake())
			continue
		}
		op := out.partition(tp.TopicID, tp.Partition)
		op.Records = cutBatches(br.Batches, ranges[0].First, ranges[len(ranges)-1].Last)
		for _, r := range ranges {
			op.AcquiredRecords = append(op.AcquiredRecords, kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{
				FirstOffset: r.First, LastOffset: r.Last, DeliveryCount: r.Count})
			got += int(r.Last - r.First + 1)
		}
		used += len(op.Records)
	}
	s.share.Stats().Acquired.Add(int64(got))
	return got, wake, expiry
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
