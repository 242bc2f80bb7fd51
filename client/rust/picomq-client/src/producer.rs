//! Identified producer sessions with batching (Pico only).
//!
//! A [`Producer`] appends records to one stream in batches. Every batch
//! carries the producer's id, epoch and the next sequence number
//! (`Pico-Producer-Id`, `-Epoch`, `-Seq`); the server writes each
//! (id, epoch, seq) once. A batch whose outcome is unknown or that was
//! refused for now (connection lost, 5xx, 429) is sent again with the same
//! sequence number, and the server acknowledges a batch it already wrote as
//! a duplicate instead of writing it twice. One batch is in flight at a
//! time, so records are appended in `send` order; records sent while a
//! batch is in flight go out together in the next one.
//!
//! A batch that fails for good (a 4xx answer: fenced epoch, sequence gap,
//! invalid record, deleted stream; or retries past `delivery_timeout`)
//! fails the producer: that batch, every queued record and every later
//! `send` get the error. Recover with a new producer: same id, higher epoch.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use picomq_protocol::codec;
use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::pico::{self, ProducerHeaders};
use crate::transport::{random_u64, Transport};
use crate::{Ack, AppendRecord, Client, Protocol};

/// Tuning of a [`Producer`]; `ProducerConfig::default()` for the defaults.
#[derive(Clone, Debug)]
pub struct ProducerConfig {
    /// The producer's identity. `None`: a random id, new for every
    /// producer, which is always safe. A fixed id lets a restarted process
    /// fence its previous incarnation, but each new producer with that id
    /// then needs a higher `epoch`.
    pub id: Option<String>,
    /// Epoch of this session (default 0).
    pub epoch: u64,
    /// Bound on the encoded bytes of one batch (default 1 MiB). A larger
    /// record is refused by `send` without failing the producer.
    pub max_batch_bytes: usize,
    /// Bound on the records of one batch (default 10,000).
    pub max_batch_records: usize,
    /// How long an idle producer waits for more records before sending a
    /// batch that is not full (default 0). `flush`, `send_durable` and
    /// `close` never wait for it.
    pub linger: Duration,
    /// Bound on the bytes sent but not yet acknowledged (default 32 MiB);
    /// `send` waits while it is reached.
    pub max_buffered_bytes: usize,
    /// How long one batch is retried before the producer fails (default 2 min).
    pub delivery_timeout: Duration,
}

impl Default for ProducerConfig {
    fn default() -> ProducerConfig {
        ProducerConfig {
            id: None,
            epoch: 0,
            max_batch_bytes: 1 << 20,
            max_batch_records: 10_000,
            linger: Duration::ZERO,
            max_buffered_bytes: 32 << 20,
            delivery_timeout: Duration::from_secs(120),
        }
    }
}

/// The future acknowledgement of one record given to [`Producer::send`].
#[derive(Debug)]
pub struct PendingAck(oneshot::Receiver<Result<Ack>>);

impl PendingAck {
    /// Waits until the record is acknowledged (its `start` is the record's
    /// position) or has failed.
    pub async fn wait(self) -> Result<Ack> {
        match self.0.await {
            Ok(r) => r,
            Err(_) => Err(closed_error()),
        }
    }
}

fn closed_error() -> Error {
    Error::InvalidArgument("producer closed".into())
}

struct Pending {
    rec: AppendRecord,
    size: usize,
    tx: oneshot::Sender<Result<Ack>>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Pending>,
    queue_bytes: usize,
    /// Bytes queued or in flight.
    buffered: usize,
    /// Records accepted by send, taken into batches, resolved: ever.
    enqueued: u64,
    taken: u64,
    resolved: u64,
    /// Send without lingering until `taken` reaches it.
    flush_until: u64,
    seq: u64,
    err: Option<Error>,
    closed: bool,
}

struct Shared {
    t: Arc<Transport>,
    stream: String,
    id: String,
    epoch: u64,
    cfg: ProducerConfig,
    state: Mutex<State>,
    /// Wakes the sending task: records queued, flush or close asked for.
    wake: Notify,
    /// Counts resolved records, for flush and backpressure waiters.
    progress: watch::Sender<u64>,
}

/// A batching producer with an identified session on one stream. Create it
/// inside a Tokio runtime (it spawns its sending task). Dropping it sends
/// what is queued in the background; [`Producer::close`] waits for that.
pub struct Producer {
    shared: Arc<Shared>,
    progress: watch::Receiver<u64>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Producer {
    /// A producer for `stream` (Pico only; no I/O).
    pub fn new(client: &Client, stream: &str, config: ProducerConfig) -> Result<Producer> {
        let t = client.transport().clone();
        if t.protocol != Protocol::Pico {
            return Err(Error::unsupported(t.protocol, "producer", "identified producers are Pico only in this client"));
        }
        let id = match &config.id {
            Some(id) if !id.is_empty() => id.clone(),
            _ => format!("{:016x}{:016x}", random_u64(), random_u64()),
        };
        let (tx, rx) = watch::channel(0);
        let shared = Arc::new(Shared {
            t,
            stream: stream.to_string(),
            id,
            epoch: config.epoch,
            cfg: config,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            progress: tx,
        });
        let task = tokio::spawn(run(shared.clone()));
        Ok(Producer { shared, progress: rx, task: Some(task) })
    }

    /// The producer's id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The producer's epoch.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch
    }

    /// The failure that stopped the producer, if any.
    pub fn error(&self) -> Option<Error> {
        self.shared.state.lock().unwrap().err.clone()
    }

    /// Queues `record` and returns at once, unless `max_buffered_bytes` is
    /// reached (then it waits for acknowledgements).
    pub async fn send(&self, record: AppendRecord) -> Result<PendingAck> {
        let size = pico::encoded_size(&record);
        if size + codec::FRAME_HEADER_SIZE > self.shared.cfg.max_batch_bytes {
            return Err(Error::InvalidArgument(format!(
                "record of {} bytes is above max_batch_bytes {}",
                size, self.shared.cfg.max_batch_bytes
            )));
        }
        let mut progress = self.progress.clone();
        loop {
            {
                let mut st = self.shared.state.lock().unwrap();
                if let Some(e) = &st.err {
                    return Err(e.clone());
                }
                if st.closed {
                    return Err(closed_error());
                }
                if st.buffered == 0 || st.buffered + size <= self.shared.cfg.max_buffered_bytes {
                    let (tx, rx) = oneshot::channel();
                    st.queue.push_back(Pending { rec: record, size, tx });
                    st.queue_bytes += size;
                    st.buffered += size;
                    st.enqueued += 1;
                    drop(st);
                    self.shared.wake.notify_one();
                    return Ok(PendingAck(rx));
                }
            }
            if progress.changed().await.is_err() {
                return Err(closed_error());
            }
        }
    }

    /// Sends `record` now (no lingering) and waits for its acknowledgement.
    pub async fn send_durable(&self, record: AppendRecord) -> Result<Ack> {
        let pending = self.send(record).await?;
        self.kick();
        pending.wait().await
    }

    /// Asks the task to send everything queued so far without lingering.
    fn kick(&self) -> u64 {
        let target = {
            let mut st = self.shared.state.lock().unwrap();
            st.flush_until = st.flush_until.max(st.enqueued);
            st.enqueued
        };
        self.shared.wake.notify_one();
        target
    }

    /// Waits until every record sent so far is acknowledged (or failed:
    /// then the producer's error).
    pub async fn flush(&self) -> Result<()> {
        let target = self.kick();
        let mut progress = self.progress.clone();
        loop {
            {
                let st = self.shared.state.lock().unwrap();
                if st.resolved >= target {
                    return match &st.err {
                        Some(e) => Err(e.clone()),
                        None => Ok(()),
                    };
                }
            }
            if progress.changed().await.is_err() {
                return Err(closed_error());
            }
        }
    }

    /// Flushes and stops the producer.
    pub async fn close(mut self) -> Result<()> {
        let flushed = self.flush().await;
        self.shared.state.lock().unwrap().closed = true;
        self.shared.wake.notify_one();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        flushed
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // The task sends what is queued, then ends.
        let mut st = self.shared.state.lock().unwrap();
        st.closed = true;
        st.flush_until = st.enqueued;
        drop(st);
        self.shared.wake.notify_one();
    }
}

/// The sending task: one batch at a time, in queue order.
async fn run(p: Arc<Shared>) {
    let mut linger_until: Option<Instant> = None;
    loop {
        let batch = {
            let mut st = p.state.lock().unwrap();
            if st.err.is_some() || (st.closed && st.queue.is_empty()) {
                return;
            }
            let full = st.queue.len() >= p.cfg.max_batch_records
                || st.queue_bytes + codec::FRAME_HEADER_SIZE >= p.cfg.max_batch_bytes;
            let hurry = st.taken < st.flush_until || st.closed || full || p.cfg.linger.is_zero();
            if st.queue.is_empty() {
                None
            } else if !hurry && *linger_until.get_or_insert_with(|| Instant::now() + p.cfg.linger) > Instant::now() {
                None
            } else {
                let mut batch = Vec::new();
                let mut bytes = codec::FRAME_HEADER_SIZE;
                while let Some(r) = st.queue.front() {
                    if batch.len() >= p.cfg.max_batch_records || bytes + r.size > p.cfg.max_batch_bytes {
                        break;
                    }
                    bytes += r.size;
                    batch.push(st.queue.pop_front().unwrap());
                }
                st.queue_bytes -= bytes - codec::FRAME_HEADER_SIZE;
                st.taken += batch.len() as u64;
                Some((batch, st.seq))
            }
        };
        let (batch, seq) = match batch {
            Some(b) => b,
            None => {
                match linger_until {
                    Some(deadline) => {
                        tokio::select! {
                            _ = p.wake.notified() => {}
                            _ = tokio::time::sleep_until(deadline) => {}
                        }
                    }
                    None => p.wake.notified().await,
                }
                continue;
            }
        };
        linger_until = None;
        let result = deliver(&p, &batch, seq).await;
        let mut st = p.state.lock().unwrap();
        match result {
            Ok(ack) => {
                st.seq += 1;
                complete(&mut st, batch, &ack);
            }
            Err(e) => {
                st.err = Some(e.clone());
                let queued: Vec<Pending> = st.queue.drain(..).collect();
                st.queue_bytes = 0;
                for r in batch.into_iter().chain(queued) {
                    st.buffered -= r.size;
                    st.resolved += 1;
                    let _ = r.tx.send(Err(e.clone()));
                }
            }
        }
        let resolved = st.resolved;
        drop(st);
        let _ = p.progress.send(resolved);
    }
}

/// Resolves the acks of a delivered batch: each record gets its own
/// position when the server reported the batch's.
fn complete(st: &mut State, batch: Vec<Pending>, ack: &Ack) {
    let first: Option<i64> = ack.start.parse().ok().filter(|_| ack.count == batch.len());
    for (i, r) in batch.into_iter().enumerate() {
        let mut a = Ack { count: 1, timestamp: ack.timestamp, duplicate: ack.duplicate, ..Ack::default() };
        match first {
            Some(n) => {
                a.start = (n + i as i64).to_string();
                a.next = (n + i as i64 + 1).to_string();
            }
            None => {
                a.start = ack.start.clone();
                a.next = ack.next.clone();
            }
        }
        st.buffered -= r.size;
        st.resolved += 1;
        let _ = r.tx.send(Ok(a));
    }
}

/// Errors after which a batch's outcome is unknown or it was refused for
/// now: sending it again under the same sequence number is safe.
fn retryable(e: &Error) -> bool {
    match e {
        Error::Api(a) => a.status == 429 || a.status >= 500,
        Error::Transport(_) => true,
        _ => false,
    }
}

/// Sends one batch until it is acknowledged, retrying what may be retried
/// under the same sequence number.
async fn deliver(p: &Shared, batch: &[Pending], seq: u64) -> Result<Ack> {
    let deadline = Instant::now() + p.cfg.delivery_timeout;
    let recs: Vec<AppendRecord> = batch.iter().map(|r| r.rec.clone()).collect();
    let body = pico::encode(&recs);
    let mut attempt = 1;
    loop {
        let hdr = ProducerHeaders { id: &p.id, epoch: p.epoch, seq };
        match pico::append_body(&p.t, &p.stream, body.clone(), recs.len(), Some(hdr)).await {
            Ok(ack) if ack.duplicate && attempt == 1 => {
                // Nothing of ours was sent with this sequence before: another
                // producer wrote it with the same id and epoch.
                return Err(Error::InvalidArgument(format!(
                    "producer {} epoch {}: batch {} was already written by another producer with the same id and epoch; use a higher epoch or a new id",
                    p.id, p.epoch, seq
                )));
            }
            Ok(ack) => return Ok(ack),
            Err(e) if !retryable(&e) => return Err(e),
            Err(e) => {
                let after = match &e {
                    Error::Api(a) => a.retry_after,
                    _ => None,
                };
                let wait = p.t.retry.delay(attempt, after);
                if Instant::now() + wait > deadline {
                    return Err(e);
                }
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
        }
    }
}
