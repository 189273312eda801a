//! The topology both services declare, in one place from `shared::keys`: the exchanges,
//! the quorum queues with their delivery limit, and the dead-letter exchange and queues.

use lapin::Channel;
use lapin::ExchangeKind;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use shared::keys;

/// Declares exchanges, quorum queues with their delivery limit and dead-lettering, and the
/// dead-letter queues. Idempotent; every declaration uses the arguments from `shared::keys`.
pub async fn declare_topology(channel: &Channel) -> lapin::Result<()> {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    for exchange in [keys::ORDERS_EXCHANGE, keys::INVENTORY_EXCHANGE] {
        channel
            .exchange_declare(
                exchange.into(),
                ExchangeKind::Topic,
                durable,
                FieldTable::default(),
            )
            .await?;
    }
    channel
        .exchange_declare(
            keys::DEAD_LETTER_EXCHANGE.into(),
            ExchangeKind::Direct,
            durable,
            FieldTable::default(),
        )
        .await?;
    let queues = [
        (
            keys::INVENTORY_ORDER_EVENTS_QUEUE,
            keys::ORDERS_EXCHANGE,
            keys::ORDER_EVENTS_BINDING,
        ),
        (
            keys::ORDER_INVENTORY_EVENTS_QUEUE,
            keys::INVENTORY_EXCHANGE,
            keys::INVENTORY_EVENTS_BINDING,
        ),
    ];
    let queue_options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    for (queue, exchange, binding) in queues {
        let dlq = keys::dead_letter_queue(queue);
        channel
            .queue_declare(dlq.as_str().into(), queue_options, quorum(None))
            .await?;
        channel
            .queue_bind(
                dlq.as_str().into(),
                keys::DEAD_LETTER_EXCHANGE.into(),
                queue.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        channel
            .queue_declare(queue.into(), queue_options, quorum(Some(queue)))
            .await?;
        channel
            .queue_bind(
                queue.into(),
                exchange.into(),
                binding.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok(())
}

/// Quorum-queue arguments; with `dead_letter_key`, also the delivery limit and dead-lettering.
fn quorum(dead_letter_key: Option<&str>) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    if let Some(key) = dead_letter_key {
        args.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongLongInt(keys::DELIVERY_LIMIT),
        );
        args.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString(keys::DEAD_LETTER_EXCHANGE.into()),
        );
        args.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString(key.into()),
        );
    }
    args
}
