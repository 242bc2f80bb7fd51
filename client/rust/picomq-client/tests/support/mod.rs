//! Helpers of the integration tests: the nodes' URLs, which the Go test
//! e2e/rust_client_test.go passes in after starting real `picomq serve`
//! processes, unique stream names, and tiny loopback TCP servers.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The URL in environment variable `name`. The integration tests need real
/// nodes: run them through `go test ./e2e -run TestRustClient`, which starts
/// the nodes, sets these variables and runs `cargo test`.
pub fn env_url(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{} is not set: these tests run against real picomq nodes; run `go test ./e2e -run TestRustClient` (it starts the nodes and runs cargo test)",
            name
        ),
    }
}

pub fn pico_url() -> String {
    env_url("PICOMQ_TEST_PICO_URL")
}

pub fn ds_url() -> String {
    env_url("PICOMQ_TEST_DS_URL")
}

static N: AtomicUsize = AtomicUsize::new(0);

/// A stream name no other test (or earlier run against the same node) uses.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("/rust-test/{}/{}-{}-{}", prefix, std::process::id(), nanos, N.fetch_add(1, Ordering::Relaxed))
}

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A loopback listener and its http://127.0.0.1:port URL.
pub async fn listen() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    (l, url)
}

/// One HTTP/1.1 request as a tiny test server sees it.
#[derive(Clone, Debug, Default)]
pub struct SeenRequest {
    pub method: String,
    pub target: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == &name.to_ascii_lowercase()).map(|(_, v)| v.as_str())
    }
}

/// Reads one request (headers and a Content-Length body) from `conn`;
/// `None` when the client closed the connection first.
pub async fn read_request(conn: &mut TcpStream) -> Option<SeenRequest> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let mut req = SeenRequest { method: first.next()?.to_string(), target: first.next()?.to_string(), ..SeenRequest::default() };
    for l in lines.filter(|l| !l.is_empty()) {
        let (k, v) = l.split_once(':')?;
        req.headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = req.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    req.body = buf[head_end..].to_vec();
    while req.body.len() < len {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        req.body.extend_from_slice(&chunk[..n]);
    }
    Some(req)
}

/// Writes a complete response.
pub async fn respond(conn: &mut TcpStream, status: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut out = format!("HTTP/1.1 {}\r\nContent-Length: {}\r\n", status, body.len());
    for (k, v) in headers {
        out.push_str(&format!("{}: {}\r\n", k, v));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    let _ = conn.write_all(&bytes).await;
}

/// What a tiny test server answers to one request: status line, headers
/// and body.
pub type Reply = (&'static str, Vec<(&'static str, String)>, Vec<u8>);

/// Serves `l` in the background: every request on every connection is
/// answered with what `handle` returns for it (called before the answer is
/// written, so what it records is there when the client has its response).
pub fn serve<F>(l: TcpListener, handle: F)
where
    F: Fn(SeenRequest) -> Reply + Send + Sync + 'static,
{
    let handle = Arc::new(handle);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = l.accept().await {
            let handle = handle.clone();
            tokio::spawn(async move {
                while let Some(req) = read_request(&mut conn).await {
                    let (status, headers, body) = handle(req);
                    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    respond(&mut conn, status, &headers, &body).await;
                }
            });
        }
    });
}
