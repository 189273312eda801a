//! [`Members`]: the etcd cluster's members, one client each, and a call that moves on to the
//! next member when one cannot be reached. etcd-client's own balanced channel keeps choosing a
//! member that refuses connections, failing that share of the calls for as long as the member
//! is down; here a dead member costs one refused connection, and the member that answered
//! last is asked first.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

/// One client per member (each connects lazily: the service starts while etcd is down).
pub(super) struct Members {
    clients: Vec<Client>,
    /// The member that answered last.
    preferred: AtomicUsize,
    call_timeout: Duration,
}

impl Members {
    pub(super) async fn connect(
        endpoints: &[String],
        call_timeout: Duration,
    ) -> Result<Self, etcd_client::Error> {
        let options = ConnectOptions::new()
            .with_connect_timeout(call_timeout)
            .with_timeout(call_timeout)
            .with_keep_alive(call_timeout, call_timeout);
        let mut clients = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            clients.push(Client::connect([endpoint], Some(options.clone())).await?);
        }
        Ok(Self {
            clients,
            preferred: AtomicUsize::new(0),
            call_timeout,
        })
    }

    /// `call` on the member that answered last, then on each other member in turn while the
    /// one asked cannot be reached or does not answer within the call timeout. An answer
    /// from a member, an error included (a failed comparison is not one), is final.
    pub(super) async fn call<T, F, Fut>(&self, call: F) -> Result<T, etcd_client::Error>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let first = self.preferred.load(Ordering::Relaxed);
        let count = self.clients.len();
        let mut last = None;
        for i in (0..count).map(|offset| (first + offset) % count) {
            let answer = tokio::time::timeout(self.call_timeout, call(self.clients[i].clone()))
                .await
                .unwrap_or_else(|_| Err(timed_out(self.call_timeout)));
            match answer {
                Err(error) if unreachable(&error) => last = Some(error),
                answer => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return answer;
                }
            }
        }
        Err(last.unwrap_or_else(|| timed_out(self.call_timeout)))
    }
}

/// Whether another member may answer where this one failed: it could not be reached, did not
/// answer in time, or has no leader to serve the request.
fn unreachable(error: &etcd_client::Error) -> bool {
    use etcd_client::Error;
    use tonic::Code;
    match error {
        Error::TransportError(_) | Error::IoError(_) => true,
        Error::GRpcStatus(status) => matches!(
            status.code(),
            Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled
        ),
        _ => false,
    }
}

fn timed_out(after: Duration) -> etcd_client::Error {
    etcd_client::Error::IoError(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("etcd did not answer within {after:?}"),
    ))
}
