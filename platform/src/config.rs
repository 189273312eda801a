//! Tiny helpers for reading configuration from the environment; errors name the variable.

use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, anyhow};

/// The variable's value, or `default` when it is unset or empty.
pub fn string(name: &str, default: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => value,
        _ => default.to_owned(),
    }
}

/// The variable's value, or `None` when it is unset or empty.
pub fn optional(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The variable parsed as `T`, or `default` when it is unset or empty.
pub fn parsed<T>(name: &str, default: T) -> anyhow::Result<T>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    match optional(name) {
        None => Ok(default),
        Some(raw) => raw
            .trim()
            .parse()
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("environment variable {name}={raw:?} is not valid")),
    }
}

/// A duration given in whole seconds.
pub fn secs(name: &str, default: u64) -> anyhow::Result<Duration> {
    parsed(name, default).map(Duration::from_secs)
}

/// A duration given in whole milliseconds.
pub fn millis(name: &str, default: u64) -> anyhow::Result<Duration> {
    parsed(name, default).map(Duration::from_millis)
}

/// Messaging knobs both services read the same way.
#[derive(Debug, Clone)]
pub struct MessagingConfig {
    /// `RELAY_BATCH_SIZE` (200), `OUTBOX_MAX_ATTEMPTS` (10), `OUTBOX_RETRY_BASE_MS` (200),
    /// `OUTBOX_RETRY_MAX_SECS` (60).
    pub relay: crate::relay::RelaySettings,
    /// `RETENTION_SECS` (604800 = 7 days): how long sent outbox rows and processed message
    /// ids are kept.
    pub retention: crate::outbox::Retention,
    /// `CONSUMER_CONCURRENCY` (16): deliveries handled at once.
    pub consumer_concurrency: usize,
    /// `CONSUMER_PREFETCH` (64): deliveries the broker sends ahead of acks.
    pub consumer_prefetch: u16,
    /// `VACUUM_EVERY_SECS` (15): how often the busiest tables are vacuumed while PostgreSQL's
    /// autovacuum is off.
    pub vacuum_every: Duration,
}

impl MessagingConfig {
    pub fn from_env() -> anyhow::Result<Self> {
        Ok(Self {
            relay: crate::relay::RelaySettings {
                batch_size: parsed("RELAY_BATCH_SIZE", 200)?,
                max_attempts: parsed("OUTBOX_MAX_ATTEMPTS", 10)?,
                base_backoff: millis("OUTBOX_RETRY_BASE_MS", 200)?,
                max_backoff: secs("OUTBOX_RETRY_MAX_SECS", 60)?,
                ..Default::default()
            },
            retention: crate::outbox::Retention {
                keep: secs("RETENTION_SECS", 7 * 24 * 3600)?,
                ..Default::default()
            },
            consumer_concurrency: parsed("CONSUMER_CONCURRENCY", 16)?,
            consumer_prefetch: parsed("CONSUMER_PREFETCH", 64)?,
            vacuum_every: secs("VACUUM_EVERY_SECS", 15)?,
        })
    }
}

impl Default for MessagingConfig {
    fn default() -> Self {
        Self {
            relay: Default::default(),
            retention: Default::default(),
            consumer_concurrency: 16,
            consumer_prefetch: 64,
            vacuum_every: Duration::from_secs(15),
        }
    }
}
