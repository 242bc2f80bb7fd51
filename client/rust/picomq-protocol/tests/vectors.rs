//! The shared codec test vectors (sdk/wire/testdata/codec-vectors.json),
//! which the Go codec's TestVectors checks too: the Rust codec encodes every
//! valid case to exactly the vector's bytes, decodes them back, and rejects
//! every invalid case at the byte the Go decoder names.

use picomq_protocol::codec::{self, Header, Limits, Record};
use serde_json::Value;

const VECTORS: &str = include_str!("../../../../sdk/wire/testdata/codec-vectors.json");

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex {:?}", s);
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{:02x}", x)).collect()
}

fn opt_hex(b: Option<&[u8]>) -> Value {
    b.map_or(Value::Null, |b| Value::String(hex(b)))
}

/// The vector form of decoded records, to compare with the file.
fn to_json(recs: &[Record<'_>]) -> Value {
    Value::Array(
        recs.iter()
            .map(|r| {
                serde_json::json!({
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": opt_hex(r.key),
                    "value": opt_hex(r.value),
                    "headers": r.headers.iter()
                        .map(|h| serde_json::json!({"key": hex(h.key), "value": opt_hex(h.value)}))
                        .collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// Owned bytes of one vector record, so that Records can borrow them.
struct Owned {
    offset: i64,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn opt_unhex(v: &Value) -> Option<Vec<u8>> {
    v.as_str().map(unhex)
}

fn owned(v: &Value) -> Owned {
    Owned {
        offset: v["offset"].as_i64().expect("offset"),
        timestamp: v["timestamp"].as_i64().expect("timestamp"),
        key: opt_unhex(&v["key"]),
        value: opt_unhex(&v["value"]),
        headers: v["headers"].as_array().expect("headers").iter()
            .map(|h| (unhex(h["key"].as_str().expect("header key")), opt_unhex(&h["value"])))
            .collect(),
    }
}

fn record(o: &Owned) -> Record<'_> {
    Record {
        offset: o.offset,
        timestamp: o.timestamp,
        key: o.key.as_deref(),
        value: o.value.as_deref(),
        headers: o.headers.iter().map(|(k, v)| Header { key: k, value: v.as_deref() }).collect(),
    }
}

#[test]
fn valid_vectors_encode_and_decode_like_go() {
    let v: Value = serde_json::from_str(VECTORS).expect("vectors JSON");
    let valid = v["valid"].as_array().expect("valid");
    assert!(!valid.is_empty());
    for c in valid {
        let name = c["name"].as_str().unwrap();
        let owned: Vec<Owned> = c["records"].as_array().unwrap().iter().map(owned).collect();
        let recs: Vec<Record<'_>> = owned.iter().map(record).collect();
        let frame = c["frame"].as_str().unwrap();
        assert_eq!(hex(&codec::encode(&recs)), frame, "{}: encode", name);
        let size: usize = codec::FRAME_HEADER_SIZE
            + recs.iter().map(|r| codec::record_size(r.key, r.value, &r.headers)).sum::<usize>();
        assert_eq!(size, frame.len() / 2, "{}: record_size", name);
        let bytes = unhex(frame);
        let decoded = codec::decode(&bytes, Limits::default()).unwrap_or_else(|e| panic!("{}: {}", name, e));
        assert_eq!(to_json(&decoded), c["records"], "{}: decode", name);
    }
}

#[test]
fn invalid_vectors_fail_at_the_same_byte_as_go() {
    let v: Value = serde_json::from_str(VECTORS).expect("vectors JSON");
    let invalid = v["invalid"].as_array().expect("invalid");
    assert!(!invalid.is_empty());
    for c in invalid {
        let name = c["name"].as_str().unwrap();
        let bytes = unhex(c["frame"].as_str().unwrap());
        match codec::decode(&bytes, Limits::default()) {
            Ok(r) => panic!("{}: decoded {:?}, want an error", name, r),
            Err(e) => assert_eq!(e.pos as u64, c["errorAt"].as_u64().unwrap(), "{}: {}", name, e),
        }
    }
}

#[test]
fn limits_bound_records_and_headers() {
    let h = [Header { key: b"a", value: None }, Header { key: b"b", value: None }];
    let recs = [
        Record { value: Some(b"x"), headers: h.to_vec(), ..Record::default() },
        Record { value: Some(b"y"), ..Record::default() },
    ];
    let b = codec::encode(&recs);
    assert!(codec::decode(&b, Limits { max_records: Some(1), max_headers: None }).is_err());
    assert!(codec::decode(&b, Limits { max_records: None, max_headers: Some(1) }).is_err());
    let ok = codec::decode(&b, Limits { max_records: Some(2), max_headers: Some(2) }).expect("within limits");
    assert_eq!(ok, recs.to_vec());
}
