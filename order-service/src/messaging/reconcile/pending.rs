//! `PENDING` orders that waited too long: a known verdict settles the order; no record at
//! all means inventory never saw the order, so its `order.created` is published again.

use platform::http::TraceContext;
use shared::events::{Envelope, OrderCreated, OrderEvent};
use shared::ids::{OrderId, UserId};
use shared::keys;
use sqlx::PgPool;

use super::ReconcileSettings;
use super::inventory::{Answer, Inventory, ReservationState};
use crate::db;
use crate::db::orders::OrderRow;
use crate::settle::{self, Verdict};

pub(super) async fn reconcile(
    db: &PgPool,
    inventory: &Inventory<'_>,
    settings: &ReconcileSettings,
) -> anyhow::Result<usize> {
    let stale =
        db::orders::claim_stale_pending(&mut *db.acquire().await?, settings.after, settings.batch)
            .await?;
    for order in &stale {
        let order_id = OrderId(order.order_id);
        let trace = TraceContext::new_root();
        match inventory.reservation(order_id).await? {
            Answer::Known(reservation) => {
                let verdict = match (reservation.state, reservation.rejection_reason) {
                    (ReservationState::Applied, _) => Verdict::Reserved,
                    (ReservationState::Rejected, Some(reason)) => Verdict::Rejected(reason),
                    (state, _) => {
                        tracing::warn!(%order_id, ?state, "pending order with a final reservation state");
                        continue;
                    }
                };
                tracing::info!(%order_id, ?verdict, "settled by reconciliation");
                let mut tx = db.begin().await?;
                let transition = settle::apply_verdict(&mut tx, order_id, verdict, &trace).await?;
                tx.commit().await?;
                transition.into_iter().for_each(settle::Transition::record);
            }
            Answer::Unknown => {
                tracing::info!(%order_id, "inventory never saw this order; publishing it again");
                republish(&mut *db.acquire().await?, order, &trace).await?;
            }
            Answer::Unreachable => break,
            Answer::Unexpected(status) => {
                tracing::warn!(%order_id, status, "unexpected answer from inventory")
            }
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
