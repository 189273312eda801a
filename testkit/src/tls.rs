//! TLS endpoints of a test's own, to show that the services verify what they connect to: a
//! throwaway CA with a server certificate for 127.0.0.1 (made by the `openssl` CLI), a
//! PostgreSQL cluster that takes TLS connections only, and a TLS front (rustls) before the
//! machine's RabbitMQ. The TLS Redis is [`crate::redis::PrivateRedis::start_tls`].

use std::path::PathBuf;
use std::process::Command;

use crate::postgres::{PostgresNode, chown_to_postgres};
use crate::scratch::{TempDir, run};

/// A CA of a test's own and a server certificate it signed for `127.0.0.1`.
#[derive(Debug)]
pub struct TestCa {
    dir: TempDir,
}

impl TestCa {
    pub fn new() -> Self {
        let dir = TempDir::new("test-ca");
        let openssl = || {
            let mut command = Command::new("openssl");
            command.current_dir(&dir.0);
            command
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        run(openssl()
            .args(["req", "-x509", "-days", "2", "-subj", "/CN=test CA"])
            .args(ec)
            .args(["-keyout", "ca.key", "-out", "ca.pem"])
            .args(["-addext", "basicConstraints=critical,CA:TRUE"])
            .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]));
        run(openssl()
            .args(["req", "-subj", "/CN=127.0.0.1"])
            .args(ec)
            .args(["-keyout", "server.key", "-out", "server.csr"]));
        std::fs::write(
            dir.0.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write the extensions");
        run(openssl().args([
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ]));
        Self { dir }
    }

    /// The CA's certificate, PEM: what a client trusts.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.0.join("ca.pem")
    }

    /// The server's certificate, PEM.
    pub fn cert_file(&self) -> PathBuf {
        self.dir.0.join("server.pem")
    }

    /// The server's private key, PEM.
    pub fn key_file(&self) -> PathBuf {
        self.dir.0.join("server.key")
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

/// Waits until something accepts TCP connections on `port`.
/// A PostgreSQL cluster of a test's own (`initdb` in a temporary directory, a free port)
/// that accepts TLS connections only (`hostssl` in `pg_hba.conf`), with the certificate of
/// a [`TestCa`]. Stopped and deleted when dropped.
#[derive(Debug)]
pub struct PrivatePostgres {
    pub port: u16,
    node: PostgresNode,
}

impl PrivatePostgres {
    pub fn start_tls(ca: &TestCa) -> Self {
        let node = PostgresNode::init(
            "ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\n",
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        );
        for (from, to) in [
            (ca.cert_file(), "server.pem"),
            (ca.key_file(), "server.key"),
        ] {
            let target = node.data().join(to);
            std::fs::copy(from, &target).expect("copy the certificate");
            chown_to_postgres(&target);
            // PostgreSQL refuses a key others can read.
            run(Command::new("chmod").arg("600").arg(&target));
        }
        node.start();
        Self {
            port: node.port,
            node,
        }
    }

    /// A URL for `database` with the query `params` (`sslmode=...&sslrootcert=...`).
    pub fn url(&self, database: &str, params: &str) -> String {
        self.node.url(database, params)
    }
}

/// TLS terminated (with a [`TestCa`]'s certificate, by rustls) on a free port in front of
/// `target` (`host:port`): the machine's RabbitMQ becomes an `amqps://` endpoint, with no TLS
/// program to install. It runs on a thread and runtime of its own, so it works under any test
/// runtime; dropping it closes the listener and every connection through it.
#[derive(Debug)]
pub struct TlsFront {
    pub port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TlsFront {
    pub fn start(ca: &TestCa, target: &str) -> Self {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};

        let certs = CertificateDer::pem_file_iter(ca.cert_file())
            .expect("the server certificate")
            .collect::<Result<Vec<_>, _>>()
            .expect("the server certificate parses");
        let key = PrivateKeyDer::from_pem_file(ca.key_file()).expect("the server key");
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("the server certificate and key match");
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let port = listener.local_addr().expect("its address").port();
        let target = target.to_owned();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the TLS front");
            runtime.block_on(serve(listener, acceptor, target, stopped));
        });
        Self {
            port,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

/// Accepts until `stopped`; each connection is decrypted and copied to a new connection to
/// `target`, both ways.
async fn serve(
    listener: std::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    target: String,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((client, _)) = accepted else { continue };
        let (acceptor, target) = (acceptor.clone(), target.clone());
        tokio::spawn(async move {
            // A client that fails the handshake (it does not trust the CA) just goes away.
            let Ok(mut tls) = acceptor.accept(client).await else {
                return;
            };
            let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else {
                return;
            };
            let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
        });
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
