//! Order intake in batches: group commit for `POST /orders`.
//!
//! Handlers do not write orders themselves. Each hands its validated, prepared order to the
//! one intake task of the process and waits for its own answer. The task takes everything
//! queued (up to `INTAKE_BATCH_MAX`), claims the batch's tokens in Redis in one round trip,
//! writes all its orders in one statement and one commit, answers each request, and records
//! the outcomes in Redis in one round trip before it takes the next batch. Requests that arrive meanwhile queue for the next
//! batch. Nothing waits to gather a batch: an idle service writes a batch of one at once, the
//! same code as a batch of sixty-four. This is how one WAL flush comes to serve many orders
//! (see [`placement`]).
//!
//! The task owns one pooled connection, kept from batch to batch (replaced after an error,
//! given back after each batch in a pool too small to spare it), on which its statement is
//! planned once on PostgreSQL ([`Session`], decision 0063). At shutdown it goes on until
//! the HTTP server has answered its last request, then writes whatever was still queued.

mod batch;
pub mod placement;

use chrono::{DateTime, Utc};
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use platform::messaging::outbox::OutboxSignal;
use platform::storage::{Database, Session};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::orders::intake::placement::NewPlacement;
use crate::orders::place_error::PlaceError;
use crate::tokens::StoredResponse;
use crate::tokens::store::TokenStore;

/// The answer to give: the stored response, and whether it is a replay.
#[derive(Debug)]
pub struct Placed {
    pub response: StoredResponse,
    pub replayed: bool,
}

/// A validated order ready for its batch.
#[derive(Debug, Clone)]
pub struct Placement {
    pub row: NewPlacement,
    /// The token's expiry when it proves it was issued here and is unexpired: a token Redis
    /// forgot is then claimed again rather than refused as unknown.
    pub recreate_until: Option<DateTime<Utc>>,
}

pub const INTAKE_WAITING: &str = "order_intake_waiting";
pub const INTAKE_BATCH_SIZE: &str = "order_intake_batch_size";

/// A request waiting for its batch.
struct Job {
    placement: Placement,
    reply: oneshot::Sender<Result<Placed, PlaceError>>,
}

/// What the intake task needs besides its queue.
#[derive(Clone, Debug)]
pub struct Writer {
    pub db: Database,
    pub tokens: TokenStore,
    /// Woken after each commit that wrote outbox rows.
    pub outbox: OutboxSignal,
}

/// The handlers' end of the intake queue. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Intake {
    queue: mpsc::Sender<Job>,
    /// The task's end, until [`Intake::run`] takes it.
    receiver: Arc<Mutex<Option<mpsc::Receiver<Job>>>>,
    batch_max: usize,
}

impl Intake {
    /// A queue for batches of at most `batch_max` orders (at least one).
    pub fn new(batch_max: usize) -> Self {
        let batch_max = batch_max.max(1);
        // Room for a few batches: beyond that, handlers wait to enqueue (and the request
        // timeout bounds how long), instead of the queue growing without limit.
        let (queue, receiver) = mpsc::channel(batch_max * 8);
        Self {
            queue,
            receiver: Arc::new(Mutex::new(Some(receiver))),
            batch_max,
        }
    }

    /// Queues `placement` for the next batch and waits for its answer.
    pub async fn submit(&self, placement: Placement) -> Result<Placed, PlaceError> {
        let (reply, answer) = oneshot::channel();
        metrics::gauge!(INTAKE_WAITING).increment(1.0);
        if self.queue.send(Job { placement, reply }).await.is_err() {
            metrics::gauge!(INTAKE_WAITING).decrement(1.0);
            return Err(PlaceError::Unavailable("order intake"));
        }
        answer.await.map_err(|_| {
            PlaceError::Unexpected(anyhow::anyhow!(
                "the order intake dropped a request without answering it"
            ))
        })?
    }

    /// The intake task: writes batches until `stop`, then drains what is queued. `stop` must
    /// come after the last handler that may submit has finished (see [`crate::serve`]).
    pub async fn run(&self, writer: Writer, stop: CancellationToken) -> anyhow::Result<()> {
        let taken = self
            .receiver
            .lock()
            .map_err(|_| anyhow::anyhow!("the intake queue's lock is poisoned"))?
            .take();
        let mut queue = taken.ok_or_else(|| anyhow::anyhow!("the intake already runs"))?;
        let mut conn = Session::default();
        let mut jobs = Vec::with_capacity(self.batch_max);
        loop {
            let taken = tokio::select! {
                biased;
                taken = queue.recv_many(&mut jobs, self.batch_max) => taken,
                () = stop.cancelled() => break,
            };
            if taken == 0 {
                return Ok(());
            }
            write(&writer, &mut conn, std::mem::take(&mut jobs)).await;
        }
        queue.close();
        while queue.recv_many(&mut jobs, self.batch_max).await > 0 {
            write(&writer, &mut conn, std::mem::take(&mut jobs)).await;
        }
        Ok(())
    }
}

/// Writes one batch, answers its requests, then records their outcomes in Redis. A panic
/// fails this batch's requests (their answers are dropped: each gets a 500) but not the task.
async fn write(writer: &Writer, conn: &mut Session, jobs: Vec<Job>) {
    metrics::gauge!(INTAKE_WAITING).decrement(jobs.len() as f64);
    metrics::histogram!(INTAKE_BATCH_SIZE).record(jobs.len() as f64);
    let (placements, replies): (Vec<_>, Vec<_>) =
        jobs.into_iter().map(|j| (j.placement, j.reply)).unzip();
    let run = std::panic::AssertUnwindSafe(batch::place(writer, conn, placements));
    let ran = run.catch_unwind().await;
    conn.end_batch(&writer.db);
    match ran {
        Ok((answers, record)) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                // The client may have gone (a timeout): its order stands, and a retry with
                // its token replays it.
                reply.send(answer).ok();
            }
            let recorded = std::panic::AssertUnwindSafe(record.write(writer));
            if recorded.catch_unwind().await.is_err() {
                tracing::error!("recording a batch's outcomes in Redis panicked");
            }
        }
        Err(_) => {
            tracing::error!("placing a batch of orders panicked");
            conn.discard();
        }
    }
}

/// Describes the intake metrics and exposes them at zero.
pub fn register_metrics() {
    metrics::describe_gauge!(INTAKE_WAITING, "Orders queued for the next intake batch");
    metrics::describe_histogram!(INTAKE_BATCH_SIZE, "Orders written per intake commit");
    metrics::gauge!(INTAKE_WAITING).set(0.0);
    platform::telemetry::metrics::zero_histogram(INTAKE_BATCH_SIZE);
}
