//! Trust for the TLS connections to Redis (`rediss://`) and RabbitMQ (`amqps://`): a private
//! CA named by `REDIS_CA_FILE` / `AMQP_CA_FILE`, read and checked at start. PostgreSQL takes
//! its CA from `sslrootcert` in `DATABASE_URL`, which sqlx reads itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The PEM certificates of a CA file, read once at start.
#[derive(Clone)]
pub struct CaBundle {
    path: PathBuf,
    pem: Arc<str>,
}

impl std::fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaBundle")
            .field("path", &self.path)
            .finish()
    }
}

impl CaBundle {
    /// Reads `path`; it must hold at least one PEM certificate, and nothing that fails to parse.
    pub fn load(path: impl Into<PathBuf>) -> anyhow::Result<Self> {
        let path = path.into();
        let pem = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let certificates = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("{} is not valid PEM", path.display()))?;
        if certificates.is_empty() {
            bail!("{} holds no PEM certificate", path.display());
        }
        Ok(Self {
            path,
            pem: pem.into(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's text, PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }
}

/// The CA file named by the variable `name`, `None` when it is unset; a file that is missing
/// or holds no certificate stops the start with a message naming the variable, instead of
/// failing every connection later.
pub fn ca_file(name: &str) -> anyhow::Result<Option<CaBundle>> {
    crate::config::optional(name)
        .map(|path| {
            CaBundle::load(path.trim())
                .with_context(|| format!("environment variable {name} is not a usable CA file"))
        })
        .transpose()
}

/// The private CAs of the TLS connections to Redis and RabbitMQ; `None` trusts the system's
/// roots (docs/operating.md, "Which CA each client trusts", says which client adds the CA to
/// them and which replaces it).
#[derive(Debug, Clone, Default)]
pub struct ClientTls {
    /// `REDIS_CA_FILE`.
    pub redis_ca: Option<CaBundle>,
    /// `AMQP_CA_FILE`.
    pub amqp_ca: Option<CaBundle>,
}

impl ClientTls {
    pub fn from_env() -> anyhow::Result<Self> {
        Ok(Self {
            redis_ca: ca_file("REDIS_CA_FILE")?,
            amqp_ca: ca_file("AMQP_CA_FILE")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_a_certificate_is_refused() {
        let dir = std::env::temp_dir().join(format!("ca-test-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        let refused = CaBundle::load(&empty).expect_err("no certificate");
        assert!(
            refused.to_string().contains("no PEM certificate"),
            "{refused:#}"
        );
        assert!(CaBundle::load(dir.join("missing.pem")).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
