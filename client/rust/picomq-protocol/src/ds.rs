//! The Durable Streams protocol's header names, exactly as the protocol
//! spells them (docs/durable-streams.md).

/// PicoMQ serves Durable Streams under this path.
pub const PREFIX: &str = "/v1/stream";

pub const HEADER_NEXT_OFFSET: &str = "Stream-Next-Offset";
pub const HEADER_UP_TO_DATE: &str = "Stream-Up-To-Date";
pub const HEADER_CLOSED: &str = "Stream-Closed";
pub const HEADER_CURSOR: &str = "Stream-Cursor";
pub const HEADER_SEQ: &str = "Stream-Seq";
pub const HEADER_TTL: &str = "Stream-TTL";
pub const HEADER_EXPIRES_AT: &str = "Stream-Expires-At";
pub const HEADER_FORKED_FROM: &str = "Stream-Forked-From";
pub const HEADER_FORK_OFFSET: &str = "Stream-Fork-Offset";
pub const HEADER_FORK_SUB_OFFSET: &str = "Stream-Fork-Sub-Offset";
pub const HEADER_SSE_DATA_ENCODING: &str = "Stream-Sse-Data-Encoding";
pub const HEADER_PRODUCER_ID: &str = "Producer-Id";
pub const HEADER_PRODUCER_EPOCH: &str = "Producer-Epoch";
pub const HEADER_PRODUCER_SEQ: &str = "Producer-Seq";
pub const HEADER_PRODUCER_EXPECTED_SEQ: &str = "Producer-Expected-Seq";
pub const HEADER_PRODUCER_RECEIVED_SEQ: &str = "Producer-Received-Seq";

/// Query parameters and their values.
pub const QUERY_OFFSET: &str = "offset";
pub const QUERY_LIVE: &str = "live";
pub const QUERY_CURSOR: &str = "cursor";
pub const LIVE_LONG_POLL: &str = "long-poll";

/// The position of a stream's first record.
pub const OFFSET_BEGINNING: &str = "-1";
/// The position of a stream's end.
pub const OFFSET_NOW: &str = "now";
