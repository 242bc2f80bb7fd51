//! The Pico record codec: the binary batch format of the Pico protocol
//! (media type `application/vnd.picomq.batch`), byte for byte the format of
//! Go's `sdk/wire/codec`.
//!
//! All integers are big-endian. A frame is a header and `count` records:
//!
//! ```text
//! frame   = magic:4 "PQB1"  count:u32  record*count
//! record  = length:u32                  ; bytes of the rest of this record
//!           offset:i64                  ; reads: the record's offset; appends: 0
//!           timestamp:i64               ; reads: ms since the Unix epoch; appends: 0
//!           keyLength:i32    key        ; -1 = null key
//!           valueLength:i32  value      ; -1 = null value (a tombstone)
//!           headerCount:u32  header*headerCount
//! header  = keyLength:u32    key        ; a header key is never null
//!           valueLength:i32  value      ; -1 = null value
//! ```
//!
//! A frame holds exactly `count` records and nothing after the last; a
//! record's length equals the bytes its fields use.

use std::fmt;

/// Media type of a frame.
pub const MEDIA_TYPE: &str = "application/vnd.picomq.batch";
/// Opens every frame: "PQB1" (Pico batch, layout 1).
pub const MAGIC: [u8; 4] = *b"PQB1";
/// Magic plus count.
pub const FRAME_HEADER_SIZE: usize = 8;
/// Size of a record with null key and value and no headers, length prefix included.
pub const RECORD_OVERHEAD: usize = 4 + 8 + 8 + 4 + 4 + 4;
/// Size of a header with an empty key and a null value.
pub const HEADER_OVERHEAD: usize = 4 + 4;

/// One record header. Headers are ordered and may repeat a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// Header keys are never null. Kafka clients write UTF-8, but the
    /// format (like Go's codec) does not require it.
    pub key: &'a [u8],
    /// `None` is a null value, distinct from an empty one.
    pub value: Option<&'a [u8]>,
}

/// One record of a frame. Decoded records borrow from the frame's bytes.
/// `None` keys and values are null, distinct from empty ones, as in Kafka.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<Header<'a>>,
}

/// Why a frame did not decode, and at which byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte position in the frame of the field that broke a rule.
    pub pos: usize,
    pub message: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "codec: invalid Pico batch: byte {}: {}", self.pos, self.message)
    }
}

impl std::error::Error for DecodeError {}

fn err<T>(pos: usize, message: String) -> Result<T, DecodeError> {
    Err(DecodeError { pos, message })
}

/// Bounds on what [`decode`] accepts, so a hostile frame cannot make the
/// decoder allocate more than the caller allows. `None` = no limit beyond
/// the input's own size.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    pub max_records: Option<usize>,
    pub max_headers: Option<usize>,
}

/// The encoded size of a record with these parts.
pub fn record_size(key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Header<'_>]) -> usize {
    let len = |b: Option<&[u8]>| b.map_or(0, |b| b.len());
    RECORD_OVERHEAD
        + len(key)
        + len(value)
        + headers.iter().map(|h| HEADER_OVERHEAD + h.key.len() + len(h.value)).sum::<usize>()
}

/// Appends the frame header for `count` records.
pub fn put_frame_header(dst: &mut Vec<u8>, count: u32) {
    dst.extend_from_slice(&MAGIC);
    dst.extend_from_slice(&count.to_be_bytes());
}

fn put_bytes(dst: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => dst.extend_from_slice(&(-1i32).to_be_bytes()),
        Some(b) => {
            dst.extend_from_slice(&(b.len() as u32).to_be_bytes());
            dst.extend_from_slice(b);
        }
    }
}

/// Appends one record. Encoding a frame: [`put_frame_header`] with the
/// number of records, then `put_record` for each.
pub fn put_record(dst: &mut Vec<u8>, r: &Record<'_>) {
    let start = dst.len();
    dst.extend_from_slice(&[0; 4]); // length, patched below
    dst.extend_from_slice(&r.offset.to_be_bytes());
    dst.extend_from_slice(&r.timestamp.to_be_bytes());
    put_bytes(dst, r.key);
    put_bytes(dst, r.value);
    dst.extend_from_slice(&(r.headers.len() as u32).to_be_bytes());
    for h in &r.headers {
        dst.extend_from_slice(&(h.key.len() as u32).to_be_bytes());
        dst.extend_from_slice(h.key);
        put_bytes(dst, h.value);
    }
    let n = (dst.len() - start - 4) as u32;
    dst[start..start + 4].copy_from_slice(&n.to_be_bytes());
}

/// Returns `records` as one frame.
pub fn encode(records: &[Record<'_>]) -> Vec<u8> {
    let size = FRAME_HEADER_SIZE
        + records.iter().map(|r| record_size(r.key, r.value, &r.headers)).sum::<usize>();
    let mut dst = Vec::with_capacity(size);
    put_frame_header(&mut dst, records.len() as u32);
    for r in records {
        put_record(&mut dst, r);
    }
    dst
}

fn u32_at(b: &[u8], p: usize) -> u32 {
    u32::from_be_bytes([b[p], b[p + 1], b[p + 2], b[p + 3]])
}

fn i64_at(b: &[u8], p: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[p..p + 8]);
    i64::from_be_bytes(a)
}

/// Parses a frame. Keys, values and header values borrow from `b`.
pub fn decode<'a>(b: &'a [u8], lim: Limits) -> Result<Vec<Record<'a>>, DecodeError> {
    if b.len() < FRAME_HEADER_SIZE {
        return err(0, format!("frame of {} bytes is shorter than its {}-byte header", b.len(), FRAME_HEADER_SIZE));
    }
    if b[..4] != MAGIC {
        return err(0, format!("magic {:?}, want \"PQB1\" (is the body really {}?)", String::from_utf8_lossy(&b[..4]), MEDIA_TYPE));
    }
    let count = u32_at(b, 4) as usize;
    if let Some(max) = lim.max_records {
        if count > max {
            return err(4, format!("{} records, the limit is {}", count, max));
        }
    }
    // Every record takes at least RECORD_OVERHEAD bytes: a count the body
    // cannot hold is rejected before anything is allocated for it.
    if (count as u64) * (RECORD_OVERHEAD as u64) > (b.len() - FRAME_HEADER_SIZE) as u64 {
        return err(4, format!("count {} needs at least {} bytes, the frame has {} after its header",
            count, count * RECORD_OVERHEAD, b.len() - FRAME_HEADER_SIZE));
    }
    let mut out = Vec::with_capacity(count);
    let mut pos = FRAME_HEADER_SIZE;
    for i in 0..count {
        let (r, next) = decode_record(b, pos, i, lim)?;
        out.push(r);
        pos = next;
    }
    if pos != b.len() {
        return err(pos, format!("{} bytes after the last of {} records", b.len() - pos, count));
    }
    Ok(out)
}

fn decode_record<'a>(b: &'a [u8], start: usize, i: usize, lim: Limits) -> Result<(Record<'a>, usize), DecodeError> {
    if b.len() - start < 4 {
        return err(start, format!("record {}: truncated length", i));
    }
    let n = u32_at(b, start) as usize;
    if n > b.len() - start - 4 {
        return err(start, format!("record {}: length {} runs past the end of the frame ({} bytes left)", i, n, b.len() - start - 4));
    }
    let end = start + 4 + n;
    if n < RECORD_OVERHEAD - 4 {
        return err(start, format!("record {}: length {} is below the minimum {}", i, n, RECORD_OVERHEAD - 4));
    }
    let mut p = start + 4;
    let offset = i64_at(b, p);
    let timestamp = i64_at(b, p + 8);
    p += 16;
    let (key, np) = bytes_at(b, p, end, i, "key")?;
    let (value, np) = bytes_at(b, np, end, i, "value")?;
    p = np;
    if end - p < 4 {
        return err(p, format!("record {}: truncated header count", i));
    }
    let nh = u32_at(b, p) as usize;
    if let Some(max) = lim.max_headers {
        if nh > max {
            return err(p, format!("record {}: {} headers, the limit is {}", i, nh, max));
        }
    }
    if (nh as u64) * (HEADER_OVERHEAD as u64) > (end - p - 4) as u64 {
        return err(p, format!("record {}: {} headers cannot fit in the {} bytes left of the record", i, nh, end - p - 4));
    }
    p += 4;
    let mut headers = Vec::with_capacity(nh);
    for j in 0..nh {
        if end - p < 4 {
            return err(p, format!("record {} header {}: truncated key length", i, j));
        }
        let kl = u32_at(b, p) as usize;
        if kl > end - p - 4 {
            return err(p, format!("record {} header {}: key length {} runs past the record", i, j, kl));
        }
        let key = &b[p + 4..p + 4 + kl];
        p += 4 + kl;
        let (value, np) = bytes_at(b, p, end, i, "header value")?;
        p = np;
        headers.push(Header { key, value });
    }
    if p != end {
        return err(p, format!("record {}: length says {} bytes, its fields use {}", i, n, p - start - 4));
    }
    Ok((Record { offset, timestamp, key, value, headers }, end))
}

/// Reads an i32 length (-1 = null) and that many bytes at `p`, within `end`.
fn bytes_at<'a>(b: &'a [u8], p: usize, end: usize, i: usize, what: &str) -> Result<(Option<&'a [u8]>, usize), DecodeError> {
    if end - p < 4 {
        return err(p, format!("record {}: truncated {} length", i, what));
    }
    let l = u32_at(b, p) as i32;
    let p = p + 4;
    if l == -1 {
        return Ok((None, p));
    }
    if l < 0 {
        return err(p - 4, format!("record {}: {} length {} (only -1 may be negative)", i, what, l));
    }
    let l = l as usize;
    if l > end - p {
        return err(p - 4, format!("record {}: {} length {} runs past the record ({} bytes left)", i, what, l, end - p));
    }
    Ok((Some(&b[p..p + l]), p + l))
}
