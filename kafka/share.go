package kafka

// Share groups (KIP-932) in the frontend: package share holds membership,
// sessions and share-partitions; here are the log reads, topic lookups,
// authorization and the durable start offsets (docs/kafka.md, "Share
// groups").

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/kafka/share"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// shareCoordinator answers whether this node coordinates share group id:
// the node serving the group's offsets stream, as for classic groups.
// Non-zero is the error code to answer with.
func (s *Server) shareCoordinator(ctx context.Context, cc *connState, id string) int16 {
	name, err := group.StreamName(id)
	if err != nil || id == "" {
		return kerr.InvalidGroupID.Code
	}
	_, self, err := s.Locate(stream.WithSystemAccess(ctx), name)
	switch {
	case err != nil:
		return kerr.CoordinatorNotAvailable.Code
	case !self:
		return kerr.NotCoordinator.Code
	}
	return 0
}

// shareGroupAdmin says whether cc may administer group id (its offsets,
// configs, deletion): admin on the group's offsets stream, as DeleteGroups.
func (s *Server) shareGroupAdmin(cc *connState, id string) bool {
	name, err := group.StreamName(id)
	return err == nil && s.allow(cc, auth.Admin, name) == nil
}

// shareTopicName finds the name of a topic id: from the share manager's
// memory (heartbeats resolve their topics) or a registry scan.
func (s *Server) shareTopicName(ctx context.Context, id [16]byte) (string, error) {
	if n := s.share.TopicName(id); n != "" {
		return n, nil
	}
	ts, err := s.allTopics(ctx)
	if err != nil {
		return "", err
	}
	for _, t := range ts {
		s.share.NoteTopic(t.id, t.name)
		if t.id == id {
			return t.name, nil
		}
	}
	return "", kerr.UnknownTopicID
}

// shareResolve returns the existing topics among names, for assignment.
func (s *Server) shareResolve(ctx context.Context) func([]string) map[string]share.Topic {
	return func(names []string) map[string]share.Topic {
		out := map[string]share.Topic{}
		for _, n := range names {
			t, err := s.resolveTopic(ctx, n)
			if err != nil {
				continue
			}
			out[n] = share.Topic{ID: t.id, Partitions: int32(len(t.partitions))}
		}
		return out
	}
}

// loadShare sets a share-partition's start offset the first time this node
// uses it: the stored SPSO (read from the group's coordinator, here or
// another node), else share.auto.offset.reset (latest: the end of the log;
// earliest: its start), which is then stored.
func (s *Server) loadShare(ctx context.Context, gid, topic string, p int32, name string, sp *share.Partition) error {
	head, err := s.svc.Head(ctx, name)
	if err != nil {
		return err
	}
	stored, err := s.groups.ShareOffsets(ctx, gid)
	off, ok := stored[topic][p]
	if err != nil {
		if group.Code(err) != kerr.NotCoordinator.Code {
			return err
		}
		// Another node coordinates the group: its offsets stream has the
		// SPSO. Failing here (the fetch is retried) beats guessing one.
		if off, ok, err = s.fetchShareOffset(ctx, gid, topic, p); err != nil {
			return err
		}
	}
	if ok {
		sp.Init(max(off, head.StartOffset), off >= head.StartOffset)
		return nil
	}
	off = head.NextOffset
	if s.share.Configs(gid)[share.ConfigAutoOffsetReset] == "earliest" {
		off = head.StartOffset
	}
	sp.Init(off, false)
	return nil
}

// shareFlush stores a share-partition's start offset if it moved, on the
// group's coordinator (here or another node, share_remote.go), in the
// background and one write at a time per partition: acknowledgements do
// not wait for it, so a coordinator restart may deliver again what was
// acknowledged in the last moments (at-least-once, docs/kafka.md).
func (s *Server) shareFlush(gid, topic string, p int32, sp *share.Partition) {
	off, ok := sp.BeginFlush(time.Now())
	if !ok {
		return
	}
	s.jobs.Add(1)
	go func() {
		defer s.jobs.Done()
		for {
			ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			err := s.storeShareOffset(ctx, gid, topic, p, off)
			cancel()
			sp.EndFlush(off, err == nil, time.Now())
			if err != nil {
				s.shareUnpersisted.Add(1)
				s.log.Debug("kafka share start offset not stored", "group", gid, "topic", topic, "partition", p, "err", err)
				return
			}
			if off, ok = sp.BeginFlush(time.Now()); !ok {
				return
			}
		}
	}()
}

// spans lists the batches of a read as share.Acquire sees them: control
// batches, and under read_committed the batches of aborted transactions,
// are skipped (never delivered).
func spans(batches []byte, aborted []stream.AbortedTxn, readCommitted bool) []share.Span {
	var out []share.Span
	for pos := 0; pos < len(batches); {
		h, err := record.ParseHeader(batches[pos:])
		if err != nil || pos+h.Size() > len(batches) {
			break
		}
		pos += h.Size()
		skip := h.Control()
		if readCommitted && h.Transactional() {
			for _, a := range aborted {
				if a.ProducerID == h.ProducerID && a.FirstOffset <= h.BaseOffset && h.BaseOffset <= a.LastOffset {
					skip = true
				}
			}
		}
		out = append(out, share.Span{First: h.BaseOffset, Last: h.LastOffset(), Skip: skip})
	}
	return out
}

// cutBatches keeps the batches of a read that hold offsets in [from, to].
func cutBatches(batches []byte, from, to int64) []byte {
	start, end := -1, 0
	for pos := 0; pos < len(batches); {
		h, err := record.ParseHeader(batches[pos:])
		if err != nil || pos+h.Size() > len(batches) {
			break
		}
		if h.LastOffset() >= from && h.BaseOffset <= to {
			if start < 0 {
				start = pos
			}
			end = pos + h.Size()
		}
		pos += h.Size()
	}
	if start < 0 {
		return nil
	}
	return batches[start:end]
}

// shareAck applies acknowledgements to one share-partition and returns the
// partition's error code.
func (s *Server) shareAck(ctx context.Context, cc *connState, gid, member string, tid [16]byte, p int32, batches []share.AckBatch) (int16, *string) {
	topic, err := s.shareTopicName(ctx, tid)
	if err != nil {
		return errCode(err), errMessage(err)
	}
	if name, err := s.partitionName(ctx, topic, p, false); err != nil {
		return errCode(err), errMessage(err)
	} else if err := s.allow(cc, auth.Read, name); err != nil {
		return errCode(err), errMessage(err)
	}
	sp := s.share.Partition(share.PartKey{Group: gid, TopicID: tid, Partition: p})
	if !sp.Loaded() {
		msg := "no records of this partition are acquired on this node"
		return kerr.InvalidRecordState.Code, &msg
	}
	if err := sp.Acknowledge(member, s.share.Now(), batches, s.share.Limits(gid)); err != nil {
		c := kerr.InvalidRecordState.Code
		if errors.Is(err, share.ErrInvalidAckType) {
			c = kerr.InvalidRequest.Code
		}
		msg := err.Error()
		return c, &msg
	}
	st := s.share.Stats()
	for _, b := range batches {
		if len(b.Types) == 1 {
			st.Acks[b.Types[0]].Add(b.Last - b.First + 1)
			continue
		}
		for _, t := range b.Types {
			st.Acks[t].Add(1)
		}
	}
	s.shareFlush(gid, topic, p, sp)
	return 0, nil
}

// ShareStats are the share-group counters for /metrics.
type ShareStats struct {
	Acquired, Released, Unpersisted int64
	Acks                            map[string]int64 // by type: gap, accept, release, reject, renew
}

// ShareStats returns the share-group counters.
func (s *Server) ShareStats() ShareStats {
	st := s.share.Stats()
	out := ShareStats{Acquired: st.Acquired.Load(), Released: st.Released.Load(), Unpersisted: s.shareUnpersisted.Load(),
		Acks: map[string]int64{}}
	for i, n := range []string{"gap", "accept", "release", "reject", "renew"} {
		out.Acks[n] = st.Acks[i].Load()
	}
	return out
}

// alterGroupConfigs applies ops to a share group's configs (GROUP
// resources of IncrementalAlterConfigs/AlterConfigs).
func (s *Server) alterGroupConfigs(cc *connState, gid string, ops []configOp, incremental, validateOnly bool) error {
	if gid == "" {
		return fmt.Errorf("%w: empty group id", kerr.InvalidGroupID)
	}
	if !s.shareGroupAdmin(cc, gid) {
		return kerr.GroupAuthorizationFailed
	}
	set := map[string]*string{}
	if !incremental {
		for _, n := range share.ConfigNames() {
			set[n] = nil
		}
	}
	for _, o := range ops {
		switch o.op {
		case kmsg.IncrementalAlterConfigOpSet:
			set[o.name] = o.value
		case kmsg.IncrementalAlterConfigOpDelete:
			set[o.name] = nil
		default:
			return fmt.Errorf("%w: %s of config %s: group configs are not lists", kerr.InvalidConfig, o.op, o.name)
		}
		v := o.value
		if o.op == kmsg.IncrementalAlterConfigOpDelete {
			v = nil
		}
		if _, known := s.share.ConfigDefault(o.name); !known {
			return fmt.Errorf("%w: group config %s is not supported by PicoMQ (supported: %s)", kerr.InvalidConfig, o.name, strings.Join(share.ConfigNames(), ", "))
		}
		if err := share.ValidateConfig(o.name, v); err != nil {
			return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
		}
	}
	if !validateOnly {
		s.share.SetConfigs(gid, set)
	}
	return nil
}

// describeGroupConfigs lists a group's configs: name, value, and whether it
// was set (not the default).
func (s *Server) describeGroupConfigs(gid string) ([][2]string, map[string]bool) {
	set := s.share.Configs(gid)
	var out [][2]string
	explicit := map[string]bool{}
	for _, n := range share.ConfigNames() {
		v, ok := set[n]
		if !ok {
			v, _ = s.share.ConfigDefault(n)
		}
		explicit[n] = ok
		out = append(out, [2]string{n, v})
	}
	return out, explicit
}

// handleGroup passes a group key to the group coordinator, with what share
// groups change about DeleteGroups (a share group with members is NON_EMPTY_GROUP; one without
// loses its share state too).
func (s *Server) handleGroup(ctx context.Context, cc *connState, req kmsg.Request) (kmsg.Response, error) {
	switch r := req.(type) {
	case *kmsg.DeleteGroupsRequest:
		busy := map[string]bool{}
		known := map[string]bool{}
		for _, id := range r.Groups {
			if _, ok := s.share.Members(id); !ok {
				continue
			}
			if !s.shareGroupAdmin(cc, id) {
				continue // the coordinator answers GROUP_AUTHORIZATION_FAILED
			}
			known[id] = true
			if !s.share.DeleteGroup(id) {
				busy[id] = true
			}
		}
		// A share group with members stays: the coordinator does not
		// see it (it would delete the group's stored offsets).
		fwd := *r
		fwd.Groups = nil
		for _, id := range r.Groups {
			if !busy[id] {
				fwd.Groups = append(fwd.Groups, id)
			}
		}
		resp, err := s.groups.Handle(ctx, &fwd)
		if dr, ok := resp.(*kmsg.DeleteGroupsResponse); ok && err == nil {
			for i := range dr.Groups {
				if g := &dr.Groups[i]; known[g.Group] && g.ErrorCode == kerr.GroupIDNotFound.Code {
					g.ErrorCode = 0 // a share group without stored offsets
				}
			}
			for id := range busy {
				dg := kmsg.NewDeleteGroupsResponseGroup()
				dg.Group, dg.ErrorCode = id, kerr.NonEmptyGroup.Code
				dr.Groups = append(dr.Groups, dg)
			}
		}
		return resp, err
	}
	return s.groups.Handle(ctx, req)
}
