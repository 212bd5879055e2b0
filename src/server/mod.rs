//! The embedded S3-compatible server: `ringload serve`, and the in-process target `run` starts
//! when it is given no endpoint.
//!
//! It is part of the product, not a test mock: like the Flux study's own test server, it is
//! how a loopback run measures the client rather than the storage, and how a full-size dataset
//! (500 Flux files, ~290 GiB) is served without a disk ([`virtual_dataset`]), and so is a
//! whole-object dataset of npz, jpeg or tfrecord files, a million objects or more, listed a page
//! at a time from the index ([`virtual_objects`]). A directory
//! backend ([`dir`]) stores real objects. A sink ([`sink`]) takes uploads at speed and keeps
//! only names and sizes, checking the bytes against [`crate::content`] when asked, and serves
//! its objects by making their bytes again: checkpoints larger than the disk, written and read.
//!
//! Shape: one tokio runtime of its own (a few worker threads, so an in-process server and the
//! loader's rank threads do not share an executor), hyper's HTTP/1.1 server with keep-alive,
//! path-style addressing. Each request goes through [`handler::respond`]: header limits, SigV4
//! verification when credentials are set, the operation, and an S3 XML error for anything that
//! fails. Response bodies are lists of shared `Bytes` (mapped file ranges or template slices),
//! so body bytes are never copied in user space.
//!
//! Costs are counted: requests, body bytes (sent and received), errors, and the CPU time of the server's own
//! threads (read from `/proc/self/task/<tid>/schedstat`), so a caller running the server
//! in-process can subtract it from its own.

pub mod bandwidth;
mod body;
pub mod checksums;
pub mod chunked;
pub mod dir;
pub mod error;
pub mod faults;
mod handler;
pub mod list;
mod mmap;
pub mod object;
pub mod range;
pub mod request_log;
pub mod sigv4;
pub mod sink;
pub mod store;
pub mod tls;
mod trailing;
pub mod virtual_dataset;
pub mod virtual_objects;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;

use crate::exit::{self, ExitClass};
use tokio::sync::watch;

pub use handler::{Counters, MAX_HEADER_SECTION_BYTES};
pub use sigv4::Credentials;
pub use store::Store;

use handler::State;
use trailing::{Trailing, TrailingIo, UpdateKeys};

/// The default address of `ringload serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9000";
/// The bucket a virtual dataset appears in when neither the workload nor `--bucket` names one.
pub const DEFAULT_BUCKET: &str = crate::s3::target::DEFAULT_BUCKET;
/// The region reported to clients (GetBucketLocation, HeadBucket).
pub const DEFAULT_REGION: &str = "us-east-1";
/// How long open connections get to finish their current request at shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Request heads larger than this are refused by hyper itself (431, no XML body); up to it the
/// server answers S3's `RequestHeaderSectionTooLarge` past [`MAX_HEADER_SECTION_BYTES`].
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// Connections served at once by default; one more is closed as soon as it is accepted, so a
/// client that opens and holds many (a slowloris) costs at most this many connections' memory.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How to start a server.
#[derive(Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub store: Store,
    /// When set, every request must carry a valid SigV4 signature by this key.
    pub credentials: Option<Credentials>,
    pub region: String,
    /// Tokio worker threads.
    pub worker_threads: usize,
    /// Each object body is sent no faster than this (`None`: as fast as the socket takes it).
    pub throttle_bytes_per_s: Option<u64>,
    /// Faults to inject (`serve --faults`); empty for a well-behaved server.
    pub faults: faults::Faults,
    /// Connections served at once; more are closed at once ([`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Serve HTTPS with this configuration ([`tls`]); `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}; pick a free port (--listen 127.0.0.1:0 takes any)")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the server's runtime: {0}")]
    Runtime(std::io::Error),
}

impl ExitClass for ServerError {
    /// A port that cannot be bound is the user's to change; a runtime that cannot start is not.
    fn exit_code(&self) -> u8 {
        match self {
            ServerError::Bind { .. } => exit::USAGE,
            ServerError::Runtime(_) => exit::FAILED,
        }
    }
}

/// The server's totals at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerStats {
    pub requests: u64,
    /// HEADs among `requests`.
    pub heads: u64,
    /// GETs with a `Range` header among `requests`.
    pub ranged_gets: u64,
    /// Response body bytes handed to connections.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Requests answered with an S3 error.
    pub errors: u64,
    /// Additional checksums (parts', PUTs', completions') checked, and refused as BadDigest.
    pub checksums_verified: u64,
    pub checksums_refused: u64,
    pub connections: u64,
    /// Connections that ended in an I/O or protocol error.
    pub connection_errors: u64,
    /// Connections closed at once because `max_connections` were open.
    pub connections_refused: u64,
    /// TLS connections whose handshake failed (0 over plain HTTP).
    pub tls_handshake_failures: u64,
    /// TLS handshakes that resumed a session.
    pub tls_resumed: u64,
    /// CPU time of the server's threads (user + system).
    pub cpu_s: f64,
    pub wall_s: f64,
    /// `cpu_s` per GiB of `bytes_sent` (reads).
    pub cpu_s_per_gib: Option<f64>,
    /// `cpu_s` per GiB of `bytes_received` (writes: upload bodies). Both per-GiB figures divide
    /// all the server's CPU: for a run that both writes and reads, take the difference of two
    /// [`Server::stats`] around each phase.
    pub cpu_s_per_gib_received: Option<f64>,
    /// What a sink took (`serve --sink`); `None` for the other backends.
    pub sink: Option<sink::SinkStats>,
    /// Faults injected (`serve --faults`), all of them and by spec.
    pub faults_injected: u64,
    pub faults: std::collections::BTreeMap<String, u64>,
}

/// The CPU time of a set of threads: live ones by tid, exited ones accumulated.
#[derive(Debug, Default)]
struct ThreadCpu {
    live_tids: Mutex<Vec<i32>>,
    exited_ns: std::sync::atomic::AtomicU64,
}

/// Nanoseconds a thread of this process has run, from schedstat (its first field).
fn thread_cpu_ns(tid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl ThreadCpu {
    fn register(&self) {
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        if let Ok(mut live) = self.live_tids.lock() {
            live.push(tid);
        }
    }

    /// Called on the exiting thread itself.
    fn unregister(&self) {
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        let ns = t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
        self.exited_ns.fetch_add(ns, Ordering::Relaxed);
        if let Ok(mut live) = self.live_tids.lock() {
            live.retain(|&t| t != tid);
        }
    }

    fn total_ns(&self) -> u64 {
        let live: u64 = self
            .live_tids
            .lock()
            .map(|l| l.iter().map(|&t| thread_cpu_ns(t)).sum())
            .unwrap_or(0);
        live + self.exited_ns.load(Ordering::Relaxed)
    }
}

/// A running server. Dropping it shuts it down.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    /// Serving HTTPS.
    https: bool,
    runtime: Option<tokio::runtime::Runtime>,
    stop: watch::Sender<bool>,
    accept: Option<tokio::task::JoinHandle<()>>,
    state: Arc<State>,
    cpu: Arc<ThreadCpu>,
    started: Instant,
}

impl Server {
    /// Binds, starts the runtime and begins accepting. Port 0 picks a free port; see
    /// [`Server::addr`].
    pub fn start(config: ServerConfig) -> Result<Server, ServerError> {
        let cpu = Arc::new(ThreadCpu::default());
        let (on_start, on_stop) = (cpu.clone(), cpu.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads.max(1))
            .max_blocking_threads(8)
            .thread_name("ringload-serve")
            .on_thread_start(move || on_start.register())
            .on_thread_stop(move || on_stop.unregister())
            .enable_io()
            .enable_time()
            .build()
            .map_err(ServerError::Runtime)?;
        let listener =
            std::net::TcpListener::bind(config.listen).map_err(|source| ServerError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(ServerError::Runtime)?;
        listener
            .set_nonblocking(true)
            .map_err(ServerError::Runtime)?;
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(ServerError::Runtime)?
        };
        let state = Arc::new(State {
            store: config.store,
            credentials: config.credentials,
            region: config.region,
            throttle_bytes_per_s: config.throttle_bytes_per_s,
            bandwidth: Arc::default(),
            faults: config.faults,
            counters: Counters::default(),
            request_log: std::sync::OnceLock::new(),
            checksums: Default::default(),
        });
        let (stop, stop_rx) = watch::channel(false);
        let tls = config.tls.map(tokio_rustls::TlsAcceptor::from);
        let https = tls.is_some();
        let accept = runtime.spawn(accept_loop(
            listener,
            state.clone(),
            stop_rx,
            config.max_connections.max(1),
            tls,
        ));
        Ok(Server {
            addr,
            https,
            runtime: Some(runtime),
            stop,
            accept: Some(accept),
            state,
            cpu,
            started: Instant::now(),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR` (`https://` over TLS), what a client takes as its endpoint.
    pub fn endpoint_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// What is served, in one line.
    pub fn describe(&self) -> String {
        self.state.store.describe()
    }

    /// Limits the server's GET bodies, all connections together, to `bytes_per_s` from now on
    /// (`None`: no limit) ([`bandwidth`]).
    pub fn limit_bandwidth(&self, bytes_per_s: Option<u64>) {
        self.state.bandwidth.set(bytes_per_s);
    }

    /// Logs every request answered from now on to `path` (`serve --request-log`), one JSON
    /// line each ([`request_log`]); the error names the file and the fix. Once per server.
    pub fn log_requests(&self, path: &std::path::Path) -> Result<(), String> {
        let log = request_log::RequestLog::create(path)?;
        self.state
            .request_log
            .set(log)
            .map_err(|_| "the server logs its requests already".to_string())
    }

    /// The totals so far.
    pub fn stats(&self) -> ServerStats {
        let c = &self.state.counters;
        let bytes_sent = c.bytes_sent.load(Ordering::Relaxed);
        let bytes_received = c.bytes_received.load(Ordering::Relaxed);
        let cpu_s = self.cpu.total_ns() as f64 / 1e9;
        let per_gib =
            |bytes: u64| (bytes > 0).then(|| cpu_s / (bytes as f64 / (1u64 << 30) as f64));
        ServerStats {
            requests: c.requests.load(Ordering::Relaxed),
            heads: c.heads.load(Ordering::Relaxed),
            ranged_gets: c.ranged_gets.load(Ordering::Relaxed),
            bytes_sent,
            bytes_received,
            errors: c.errors.load(Ordering::Relaxed),
            checksums_verified: c.checksums_verified.load(Ordering::Relaxed),
            checksums_refused: c.checksums_refused.load(Ordering::Relaxed),
            connections: c.connections.load(Ordering::Relaxed),
            connection_errors: c.connection_errors.load(Ordering::Relaxed),
            connections_refused: c.connections_refused.load(Ordering::Relaxed),
            tls_handshake_failures: c.tls_handshake_failures.load(Ordering::Relaxed),
            tls_resumed: c.tls_resumed.load(Ordering::Relaxed),
            cpu_s,
            wall_s: self.started.elapsed().as_secs_f64(),
            cpu_s_per_gib: per_gib(bytes_sent),
            cpu_s_per_gib_received: per_gib(bytes_received),
            sink: self.state.store.sink_stats(),
            faults_injected: self.state.faults.counts().iter().map(|(_, n)| n).sum(),
            faults: self.state.faults.counts().into_iter().collect(),
        }
    }

    /// Stops accepting, lets open requests finish (up to [`SHUTDOWN_GRACE`]), stops the
    /// runtime and returns the final totals.
    pub fn shutdown(mut self) -> ServerStats {
        self.stop_now()
    }

    fn stop_now(&mut self) -> ServerStats {
        let _ = self.stop.send(true);
        if let (Some(runtime), Some(accept)) = (self.runtime.as_ref(), self.accept.take()) {
            let _ = runtime.block_on(accept);
        }
        let stats = self.stats();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
        stats
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.runtime.is_some() {
            self.stop_now();
        }
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
    max_connections: usize,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) if connections.len() >= max_connections => {
                    // Closed at once: the client sees the connection end before an answer.
                    state.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
                    drop(stream);
                }
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    state.counters.connections.fetch_add(1, Ordering::Relaxed);
                    match &tls {
                        None => {
                            connections.spawn(serve_connection(stream, state.clone(), stop.clone()));
                        }
                        Some(acceptor) => {
                            let (acceptor, state, stop) =
                                (acceptor.clone(), state.clone(), stop.clone());
                            connections.spawn(async move {
                                // A client that never finishes its handshake holds a slot no
                                // longer than one that never sends its headers.
                                let handshake =
                                    tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream))
                                        .await;
                                match handshake {
                                    Ok(Ok(tls)) => {
                                        let resumed = tls.get_ref().1.handshake_kind()
                                            == Some(rustls::HandshakeKind::Resumed);
                                        if resumed {
                                            state
                                                .counters
                                                .tls_resumed
                                                .fetch_add(1, Ordering::Relaxed);
                                        }
                                        serve_connection(tls, state, stop).await
                                    }
                                    _ => {
                                        state
                                            .counters
                                            .tls_handshake_failures
                                            .fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            });
                        }
                    }
                }
                Err(_) => {
                    // Out of file descriptors or a connection reset before accept: count it,
                    // and back off briefly so a persistent error does not spin.
                    state.counters.connection_errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        connections.abort_all();
    }
}

async fn serve_connection<S>(stream: S, state: Arc<State>, mut stop: watch::Receiver<bool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + UpdateKeys + Unpin + Send + 'static,
{
    let service_state = state.clone();
    // Where the `extra=N` fault arms bytes to send after a body (see trailing.rs).
    let trailing = Arc::new(Trailing::default());
    let service_trailing = trailing.clone();
    let service = service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(service_trailing.clone());
        handler::respond(service_state.clone(), request)
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .keep_alive(true)
        .writev(true)
        .max_header_size(MAX_HEAD_BYTES)
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let connection =
        builder.serve_connection(TokioIo::new(TrailingIo::new(stream, trailing)), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = stop.changed() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if result.is_err() {
        state
            .counters
            .connection_errors
            .fetch_add(1, Ordering::Relaxed);
    }
}
