//! Checks on a service's database that both services share: the previous release starting on
//! a schema the next one migrated, and the safeguards its pooled sessions carry.

use sqlx::PgPool;
use sqlx::migrate::Migrator;

use crate::{TestDatabase, record_a_newer_migration};

/// Migrates a database `t_<prefix>_…` with `migrator`, records a migration newer than any it
/// knows (as the next release would), and asserts that `migrator` still connects and migrates:
/// an instance of the previous release starts during a rolling update.
pub async fn assert_the_previous_release_starts_on_a_newer_schema(
    prefix: &str,
    migrator: &Migrator,
) {
    let db = TestDatabase::create(prefix, migrator).await;
    record_a_newer_migration(&db.pool).await;
    platform::storage::postgres::connect_and_migrate(
        std::slice::from_ref(&db.url),
        &platform::storage::postgres::PoolSettings::default(),
        migrator,
    )
    .await
    .expect("the previous release starts");
}

/// The setting `name` of a session taken from `pool`.
pub async fn session_setting(pool: &PgPool, name: &str) -> String {
    let mut conn = pool.acquire().await.expect("a pooled connection");
    sqlx::query_scalar("SELECT current_setting($1)")
        .bind(name)
        .fetch_one(&mut *conn)
        .await
        .expect("read the setting")
}
