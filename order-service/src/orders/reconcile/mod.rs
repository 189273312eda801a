//! Reconciliation: the saga's safety net for events that were lost, dead-lettered or never
//! consumed. Each round asks inventory's `GET /reservations/{order_id}` about
//! - orders still `PENDING` after `RECONCILE_AFTER_SECS` ([`pending`]): settled from
//!   inventory's record, or their `order.created` published again unless one still waits
//!   in the outbox;
//! - orders `CANCELLED` or `EXPIRED` that long ago whose release is not recorded
//!   ([`cancelled`]): their `order.cancelled` is sent again until inventory holds nothing for
//!   them, so a lost or dead cancellation never leaves stock deducted.
//!
//! Inventory handles each order once whichever copy of an event arrives first, so sending
//! one again is always safe.

mod cancelled;
mod inventory;
mod pending;
mod queries;

use std::time::Duration;

use platform::messaging::outbox::OutboxSignal;
use platform::storage::Database;
use tokio_util::sync::CancellationToken;

use self::inventory::Inventory;
use crate::orders::payment::PaymentWindow;

#[derive(Debug, Clone)]
pub struct ReconcileSettings {
    pub inventory_url: String,
    /// Sent as the bearer token: inventory may keep reservations to admins
    /// (`RESERVATIONS_REQUIRE_ADMIN`, with end-user identity on).
    pub admin_token: Option<String>,
    pub after: Duration,
    pub every: Duration,
    pub batch: i64,
    /// A reservation learned from inventory settles a `PENDING` order as the consumer would.
    pub payment_window: PaymentWindow,
}

/// Runs a round every `settings.every` until `shutdown`.
pub async fn run(
    db: Database,
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
/// open; then what it said is written through the consumer's settling path in one short
/// transaction per half (a cancellation sent again has one of its own), also when a later
/// question failed. The cancelled orders are
/// looked at even when the pending ones failed, so neither half can starve the other.
pub async fn reconcile_once(
    db: &Database,
    client: &reqwest::Client,
    settings: &ReconcileSettings,
) -> anyhow::Result<usize> {
    let inventory = Inventory::new(
        client,
        &settings.inventory_url,
        settings.admin_token.as_deref(),
    );
    let pending = pending::reconcile(db, &inventory, settings).await;
    let cancelled = cancelled::reconcile(db, &inventory, settings).await;
    Ok(pending? + cancelled?)
}
