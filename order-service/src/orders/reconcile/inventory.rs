//! What inventory's `GET /reservations/{order_id}` says about an order.

use anyhow::Context;
use serde::Deserialize;
use shared::events::RejectionReason;
use shared::ids::OrderId;
pub(super) use shared::reservation::ReservationState;

#[derive(Debug, Deserialize)]
pub(super) struct Reservation {
    pub state: ReservationState,
    #[serde(default)]
    pub rejection_reason: Option<RejectionReason>,
}

#[derive(Debug)]
pub(super) enum Answer {
    Known(Reservation),
    /// 404: inventory saw no event of the order.
    Unknown,
    /// Inventory did not answer: the events wait in its queue; ask again next period.
    Unreachable,
    Unexpected(u16),
}

pub(super) struct Inventory<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
    admin_token: Option<&'a str>,
}

impl<'a> Inventory<'a> {
    pub(super) fn new(
        client: &'a reqwest::Client,
        base: &'a str,
        admin_token: Option<&'a str>,
    ) -> Self {
        Self {
            client,
            base: base.trim_end_matches('/'),
            admin_token,
        }
    }

    pub(super) async fn reservation(&self, order_id: OrderId) -> anyhow::Result<Answer> {
        let url = format!("{}/reservations/{}", self.base, order_id.0);
        let mut request = self.client.get(&url);
        if let Some(token) = self.admin_token {
            request = request.bearer_auth(token);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(%error, "inventory unreachable during reconciliation");
                return Ok(Answer::Unreachable);
            }
        };
        match response.status().as_u16() {
            200 => {
                let reservation = response
                    .json()
                    .await
                    .with_context(|| format!("reading the reservation of order {order_id}"))?;
                Ok(Answer::Known(reservation))
            }
            404 => Ok(Answer::Unknown),
            status => Ok(Answer::Unexpected(status)),
        }
    }
}
