//! The wire vocabulary of PicoMQ's HTTP protocols, shared by the Rust
//! client: header names, query parameters, media types and error codes of
//! the Pico protocol ([`pico`]), the header names of the Durable Streams
//! protocol ([`ds`]), and the Pico record codec ([`codec`]), the binary
//! batch format `application/vnd.picomq.batch`.
//!
//! It mirrors the Go packages `sdk/wire` and `sdk/wire/codec` of the PicoMQ
//! repository name for name; the codec is checked byte for byte against the
//! same test vectors as the Go codec (`sdk/wire/testdata/codec-vectors.json`).
//! It has no dependencies.

pub mod codec;
pub mod ds;
pub mod pico;
