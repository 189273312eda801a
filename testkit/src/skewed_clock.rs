//! A database server of a test's own whose clock runs ahead of the host's, for the rules that
//! must follow the database's clock rather than the service host's (a hold's deadline, the
//! payment window): hosts drift, and every instance must judge a deadline by the same clock.
//! The server runs with Debian's libfaketime preloaded (package `faketime`), which offsets
//! every wall-clock reading of the process; monotonic clocks are left alone, so the server's
//! timeouts keep their length.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::Backend;
use crate::mariadb::MariaDbNode;
use crate::postgres::PostgresNode;

/// Where Debian's `faketime` package puts the library, by architecture.
const LIBRARY_DIRS: [&str; 2] = [
    "/usr/lib/x86_64-linux-gnu/faketime",
    "/usr/lib/aarch64-linux-gnu/faketime",
];

/// A private PostgreSQL or MariaDB server whose `now()` is `ahead` of the host's.
#[derive(Debug)]
pub enum SkewedServer {
    Postgres(PostgresNode),
    MariaDb(MariaDbNode),
}

impl SkewedServer {
    /// Starts a server of `backend`'s kind with its clock `ahead` of the host's. Blocking: call
    /// it from `spawn_blocking` in an async test.
    pub fn start(backend: Backend, ahead: Duration) -> Self {
        let env = faketime_env(ahead);
        match backend {
            Backend::Postgres => {
                let node = PostgresNode::init(
                    "",
                    "local all all trust\nhost all all 127.0.0.1/32 trust\n",
                );
                node.start_with(&env);
                Self::Postgres(node)
            }
            Backend::MySql => Self::MariaDb(MariaDbNode::start_with(&[], &env)),
        }
    }

    /// A URL for `database` on the server (created by the service that connects).
    pub fn url(&self, database: &str) -> String {
        match self {
            Self::Postgres(node) => node.url(database, ""),
            Self::MariaDb(node) => node.url(database),
        }
    }

    /// The server's clock, as a statement there reads it. Blocking.
    pub fn now(&self) -> DateTime<Utc> {
        let text = match self {
            Self::Postgres(node) => node.psql(
                "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
            ),
            Self::MariaDb(node) => {
                node.sql("SELECT DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%dT%H:%i:%s.%fZ')")
            }
        };
        DateTime::parse_from_rfc3339(&text)
            .unwrap_or_else(|error| panic!("the server's clock {text:?}: {error}"))
            .with_timezone(&Utc)
    }
}

/// The environment that moves a process's wall clock `ahead`.
fn faketime_env(ahead: Duration) -> Vec<(&'static str, String)> {
    let library = LIBRARY_DIRS
        .iter()
        .map(|dir| PathBuf::from(dir).join("libfaketime.so.1"))
        .find(|library| library.exists())
        .expect("libfaketime, from Debian's package `faketime` (apt-get install faketime)");
    vec![
        ("LD_PRELOAD", library.display().to_string()),
        ("FAKETIME", format!("+{}", ahead.as_secs())),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
    ]
}
