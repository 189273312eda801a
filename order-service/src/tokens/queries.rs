//! `idempotency_keys`: the durable outcome of each used token and who took it, written in the
//! order's transaction. Its primary key is the last line of defence against a second order.

use std::collections::HashMap;

use platform::storage::Conn;
use shared::ids::UserId;
use uuid::Uuid;

use crate::tokens::{ResponseStatus, StoredResponse};

/// The stored outcomes of those of `tokens` that have one, in one query.
pub async fn find_all(
    conn: Conn<'_>,
    tokens: &[Uuid],
) -> sqlx::Result<HashMap<Uuid, StoredResponse>> {
    if tokens.is_empty() {
        return Ok(HashMap::new());
    }
    let conn = match conn {
        Conn::Postgres(conn) => conn,
        Conn::MySql(conn) => {
            let rows = order_mysql::tokens::find_all(conn, tokens).await?;
            return rows
                .into_iter()
                .map(|row| {
                    let record = Record {
                        token: row.token,
                        fingerprint: row.fingerprint,
                        order_id: row.order_id,
                        response_status: row.response_status,
                        response_body: row.response_body,
                        taker: row.taker,
                    };
                    record.read()
                })
                .collect();
        }
    };
    let rows = sqlx::query_as!(
        Record,
        "SELECT token, fingerprint, order_id, response_status, response_body, taker
         FROM idempotency_keys WHERE token = ANY($1)",
        tokens,
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter().map(Record::read).collect()
}

/// A stored outcome as either backend returns it.
struct Record {
    token: Uuid,
    fingerprint: String,
    order_id: Uuid,
    response_status: i16,
    response_body: Vec<u8>,
    taker: Option<i64>,
}

impl Record {
    fn read(self) -> sqlx::Result<(Uuid, StoredResponse)> {
        let decode = |column: &str, source: Box<dyn std::error::Error + Send + Sync>| {
            sqlx::Error::ColumnDecode {
                index: column.to_owned(),
                source,
            }
        };
        let response = StoredResponse {
            fingerprint: self.fingerprint,
            order_id: self.order_id,
            status: ResponseStatus::try_from(self.response_status)
                .map_err(|e| decode("response_status", Box::new(e)))?,
            body: String::from_utf8(self.response_body)
                .map_err(|e| decode("response_body", Box::new(e)))?,
            taker: self.taker.map(UserId),
        };
        Ok((self.token, response))
    }
}
