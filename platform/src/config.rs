//! Tiny helpers for reading configuration from the environment; errors name the variable.

use std::ops::RangeInclusive;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};

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

/// The variable parsed as `T` and at least `min`, or `default` when it is unset or empty.
///
/// A count of zero (a batch of nothing, no concurrency, an interval that never ticks) would
/// not fail at start but spin, stall or panic later; refusing it here names the variable.
pub fn at_least<T>(name: &str, default: T, min: T) -> anyhow::Result<T>
where
    T: FromStr + PartialOrd + std::fmt::Display,
    T::Err: std::fmt::Display,
{
    let value = parsed(name, default)?;
    if value < min {
        bail!("environment variable {name}={value} is out of range: it must be at least {min}");
    }
    Ok(value)
}

/// The variable parsed as `T` and inside `range`, or `default` when it is unset or empty.
pub fn within<T>(name: &str, default: T, range: RangeInclusive<T>) -> anyhow::Result<T>
where
    T: FromStr + PartialOrd + std::fmt::Display,
    T::Err: std::fmt::Display,
{
    let value = parsed(name, default)?;
    if !range.contains(&value) {
        bail!(
            "environment variable {name}={value} is out of range: it must be between {} and {}",
            range.start(),
            range.end()
        );
    }
    Ok(value)
}

/// A duration given in whole seconds, at least one.
pub fn positive_secs(name: &str, default: u64) -> anyhow::Result<Duration> {
    at_least(name, default, 1).map(Duration::from_secs)
}

/// A duration given in whole milliseconds, at least `min`.
pub fn millis_at_least(name: &str, default: u64, min: u64) -> anyhow::Result<Duration> {
    at_least(name, default, min).map(Duration::from_millis)
}

/// The service's PostgreSQL: `DATABASE_URLS` (a primary and its standbys, comma-separated,
/// in any order) or `DATABASE_URL` (one host), else `default`; each URL checked at start.
/// Both set is refused: which of the two is meant cannot be told, and whichever one a rule of
/// precedence passed over would be ignored without a word.
pub fn database_urls(default: &str) -> anyhow::Result<Vec<String>> {
    let (name, urls): (&str, Vec<String>) =
        match (optional("DATABASE_URLS"), optional("DATABASE_URL")) {
            (Some(_), Some(_)) => bail!(
                "environment variables DATABASE_URL and DATABASE_URLS are both set: set one \
                 (DATABASE_URLS for a primary and its standbys)"
            ),
            (Some(list), None) => (
                "DATABASE_URLS",
                list.split(',')
                    .map(str::trim)
                    .filter(|url| !url.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
            (None, one) => (
                "DATABASE_URL",
                vec![one.unwrap_or_else(|| default.to_owned())],
            ),
        };
    checked_database_urls(name, urls)
}

/// `urls`, read from the variable `name`: at least one, each valid for its backend, all of
/// one backend (a PostgreSQL primary with a MySQL standby is no cluster).
fn checked_database_urls(name: &str, urls: Vec<String>) -> anyhow::Result<Vec<String>> {
    if urls.is_empty() {
        bail!("environment variable {name} names no URL");
    }
    let backends = urls
        .iter()
        .map(|url| {
            check_database_url(url)
                .with_context(|| format!("environment variable {name} is not valid"))
        })
        .collect::<anyhow::Result<std::collections::HashSet<_>>>()?;
    if backends.len() > 1 {
        bail!("environment variable {name} mixes PostgreSQL and MySQL URLs");
    }
    Ok(urls)
}

/// The backend `url` names, its options checked as its driver reads them; an unknown scheme
/// stops the start. The URL itself is not repeated (it may carry a password).
fn check_database_url(url: &str) -> anyhow::Result<crate::storage::Backend> {
    let backend = crate::storage::Backend::of_url(url)?;
    match backend {
        crate::storage::Backend::Postgres => {
            crate::storage::postgres::connect_options(url).map(drop)?;
        }
        crate::storage::Backend::MySql => {
            crate::storage::mysql::connect_options(url).map(drop)?;
        }
    }
    Ok(backend)
}

/// An AMQP URL, checked at start: the broker supervisor connects lazily and would otherwise
/// retry a URL that can never work for as long as the service runs.
pub fn amqp_url(name: &str, default: &str) -> anyhow::Result<String> {
    let url = string(name, default);
    check_amqp_url(&url)
        .with_context(|| format!("environment variable {name} is not an AMQP URL"))?;
    Ok(url)
}

/// The broker's nodes: `AMQP_URLS` (comma-separated, one URL per node of a cluster) or
/// `AMQP_URL` (one node, `default` when unset). Setting both is refused: which one is meant
/// cannot be told, and a cluster silently reduced to one node loses what it was for.
pub fn amqp_nodes(default: &str) -> anyhow::Result<Vec<String>> {
    match (optional("AMQP_URLS"), optional("AMQP_URL")) {
        (Some(_), Some(_)) => bail!(
            "environment variables AMQP_URL and AMQP_URLS are both set: set AMQP_URL for one \
             broker, or AMQP_URLS for the nodes of a cluster"
        ),
        (Some(list), None) => amqp_url_list("AMQP_URLS", &list),
        (None, _) => Ok(vec![amqp_url("AMQP_URL", default)?]),
    }
}

/// `list` split at commas, each entry checked as an AMQP URL; an error names `name` and the
/// entry's position (not the URL, which carries a password).
fn amqp_url_list(name: &str, list: &str) -> anyhow::Result<Vec<String>> {
    list.split(',')
        .map(str::trim)
        .enumerate()
        .map(|(n, url)| {
            check_amqp_url(url).with_context(|| {
                format!(
                    "environment variable {name}: entry {} is not an AMQP URL",
                    n + 1
                )
            })?;
            Ok(url.to_owned())
        })
        .collect()
}

fn check_amqp_url(url: &str) -> anyhow::Result<()> {
    if url.is_empty() {
        bail!("it is empty");
    }
    url.parse::<lapin::uri::AMQPUri>()
        .map(drop)
        .map_err(|e| anyhow!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_names_its_backend_and_a_refusal_never_repeats_it() {
        use crate::storage::Backend;
        for (good, backend) in [
            (
                "postgres://postgres@127.0.0.1:5432/orders",
                Backend::Postgres,
            ),
            (
                "PostgreSQL://u:p@db/orders?sslmode=require",
                Backend::Postgres,
            ),
            ("mysql://root:secret@127.0.0.1:3306/orders", Backend::MySql),
            (
                "mariadb://root:secret@127.0.0.1:3306/orders",
                Backend::MySql,
            ),
        ] {
            assert_eq!(check_database_url(good).expect(good), backend, "{good}");
        }
        for (bad, says) in [
            (
                "foo://root:secret@127.0.0.1/orders",
                "unknown scheme `foo://`",
            ),
            ("root:secret@127.0.0.1/orders", "not a URL"),
        ] {
            let refusal = check_database_url(bad).expect_err(bad).to_string();
            assert!(refusal.contains(says), "{bad}: {refusal}");
            assert!(!refusal.contains("secret"), "{refusal}");
        }
    }

    #[test]
    fn database_urls_are_all_of_one_backend() {
        let urls = |list: &[&str]| list.iter().map(|u| (*u).to_owned()).collect::<Vec<_>>();
        let mixed = checked_database_urls(
            "DATABASE_URLS",
            urls(&["postgres://db-a/orders", "mysql://db-b/orders"]),
        )
        .expect_err("mixed");
        assert!(
            mixed.to_string().contains("mixes PostgreSQL and MySQL"),
            "{mixed}"
        );
        let mysql = urls(&["mysql://db-a/orders", "mariadb://db-b/orders"]);
        assert_eq!(
            checked_database_urls("DATABASE_URLS", mysql.clone()).expect("one backend"),
            mysql
        );
        assert!(checked_database_urls("DATABASE_URLS", Vec::new()).is_err());
    }

    #[test]
    fn a_list_of_amqp_urls_keeps_its_order_and_refuses_a_bad_or_empty_entry() {
        let nodes = amqp_url_list(
            "AMQP_URLS",
            "amqp://guest:guest@10.0.0.1:5672/%2f, amqp://guest:guest@10.0.0.2:5672/%2f",
        )
        .expect("two good nodes");
        assert_eq!(
            nodes,
            [
                "amqp://guest:guest@10.0.0.1:5672/%2f",
                "amqp://guest:guest@10.0.0.2:5672/%2f"
            ]
        );
        for (list, entry) in [
            ("amqp://guest:guest@10.0.0.1:5672/%2f,not a url", "entry 2"),
            ("amqp://guest:guest@10.0.0.1:5672/%2f,", "entry 2"),
            (",amqp://guest:guest@10.0.0.1:5672/%2f", "entry 1"),
        ] {
            let error = format!("{:#}", amqp_url_list("AMQP_URLS", list).expect_err(list));
            assert!(
                error.contains("AMQP_URLS") && error.contains(entry),
                "{list}: {error}"
            );
        }
    }
}
