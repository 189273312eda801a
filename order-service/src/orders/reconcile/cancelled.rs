//! `CANCELLED` and `EXPIRED` orders (both gave their stock back) whose stock is not known to
//! be back. Inventory's record decides:
//! - `RELEASED`, `CANCELLED` (a tombstone) or `REJECTED`: it holds nothing for the order, for
//!   good; that is recorded and the order is not asked about again;
//! - `APPLIED`, or no record at all (the cancellation must still go, to leave a tombstone for
//!   a creation that may yet arrive): `order.cancelled` is sent again as a new event, unless
//!   one still waits in the outbox (checked for the whole round in one statement, and sent in
//!   one transaction). The order is asked about again next period, until inventory's answer
//!   or its `inventory.released` records the release.

use platform::storage::Database;
use platform::telemetry::TraceContext;
use shared::ids::OrderId;
use shared::keys;

use super::ReconcileSettings;
use super::inventory::Inventory;
use crate::orders::settle::{self, Effect, Incoming};

pub(super) async fn reconcile(
    db: &Database,
    inventory: &Inventory<'_>,
    settings: &ReconcileSettings,
) -> anyhow::Result<usize> {
    let stale = super::queries::claim_stale_cancelled(
        db.acquire().await?.conn(),
        settings.after,
        settings.batch,
    )
    .await?;
    let mut released = Vec::new();
    let mut to_send = Vec::new();
    // An error stops the asking, not the recording: what was learned before it is written.
    let asked = async {
        let mut answers = inventory.ask_each(&stale);
        while let Some((order, reservation)) = answers.next().await? {
            let order_id = OrderId(order.order_id);
            match reservation {
                Some(reservation) if reservation.state.holds_nothing() => {
                    tracing::info!(%order_id, state = ?reservation.state, "inventory holds nothing for the cancelled order");
                    released.push(Incoming::learned(Effect::Released(order_id)));
                }
                Some(_) | None => to_send.push(order_id),
            }
        }
        anyhow::Ok(())
    }
    .await;
    if !released.is_empty() {
        // Recorded through the consumer's path, as an `inventory.released` would be.
        let mut tx = db.begin().await?;
        settle::settle_all(tx.conn(), &released, settings.payment_window).await?;
        tx.commit().await?;
    }
    send_again(db, &to_send).await?;
    asked.map(|()| stale.len())
}

/// Sends `order.cancelled` again for each of `orders`, but for those whose last one still
/// waits in the outbox (broker down, relay backing off): another copy would only queue up
/// behind it.
async fn send_again(db: &Database, orders: &[OrderId]) -> sqlx::Result<()> {
    if orders.is_empty() {
        return Ok(());
    }
    let mut tx = db.begin().await?;
    let unsent = super::queries::unsent(tx.conn(), keys::ORDER_CANCELLED, orders).await?;
    let again = orders.iter().copied().filter(|order_id| {
        if unsent.contains(order_id) {
            tracing::debug!(%order_id, "a cancellation still waits in the outbox");
            return false;
        }
        tracing::info!(%order_id, "stock may still be held for a cancelled or expired order; sending its cancellation again");
        true
    });
    // Not handed over: the sweep sends it once it is `OUTBOX_SWEEP_AFTER_MS` old (a copy sent
    // again is in no hurry).
    settle::request_releases(
        tx.conn(),
        again.map(|order| (order, TraceContext::new_root())),
    )
    .await?;
    tx.commit().await
}
