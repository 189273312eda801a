//! order-service's own metrics (docs/contract.md §5); HTTP, outbox and consumer metrics live in `platform`.

use platform::telemetry::metrics::{zero_counter, zero_histogram};

use crate::orders::OrderStatus;

pub const ORDER_TRANSITIONS_TOTAL: &str = "order_transitions_total";
pub const ORDER_END_TO_END_SECONDS: &str = "order_end_to_end_seconds";

/// Describes the metrics and exposes each at zero before its first event.
pub fn register() {
    platform::telemetry::metrics::handle();
    platform::messaging::relay::register_metrics();
    platform::messaging::consumer::register_metrics();
    metrics::describe_counter!(ORDER_TRANSITIONS_TOTAL, "Orders entering each status");
    metrics::describe_histogram!(
        ORDER_END_TO_END_SECONDS,
        metrics::Unit::Seconds,
        "Time from an order's creation to its first terminal status (CONFIRMED, REJECTED, \
         CANCELLED or EXPIRED; AWAITING_PAYMENT is none)"
    );
    // Every status, `AWAITING_PAYMENT` and `EXPIRED` too, whether or not a payment window is set.
    let statuses = OrderStatus::ALL.map(OrderStatus::as_str);
    zero_counter(ORDER_TRANSITIONS_TOTAL, "to", &statuses);
    zero_histogram(ORDER_END_TO_END_SECONDS);
}
