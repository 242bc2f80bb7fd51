//! Helpers of the integration tests: the nodes' URLs, which the Go test
//! e2e/rust_client_test.go passes in after starting real `picomq serve`
//! processes, unique stream names, and tiny loopback TCP servers.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

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
