//! The MySQL side of [`super`]: each query's call into `inventory_mysql::reservations`, with
//! the conversions between its plain rows (ids as integers, items as JSON) and this service's
//! types. Apart from the parent so that it holds PostgreSQL's statements, checked at build
//! time, and the one `match` per query that sends MySQL here.

use platform::messaging::outbox::NewOutboxRow;
use shared::ids::{OrderId, ProductId};
use sqlx::types::Json;
use sqlx::{Acquire, MySqlConnection};
use uuid::Uuid;

use super::{BatchRead, BatchWrite, Reservation, StoredReservation};
use crate::stock::queries::{StockRead, StockRow};

impl TryFrom<inventory_mysql::reservations::ReservationRow> for Reservation {
    type Error = sqlx::Error;

    /// MySQL's row: the same columns, the items as JSON read into line items here.
    fn try_from(row: inventory_mysql::reservations::ReservationRow) -> Result<Self, sqlx::Error> {
        let items = serde_json::from_value(row.items).map_err(|e| sqlx::Error::ColumnDecode {
            index: "items".to_owned(),
            source: Box::new(e),
        })?;
        Reservation::try_from(StoredReservation {
            order_id: row.order_id,
            state: row.state,
            items: Json(items),
            rejection_reason: row.rejection_reason,
            updated_at: row.updated_at,
        })
    }
}

/// [`super::read_batch`] on MySQL: the same rows, read by several statements.
pub(super) async fn read_batch(
    conn: &mut MySqlConnection,
    message_ids: &[Uuid],
    order_ids: &[Uuid],
    products: &[i64],
    cancelled: &[Uuid],
) -> sqlx::Result<BatchRead> {
    // Outside a transaction, as PostgreSQL's one statement: each of its statements is
    // its own, and the products' locks end with the one that took them.
    let read = inventory_mysql::reservations::read_batch(
        conn,
        message_ids,
        order_ids,
        products,
        cancelled,
    )
    .await?;
    Ok(BatchRead {
        seen: read.seen,
        reservations: read
            .reservations
            .into_iter()
            .map(Reservation::try_from)
            .collect::<sqlx::Result<_>>()?,
        stock: StockRead {
            rows: read
                .stock
                .into_iter()
                .map(|(id, row)| (ProductId(id), StockRow::from(row)))
                .collect(),
            busy: read.busy.into_iter().map(ProductId).collect(),
        },
    })
}

/// [`super::write_batch`] on MySQL: the same rows, written by `inventory_mysql::reservations`
/// in one transaction of several statements (a savepoint inside the caller's), committed here.
pub(super) async fn write_batch(
    conn: &mut MySqlConnection,
    write: &BatchWrite<'_>,
) -> sqlx::Result<()> {
    let inserted = write
        .inserted
        .iter()
        .map(|r| {
            Ok(inventory_mysql::reservations::NewReservation {
                order_id: r.order_id.0,
                state: r.state.as_str().to_owned(),
                items: serde_json::to_value(&r.items)
                    .map_err(|e| sqlx::Error::Encode(Box::new(e)))?,
                rejection_reason: r.rejection_reason.map(|r| r.as_str().to_owned()),
            })
        })
        .collect::<sqlx::Result<_>>()?;
    let mysql = inventory_mysql::reservations::BatchWrite {
        judged: write
            .judged
            .iter()
            .map(|(id, row)| (id.0, (*row).into()))
            .collect(),
        changes: write.changes.iter().map(|c| (*c).into()).collect(),
        inserted,
        released: write.released.clone(),
        recorded: write.recorded.clone(),
        outbox: write.outbox.iter().map(NewOutboxRow::as_mysql).collect(),
    };
    let mut tx = conn.begin().await?;
    inventory_mysql::reservations::write_batch(&mut tx, &mysql).await?;
    tx.commit().await
}

/// [`super::find`] on MySQL.
pub(super) async fn find(
    conn: &mut MySqlConnection,
    order_id: OrderId,
) -> sqlx::Result<Option<Reservation>> {
    let row = inventory_mysql::reservations::find(conn, order_id.0).await?;
    row.map(Reservation::try_from).transpose()
}
