package stream

import (
	"fmt"

	"github.com/PicoMQ/picomq/sdk/wire"
)

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
	ct, closed := st.info.ContentType, st.closed
	st.mu.Unlock()
	if closed {
		return nil
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
