//! What inventory's `GET /reservations/{order_id}` says about an order, and asking it about
//! each order a round claimed.

use anyhow::Context;
use serde::Deserialize;
use shared::events::RejectionReason;
use shared::ids::OrderId;
pub(super) use shared::reservation::ReservationState;

use crate::orders::queries::OrderRow;

#[derive(Debug, Deserialize)]
pub(super) struct Reservation {
    pub state: ReservationState,
    #[serde(default)]
    pub rejection_reason: Option<RejectionReason>,
}

#[derive(Debug)]
enum Answer {
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

    async fn reservation(&self, order_id: OrderId) -> anyhow::Result<Answer> {
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

    /// Asks about each of `orders` in turn, as [`Answers::next`] is called.
    pub(super) fn ask_each<'r>(&'r self, orders: &'r [OrderRow]) -> Answers<'r> {
        Answers {
            inventory: self,
            orders: orders.iter(),
        }
    }
}

/// What inventory holds for each order a round claimed, one question at a time: an error
/// stops the asking, and the caller still records what was learned before it.
pub(super) struct Answers<'a> {
    inventory: &'a Inventory<'a>,
    orders: std::slice::Iter<'a, OrderRow>,
}

impl<'a> Answers<'a> {
    /// The next order with inventory's record of it (`None`: inventory saw no event of the
    /// order); `Ok(None)` once every order was asked about, or once inventory did not answer
    /// (the rest are asked about next period).
    pub(super) async fn next(
        &mut self,
    ) -> anyhow::Result<Option<(&'a OrderRow, Option<Reservation>)>> {
        while let Some(order) = self.orders.next() {
            let order_id = OrderId(order.order_id);
            match self.inventory.reservation(order_id).await? {
                Answer::Known(reservation) => return Ok(Some((order, Some(reservation)))),
                Answer::Unknown => return Ok(Some((order, None))),
                Answer::Unreachable => self.orders = [].iter(),
                Answer::Unexpected(status) => {
                    tracing::warn!(%order_id, status, "unexpected answer from inventory")
                }
            }
        }
        Ok(None)
    }
}
