//! Reconciliation: orders still `PENDING` after `RECONCILE_AFTER_SECS` are checked against
//! inventory's `GET /reservations/{order_id}`. A known verdict settles the order; no record
//! at all means inventory never saw the order, so its `order.created` is published again
//! (inventory handles an order once, whichever copy arrives first).

use std::time::Duration;

use platform::http::TraceContext;
use platform::outbox::OutboxSignal;
use serde::Deserialize;
use shared::events::{Envelope, OrderCreated, OrderEvent, RejectionReason};
use shared::ids::{OrderId, UserId};
use shared::keys;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::db::orders::OrderRow;
use crate::settle::{self, Verdict};

#[derive(Debug, Clone)]
pub struct ReconcileSettings {
    pub inventory_url: String,
    pub after: Duration,
    pub every: Duration,
    pub batch: i64,
}

/// What `GET /reservations/{order_id}` says.
#[derive(Debug, Deserialize)]
struct Reservation {
    state: String,
    #[serde(default)]
    rejection_reason: Option<RejectionReason>,
}

pub async fn run(
    db: PgPool,
    outbox: OutboxSignal,
    settings: ReconcileSettings,
    shutdown: CancellationToken,
) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap_or_default();
    let mut tick = tokio::time::interval(settings.every);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        match reconcile_once(&db, &client, &settings).await {
            Ok(0) => {}
            Ok(_) => outbox.wake(),
            Err(error) => {
                tracing::warn!(error = format!("{error:#}"), "reconciliation round failed")
            }
        }
    }
}

/// One round; returns how many orders it looked at. Inventory is asked with no transaction
/// open; each answer is applied in a short transaction of its own.
pub async fn reconcile_once(
    db: &PgPool,
    client: &reqwest::Client,
    settings: &ReconcileSettings,
) -> anyhow::Result<usize> {
    let stale =
        db::orders::claim_stale_pending(&mut *db.acquire().await?, settings.after, settings.batch)
            .await?;
    for order in &stale {
        let order_id = OrderId(order.order_id);
        let url = format!(
            "{}/reservations/{}",
            settings.inventory_url.trim_end_matches('/'),
            order.order_id
        );
        let response = match client.get(&url).send().await {
            Ok(response) => response,
            Err(error) => {
                // Inventory is down: the events wait in the queue; try again next period.
                tracing::debug!(%error, "inventory unreachable during reconciliation");
                break;
            }
        };
        let trace = TraceContext::new_root();
        match response.status().as_u16() {
            200 => {
                let reservation: Reservation = response.json().await?;
                let verdict = match (reservation.state.as_str(), reservation.rejection_reason) {
                    ("APPLIED", _) => Verdict::Reserved,
                    ("REJECTED", Some(reason)) => Verdict::Rejected(reason),
                    _ => {
                        tracing::warn!(%order_id, state = reservation.state, "pending order with a final reservation state");
                        continue;
                    }
                };
                tracing::info!(%order_id, ?verdict, "settled by reconciliation");
                let mut tx = db.begin().await?;
                let transition = settle::apply_verdict(&mut tx, order_id, verdict, &trace).await?;
                tx.commit().await?;
                transition.into_iter().for_each(settle::Transition::record);
            }
            404 => {
                tracing::info!(%order_id, "inventory never saw this order; publishing it again");
                republish(&mut *db.acquire().await?, order, &trace).await?;
            }
            status => tracing::warn!(%order_id, status, "unexpected answer from inventory"),
        }
    }
    Ok(stale.len())
}

async fn republish(
    conn: &mut sqlx::PgConnection,
    order: &OrderRow,
    trace: &TraceContext,
) -> sqlx::Result<()> {
    let event = Envelope::new(OrderEvent::Created(OrderCreated {
        order_id: OrderId(order.order_id),
        user_id: UserId(order.user_id),
        items: order.items.0.clone(),
        amount: order.amount,
    }));
    platform::outbox::enqueue(conn, keys::ORDERS_EXCHANGE, &event, trace).await
}
