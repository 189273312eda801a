//! A plain AMQP client for tests: publish raw messages and read queues directly.

/// A plain AMQP client for tests: publish raw messages and read queues directly.
#[derive(Debug)]
pub struct AmqpProbe {
    conn: lapin::Connection,
    channel: lapin::Channel,
}

/// A message read back from a queue.
#[derive(Debug, Clone)]
pub struct Received {
    pub routing_key: String,
    pub message_id: Option<String>,
    pub persistent: bool,
    pub content_type: Option<String>,
    pub traceparent: Option<String>,
    pub body: serde_json::Value,
}

/// An event as the services write it: `event_type` around `payload`, version 1, occurring now,
/// under a fresh (UUIDv7) event id. The id, and the envelope.
pub fn event_envelope(event_type: &str, payload: serde_json::Value) -> (String, serde_json::Value) {
    let event_id = uuid::Uuid::now_v7().to_string();
    let envelope = serde_json::json!({
        "event_id": event_id, "version": 1, "occurred_at": chrono::Utc::now(),
        "event_type": event_type, "payload": payload,
    });
    (event_id, envelope)
}

impl AmqpProbe {
    /// Connects to `url` and declares the service topology there (as the services do).
    pub async fn connect(url: &str) -> Self {
        let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
            .await
            .expect("AMQP connection");
        let channel = conn.create_channel().await.expect("channel");
        platform::messaging::topology::declare_topology(&channel)
            .await
            .expect("topology");
        Self { conn, channel }
    }

    /// Publishes `body` as-is (persistent, with `message_id` when given).
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        message_id: Option<&str>,
    ) {
        let mut properties = lapin::BasicProperties::default().with_delivery_mode(2);
        if let Some(id) = message_id {
            properties = properties.with_message_id(id.into());
        }
        self.channel
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                lapin::options::BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .expect("publish")
            .await
            .expect("publish confirm");
    }

    /// Publishes an [`event_envelope`] of `event_type` around `payload` to `exchange`, as the
    /// services publish events (the type is the routing key, the event id the message id);
    /// returns the event id.
    pub async fn publish_event(
        &self,
        exchange: &str,
        event_type: &str,
        payload: serde_json::Value,
    ) -> String {
        let (event_id, body) = event_envelope(event_type, payload);
        self.publish(
            exchange,
            event_type,
            body.to_string().as_bytes(),
            Some(&event_id),
        )
        .await;
        event_id
    }

    /// Takes (and acks) one message from `queue`, if any is there.
    pub async fn get(&self, queue: &str) -> Option<Received> {
        let message = self
            .channel
            .basic_get(
                queue.into(),
                lapin::options::BasicGetOptions { no_ack: true },
            )
            .await
            .expect("basic.get")?;
        let delivery = message.delivery;
        let properties = &delivery.properties;
        let traceparent = properties.headers().as_ref().and_then(|h| {
            h.inner().get("traceparent").and_then(|v| match v {
                lapin::types::AMQPValue::LongString(s) => Some(s.to_string()),
                _ => None,
            })
        });
        Some(Received {
            routing_key: delivery.routing_key.to_string(),
            message_id: properties.message_id().as_ref().map(|m| m.to_string()),
            persistent: *properties.delivery_mode() == Some(2),
            content_type: properties.content_type().as_ref().map(|c| c.to_string()),
            traceparent,
            body: serde_json::from_slice(&delivery.data).unwrap_or(serde_json::Value::Null),
        })
    }

    /// Plays `times` consumers that die holding the first message of `queue`: each takes it
    /// unacked on a channel of its own and closes the channel, which returns it to the queue
    /// (and counts one delivery of a quorum queue's limit). `false` if the queue was empty.
    pub async fn return_unacked(&self, queue: &str, times: u32) -> bool {
        for _ in 0..times {
            let channel = self.conn.create_channel().await.expect("channel");
            // A message just published, or just returned by the previous close, may take a
            // moment to be ready again.
            let until = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let taken = channel
                    .basic_get(
                        queue.into(),
                        lapin::options::BasicGetOptions { no_ack: false },
                    )
                    .await
                    .expect("basic.get");
                if taken.is_some() {
                    break;
                }
                if tokio::time::Instant::now() >= until {
                    return false;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            channel.close(200, "dying".into()).await.expect("close");
        }
        true
    }

    /// Polls `queue` until `count` messages were taken or `deadline` passes.
    pub async fn take(
        &self,
        queue: &str,
        count: usize,
        deadline: std::time::Duration,
    ) -> Vec<Received> {
        let until = tokio::time::Instant::now() + deadline;
        let mut taken = Vec::with_capacity(count);
        while taken.len() < count && tokio::time::Instant::now() < until {
            match self.get(queue).await {
                Some(message) => taken.push(message),
                None => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
        taken
    }

    /// Messages ready in `queue`.
    pub async fn ready(&self, queue: &str) -> u32 {
        self.channel
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await
            .expect("passive declare")
            .message_count()
    }
}
