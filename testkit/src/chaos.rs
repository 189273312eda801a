//! A TCP proxy a test controls.

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
