//! Catching up: an iterator over a stream's records that reads large pages
//! and keeps the next page's request in flight (the Go client's Records).

use std::collections::VecDeque;

use tokio::task::JoinHandle;

use crate::{Client, Live, Page, Protocol, ReadLimits, Record, Result};

/// The page size a [`Records`] iterator asks a Pico node for: 4 MiB, the
/// largest read a node serves from one object-store GET. Catching up is
/// then a few large pages instead of many of the node's default 1,000
/// records.
pub const CATCH_UP_PAGE_BYTES: u64 = 4 << 20;

/// The record limit sent with byte-sized pages: the most a node serves in
/// one read (it caps larger values), so bytes bound the page.
const CATCH_UP_RECORDS: u32 = 10_000;

impl ReadLimits {
    /// Pages sized by bytes for catching up ([`CATCH_UP_PAGE_BYTES`]).
    pub fn catch_up() -> ReadLimits {
        ReadLimits { max_records: Some(CATCH_UP_RECORDS), max_bytes: Some(CATCH_UP_PAGE_BYTES) }
    }
}

/// Iterates over a stream's records from a position to the stream's end
/// (as it is when the iterator gets there), a page at a time:
///
/// ```no_run
/// # async fn f(c: picomq_client::Client) -> picomq_client::Result<()> {
/// let mut it = c.records("/orders", &c.beginning());
/// while let Some(rec) = it.next().await? {
///     println!("{}", rec.body_text());
/// }
/// let resume = it.position(); // where a later iterator continues
/// # Ok(()) }
/// ```
///
/// Over Pico, pages are asked for by bytes ([`ReadLimits::catch_up`]), and
/// as soon as a page arrives that does not reach the stream's end the
/// request for the next one is sent on a task of its own, so the caller
/// works through one page while the next crosses the network (one page
/// ahead, never more). A read ahead that fails is read again when needed,
/// so its error surfaces from `next`. Over Durable Streams the iterator
/// reads one page at a time with the server's defaults. It must be used
/// inside a Tokio runtime (as the client itself).
pub struct Records {
    client: Client,
    stream: String,
    limits: ReadLimits,
    pos: String,
    page: VecDeque<Record>,
    done: bool,
    /// The read of the page at `ahead_from`, already in flight.
    ahead: Option<(String, JoinHandle<Result<Page>>)>,
}

impl Client {
    /// An iterator over `stream`'s records from position `from` to the
    /// stream's end; see [`Records`].
    pub fn records(&self, stream: &str, from: &str) -> Records {
        let limits = match self.protocol() {
            Protocol::Pico => ReadLimits::catch_up(),
            Protocol::DurableStreams => ReadLimits::server_default(),
        };
        Records {
            client: self.clone(),
            stream: stream.to_string(),
            limits,
            pos: if from.is_empty() { self.beginning() } else { from.to_string() },
            page: VecDeque::new(),
            done: false,
            ahead: None,
        }
    }
}

impl Records {
    /// The next record, or `None` at the stream's end (or, for a closed
    /// stream, its final position). An error ends nothing: a later call
    /// reads again from the same position.
    pub async fn next(&mut self) -> Result<Option<Record>> {
        loop {
            if let Some(rec) = self.page.pop_front() {
                return Ok(Some(rec));
            }
            if self.done {
                return Ok(None);
            }
            let page = match self.take_ahead().await {
                Some(page) => page,
                None => self.client.read(&self.stream, &self.pos, Live::Off, self.limits).await?,
            };
            if !page.next.is_empty() {
                self.pos = page.next.clone();
            }
            self.done = page.up_to_date || page.closed;
            if !self.done && !page.records.is_empty() && self.client.protocol() == Protocol::Pico {
                self.read_ahead();
            }
            self.page = page.records.into();
        }
    }

    /// Where to resume after the records returned so far.
    pub fn position(&self) -> String {
        match self.page.front() {
            Some(rec) if !rec.position.is_empty() => rec.position.clone(),
            _ => self.pos.clone(),
        }
    }

    /// Starts reading the page at the current position on a task.
    fn read_ahead(&mut self) {
        let (client, stream, from, limits) = (self.client.clone(), self.stream.clone(), self.pos.clone(), self.limits);
        let task = tokio::spawn(async move { client.read(&stream, &from, Live::Off, limits).await });
        self.ahead = Some((self.pos.clone(), task));
    }

    /// The page read ahead at the current position, if it arrived whole
    /// with records; otherwise the page is to be read now (so errors and
    /// empty pages behave as without read-ahead).
    async fn take_ahead(&mut self) -> Option<Page> {
        let (from, task) = self.ahead.take()?;
        match task.await {
            Ok(Ok(page)) if from == self.pos && !page.records.is_empty() => Some(page),
            _ => None,
        }
    }
}

impl Drop for Records {
    fn drop(&mut self) {
        // An iterator dropped mid-stream leaves no read behind.
        if let Some((_, task)) = self.ahead.take() {
            task.abort();
        }
    }
}
