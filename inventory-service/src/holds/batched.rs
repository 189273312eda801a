//! Confirms and cancels of holds this process did not take (or whose first end it already
//! saw), by group commit; the first end of a hold taken here rides in the next batch of its
//! products instead (`crate::deductions`, decision 0064), and comes here only when that
//! batch did not change the hold, to be decided and worded. Each kind has a queue, and a few
//! workers each take everything waiting (up to [`MAX_BATCH`]) into one statement and one
//! commit ([`super::queries::confirm_all`], [`super::queries::cancel_all`]). A confirm alone
//! costs a commit, and with it a WAL flush every other commit waits behind; a cancel alone
//! also writes its product's row, which a hot product's batches of tries and deductions then
//! wait for. In a batch, a hot product's row is written once for all the cancels that give
//! units back to it.
//!
//! A batch of one runs the same statement as a batch of a hundred: there is no other path
//! here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use platform::storage::Database;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::error::HoldError;
use super::queries::{self, HoldRow};
use super::step::Step;

/// The most confirms (or cancels) one statement decides.
pub const MAX_BATCH: usize = 128;
/// Workers per kind: batches of one kind in flight at once.
const WORKERS: usize = 2;
/// Attempts of a batch that lost a race (a deadlock, a lock wait past `lock_timeout`).
const ATTEMPTS: u32 = 5;

type Reply = oneshot::Sender<Result<Option<HoldRow>, HoldError>>;

struct Waiter {
    hold_id: String,
    reply: Reply,
}

/// The two queues. Cheap to clone; one per process.
#[derive(Debug, Clone)]
pub struct Ends {
    confirm: mpsc::UnboundedSender<Waiter>,
    cancel: mpsc::UnboundedSender<Waiter>,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("hold_id", &self.hold_id)
            .finish()
    }
}

impl Ends {
    /// Starts the workers; they stop once every clone of the returned value is dropped.
    pub fn spawn(db: &Database) -> Self {
        Self {
            confirm: queue(db, Step::Confirm),
            cancel: queue(db, Step::Cancel),
        }
    }

    /// Runs `step` on `hold_id` in the next batch of its kind: the hold as that statement left
    /// it (changed by it or not), or `None` when there is no row for it, or a try or cancel of
    /// it committed while the statement ran (then run it again).
    pub async fn run(&self, step: Step, hold_id: &str) -> Result<Option<HoldRow>, HoldError> {
        let (reply, answer) = oneshot::channel();
        let waiter = Waiter {
            hold_id: hold_id.to_owned(),
            reply,
        };
        let queue = match step {
            Step::Confirm => &self.confirm,
            Step::Cancel => &self.cancel,
        };
        queue
            .send(waiter)
            .map_err(|_| anyhow::anyhow!("the hold workers stopped"))?;
        answer.await.unwrap_or_else(|_| {
            Err(anyhow::anyhow!("the hold batch stopped before answering").into())
        })
    }
}

fn queue(db: &Database, step: Step) -> mpsc::UnboundedSender<Waiter> {
    let (sender, receiver) = mpsc::unbounded_channel();
    let receiver = Arc::new(Mutex::new(receiver));
    for _ in 0..WORKERS {
        tokio::spawn(work(db.clone(), step, Arc::clone(&receiver)));
    }
    sender
}

async fn work(db: Database, step: Step, receiver: Arc<Mutex<mpsc::UnboundedReceiver<Waiter>>>) {
    loop {
        let batch = {
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match receiver.try_recv() {
                    Ok(waiter) => batch.push(waiter),
                    Err(_) => break,
                }
            }
            batch
        };
        answer(&db, step, batch).await;
    }
}

async fn answer(db: &Database, step: Step, batch: Vec<Waiter>) {
    let mut ids: Vec<&str> = batch.iter().map(|w| w.hold_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    match decide(db, step, &ids).await {
        Ok(rows) => {
            let rows: HashMap<String, HoldRow> = rows
                .into_iter()
                .map(|row| (row.hold_id.clone(), row))
                .collect();
            let mut answered = std::collections::HashSet::new();
            for waiter in batch {
                let mut row = rows.get(&waiter.hold_id).cloned();
                // A hold asked twice in one batch changed once: the repeat sees it unchanged.
                if !answered.insert(waiter.hold_id.clone())
                    && let Some(row) = row.as_mut()
                {
                    row.changed = false;
                }
                // A waiter that left (its client timed out) is no loss: the outcome is stored.
                let _ = waiter.reply.send(Ok(row));
            }
        }
        Err(error) => {
            let busy = matches!(error, sqlx::Error::PoolTimedOut);
            let mut error = Some(HoldError::from(error));
            for waiter in batch {
                let failed = match (busy, error.take()) {
                    (true, _) => HoldError::Busy("the database is busy; retry shortly".to_owned()),
                    (false, Some(first)) => first,
                    (false, None) => {
                        anyhow::anyhow!("another hold of the same batch failed it").into()
                    }
                };
                let _ = waiter.reply.send(Err(failed));
            }
        }
    }
}

/// The batch's statement, again after a lost race (nothing was written then).
async fn decide(db: &Database, step: Step, ids: &[&str]) -> sqlx::Result<Vec<HoldRow>> {
    let mut attempt = 1;
    loop {
        let mut conn = db.acquire().await?;
        let decided = match step {
            Step::Confirm => queries::confirm_all(conn.conn(), ids).await,
            Step::Cancel => queries::cancel_all(conn.conn(), ids).await,
        };
        match decided {
            Err(error)
                if attempt < ATTEMPTS
                    && platform::messaging::consumer::is_database_contention(&error) =>
            {
                tracing::debug!(%error, ?step, "retrying a batch of hold ends");
                tokio::time::sleep(platform::retry::backoff(
                    attempt,
                    Duration::from_millis(5),
                    Duration::from_millis(100),
                ))
                .await;
                attempt += 1;
            }
            done => return done,
        }
    }
}
