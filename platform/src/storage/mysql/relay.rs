//! The outbox relay's store on MySQL / MariaDB: [`RelayStore`] over the checked statements of
//! `platform_mysql::outbox`. The rules are the relay's; this only runs its reads and writes.

use std::time::Duration;

use anyhow::Context;
use platform_mysql::outbox::{self, ClaimedRow};
use sqlx::{MySql, Transaction};
use uuid::Uuid;

use super::MySqlStore;
use crate::messaging::relay::{Claimed, Failure, OutboxRow, RelayStore};

/// A claim on MySQL: the transaction holding the rows' locks.
#[derive(Debug)]
pub struct MySqlClaim {
    tx: Transaction<'static, MySql>,
    rows: Vec<OutboxRow>,
}

impl From<ClaimedRow> for OutboxRow {
    fn from(row: ClaimedRow) -> Self {
        Self {
            event_id: row.event_id,
            exchange: row.exchange,
            routing_key: row.routing_key,
            payload: row.payload,
            headers: row.headers,
            attempts: row.attempts,
        }
    }
}

impl RelayStore for MySqlStore {
    type Claim = MySqlClaim;

    async fn any_due(&self, min_age: Duration) -> anyhow::Result<bool> {
        outbox::any_due(&self.0, min_age)
            .await
            .context("looking for outbox rows to sweep")
    }

    async fn claim(&self, limit: i64, min_age: Duration) -> anyhow::Result<MySqlClaim> {
        let mut tx = self
            .0
            .begin()
            .await
            .context("beginning the relay transaction")?;
        let rows = outbox::claim(&mut tx, limit, min_age)
            .await
            .context("claiming outbox rows")?;
        Ok(MySqlClaim {
            tx,
            rows: rows.into_iter().map(OutboxRow::from).collect(),
        })
    }

    async fn mark_sent(&self, ids: &[Uuid]) -> anyhow::Result<()> {
        outbox::mark_sent(&self.0, ids)
            .await
            .context("marking outbox rows sent")
            .map(drop)
    }

    async fn record_failures(&self, failures: &[Failure]) -> anyhow::Result<()> {
        for failure in failures {
            record_failure(&self.0, failure).await?;
        }
        Ok(())
    }
}

impl Claimed for MySqlClaim {
    fn rows(&self) -> &[OutboxRow] {
        &self.rows
    }

    async fn settle(mut self, sent: &[Uuid], failures: &[Failure]) -> anyhow::Result<()> {
        for failure in failures {
            record_failure(&mut *self.tx, failure).await?;
        }
        outbox::mark_sent(&mut *self.tx, sent)
            .await
            .context("marking outbox rows sent")?;
        self.tx
            .commit()
            .await
            .context("committing the relay transaction")
    }
}

async fn record_failure(
    conn: impl sqlx::MySqlExecutor<'_>,
    failure: &Failure,
) -> anyhow::Result<()> {
    outbox::record_failure(
        conn,
        failure.event_id,
        failure.attempts,
        &failure.error,
        failure.delay,
        failure.dead,
    )
    .await
    .context("recording a failed publish")
}
