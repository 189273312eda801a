//! Retention and the backlog gauges on MySQL / MariaDB: [`MaintenanceStore`] over
//! `platform_mysql::{outbox, inbox}`.

use std::time::Duration;

use platform_mysql::{inbox, outbox};

use super::MySqlStore;
use crate::messaging::retention::{Backlog, Expiring, MaintenanceStore};

impl MaintenanceStore for MySqlStore {
    async fn backlog(&self) -> sqlx::Result<Backlog> {
        let backlog = outbox::backlog(&self.0).await?;
        Ok(Backlog {
            pending: backlog.pending,
            oldest_secs: backlog.oldest_secs,
        })
    }

    async fn delete_expired(
        &self,
        what: Expiring,
        keep: Duration,
        batch: i64,
    ) -> sqlx::Result<u64> {
        match what {
            Expiring::SentOutboxRows => outbox::delete_sent_before(&self.0, keep, batch).await,
            Expiring::ProcessedMessages => {
                inbox::delete_processed_before(&self.0, keep, batch).await
            }
            Expiring::MessageFailures => inbox::delete_failures_before(&self.0, keep, batch).await,
        }
    }
}
