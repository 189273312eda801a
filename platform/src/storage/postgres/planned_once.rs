//! A session that plans each statement once: a pooled connection kept by one busy writer —
//! order intake's loop, a leader of `POST /deductions` batches, each service's consumer — on
//! which every statement it runs gets one generic plan for any values.
//!
//! Every other session plans each statement for the values it runs with
//! ([`super::PLAN_CACHE_MODE`]), which keeps a plan made on a small table from scanning it
//! whole as it grows. A writer that runs the same statement for every batch pays that
//! planning each time: at a moderate rate, the intake's statement took half as long to plan
//! as to run (decision 0063); the deductions' write, with every part a batch may carry (stock,
//! outcomes, holds, their ends), took longer to plan than to run, on the one chain of batches
//! a hot product has. Here each statement is planned once (`plan_cache_mode =
//! force_generic_plan`), with sequential scans priced out (`enable_seqscan = off`) so that the
//! plans read by index whatever the tables' size when they were made;
//! `e2e/tests/flow/plans.rs` checks them on empty tables.
//!
//! The settings stay with this session: it is closed, never returned to the pool, when its
//! writer lets it go. It is still taken from the pool, so a saturated pool still answers 503
//! `busy`. A session kept between batches is a connection nobody else can use, so a small pool
//! keeps none ([`keepable`]): there the writer takes a plain pooled connection for each batch
//! and gives it back, its statements planned for their values as everywhere else.

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

/// What the session sets, once, on the pooled connection it takes.
pub const SETTINGS: &str = "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off";

/// A pooled connection set up to plan each statement once; it closes when dropped.
pub async fn open(db: &PgPool) -> sqlx::Result<PoolConnection<Postgres>> {
    let mut conn = db.acquire().await?;
    // Before the settings: a connection dropped while they are being set is closed too.
    conn.close_on_drop();
    sqlx::raw_sql(SETTINGS).execute(&mut *conn).await?;
    Ok(conn)
}

/// How many sessions that plan once each kind of writer (the intake, the deductions leaders, a
/// consumer) may keep between batches in `db`'s pool: one per eight connections (two of the
/// default twenty), none in a pool smaller than eight, where a kept session would be a large
/// share of what the handlers, the relay and the consumers wait for (with one connection, all
/// of it).
pub fn keepable(db: &PgPool) -> usize {
    (db.options().get_max_connections() / 8) as usize
}

/// A busy writer's session: opened when first needed, kept from batch to batch, closed after a
/// failure. In a pool too small to spare it ([`keepable`]) it is a plain pooled connection
/// instead, given back after every batch: closing a session there would make the pool open a
/// new connection for the next batch.
#[derive(Debug, Default)]
pub struct Kept(Option<PoolConnection<Postgres>>);

impl Kept {
    /// The kept session, or a new one (kept from then on).
    pub async fn get(&mut self, db: &PgPool) -> sqlx::Result<&mut PoolConnection<Postgres>> {
        let slot = &mut self.0;
        Ok(match slot {
            Some(conn) => conn,
            None if keepable(db) == 0 => slot.insert(db.acquire().await?),
            None => slot.insert(open(db).await?),
        })
    }

    /// Closes the session (a plain pooled connection goes back to the pool, as any request's
    /// does after a failure): its statement failed (a broken connection, a failover) or it may
    /// be mid-statement.
    pub fn discard(&mut self) {
        self.0 = None;
    }

    /// After a batch: a pool that cannot spare a connection gets this one back; kept, it
    /// would starve every other user of the pool.
    pub fn end_batch(&mut self, db: &PgPool) {
        if keepable(db) == 0 {
            self.discard();
        }
    }

    /// Whether a session is open, worth handing to the next writer.
    pub fn is_open(&self) -> bool {
        self.0.is_some()
    }
}

/// Sessions set aside by writers that finished, for the next writer of the same kind: a
/// deductions leader that ends leaves its session to the next leader, a consumer's batch to
/// the next batch. Holds at most `capacity` of them, fewer in a small pool ([`keepable`]).
#[derive(Debug)]
pub struct Shelf {
    capacity: usize,
    kept: std::sync::Mutex<Vec<Kept>>,
}

impl Shelf {
    pub const fn new(capacity: usize) -> Self {
        Self {
            capacity,
            kept: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A shelf holding as many sessions as the pool spares ([`keepable`]): for writers that
    /// run side by side, a consumer's channels.
    pub const fn as_the_pool_spares() -> Self {
        Self::new(usize::MAX)
    }

    /// A kept session if one is set aside, else an empty one that opens when first used.
    pub fn take(&self) -> Kept {
        self.kept().pop().unwrap_or_default()
    }

    /// Sets `session` aside for the next writer, or closes it: it is not open, the shelf is
    /// full, or `db`'s pool is too small to spare it.
    pub fn put_back(&self, session: Kept, db: &PgPool) {
        let mut kept = self.kept();
        if session.is_open() && kept.len() < self.capacity.min(keepable(db)) {
            kept.push(session);
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        // Nothing panics while holding the lock, and a Vec stays whole if it did.
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::postgres::PgPoolOptions;

    use super::*;

    async fn pool(connections: u32) -> PgPool {
        let server =
            crate::config::string("TEST_DATABASE_SERVER", "postgres://postgres@127.0.0.1:5432");
        PgPoolOptions::new()
            .max_connections(connections)
            .connect(&format!("{server}/postgres"))
            .await
            .expect("PostgreSQL")
    }

    async fn plan_cache_mode(conn: &mut PoolConnection<Postgres>) -> String {
        sqlx::query_scalar("SELECT current_setting('plan_cache_mode')")
            .fetch_one(&mut **conn)
            .await
            .expect("the setting")
    }

    #[tokio::test]
    async fn a_pool_of_eight_keeps_a_session_that_plans_once_from_batch_to_batch() {
        let db = pool(8).await;
        let mut kept = Kept::default();
        let conn = kept.get(&db).await.expect("a session");
        assert_eq!(plan_cache_mode(conn).await, "force_generic_plan");
        kept.end_batch(&db);
        assert!(kept.is_open(), "kept for the next batch");
        let shelf = Shelf::as_the_pool_spares();
        shelf.put_back(kept, &db);
        shelf.put_back(Kept::default(), &db);
        assert!(shelf.take().is_open(), "the open session was set aside");
        assert!(!shelf.take().is_open(), "and nothing else");
    }

    #[tokio::test]
    async fn a_session_let_go_is_closed_so_its_settings_never_reach_another_user_of_the_pool() {
        let db = pool(8).await;
        let mut kept = Kept::default();
        let conn = kept.get(&db).await.expect("a session");
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut **conn)
            .await
            .expect("its backend");
        // Let go after a failure, and at the end of a writer's life (a shelf that is full).
        kept.discard();
        let shelf = Shelf::new(0);
        let mut other = Kept::default();
        other.get(&db).await.expect("another session");
        shelf.put_back(other, &db);
        // Every connection the pool hands out now plans for its values, and none is the
        // first session's backend.
        let mut taken = Vec::new();
        for _ in 0..8 {
            let mut conn = db.acquire().await.expect("a pooled connection");
            assert_ne!(plan_cache_mode(&mut conn).await, "force_generic_plan");
            let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut *conn)
                .await
                .expect("its backend");
            assert_ne!(backend, pid, "the session let go came back to the pool");
            taken.push(conn);
        }
    }

    #[tokio::test]
    async fn a_pool_too_small_to_spare_a_session_lends_a_plain_connection_and_gets_it_back() {
        let db = pool(1).await;
        let mut kept = Kept::default();
        let conn = kept.get(&db).await.expect("a connection");
        assert_ne!(plan_cache_mode(conn).await, "force_generic_plan");
        kept.end_batch(&db);
        assert!(!kept.is_open());
        // Given back, not closed: the pool's one connection comes back idle.
        let back = async {
            while db.num_idle() == 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), back)
            .await
            .expect("the connection back in the pool");
        assert_eq!(db.size(), 1);
        let shelf = Shelf::as_the_pool_spares();
        let mut session = shelf.take();
        session.get(&db).await.expect("a connection");
        shelf.put_back(session, &db);
        assert!(
            !shelf.take().is_open(),
            "nothing is set aside in a pool of one"
        );
    }
}
