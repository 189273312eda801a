//! Messaging: the broker and its topology, the transactional outbox and its relay, the
//! consumer loop with its one-by-one fallback. (The ids of processed messages are written by each
//! consumer's one write statement, in the same commit as their effect.)

pub mod background;
pub mod broker;
mod confirms;
pub mod consumer;
pub mod linger;
pub mod outbox;
pub mod relay;
pub mod retention;
pub mod topology;

use std::time::Duration;

use crate::config::{at_least, millis_at_least, positive_secs};

/// Messaging knobs both services read the same way.
#[derive(Debug, Clone)]
pub struct MessagingConfig {
    /// `RELAY_BATCH_SIZE` (200), `OUTBOX_MAX_ATTEMPTS` (10), `OUTBOX_RETRY_BASE_MS` (200),
    /// `OUTBOX_RETRY_MAX_SECS` (60), `OUTBOX_SWEEP_AFTER_MS` (5000: the age from which the
    /// sweep publishes a row nobody has tried), and `BATCH_LINGER_MS` (10): the longest the relay
    /// and the consumers wait for a batch to fill, when their pace promises company (0: never;
    /// see [`linger`]).
    pub relay: relay::RelaySettings,
    /// `RETENTION_SECS` (604800 = 7 days): how long sent outbox rows and processed message
    /// ids are kept.
    pub retention: retention::Retention,
    /// `CONSUMER_CONCURRENCY` (1): channels consuming the queue at once, each handling one
    /// batch of up to `CONSUMER_PREFETCH` deliveries at a time.
    pub consumer_concurrency: usize,
    /// `CONSUMER_PREFETCH` (256): deliveries the broker sends ahead of acks. Also the largest
    /// batch: at 64, a flash sale left the consumers a growing backlog; 1,024 made each batch
    /// (and so the lock hold and the transaction) long enough to cost more than it saved.
    pub consumer_prefetch: u16,
    /// `VACUUM_EVERY_SECS` (15): how often the busiest tables are vacuumed while PostgreSQL's
    /// autovacuum is off.
    pub vacuum_every: Duration,
}

impl MessagingConfig {
    pub fn from_env() -> anyhow::Result<Self> {
        Ok(Self {
            relay: relay::RelaySettings {
                batch_size: at_least("RELAY_BATCH_SIZE", 200, 1)?,
                max_attempts: at_least("OUTBOX_MAX_ATTEMPTS", 10, 1)?,
                base_backoff: millis_at_least("OUTBOX_RETRY_BASE_MS", 200, 1)?,
                max_backoff: positive_secs("OUTBOX_RETRY_MAX_SECS", 60)?,
                sweep_after: millis_at_least("OUTBOX_SWEEP_AFTER_MS", 5000, 1000)?,
                linger: linger::Linger::new(millis_at_least(
                    "BATCH_LINGER_MS",
                    linger::DEFAULT_WAIT_MS,
                    0,
                )?),
                ..Default::default()
            },
            retention: retention::Retention {
                keep: positive_secs("RETENTION_SECS", 7 * 24 * 3600)?,
                ..Default::default()
            },
            consumer_concurrency: at_least("CONSUMER_CONCURRENCY", 1, 1)?,
            // 0 means "unlimited" to AMQP: the broker would push the whole queue at once.
            consumer_prefetch: at_least("CONSUMER_PREFETCH", 256, 1)?,
            vacuum_every: positive_secs("VACUUM_EVERY_SECS", 15)?,
        })
    }
}

impl Default for MessagingConfig {
    fn default() -> Self {
        Self {
            relay: Default::default(),
            retention: Default::default(),
            consumer_concurrency: 1,
            consumer_prefetch: 256,
            vacuum_every: Duration::from_secs(15),
        }
    }
}
