//! Isolation for integration tests against the real PostgreSQL, Redis and RabbitMQ:
//! every test gets its own database, its own Redis key prefix and its own AMQP vhost,
//! so tests run in parallel and repeat without seeing each other.

use std::process::Command;

use sqlx::migrate::Migrator;
use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

/// A service binary set up to start against this test's database, vhost and Redis key
/// prefix, quietly (logs at `error`, output discarded). Add `HTTP_ADDR` and anything else,
/// then spawn it.
pub fn service_command(
    binary: &str,
    database_url: &str,
    amqp_url: &str,
    redis_prefix: &str,
) -> Command {
    let mut command = Command::new(binary);
    command
        .env("DATABASE_URL", database_url)
        .env("REDIS_URL", redis_url())
        .env("REDIS_KEY_PREFIX", redis_prefix)
        .env("AMQP_URL", amqp_url)
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    command
}

/// A child process that is killed when this guard drops, so a failing test leaves no service
/// running behind it.
#[derive(Debug)]
pub struct KilledOnDrop(pub std::process::Child);

impl std::ops::Deref for KilledOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for KilledOnDrop {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        // A stopped process dies of SIGKILL too; `kill` fails harmlessly if it already exited.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` (a [`service_command`] with one bad setting added) and expects it to
/// refuse to start: returns what it wrote to stderr once it exited with a failure. Panics if
/// it exits 0, or is still running after 20 s (the setting was accepted and it serves).
pub fn expect_refused_start(mut command: Command) -> String {
    let mut child = command
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the binary");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the binary") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("the service started with a setting it should have refused");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        std::io::Read::read_to_string(&mut pipe, &mut stderr).ok();
    }
    assert!(
        !status.success(),
        "exit status {status:?}; stderr: {stderr}"
    );
    stderr
}

/// The value of the metric line of `base`'s `/metrics` that starts with `series` (name and
/// labels), 0 when absent or when the service does not answer.
pub async fn scrape_metric(base: &str, series: &str) -> f64 {
    let Ok(response) = reqwest::get(format!("{base}/metrics")).await else {
        return 0.0;
    };
    let text = response.text().await.unwrap_or_default();
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Starts the service `binary` once per `(variable, value)` of `refused`, on `database_url`, and
/// asserts that each start is refused with a message naming the variable. An `AMQP_URLS` stands
/// in for the command's `AMQP_URL` (both together are refused whatever they say).
pub async fn assert_each_setting_refused(
    binary: &'static str,
    database_url: &str,
    refused: &[(&'static str, &'static str)],
) {
    for &(name, value) in refused {
        let mut command = service_command(
            binary,
            database_url,
            "amqp://guest:guest@127.0.0.1:1/%2f",
            &redis_prefix(),
        );
        command
            .env("HTTP_ADDR", format!("127.0.0.1:{}", free_port()))
            .env(name, value);
        if name == "AMQP_URLS" {
            command.env_remove("AMQP_URL");
        }
        let stderr = tokio::task::spawn_blocking(move || expect_refused_start(command))
            .await
            .expect("the check runs");
        assert!(
            stderr.contains(name),
            "{name}={value:?} was refused without naming it: {stderr}"
        );
    }
}

/// Sends the signal `name` (`TERM`, `STOP`, `CONT`, …) to `child`.
pub fn signal(child: &std::process::Child, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{name}");
}

/// A port that was free a moment ago (bound and let go), for a binary that must keep its
/// address across a restart: one the kernel picks, or, when `TEST_PORT_RANGE` (`first-last`)
/// is set, the next free one of that range, so test runs sharing a machine can be given
/// ranges that never meet.
pub fn free_port() -> u16 {
    let Some((first, last)) = crate::config::optional("TEST_PORT_RANGE").and_then(|range| {
        let (first, last) = range.split_once('-')?;
        Some((
            first.trim().parse::<u16>().ok()?,
            last.trim().parse::<u16>().ok()?,
        ))
    }) else {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        return probe.local_addr().expect("its address").port();
    };
    // Handed out in turn: two calls before either port is bound must not get the same one.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let size = u32::from(last.saturating_sub(first)) + 1;
    (0..size)
        .map(|_| first + (NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % size) as u16)
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .expect("a free port in TEST_PORT_RANGE")
}

/// Server URL the test databases are created on (`TEST_DATABASE_SERVER` overrides).
pub fn database_server() -> String {
    crate::config::string("TEST_DATABASE_SERVER", "postgres://postgres@127.0.0.1:5432")
}

pub fn redis_url() -> String {
    crate::config::string("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
}

pub fn amqp_server() -> String {
    crate::config::string("TEST_AMQP_SERVER", "amqp://guest:guest@127.0.0.1:5672")
}

/// A database that exists for one test and is dropped with this guard.
#[derive(Debug)]
pub struct TestDatabase {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
}

impl TestDatabase {
    /// Creates `t_<prefix>_<random>` and applies `migrator`.
    pub async fn create(prefix: &str, migrator: &Migrator) -> Self {
        let name = format!("t_{}_{}", prefix.replace('-', "_"), Uuid::new_v4().simple());
        let url = format!("{}/{name}", database_server());
        let pool = crate::db::connect_and_migrate(
            std::slice::from_ref(&url),
            &crate::db::PoolSettings::default(),
            migrator,
        )
        .await
        .expect("test database");
        Self { name, url, pool }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        let server = database_server();
        // Drop runs outside async context possibly inside a runtime: use a thread of our own.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(mut conn) = PgConnection::connect(&format!("{server}/postgres")).await {
                    let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                    let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// A Redis key prefix no other test uses.
pub fn redis_prefix() -> String {
    format!("test:{}:", Uuid::new_v4().simple())
}

/// A RabbitMQ vhost that exists for one test and is deleted with this guard.
#[derive(Debug)]
pub struct TestVhost {
    pub name: String,
    /// `AMQP_URL` for the vhost.
    pub url: String,
}

impl TestVhost {
    pub fn create() -> Self {
        let name = format!("test-{}", Uuid::new_v4().simple());
        rabbitmqctl(&["add_vhost", &name]);
        rabbitmqctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"]);
        let url = format!("{}/{name}", amqp_server());
        Self { name, url }
    }
}

impl Drop for TestVhost {
    fn drop(&mut self) {
        rabbitmqctl(&["delete_vhost", &self.name]);
    }
}

fn rabbitmqctl(args: &[&str]) {
    let output = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .expect("rabbitmqctl runs");
    assert!(
        output.status.success(),
        "rabbitmqctl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A plain AMQP client for tests: publish raw messages and read queues directly.
#[derive(Debug)]
pub struct AmqpProbe {
    _conn: lapin::Connection,
    channel: lapin::Channel,
}

/// A message read back from a queue.
#[derive(Debug, Clone)]
pub struct Received {
    pub routing_key: String,
    pub message_id: Option<String>,
    pub persistent: bool,
    pub content_type: Option<String>,
    pub traceparent: Option<String>,
    pub body: serde_json::Value,
}

impl AmqpProbe {
    /// Connects to `url` and declares the service topology there (as the services do).
    pub async fn connect(url: &str) -> Self {
        let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
            .await
            .expect("AMQP connection");
        let channel = conn.create_channel().await.expect("channel");
        crate::amqp::declare_topology(&channel)
            .await
            .expect("topology");
        Self {
            _conn: conn,
            channel,
        }
    }

    /// Publishes `body` as-is (persistent, with `message_id` when given).
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        message_id: Option<&str>,
    ) {
        let mut properties = lapin::BasicProperties::default().with_delivery_mode(2);
        if let Some(id) = message_id {
            properties = properties.with_message_id(id.into());
        }
        self.channel
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                lapin::options::BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .expect("publish")
            .await
            .expect("publish confirm");
    }

    /// Takes (and acks) one message from `queue`, if any is there.
    pub async fn get(&self, queue: &str) -> Option<Received> {
        let message = self
            .channel
            .basic_get(
                queue.into(),
                lapin::options::BasicGetOptions { no_ack: true },
            )
            .await
            .expect("basic.get")?;
        let delivery = message.delivery;
        let properties = &delivery.properties;
        let traceparent = properties.headers().as_ref().and_then(|h| {
            h.inner().get("traceparent").and_then(|v| match v {
                lapin::types::AMQPValue::LongString(s) => Some(s.to_string()),
                _ => None,
            })
        });
        Some(Received {
            routing_key: delivery.routing_key.to_string(),
            message_id: properties.message_id().as_ref().map(|m| m.to_string()),
            persistent: *properties.delivery_mode() == Some(2),
            content_type: properties.content_type().as_ref().map(|c| c.to_string()),
            traceparent,
            body: serde_json::from_slice(&delivery.data).unwrap_or(serde_json::Value::Null),
        })
    }

    /// Polls `queue` until `count` messages were taken or `deadline` passes.
    pub async fn take(
        &self,
        queue: &str,
        count: usize,
        deadline: std::time::Duration,
    ) -> Vec<Received> {
        let until = tokio::time::Instant::now() + deadline;
        let mut taken = Vec::with_capacity(count);
        while taken.len() < count && tokio::time::Instant::now() < until {
            match self.get(queue).await {
                Some(message) => taken.push(message),
                None => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
        taken
    }

    /// Messages ready in `queue`.
    pub async fn ready(&self, queue: &str) -> u32 {
        self.channel
            .queue_declare(
                queue.into(),
                lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await
            .expect("passive declare")
            .message_count()
    }
}

/// Logs for tests: captured per test by the test harness, `warn` unless `RUST_LOG` says
/// otherwise; spans get trace ids as in the services (nothing is exported).
pub fn init_logs() {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    static PROVIDER: std::sync::OnceLock<opentelemetry_sdk::trace::SdkTracerProvider> =
        std::sync::OnceLock::new();
    let provider = PROVIDER.get_or_init(crate::telemetry::local_provider);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(filter),
        )
        .with(crate::telemetry::spans(provider))
        .try_init();
}

/// A TCP proxy a test controls, to cut a service off from PostgreSQL, Redis or RabbitMQ and
/// let it back in without touching the real server (the kernel here has no `tc netem`).
#[derive(Debug, Clone)]
pub struct ChaosProxy {
    /// `127.0.0.1:<port>` to give the service instead of the real server's address.
    pub addr: std::net::SocketAddr,
    state: std::sync::Arc<ProxyState>,
}

#[derive(Debug)]
struct ProxyState {
    open: std::sync::atomic::AtomicBool,
    /// Bumped by every cut; connections of an older generation close themselves.
    generation: tokio::sync::watch::Sender<u64>,
}

impl ChaosProxy {
    /// Starts forwarding to `target` (`host:port`).
    pub async fn start(target: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let state = std::sync::Arc::new(ProxyState {
            open: std::sync::atomic::AtomicBool::new(true),
            generation: tokio::sync::watch::channel(0).0,
        });
        let target = target.to_owned();
        let accept_state = state.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !accept_state.open.load(std::sync::atomic::Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                let mut cut = accept_state.generation.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Self { addr, state }
    }

    /// Drops every open connection and refuses new ones until [`ChaosProxy::restore`].
    pub fn cut(&self) {
        self.state
            .open
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.state.generation.send_modify(|g| *g += 1);
    }

    pub fn restore(&self) {
        self.state
            .open
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Polls `check` until it returns `Some`, and fails the test once `deadline` has passed.
/// Tests wait for conditions this way, never by sleeping a fixed time.
pub async fn eventually<T, F, Fut>(deadline: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "condition not met within {deadline:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits up to `deadline` for `child` to exit and returns how it exited; fails the test if it
/// still runs then.
pub async fn exit_status(
    child: &mut std::process::Child,
    deadline: std::time::Duration,
) -> std::process::ExitStatus {
    eventually(deadline, || {
        std::future::ready(child.try_wait().expect("wait for the binary"))
    })
    .await
}

/// Records in `pool`'s database a migration newer than any this build knows, as the next
/// release applies one while instances of this release still run (a rolling update).
pub async fn record_a_newer_migration(pool: &PgPool) {
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         SELECT max(version) + 1, 'from the next release', true, '\\x00'::bytea, 0 \
         FROM _sqlx_migrations",
    )
    .execute(pool)
    .await
    .expect("record a newer migration");
}

/// Credentials an admin route must refuse: none, a wrong bearer token, another scheme.
pub const REFUSED_CREDENTIALS: [Option<&str>; 3] =
    [None, Some("Bearer wrong-token"), Some("Basic dXNlcjpwdw==")];

/// Sends `request` with `credential` as its `Authorization` header (none for `None`); the
/// response and its challenge (see [`challenge_of`]).
pub async fn send_with_credential(
    request: reqwest::RequestBuilder,
    credential: Option<&str>,
) -> (reqwest::Response, String) {
    let request = match credential {
        Some(value) => request.header("Authorization", value),
        None => request,
    };
    let response = request.send().await.expect("request");
    let challenge = challenge_of(&response);
    (response, challenge)
}

/// The response's `WWW-Authenticate` challenge, empty when it has none.
pub fn challenge_of(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}
