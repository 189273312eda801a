//! What a MySQL server says of itself: whether it takes writes (`@@global.read_only`) and
//! which server it is, asked on a connection of the caller's or on one opened for the
//! question.

use std::time::Duration;

use sqlx::mysql::MySqlConnectOptions;
use sqlx::{ConnectOptions, MySqlConnection};

/// How long one server may take to connect and answer before it counts as down.
pub(super) const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the server at the other end of `conn` takes writes; one round trip.
pub async fn takes_writes(conn: &mut MySqlConnection) -> sqlx::Result<bool> {
    Ok(identify(conn).await?.0)
}

/// Which server a connection reached: what it says of itself. MariaDB has no
/// `@@server_uuid`; `@@server_id` is unique among servers that replicate to each other (they
/// refuse to start replicating otherwise), and with the host name and port it tells apart
/// servers that do not replicate (as a test's, all `server_id` 1 on one host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub hostname: String,
    pub port: i64,
    pub server_id: i64,
}

/// Whether the server at the other end of `conn` takes writes, and which it is; one round
/// trip.
pub async fn identify(conn: &mut MySqlConnection) -> sqlx::Result<(bool, Server)> {
    let (read_only, hostname, port, server_id): (i64, String, i64, i64) = sqlx::query_as(
        "SELECT @@global.read_only, @@hostname, CAST(@@port AS SIGNED), \
                CAST(@@server_id AS SIGNED)",
    )
    .fetch_one(conn)
    .await?;
    let server = Server {
        hostname,
        port,
        server_id,
    };
    Ok((read_only == 0, server))
}

/// An answer of one server: whether it takes writes, which it is, and the connection asked.
pub(super) type Answer = (bool, Server, MySqlConnection);

/// A connection to `options`, and whether its server takes writes, within [`ASK_TIMEOUT`];
/// or why not.
pub(super) async fn ask(options: &MySqlConnectOptions) -> Result<Answer, String> {
    let asked = async {
        let mut conn = options.connect().await?;
        let (writable, server) = identify(&mut conn).await?;
        Ok::<_, sqlx::Error>((writable, server, conn))
    };
    match tokio::time::timeout(ASK_TIMEOUT, asked).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(error)) => Err(format!("{error:#}")),
        Err(_) => Err(format!("no answer within {ASK_TIMEOUT:?}")),
    }
}
