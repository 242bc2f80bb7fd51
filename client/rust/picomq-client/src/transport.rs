//! Sending one logical request: the bearer token on every hop, 307/308
//! redirects followed by the client itself (reqwest would drop the
//! `Authorization` header on a hop to another host), the stream's owner
//! remembered, and read-shaped requests retried per the [`RetryPolicy`].

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use reqwest::{Method, Response, Url};

use crate::error::{api_error, header_str, header_true, Error, Result};
use crate::pico::MAX_PAGE_BYTES;
use crate::{Page, Protocol, RetryPolicy};

/// Redirects followed per request.
pub(crate) const MAX_REDIRECTS: usize = 5;
/// Streams whose owner node is remembered; the map is cleared when full.
const MAX_OWNERS: usize = 10_000;
/// Bound on an error body the client reads.
const MAX_ERROR_BODY: usize = 64 << 10;

/// One logical request. The body is kept so that it can be sent again on a
/// redirect or a retry.
pub(crate) struct Call {
    pub method: Method,
    /// Path under the client's prefix, unescaped ("/orders/1").
    pub path: String,
    pub query: Vec<(&'static str, String)>,
    pub headers: Vec<(&'static str, String)>,
    pub body: Option<Vec<u8>>,
    /// Read-shaped: the retry policy may repeat it.
    pub retry: bool,
    /// Remember (and use) the owner node of this stream.
    pub owner: bool,
}

impl Call {
    pub fn new(method: Method, path: &str) -> Call {
        Call { method, path: path.to_string(), query: Vec::new(), headers: Vec::new(), body: None, retry: false, owner: true }
    }
}

pub(crate) struct Transport {
    pub protocol: Protocol,
    pub http: reqwest::Client,
    /// scheme://host[:port] of the configured node.
    pub origin: Url,
    /// Path prefix: "" for Pico, "/v1/stream" for Durable Streams.
    pub prefix: String,
    pub token: Option<String>,
    pub retry: RetryPolicy,
    /// Stream path → origin of the node it was last redirected to.
    owners: Mutex<HashMap<String, Url>>,
}

/// A random 64-bit number from the standard library's hasher seeds: enough
/// for jitter and producer ids without a dependency.
pub(crate) fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

impl RetryPolicy {
    /// The wait before retry number `attempt` (1 = the first retry): doubling
    /// from `initial_backoff` up to `max_backoff`, jittered between half and
    /// all of it; a server's Retry-After wins up to `max_backoff`.
    pub(crate) fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let mut d = self.initial_backoff;
        for _ in 1..attempt {
            if d >= self.max_backoff {
                break;
            }
            d *= 2;
        }
        d = d.min(self.max_backoff);
        let half = d / 2;
        let jitter = Duration::from_nanos(random_u64() % (half.as_nanos() as u64 + 1));
        let d = half + jitter;
        match retry_after {
            Some(ra) if ra.min(self.max_backoff) > d => ra.min(self.max_backoff),
            _ => d,
        }
    }
}

/// Whether a failed request may be retried (when that is safe), and the
/// server's Retry-After.
pub(crate) fn retryable(e: &Error) -> (bool, Option<Duration>) {
    match e {
        Error::Api(a) => (matches!(a.status, 429 | 502 | 503 | 504), a.retry_after),
        Error::Transport(_) => (true, None),
        _ => (false, None),
    }
}

impl Transport {
    pub fn new(protocol: Protocol, http: reqwest::Client, origin: Url, prefix: String, token: Option<String>, retry: RetryPolicy) -> Transport {
        Transport { protocol, http, origin, prefix, token, retry, owners: Mutex::new(HashMap::new()) }
    }

    fn owner(&self, path: &str) -> Option<Url> {
        self.owners.lock().unwrap().get(path).cloned()
    }

    fn set_owner(&self, path: &str, origin: Option<Url>) {
        let mut owners = self.owners.lock().unwrap();
        match origin {
            Some(o) => {
                if owners.len() >= MAX_OWNERS && !owners.contains_key(path) {
                    owners.clear();
                }
                owners.insert(path.to_string(), o);
            }
            None => {
                owners.remove(path);
            }
        }
    }

    /// The URL of `call` on the node at `origin`.
    fn url(&self, origin: &Url, call: &Call) -> Url {
        let mut u = origin.clone();
        u.set_path(&format!("{}{}", self.prefix, call.path));
        if !call.query.is_empty() {
            let mut q = u.query_pairs_mut();
            for (k, v) in &call.query {
                q.append_pair(k, v);
            }
        }
        u
    }

    /// Sends `call`, following redirects and retrying read-shaped calls.
    /// Returns a 2xx answer; anything else becomes an error.
    pub async fn send(&self, call: &Call) -> Result<Response> {
        let attempts = if call.retry { self.retry.max_attempts.max(1) } else { 1 };
        let mut attempt = 1;
        loop {
            match self.send_once(call).await {
                Ok(r) => return Ok(r),
                Err(e) => {
                    let (again, after) = retryable(&e);
                    if !again || attempt >= attempts {
                        return Err(e);
                    }
                    tokio::time::sleep(self.retry.delay(attempt, after)).await;
                    attempt += 1;
                }
            }
        }
    }

    async fn send_once(&self, call: &Call) -> Result<Response> {
        let mut owner = if call.owner { self.owner(&call.path) } else { None };
        let mut target = self.url(owner.as_ref().unwrap_or(&self.origin), call);
        let start_uri = path_and_query(&target);
        let mut redirected = false;
        let mut hop = 0;
        loop {
            let resp = match self.request(call, target.clone()).await {
                Ok(r) => r,
                Err(e) if hop == 0 && owner.is_some() && e.is_connect() => {
                    // The remembered owner is gone and nothing was sent:
                    // start again at the configured node.
                    self.set_owner(&call.path, None);
                    owner = None;
                    target = self.url(&self.origin, call);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let status = resp.status().as_u16();
            if status == 307 || status == 308 {
                let loc = resp.headers().get("Location").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                if hop >= MAX_REDIRECTS {
                    return Err(Error::Redirect(format!("{} {}: more than {} redirects", call.method, target, MAX_REDIRECTS)));
                }
                let next = match target.join(&loc) {
                    Ok(u) if !loc.is_empty() && (u.scheme() == "http" || u.scheme() == "https") => u,
                    _ => return Err(Error::Redirect(format!("{} {}: bad Location {:?}", call.method, target, loc))),
                };
                if self.token.is_some() && target.scheme() == "https" && next.scheme() != "https" {
                    return Err(Error::Redirect(format!("{} {}: refusing to send the token from https to {}", call.method, target, next)));
                }
                target = next;
                redirected = true;
                hop += 1;
                continue;
            }
            if redirected && call.owner && path_and_query(&target) == start_uri {
                // The server redirects to owner + the same URI: remember the owner.
                let mut o = target.clone();
                o.set_path("");
                o.set_query(None);
                self.set_owner(&call.path, Some(o));
            }
            if (200..300).contains(&status) {
                return Ok(resp);
            }
            let headers = resp.headers().clone();
            let body = if call.method == Method::HEAD { Vec::new() } else { read_limited(resp, MAX_ERROR_BODY).await.unwrap_or_default() };
            return Err(api_error(self.protocol, call.method.as_str(), target.as_str(), status, &headers, &body));
        }
    }

    async fn request(&self, call: &Call, url: Url) -> std::result::Result<Response, reqwest::Error> {
        let mut req = self.http.request(call.method.clone(), url);
        for (k, v) in &call.headers {
            req = req.header(*k, v.as_str());
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = &call.body {
            req = req.body(b.clone());
        }
        req.send().await
    }
}

fn path_and_query(u: &Url) -> String {
    match u.query() {
        Some(q) => format!("{}?{}", u.path(), q),
        None => u.path().to_string(),
    }
}

/// One protocol's names of the headers that place a read page.
pub(crate) struct PageHeaders {
    pub next: &'static str,
    pub up_to_date: &'static str,
    pub closed: &'static str,
    pub cursor: &'static str,
}

/// One read answer: the page's positions from its headers (records still
/// to decode), its content type, and its body; `None` for a 204 (nothing
/// new).
pub(crate) struct PageReply {
    pub page: Page,
    pub content_type: String,
    pub body: Option<Vec<u8>>,
}

/// Sends a read `call`; both protocols answer it the same way but for the
/// header names.
pub(crate) async fn get_page(t: &Transport, call: &Call, names: &PageHeaders) -> Result<PageReply> {
    let resp = t.send(call).await?;
    let h = resp.headers();
    let page = Page {
        next: header_str(h, names.next).unwrap_or_default(),
        up_to_date: header_true(h, names.up_to_date),
        closed: header_true(h, names.closed),
        cursor: header_str(h, names.cursor),
        records: Vec::new(),
    };
    let content_type = header_str(h, "Content-Type").unwrap_or_default();
    if resp.status().as_u16() == 204 {
        return Ok(PageReply { page, content_type, body: None });
    }
    let body = read_limited(resp, MAX_PAGE_BYTES).await?;
    Ok(PageReply { page, content_type, body: Some(body) })
}

/// Reads a body of at most `max` bytes.
pub(crate) async fn read_limited(mut resp: Response, max: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if out.len() + chunk.len() > max {
            return Err(Error::Decode(format!("response body above {} bytes", max)));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}
