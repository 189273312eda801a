//! The expiry of orders whose payment window closed: a loop on every instance moves the
//! orders still `AWAITING_PAYMENT` at their `payment_due_at` to `EXPIRED` within a period, and
//! in the same transaction asks inventory for their stock back through the path a cancellation
//! takes ([`settle::request_releases`]). A cancel that finds the window closed expires its
//! order with the same code ([`expire`]): there is one way to expire an order.
//!
//! Several instances run the loop at once: a batch is claimed with `FOR UPDATE SKIP LOCKED`,
//! so each due order is expired by one of them, and an order a confirm holds is left to it.

use std::time::Duration;

use anyhow::Context;
use platform::messaging::outbox::{NewOutboxRow, OutboxSignal};
use platform::storage::{Conn, Database};
use platform::telemetry::TraceContext;
use shared::ids::OrderId;
use tokio_util::sync::CancellationToken;

use crate::orders::OrderStatus;
use crate::orders::queries::OrderRow;
use crate::orders::settle::{self, Transition};

/// The most orders one transaction expires; a longer backlog takes several, back to back.
pub const BATCH: i64 = 100;

/// Expires what is due every `every` until `shutdown`, which it checks between batches only.
pub async fn run(db: Database, outbox: OutboxSignal, every: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        loop {
            match expire_batch(&db, &outbox).await {
                Ok(expired) => {
                    if expired < BATCH as usize || shutdown.is_cancelled() {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(error = format!("{error:#}"), "payment expiry round failed");
                    break;
                }
            }
        }
    }
}

/// One batch: nothing due costs one read and no transaction; otherwise up to [`BATCH`] orders
/// expire with their give-backs in one transaction, handed to the relay once committed. How
/// many expired.
pub async fn expire_batch(db: &Database, outbox: &OutboxSignal) -> anyhow::Result<usize> {
    let mut conn = db.acquire().await.context("acquiring a connection")?;
    if !super::queries::any_due(conn.conn()).await? {
        return Ok(0);
    }
    drop(conn);
    let mut tx = db.begin().await?;
    let expired = expire(tx.conn(), None, BATCH).await?;
    tx.commit().await?;
    outbox.committed(expired.events);
    let count = expired.orders.len();
    for (order, transition) in expired.orders {
        tracing::info!(order_id = %order.order_id, "payment window closed; order expired and its stock given back");
        transition.record();
    }
    Ok(count)
}

/// Expires up to `limit` due orders (only `only`'s when given, with its request's trace) and
/// writes their give-backs, in the caller's transaction.
pub async fn expire(
    mut conn: Conn<'_>,
    only: Option<(OrderId, &TraceContext)>,
    limit: i64,
) -> sqlx::Result<Expired> {
    let rows =
        super::queries::expire_due(conn.reborrow(), only.map(|(order, _)| order), limit).await?;
    // A new trace per order without a request: each order's saga is followed on its own.
    let trace = |_: &OrderRow| only.map_or_else(TraceContext::new_root, |(_, t)| t.clone());
    let releases = rows.iter().map(|row| (OrderId(row.order_id), trace(row)));
    let events = settle::request_releases(conn, releases).await?;
    let orders = rows
        .into_iter()
        .map(|row| {
            let transition =
                Transition::from_row(&row, OrderStatus::AwaitingPayment, OrderStatus::Expired);
            (row, transition)
        })
        .collect();
    Ok(Expired { orders, events })
}

/// What [`expire`] did: each expired order with the transition to record, and the release
/// requests to hand to the relay, once the caller committed.
#[derive(Debug)]
pub struct Expired {
    pub orders: Vec<(OrderRow, Transition)>,
    pub events: Vec<NewOutboxRow>,
}
