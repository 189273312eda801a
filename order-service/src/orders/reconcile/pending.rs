//! `PENDING` orders that waited too long: a known verdict settles the order; no record at
//! all means inventory never saw the order, so its `order.created` is published again,
//! unless one still waits in the outbox: at most one copy is outstanding per order, however
//! long the broker stays away.

use platform::messaging::outbox::NewOutboxRow;
use platform::storage::{Conn, Database};
use platform::telemetry::TraceContext;
use shared::events::{Envelope, OrderCreated, OrderEvent};
use shared::ids::{OrderId, UserId};
use shared::keys;

use super::ReconcileSettings;
use super::inventory::{Inventory, ReservationState};
use crate::orders::queries::OrderRow;
use crate::orders::settle::{self, Effect, Incoming, Verdict};

pub(super) async fn reconcile(
    db: &Database,
    inventory: &Inventory<'_>,
    settings: &ReconcileSettings,
) -> anyhow::Result<usize> {
    let stale = super::queries::claim_stale_pending(
        db.acquire().await?.conn(),
        settings.after,
        settings.batch,
    )
    .await?;
    let mut learned = Vec::new();
    let mut unseen = Vec::new();
    // An error stops the asking, not the settling: what was learned before it is written.
    let asked = async {
        let mut answers = inventory.ask_each(&stale);
        while let Some((order, reservation)) = answers.next().await? {
            let order_id = OrderId(order.order_id);
            let Some(reservation) = reservation else {
                unseen.push(order);
                continue;
            };
            let verdict = match (reservation.state, reservation.rejection_reason) {
                (ReservationState::Applied, _) => Verdict::Reserved,
                (ReservationState::Rejected, Some(reason)) => Verdict::Rejected(reason),
                (state, _) => {
                    tracing::warn!(%order_id, ?state, "pending order with a final reservation state");
                    continue;
                }
            };
            tracing::info!(%order_id, ?verdict, "settled by reconciliation");
            learned.push(Incoming::learned(Effect::Verdict(order_id, verdict)));
        }
        anyhow::Ok(())
    }
    .await;
    if !learned.is_empty() || !unseen.is_empty() {
        // What was learned goes through the consumer's path, in one transaction.
        let mut tx = db.begin().await?;
        let settled = settle::settle_all(tx.conn(), &learned, settings.payment_window).await?;
        let again = republications(tx.conn(), &unseen).await?;
        platform::messaging::outbox::enqueue_all(tx.conn(), &again).await?;
        tx.commit().await?;
        settled
            .transitions
            .into_iter()
            .for_each(settle::Transition::record);
    }
    asked.map(|()| stale.len())
}

/// The `order.created` to publish again of each order inventory never saw, but for those
/// whose last one still waits in the outbox (the broker is away, or the relay backs off):
/// another copy would only queue up behind it, and a round per period of the outage would
/// each add one. Checked for all of them in one statement, in the transaction that enqueues.
async fn republications(conn: Conn<'_>, unseen: &[&OrderRow]) -> sqlx::Result<Vec<NewOutboxRow>> {
    if unseen.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<OrderId> = unseen.iter().map(|order| OrderId(order.order_id)).collect();
    let unsent = super::queries::unsent(conn, keys::ORDER_CREATED, &ids).await?;
    let mut again = Vec::with_capacity(unseen.len());
    for (order, order_id) in unseen.iter().zip(ids) {
        if unsent.contains(&order_id) {
            tracing::debug!(%order_id, "inventory never saw this order; its order.created still waits in the outbox");
            continue;
        }
        tracing::info!(%order_id, "inventory never saw this order; publishing it again");
        again.push(republication(order)?);
    }
    Ok(again)
}

/// The order's `order.created` again, as a new event (inventory handles an order once,
/// whichever copy comes first).
fn republication(order: &OrderRow) -> sqlx::Result<NewOutboxRow> {
    let event = Envelope::new(OrderEvent::Created(OrderCreated {
        order_id: OrderId(order.order_id),
        user_id: UserId(order.user_id),
        items: order.items.0.clone(),
        amount: order.amount,
    }));
    NewOutboxRow::new(keys::ORDERS_EXCHANGE, &event, &TraceContext::new_root())
        .map_err(|e| sqlx::Error::Encode(Box::new(e)))
}
