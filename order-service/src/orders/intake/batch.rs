//! One batch of order intake, as if its requests had come one at a time (docs/contract.md §4.1):
//!
//! 1. Every token is claimed in one Redis round trip, in arrival order, so a second request
//!    for a token in the same batch finds the first one's claim (409, or 422 for another body).
//!    A token Redis does not know is claimed again when it proves it was issued here and is
//!    unexpired ([`crate::tokens::signed`]); PostgreSQL's unique key then settles whether it was
//!    used. Tokens Redis calls unknown, and every token while Redis is down, are answered from
//!    PostgreSQL's stored outcomes (one query), else 400 or 503.
//! 2. The claimed ones are written in one statement ([`crate::orders::intake::placement::insert_batch`]). One
//!    whose token already has an outcome is skipped alone and answered with that outcome.
//! 3. The requests are answered, and then the outcomes go to Redis in one round trip, for
//!    cheap replays ([`Record`]). Answering first takes a Redis round trip off every order's
//!    latency and opens no gap: until the outcome is there, the token's claim is in flight
//!    with the same request's fingerprint, which sends a replay to PostgreSQL's outcome (as
//!    after a Redis failover), and this instance's next batch, where a replay sent here
//!    would be, starts only once the outcomes are recorded.
//!
//! A token's taker is checked wherever its state is found (Redis or PostgreSQL): another
//! user's token is 403 before its body is compared.
//!
//! Redis losing its keys while a first request A is between its claim and its commit: a
//! repeat B finds no key and a valid token, and claims it again. B's insert then waits on
//! A's uncommitted `idempotency_keys_pkey` entry and, once A commits, skips it; B answers A's
//! outcome. No extra write was needed on A's path.

use std::collections::HashMap;

use platform::storage::redis::health::RedisCallError;
use platform::storage::{Conn, Session};
use uuid::Uuid;

use super::Writer;
use super::{Placed, Placement};
use crate::orders::place_error::PlaceError;
use crate::tokens::StoredResponse;
use crate::tokens::store::{Claim, ClaimRequest, Held};

type Answer = Result<Placed, PlaceError>;

/// Places the batch: the answers, index-aligned with `batch`, and the outcomes to record in
/// Redis once they are given.
pub(super) async fn place(
    writer: &Writer,
    conn: &mut Session,
    batch: Vec<Placement>,
) -> (Vec<Answer>, Record) {
    let mut answers: Vec<Option<Answer>> = batch.iter().map(|_| None).collect();
    let mut record = Record::default();
    let (claimed, ask_postgres) = claim(writer, &batch, &mut answers).await;
    let connection = match conn.get(&writer.db).await {
        Ok(connection) => connection,
        Err(error) => {
            release(writer, &batch, &claimed).await;
            return (finish(answers, Some(error)), record);
        }
    };
    let written = write(
        writer,
        connection,
        &batch,
        claimed,
        ask_postgres,
        &mut answers,
        &mut record,
    )
    .await;
    record.batch = batch;
    match written {
        Ok(()) => (finish(answers, None), record),
        Err(error) => {
            conn.discard();
            (finish(answers, Some(error)), record)
        }
    }
}

/// The outcomes of a batch to record in Redis after its requests were answered: the new
/// ones, and stored ones Redis had forgotten.
#[derive(Default)]
pub(super) struct Record {
    batch: Vec<Placement>,
    /// Indexes in `batch` of the orders this batch wrote.
    done: Vec<usize>,
    warm: Vec<(Uuid, StoredResponse)>,
}

impl Record {
    /// Records the outcomes in one round trip. When that fails, the new ones' tokens are
    /// given back instead of being left in flight: a retry then claims the token, is skipped
    /// by PostgreSQL's unique key and gets the stored response, instead of 409s.
    pub(super) async fn write(self, writer: &Writer) {
        let outcomes: Vec<(Uuid, &StoredResponse)> = self
            .done
            .iter()
            .map(|&i| (self.batch[i].row.token, &self.batch[i].row.response))
            .chain(self.warm.iter().map(|(token, response)| (*token, response)))
            .collect();
        if let Err(error) = writer.tokens.complete_all(&outcomes).await {
            tracing::warn!(%error, "could not cache responses in Redis; PostgreSQL has them");
            release(writer, &self.batch, &self.done).await;
        }
    }
}

/// Claims the tokens in one round trip. Returns the indexes whose tokens were claimed, and
/// those to answer from PostgreSQL with the error to give when it has no outcome either.
async fn claim(
    writer: &Writer,
    batch: &[Placement],
    answers: &mut [Option<Answer>],
) -> (Vec<usize>, Vec<(usize, PlaceError)>) {
    let requests: Vec<ClaimRequest<'_>> = batch
        .iter()
        .map(|p| ClaimRequest {
            token: &p.row.token,
            fingerprint: &p.row.response.fingerprint,
            recreate_until: p.recreate_until,
            taker: p.row.response.taker,
        })
        .collect();
    let (mut claimed, mut ask_postgres) = (Vec::new(), Vec::new());
    match writer.tokens.claim_all(&requests).await {
        Ok(claims) => {
            for (i, claim) in claims.into_iter().enumerate() {
                let mine = &batch[i].row.response;
                let fingerprint = &mine.fingerprint;
                match claim {
                    Claim::Claimed => claimed.push(i),
                    Claim::Done(first) => answers[i] = Some(replay(first, mine)),
                    // The script claims a token issued to this request's taker, so an issued
                    // token it leaves is someone else's, as is a claim by another taker.
                    Claim::IssuedTo(_) => answers[i] = Some(Err(PlaceError::TokenOfAnotherUser)),
                    Claim::InFlight { taker, .. } if taker != mine.taker => {
                        answers[i] = Some(Err(PlaceError::TokenOfAnotherUser));
                    }
                    // The claim may outlive its request: after a Redis failover the promoted
                    // replica can hold the claim but not the outcome recorded after it. An
                    // outcome in PostgreSQL is then the answer, not a 409 until the claim ages.
                    Claim::InFlight {
                        fingerprint: other, ..
                    } if &other == fingerprint => {
                        ask_postgres.push((i, PlaceError::RequestInProgress));
                    }
                    Claim::InFlight { .. } => {
                        answers[i] = Some(Err(PlaceError::IdempotencyKeyReused))
                    }
                    Claim::Unknown => ask_postgres.push((i, PlaceError::UnknownIdempotencyKey)),
                }
            }
        }
        Err(error) => {
            if !matches!(error, RedisCallError::Down) {
                tracing::warn!(%error, "Redis unavailable while claiming tokens");
            }
            // A used token is still answered from PostgreSQL; a new one cannot be verified
            // as unused without Redis.
            ask_postgres = (0..batch.len())
                .map(|i| (i, PlaceError::Unavailable("redis")))
                .collect();
        }
    }
    (claimed, ask_postgres)
}

async fn write(
    writer: &Writer,
    mut conn: Conn<'_>,
    batch: &[Placement],
    claimed: Vec<usize>,
    ask_postgres: Vec<(usize, PlaceError)>,
    answers: &mut [Option<Answer>],
    record: &mut Record,
) -> sqlx::Result<()> {
    let Record { done, warm, .. } = record;

    let tokens: Vec<Uuid> = ask_postgres
        .iter()
        .map(|(i, _)| batch[*i].row.token)
        .collect();
    let stored = match crate::tokens::queries::find_all(conn.reborrow(), &tokens).await {
        Ok(stored) => stored,
        Err(error) => {
            release(writer, batch, &claimed).await;
            return Err(error);
        }
    };
    for (i, otherwise) in ask_postgres {
        let placement = &batch[i];
        answers[i] = Some(match stored.get(&placement.row.token) {
            Some(first) => {
                warm.push((placement.row.token, first.clone()));
                replay(first.clone(), &placement.row.response)
            }
            None => Err(otherwise),
        });
    }

    let rows: Vec<_> = claimed.iter().map(|&i| batch[i].row.clone()).collect();
    let inserted =
        match crate::orders::intake::placement::insert_batch(conn.reborrow(), &rows).await {
            Ok(inserted) => inserted,
            Err(error) => {
                release(writer, batch, &claimed).await;
                return Err(error);
            }
        };
    let mut skipped = Vec::new();
    for &i in &claimed {
        if inserted.contains(&batch[i].row.token) {
            done.push(i);
            answers[i] = Some(Ok(Placed {
                response: batch[i].row.response.clone(),
                replayed: false,
            }));
        } else {
            skipped.push(i);
        }
    }
    if !inserted.is_empty() {
        // The statement committed on its own: the relay can publish its events as they are.
        writer
            .outbox
            .committed(done.iter().map(|&i| batch[i].row.event.clone()));
        metrics::counter!(crate::metrics::ORDER_TRANSITIONS_TOTAL, "to" => "PENDING")
            .increment(inserted.len() as u64);
    }
    settle_skipped(writer, conn, batch, &skipped, answers, warm).await
}

/// Answers the claimed requests whose token already had an outcome in PostgreSQL (Redis had
/// forgotten it was used) with that outcome.
async fn settle_skipped(
    writer: &Writer,
    conn: Conn<'_>,
    batch: &[Placement],
    skipped: &[usize],
    answers: &mut [Option<Answer>],
    warm: &mut Vec<(Uuid, StoredResponse)>,
) -> sqlx::Result<()> {
    if skipped.is_empty() {
        return Ok(());
    }
    let tokens: Vec<Uuid> = skipped.iter().map(|&i| batch[i].row.token).collect();
    let stored: HashMap<Uuid, StoredResponse> =
        crate::tokens::queries::find_all(conn, &tokens).await?;
    let mut unsettled = Vec::new();
    for &i in skipped {
        let placement = &batch[i];
        answers[i] = Some(match stored.get(&placement.row.token) {
            Some(first) => {
                warm.push((placement.row.token, first.clone()));
                replay(first.clone(), &placement.row.response)
            }
            // Skipped for an outcome that is not there: only a deleted row could do this.
            None => {
                unsettled.push(i);
                Err(PlaceError::RequestInProgress)
            }
        });
    }
    release(writer, batch, &unsettled).await;
    Ok(())
}

/// Gives back the tokens of `indexes` that their requests still hold, in one round trip.
async fn release(writer: &Writer, batch: &[Placement], indexes: &[usize]) {
    let held: Vec<Held<'_>> = indexes
        .iter()
        .map(|&i| Held {
            token: &batch[i].row.token,
            fingerprint: &batch[i].row.response.fingerprint,
            taker: batch[i].row.response.taker,
        })
        .collect();
    if let Err(error) = writer.tokens.release_all(&held).await {
        tracing::warn!(%error, "could not release tokens after a failure");
    }
}

/// Every answer, failing those not given yet with the batch's `error` (`None`: the batch
/// left them unanswered, a bug).
fn finish(answers: Vec<Option<Answer>>, error: Option<sqlx::Error>) -> Vec<Answer> {
    answers
        .into_iter()
        .map(|answer| answer.unwrap_or_else(|| Err(PlaceError::of_batch(error.as_ref()))))
        .collect()
}

/// The first response to the token again, for its taker and the same request only.
fn replay(first: StoredResponse, mine: &StoredResponse) -> Answer {
    if first.taker != mine.taker {
        return Err(PlaceError::TokenOfAnotherUser);
    }
    if first.fingerprint != mine.fingerprint {
        return Err(PlaceError::IdempotencyKeyReused);
    }
    Ok(Placed {
        response: first,
        replayed: true,
    })
}
