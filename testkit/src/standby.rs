//! A PostgreSQL primary and a synchronous standby of a test's own, to show what the services
//! do when the primary goes and the standby is promoted. Both stopped and deleted when
//! dropped.

use std::time::{Duration, Instant};

use crate::postgres::PostgresNode;

/// The standby's name: its `application_name` on the primary, which
/// `synchronous_standby_names` waits for, and its replication slot.
const STANDBY: &str = "standby";

/// A primary whose every commit waits until the standby has it (`synchronous_commit = on`,
/// the standby named in `synchronous_standby_names`), and that standby, streaming from a
/// replication slot. Trust authentication on 127.0.0.1.
#[derive(Debug)]
pub struct PrivateStandby {
    pub primary: PostgresNode,
    pub standby: PostgresNode,
}

impl PrivateStandby {
    /// Starts both and waits until the standby is the primary's synchronous one.
    pub fn start() -> Self {
        let primary = PostgresNode::init(
            &format!("synchronous_standby_names = '{STANDBY}'\nsynchronous_commit = on\n"),
            "local all all trust\nhost all all 127.0.0.1/32 trust\n\
             host replication all 127.0.0.1/32 trust\n",
        );
        primary.start();
        // Promoted, the standby is a primary with no standby of its own: it must not wait
        // for one, or it could commit nothing.
        let standby = PostgresNode::standby_of(
            &primary,
            STANDBY,
            &format!("cluster_name = '{STANDBY}'\nsynchronous_standby_names = ''\n"),
        );
        standby.start();
        let pair = Self { primary, standby };
        pair.await_sync();
        pair
    }

    fn await_sync(&self) {
        let until = Instant::now() + Duration::from_secs(30);
        let query = format!(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY}'"
        );
        while self.primary.psql(&query) != "sync" {
            assert!(
                Instant::now() < until,
                "the standby did not become synchronous"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `DATABASE_URLS` for `database`: the primary, then the standby.
    pub fn urls(&self, database: &str) -> Vec<String> {
        vec![
            self.primary.url(database, ""),
            self.standby.url(database, ""),
        ]
    }

    /// The switch-over: the primary stops (`stop_mode` as [`PostgresNode::stop`] takes it:
    /// `fast` for a clean shutdown, `immediate` for what a crash leaves), then the standby
    /// is promoted.
    pub fn fail_over(&self, stop_mode: &str) {
        self.primary.stop(stop_mode);
        self.standby.promote();
    }
}
