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
