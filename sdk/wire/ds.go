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
