//! `REDIS_SENTINELS` and `REDIS_SENTINEL_MASTER`: Redis Sentinels that name the primary, and
//! the client that asks them.
//!
//! With Sentinels, `REDIS_URL` no longer says where Redis is, only how to talk to its data
//! nodes: its scheme (`rediss://`: TLS, verified against `REDIS_CA_FILE` when set), user,
//! password and database number apply to whichever node the Sentinels name; its host and
//! port are not used. The Sentinels themselves are reached without a password, over TLS when
//! the data nodes are (Sentinels of a TLS deployment listen on their TLS port with the same
//! certificates).

use anyhow::{Context, bail};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, IntoConnectionInfo, TlsCertificates, TlsMode};

use crate::config;
use crate::storage::tls::CaBundle;

/// Where the Sentinels are and the name they know the primary by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sentinels {
    /// `REDIS_SENTINELS`: each Sentinel's host and port, asked in this order.
    pub addresses: Vec<(String, u16)>,
    /// `REDIS_SENTINEL_MASTER`: the name in the Sentinels' `sentinel monitor` line.
    pub master: String,
}

impl Sentinels {
    /// Reads both variables: both set, or neither (then `None`: Redis is `REDIS_URL`'s server).
    pub fn from_env() -> anyhow::Result<Option<Self>> {
        Self::from_values(
            config::optional("REDIS_SENTINELS"),
            config::optional("REDIS_SENTINEL_MASTER"),
        )
    }

    fn from_values(
        addresses: Option<String>,
        master: Option<String>,
    ) -> anyhow::Result<Option<Self>> {
        match (addresses, master) {
            (None, None) => Ok(None),
            (Some(_), None) => bail!(
                "REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER is not: set both (Sentinel) or neither (REDIS_URL's server)"
            ),
            (None, Some(_)) => bail!(
                "REDIS_SENTINEL_MASTER is set but REDIS_SENTINELS is not: set both (Sentinel) or neither (REDIS_URL's server)"
            ),
            (Some(addresses), Some(master)) => Ok(Some(Self {
                addresses: parse_addresses(&addresses)?,
                master: master.trim().to_owned(),
            })),
        }
    }

    /// A client that asks these Sentinels for the primary and connects to it as `url` says
    /// (see the module's documentation).
    pub(super) fn client(
        &self,
        url: &str,
        ca: Option<&CaBundle>,
    ) -> anyhow::Result<SentinelClient> {
        let info = url
            .into_connection_info()
            .with_context(|| format!("REDIS_URL {url:?} is not valid"))?;
        let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        let sentinels = self.addresses.iter().map(|(host, port)| {
            if tls {
                ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port: *port,
                    insecure: false,
                    tls_params: None,
                }
            } else {
                ConnectionAddr::Tcp(host.clone(), *port)
            }
        });
        let data = info.redis_settings();
        let mut builder =
            SentinelClientBuilder::new(sentinels, &self.master, SentinelServerType::Master)?
                .set_client_to_redis_db(data.db())
                .set_client_to_redis_protocol(data.protocol());
        if let Some(username) = data.username() {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = data.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if tls {
            builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
            if let Some(ca) = ca {
                let roots = || TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.pem().as_bytes().to_vec()),
                };
                builder = builder
                    .set_client_to_redis_certificates(roots())
                    .set_client_to_sentinel_certificates(roots());
            }
        }
        builder
            .build()
            .context("REDIS_SENTINELS and REDIS_URL do not make a Sentinel client")
    }
}

/// `host:port,host:port`: at least one, every port given.
fn parse_addresses(list: &str) -> anyhow::Result<Vec<(String, u16)>> {
    let addresses = list
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (host, port) = entry
                .rsplit_once(':')
                .filter(|(host, _)| !host.is_empty())
                .with_context(|| format!("REDIS_SENTINELS: {entry:?} is not host:port"))?;
            let port = port
                .parse::<u16>()
                .with_context(|| format!("REDIS_SENTINELS: {entry:?} has no valid port"))?;
            Ok((host.trim_matches(['[', ']']).to_owned(), port))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if addresses.is_empty() {
        bail!("REDIS_SENTINELS names no Sentinel");
    }
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(addresses: Option<&str>, master: Option<&str>) -> anyhow::Result<Option<Sentinels>> {
        Sentinels::from_values(addresses.map(Into::into), master.map(Into::into))
    }

    #[test]
    fn neither_variable_means_no_sentinel() {
        assert_eq!(read(None, None).expect("no Sentinels"), None);
    }

    #[test]
    fn one_variable_alone_is_refused_naming_the_missing_one() {
        let error = read(Some("127.0.0.1:26379"), None)
            .expect_err("refused")
            .to_string();
        assert!(error.contains("REDIS_SENTINEL_MASTER is not"), "{error}");
        let error = read(None, Some("orders")).expect_err("refused").to_string();
        assert!(error.contains("REDIS_SENTINELS is not"), "{error}");
    }

    #[test]
    fn the_list_is_read_in_order_with_spaces_and_ipv6_brackets() {
        let sentinels = read(
            Some(" s1:26379, 10.0.0.2:26380 ,[::1]:26381,"),
            Some("orders"),
        )
        .expect("valid")
        .expect("Sentinels");
        assert_eq!(
            sentinels.addresses,
            [
                ("s1".to_owned(), 26379),
                ("10.0.0.2".to_owned(), 26380),
                ("::1".to_owned(), 26381)
            ]
        );
        assert_eq!(sentinels.master, "orders");
    }

    #[test]
    fn entries_without_a_valid_port_are_refused() {
        for list in ["s1", "s1:", ":26379", "s1:99999", " , "] {
            let error = read(Some(list), Some("orders"))
                .expect_err("refused")
                .to_string();
            assert!(error.contains("REDIS_SENTINELS"), "{list:?}: {error}");
        }
    }
}
