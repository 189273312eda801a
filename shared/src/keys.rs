//! Names both services must spell the same way: exchanges, routing keys, queues, Redis keys.

use crate::ids::ProductId;

/// Topic exchange order-service publishes to.
pub const ORDERS_EXCHANGE: &str = "orders.events";
/// Topic exchange inventory-service publishes to.
pub const INVENTORY_EXCHANGE: &str = "inventory.events";
/// Direct exchange every queue dead-letters into, keyed by the queue's own name.
pub const DEAD_LETTER_EXCHANGE: &str = "dlx";

pub const ORDER_CREATED: &str = "order.created";
pub const ORDER_CANCELLED: &str = "order.cancelled";
pub const INVENTORY_RESERVED: &str = "inventory.reserved";
pub const INVENTORY_REJECTED: &str = "inventory.rejected";
pub const INVENTORY_RELEASED: &str = "inventory.released";

/// inventory-service's inbox, bound to `orders.events` with `order.*`.
pub const INVENTORY_ORDER_EVENTS_QUEUE: &str = "inventory-service.order-events";
pub const ORDER_EVENTS_BINDING: &str = "order.*";
/// order-service's inbox, bound to `inventory.events` with `inventory.*`.
pub const ORDER_INVENTORY_EVENTS_QUEUE: &str = "order-service.inventory-events";
pub const INVENTORY_EVENTS_BINDING: &str = "inventory.*";

/// Deliveries of one message before the broker dead-letters it instead of redelivering: a
/// backstop. The consumers dead-letter a message that keeps failing themselves, after 5
/// failures counted by its id; a quorum queue also counts every return of a message a closed
/// channel held (a consumer killed, a connection lost). 5 failures leave 95 deliveries for
/// returns, so a valid message is dead-lettered by the broker only if 95 consumers died while
/// holding it. Part of the queue's declared arguments, so both services must use the same value.
pub const DELIVERY_LIMIT: i64 = 100;

/// The dead-letter queue of `queue`, bound to [`DEAD_LETTER_EXCHANGE`] with the queue's name.
pub fn dead_letter_queue(queue: &str) -> String {
    format!("{queue}.dlq")
}

/// Redis key builders. The prefix lets several deployments (or test runs) share one Redis.
///
/// The part in braces is the key's hash tag: on a Redis Cluster only it picks the slot, so
/// the keys one script changes together (a token's state and its claim id; a product's lock
/// and its waiter) sit in one slot, while different tokens and products spread over the
/// cluster. A prefix must not hold `{`, or its braces would be the tag.
#[derive(Debug, Clone, Default)]
pub struct RedisKeys {
    prefix: String,
}

impl RedisKeys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// State of one idempotency token: issued, in flight, or the finished response.
    pub fn idempotency_token(&self, token: &uuid::Uuid) -> String {
        format!("{}idem:{{{token}}}", self.prefix)
    }

    /// The id of the claim that holds one idempotency token in flight, beside its state (whose
    /// form stays the one every release reads): a claim run again recognises its first run.
    pub fn idempotency_claim(&self, token: &uuid::Uuid) -> String {
        format!("{}idem:{{{token}}}:claim", self.prefix)
    }

    /// The stock lock of one product.
    pub fn product_lock(&self, product: ProductId) -> String {
        format!("{}lock:product:{{{product}}}", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_prefix() {
        let keys = RedisKeys::new("t1:");
        assert_eq!(keys.product_lock(ProductId(7)), "t1:lock:product:{7}");
        let token = uuid::Uuid::nil();
        assert_eq!(
            keys.idempotency_claim(&token),
            format!("t1:idem:{{{token}}}:claim")
        );
        assert_eq!(
            dead_letter_queue(INVENTORY_ORDER_EVENTS_QUEUE),
            "inventory-service.order-events.dlq"
        );
    }
}
