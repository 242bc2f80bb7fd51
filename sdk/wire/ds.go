package wire

// Header names of the Durable Streams protocol (PROTOCOL.md of
// github.com/durable-streams/durable-streams), spelled as the protocol
// spells them. The server (api/ds), the Go client (client/go) and the CLI
// share these, so the two sides cannot drift apart. HTTP field names are
// case-insensitive: Go canonicalises Stream-TTL to Stream-Ttl on the wire,
// which every peer accepts.
const (
	DSHeaderNextOffset       = "Stream-Next-Offset"
	DSHeaderUpToDate         = "Stream-Up-To-Date"
	DSHeaderClosed           = "Stream-Closed"
	DSHeaderCursor           = "Stream-Cursor"
	DSHeaderSeq              = "Stream-Seq"
	DSHeaderTTL              = "Stream-TTL"
	DSHeaderExpiresAt        = "Stream-Expires-At"
	DSHeaderForkedFrom       = "Stream-Forked-From"
	DSHeaderForkOffset       = "Stream-Fork-Offset"
	DSHeaderForkSubOffset    = "Stream-Fork-Sub-Offset"
	DSHeaderSSEDataEncoding  = "Stream-Sse-Data-Encoding"
	DSHeaderProducerID       = "Producer-Id"
	DSHeaderProducerEpoch    = "Producer-Epoch"
	DSHeaderProducerSeq      = "Producer-Seq"
	DSHeaderProducerExpected = "Producer-Expected-Seq"
	DSHeaderProducerReceived = "Producer-Received-Seq"
)

// DSControlEvent is the data of a Durable Streams SSE "control" event: the
// offset to resume from, the cursor to echo, and whether the reader has
// caught up or the stream is closed (false ones are left out).
type DSControlEvent struct {
	StreamNextOffset string `json:"streamNextOffset"`
	StreamCursor     string `json:"streamCursor,omitempty"`
	UpToDate         bool   `json:"upToDate,omitempty"`
	StreamClosed     bool   `json:"streamClosed,omitempty"`
}
