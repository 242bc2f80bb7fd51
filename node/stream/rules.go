package stream

import (
	"fmt"

	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// checkKeys refuses records without a key on a compacted stream: key
// compaction keeps the latest record per key, and a keyless record has
// none (Kafka refuses them on a compacted topic). A raw Kafka batch is
// decoded for this, on compacted streams only; a control batch carries
// no data.
func checkKeys(name string, req AppendRequest) error {
	for i := range req.Records {
		if req.Records[i].Key == nil {
			return fmt.Errorf("%w: record %d of the append to %s has none", ErrKeyRequired, i, name)
		}
	}
	if req.Batch == nil || req.Control {
		return nil
	}
	recs, err := record.DecodeRecords(req.Batch, nil)
	if err != nil {
		return err
	}
	for i := range recs {
		if recs[i].Key == nil {
			return fmt.Errorf("%w: record at offset delta %d of the batch to %s has none", ErrKeyRequired, i, name)
		}
	}
	return nil
}

// checkRecords applies the stream's content rules to an append, whatever
// protocol it came on: the records' media type must be the stream's, and a
// JSON stream (wire.IsJSON) accepts only JSON texts, UTF-8 included
// (wire.IsJSONText, the one JSON predicate of the service and both HTTP
// protocols; a null value is a record without a value and passes). A raw batch (AppendRequest.Batch,
// Kafka) is stored as sent: its values are not decoded on the append path,
// so the JSON rule does not reach them. A closed stream is left to the
// append itself, which answers every append to it alike.
func (st *streamState) checkRecords(req AppendRequest) error {
	st.mu.Lock()
	ct, closed, compacted := st.info.ContentType, st.closed, st.info.Compaction != nil
	st.mu.Unlock()
	if closed {
		return nil
	}
	if compacted {
		if err := checkKeys(st.info.Name, req); err != nil {
			return err
		}
	}
	if req.ContentType != "" && !SameContentType(req.ContentType, ct) {
		return fmt.Errorf("%w: stream %s holds %q; the records are %q", ErrContentTypeMismatch, st.info.Name, ct, req.ContentType)
	}
	if !wire.IsJSON(ct) {
		return nil
	}
	for i := range req.Records {
		if v := req.Records[i].Value; v != nil && !wire.IsJSONText(v) {
			if len(req.Records) == 1 {
				return fmt.Errorf("%w: body is not valid JSON, but the stream holds %s", ErrInvalidArgument, ct)
			}
			return fmt.Errorf("%w: record %d: value is not valid JSON, but the stream holds %s", ErrInvalidArgument, i, ct)
		}
	}
	return nil
}
