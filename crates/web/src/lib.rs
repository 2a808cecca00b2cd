//! `warden serve`: the web console. One page with everything the terminal dashboard
//! shows, live over server-sent events driven by the store's change signal, and the
//! person's actions (approve, reject, retry, respawn, cancel) — an adapter over
//! warden-app like the CLI and MCP, with no rules of its own.
//!
//! [`bind`] checks the options and opens the socket, the store connections and the
//! watcher; [`Server::run`] serves until Ctrl-C or SIGTERM. The page's files are
//! embedded in the binary: nothing to install, nothing fetched from another host.
// Stderr is written through `warden_store::say!`, which a closed stderr cannot panic.
#![cfg_attr(not(test), deny(clippy::print_stderr))]
#![forbid(unsafe_code)]

pub mod board;
pub mod detail;
pub mod error;
pub mod live;
pub mod markdown;
pub mod pool;
pub mod routes;
pub mod security;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Semaphore, watch};
use warden_core::failure::Failure;
use warden_store::Workspace;

pub use security::Rates;

/// The address `warden serve` listens on by default: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7777";

/// Board streams (open pages) served at once.
const MAX_BOARD_STREAMS: usize = 64;
/// Task streams (open detail panes) served at once.
const MAX_TASK_STREAMS: usize = 64;
/// Threads calling warden-app for requests.
const WORKERS: usize = 3;

/// How to serve.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to listen.
    pub addr: SocketAddr,
    /// The access token; required (and generated when `None`) off loopback.
    pub token: Option<String>,
    /// Request rates per client address.
    pub rates: Rates,
    /// How long a client has to send a request's headers before its connection is
    /// closed.
    pub header_read_timeout: std::time::Duration,
}

impl Options {
    /// Options for `addr` with the default rates and no token.
    pub fn new(addr: SocketAddr) -> Options {
        Options {
            addr,
            token: None,
            rates: Rates::default(),
            header_read_timeout: HEADER_READ_TIMEOUT,
        }
    }
}

/// What a started console tells the person.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Info {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The URL to open (with the token, when one is needed).
    pub url: String,
    /// Only this machine can reach it.
    pub loopback: bool,
    /// Every request must carry the token.
    pub token_required: bool,
    /// The token was generated now (so it must be printed: nobody else knows it).
    pub token_generated: bool,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
}

/// What the handlers share.
#[derive(Debug)]
pub struct Shared {
    /// The workspace (paths of TASK.md and output.log for the task streams).
    pub ws: Workspace,
    /// The access policy.
    pub policy: security::Policy,
    /// Workers that call warden-app.
    pub pool: pool::Pool,
    /// The latest board and its updates.
    pub live: Arc<live::Live>,
    /// Set to `true` at shutdown: every stream ends.
    pub shutdown: watch::Receiver<bool>,
    /// Permits for board streams.
    pub board_streams: Arc<Semaphore>,
    /// Permits for task streams.
    pub task_streams: Arc<Semaphore>,
}

/// A console ready to serve: the socket is bound, the store is open, the first board is
/// built.
#[derive(Debug)]
pub struct Server {
    listener: std::net::TcpListener,
    header_read_timeout: std::time::Duration,
    shared: Arc<Shared>,
    info: Info,
    stop_tx: watch::Sender<bool>,
    stop: Arc<AtomicBool>,
}

/// Is `addr` reachable only from this machine?
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// A random secret: 128 bits as 32 hex digits.
fn secret() -> Result<String, Failure> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| Failure::internal(format!("no randomness for a secret: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

pub use warden_store::config::token_fits;

/// Opens the console: checks the token, binds `opts.addr`, opens the store (a usage
/// error for a bad address, exit 2; a busy port is a conflict, exit 4).
pub fn bind(ws: Workspace, opts: Options) -> Result<Server, Failure> {
    if let Some(t) = &opts.token
        && !token_fits(t)
    {
        return Err(Failure::usage(
            "the token must be at least 16 characters of A-Z a-z 0-9 . _ ~ - (it travels in a URL and a cookie)",
        ));
    }
    let listener = std::net::TcpListener::bind(opts.addr).map_err(|e| {
        let f = format!("cannot listen on {}: {e}", opts.addr);
        match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                Failure::conflict(format!("{f}; stop the other server or pick --addr"))
            }
            _ => Failure::usage(format!("{f}; pick another --addr")),
        }
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Failure::internal(format!("cannot set up the socket: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::internal(format!("cannot read the socket's address: {e}")))?;
    let loopback = is_loopback(&addr);
    let (token, token_generated) = match opts.token {
        Some(t) => (Some(t), false),
        None if loopback => (None, false),
        None => (Some(secret()?), true),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let live = live::start(&ws, Arc::clone(&stop))?;
    let pool =
        pool::Pool::start(&ws, WORKERS).inspect_err(|_| stop.store(true, Ordering::Relaxed))?;
    let (stop_tx, shutdown) = watch::channel(false);
    let url = match &token {
        Some(t) => format!("http://{addr}/?token={t}"),
        None => format!("http://{addr}/"),
    };
    let backend = live.backend;
    let info = Info {
        addr,
        url,
        loopback,
        token_required: token.is_some(),
        token_generated,
        backend,
    };
    let policy = security::Policy {
        token,
        csrf: secret()?,
        hosts: loopback.then(|| security::Policy::loopback_hosts(addr)),
        cookie: format!("warden_token_{}", addr.port()),
        limiter: security::Limiter::new(opts.rates),
    };
    let shared = Arc::new(Shared {
        ws,
        policy,
        pool,
        live,
        shutdown,
        board_streams: Arc::new(Semaphore::new(MAX_BOARD_STREAMS)),
        task_streams: Arc::new(Semaphore::new(MAX_TASK_STREAMS)),
    });
    Ok(Server {
        listener,
        header_read_timeout: opts.header_read_timeout,
        shared,
        info,
        stop_tx,
        stop,
    })
}

/// A console serving on a thread of its own (tests, embedding).
#[derive(Debug)]
pub struct Running {
    /// What it tells the person.
    pub info: Info,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), Failure>>>,
}

impl Running {
    /// Stops the console and waits for it.
    pub fn stop(mut self) -> Result<(), Failure> {
        self.halt()
    }

    fn halt(&mut self) -> Result<(), Failure> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| Failure::internal("the console thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

impl Server {
    /// What to tell the person: the URL, whether a token is needed.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// Serves until Ctrl-C or SIGTERM.
    pub fn run(self) -> Result<(), Failure> {
        self.serve_until(async {
            let ctrl_c = tokio::signal::ctrl_c();
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => {
                        let _ = ctrl_c.await;
                        return;
                    }
                };
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        })
    }

    /// Serves on a thread of its own until [`Running::stop`].
    pub fn spawn(self) -> Result<Running, Failure> {
        let info = self.info.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("warden-web".into())
            .spawn(move || {
                self.serve_until(async {
                    let _ = rx.await;
                })
            })
            .map_err(|e| Failure::internal(format!("cannot start the console thread: {e}")))?;
        Ok(Running {
            info,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    fn serve_until(
        self,
        signal: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), Failure> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Failure::internal(format!("cannot start the async runtime: {e}")))?;
        let Server {
            listener,
            header_read_timeout,
            shared,
            stop_tx,
            stop,
            ..
        } = self;
        let result = rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)
                .map_err(|e| Failure::internal(format!("cannot use the socket: {e}")))?;
            serve(
                listener,
                routes::router(shared),
                header_read_timeout,
                async move {
                    signal.await;
                    // Streams end first, so the graceful shutdown does not wait on them.
                    let _ = stop_tx.send(true);
                },
            )
            .await;
            Ok(())
        });
        stop.store(true, Ordering::Relaxed);
        // Workers and the watcher end with the process (or at their next wake).
        rt.shutdown_timeout(std::time::Duration::from_secs(1));
        result
    }
}

/// How long a client has to send a request's headers. axum's own `serve` sets no limit:
/// connections that sent half a request line and then nothing were held for as long as
/// the client liked, and 20,000 of them took every file descriptor the server had.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves `router` on `listener` until `shutdown` completes, then lets the connections
/// finish: axum's `serve` loop, with hyper's header read timeout (which needs a timer
/// axum does not give it) and each request's peer address as `ConnectInfo`.
async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    header_read_timeout: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of file descriptors, say: wait a moment rather than spin.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        while conns.try_join_next().is_some() {}
        let router = router.clone();
        let service =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                let mut router = router.clone();
                tower_service::Service::call(&mut router, req.map(axum::body::Body::new))
            });
        let mut closing = closing_rx.clone();
        conns.spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = closing.changed() => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    let _ = closing_tx.send(true);
    while conns.join_next().await.is_some() {}
}
