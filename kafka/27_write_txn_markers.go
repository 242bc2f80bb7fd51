package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/record"
)

// handleWriteTxnMarkers appends transaction markers to partitions this node
// leads: what a transaction coordinator on another node asks of the
// partitions' leader (Kafka's inter-broker request). It needs admin access
// to each partition.
func handleWriteTxnMarkers(s *Server, ctx context.Context, cc *connState, kreq kmsg.Request) (kmsg.Response, error) {
	req := kreq.(*kmsg.WriteTxnMarkersRequest)
	resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	for _, m := range req.Markers {
		om := kmsg.NewWriteTxnMarkersResponseMarker()
		om.ProducerID = m.ProducerID
		marker := record.MarkerAbort
		if m.Committed {
			marker = record.MarkerCommit
		}
		for _, t := range m.Topics {
			ot := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			ot.Topic = t.Topic
			for _, p := range t.Partitions {
				op := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				op.Partition = p
				name, err := s.markerStream(ctx, t.Topic, p)
				if err == nil {
					err = s.allow(cc, auth.Admin, name)
				}
				if err == nil {
					err = s.appendMarker(ctx, name, m.ProducerID, m.ProducerEpoch, marker, false)
				}
				op.ErrorCode = errCode(err)
				ot.Partitions = append(ot.Partitions, op)
			}
			om.Topics = append(om.Topics, ot)
		}
		resp.Markers = append(resp.Markers, om)
	}
	return resp, nil
}
