//! The io_uring engine: what ringload exists for.
//!
//! One ring per rank, created in the rank's (pinned) thread; a hand-written completion loop; one
//! small state machine per keep-alive connection. A GET goes:
//!
//! ```text
//! idle ─▶ connect (only if the socket is closed) ─▶ send head ─▶ peek/consume head ─▶ read body
//!   ▲                                                                              │
//!   └───────────── complete: buffer held until the step loop releases it ◀─────────┘
//! ```
//!
//! - **Request**: the head is formatted (and SigV4-signed when keys are set) into the
//!   connection's request buffer and sent with `SEND`.
//! - **Response head**: peeked into the connection's scratch buffer, parsed with `httparse`, and
//!   exactly its bytes consumed ([`http::HeadReader`]); `206`, `Content-Range` and
//!   `Content-Length` are checked before a body byte moves. A `200` is an error and its body is
//!   never read; an error status's document is read into the scratch buffer for the message.
//! - **Body**: `READ_FIXED` on the socket straight into the GET's registered buffer. The kernel
//!   copies each byte once, from the socket into the pool; no user-space code touches it.
//!   `SO_RCVLOWAT` is raised to 1 MiB while streaming (a read completes when a MiB is queued,
//!   so a 99 MiB body takes about a hundred completions, not thousands) and lowered to 1 for
//!   the last MiB (a read never waits for bytes that will not come). At that switch a
//!   `TCP_QUICKACK` sends the ACK the kernel held back while a MiB sat unread; without it a
//!   sender with Nagle on holds the body's last segment for the ~40 ms delayed-ACK timer
//!   (BENCHMARKS.md, "slow servers"). Never one huge `RECV | MSG_WAITALL`: the kernel would
//!   hand that to an io-wq thread.
//! - **Failures**: a retryable failure (5xx, 429, a closed or reset connection, a timeout)
//!   closes the connection, waits out the backoff and starts the GET again on a new connection,
//!   up to the policy's retries; each attempt has the policy's timeout.
//!
//! The files, by job: [`probe`] says whether io_uring can be used here; [`conn`] is one
//! connection's state machine, apart from the ring; this file is the rank's loop over the ring
//! (the [`Transport`] of the shared reader window); [`http`] formats requests and reads heads;
//! [`ring`] and [`pool`] own every piece of memory the kernel writes into, and hold the
//! engine's only `unsafe`.
//!
//! The rank thread blocks only in `io_uring_enter`: [`RankIo::compute`] is a ring timeout, and
//! [`RankIo::barrier`] keeps reaping while it waits (an eventfd read wakes the ring when the
//! barrier turns), so I/O overlaps compute and the barrier as in a real loader.
//!
//! Memory is set up before the clock starts and never allocated on the hot path, apart from
//! what SigV4 signing allocates per request when keys are set: one pool of
//! `readers × prefetch` buffers (each the largest GET), one connection per buffer, a fixed
//! scratch and request buffer per connection.

pub mod conn;
pub mod http;
pub mod pool;
pub mod probe;
pub mod ring;
pub mod tls;

use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use rustix::net::{AddressFamily, SocketFlags, SocketType};

pub use self::probe::unavailable_cause;

use self::conn::{Conn, Failure, Job, Op, Step, TimerAction};
use self::pool::{BufIndex, BufferPool};
use self::ring::{COMPUTE_TAG, Completion, Ring, WAKE_TAG};
use super::window::{Fetched, Transport, Window, WindowedRank};
use crate::plan::RangedGet;
use crate::rank::{Progress, RankError, StepBarrier};
use crate::s3::sign::{Payload, Signer};
use crate::s3::{Client, RequestError, RetryPolicy, Wait};

/// Response heads (and error documents) are read into this much scratch per connection.
pub const SCRATCH_BYTES: usize = 16 << 10;
/// How often a waiting rank looks at timers and at whether another rank failed.
const POLL: Duration = Duration::from_millis(100);

/// What every rank of a run shares: where to connect, how to sign, how to retry.
#[derive(Debug, Clone)]
pub struct UringEngine {
    client: Client,
    /// The target's endpoints, in its order.
    endpoints: Vec<Gateway>,
    /// With `https://` endpoints: the client's TLS configuration (its session cache shared),
    /// with secret extraction on for the ring's own record layer.
    tls: Option<Arc<rustls::ClientConfig>>,
}
#[derive(Debug, Clone)]
struct Gateway {
    /// `http://host:port`, for messages.
    url: String,
    addr: SocketAddr,
    /// The `Host` header (with the bucket in it, virtual-hosted).
    host: String,
    /// `scheme://host` that request paths follow, for signing.
    url_prefix: String,
    /// The name TLS checks, for `https://`.
    server_name: Option<rustls::pki_types::ServerName<'static>>,
}

impl UringEngine {
    /// Resolves every endpoint once (through `--resolve` pins first), for every rank's
    /// connections.
    pub fn new(client: Client) -> Result<UringEngine, RankError> {
        let target = client.target();
        let tls = client.tls_config().map(|config| {
            let mut config = (**config).clone();
            config.enable_secret_extraction = true;
            Arc::new(config)
        });
        let endpoints = target
            .endpoints
            .iter()
            .map(|endpoint| {
                let addr = target
                    .addresses(endpoint)
                    .ok()
                    .and_then(|addrs| addrs.into_iter().next())
                    .ok_or_else(|| {
                        RankError::Request(RequestError::Unreachable {
                            operation: client.operation("GET", None),
                            reason: format!(
                                "cannot resolve {}; check --endpoint (or pin the name with \
                                 --resolve HOST:PORT:ADDR)",
                                target.request_hostname(endpoint)
                            ),
                        })
                    })?;
                let server_name = if endpoint.is_tls() {
                    let name = target.request_hostname(endpoint);
                    Some(crate::s3::tls::server_name(&name).map_err(|reason| {
                        RankError::Request(RequestError::Tls {
                            operation: client.operation("GET", None),
                            reason,
                        })
                    })?)
                } else {
                    None
                };
                Ok(Gateway {
                    url: endpoint.url.clone(),
                    addr,
                    host: target.host_header(endpoint),
                    url_prefix: target.request_url(endpoint, "", ""),
                    server_name,
                })
            })
            .collect::<Result<Vec<_>, RankError>>()?;
        Ok(UringEngine {
            client,
            endpoints,
            tls,
        })
    }

    /// The I/O of one rank for `epochs` epochs, set up in full: its pool mapped, pre-faulted,
    /// locked and registered, its connections' buffers allocated. Call it in the rank's own
    /// thread.
    ///
    /// Each reader has `prefetch` connections of its own; connection `j` of reader `g`
    /// (`g = first_reader + reader`, counting every rank's readers) goes to endpoint
    /// `(g × prefetch + j) mod E`, as the baseline assigns its slots.
    #[allow(clippy::too_many_arguments)]
    pub fn rank<'a>(
        &self,
        gets: Vec<Vec<RangedGet>>,
        prefetch: usize,
        epochs: u32,
        first_reader: usize,
        buffer_bytes: usize,
        barrier: &'a StepBarrier,
        progress: &'a Progress,
    ) -> Result<UringRank<'a>, RankError> {
        let buffers = (gets.len() * prefetch).max(1);
        let largest = gets
            .iter()
            .flatten()
            .map(|g| g.len_bytes)
            .max()
            .unwrap_or(0);
        if largest as usize > buffer_bytes {
            return Err(RankError::Engine(format!(
                "a GET of {largest} bytes does not fit the plan's {buffer_bytes}-byte buffers (a bug)"
            )));
        }
        let engine = |what: &str, e: std::io::Error| RankError::Engine(format!("{what}: {e}"));
        // TLS bodies are decrypted in their buffer: it holds a record beyond the body (the
        // plan's budget counts it).
        if self.tls.is_some()
            && (largest + crate::budget::TLS_RECORD_SLACK_BYTES) as usize > buffer_bytes
        {
            return Err(RankError::Engine(format!(
                "a GET of {largest} bytes and a TLS record do not fit the plan's \
                 {buffer_bytes}-byte buffers (a bug)"
            )));
        }
        let pool = BufferPool::new(buffers, buffer_bytes)
            .map_err(|e| engine("cannot set up the buffer pool", e))?;
        let stage_bytes = if self.tls.is_some() {
            tls::STAGE_BYTES
        } else {
            0
        };
        let mut ring = Ring::new(buffers, SCRATCH_BYTES, stage_bytes, pool)
            .map_err(|e| engine("cannot set up the ring", e))?;
        let wake = rustix::event::eventfd(
            0,
            // Blocking: a ring read of a non-blocking fd would complete at once with EAGAIN.
            rustix::event::EventfdFlags::CLOEXEC,
        )
        .map_err(|e| engine("cannot create the barrier's eventfd", e.into()))?;
        let wake = Arc::new(wake);
        barrier.add_waker(Arc::clone(&wake));
        ring.watch(wake.as_fd())
            .map_err(|e| engine("cannot watch the barrier's eventfd", e))?;
        let policy = *self.client.policy();
        let target = self.client.target();
        let paths = gets
            .iter()
            .map(|reader| {
                reader
                    .iter()
                    .map(|g| target.request_path(Some(&g.key)))
                    .collect()
            })
            .collect();
        let prefetch = prefetch.max(1);
        let mut transport = RingIo {
            ring,
            // One connection per buffer, `prefetch` per reader: every GET the window holds
            // can be in flight.
            conns: (0..buffers).map(|_| Conn::default()).collect(),
            conn_endpoint: (0..buffers)
                .map(|c| target.endpoint_for(first_reader + c / prefetch, prefetch, c % prefetch))
                .collect(),
            prefetch,
            tls: (0..buffers).map(|_| None).collect(),
            tls_read: vec![None; buffers],
            tls_failure: vec![None; buffers],
            ready: std::collections::VecDeque::with_capacity(buffers),
            paths,
            completions: Vec::with_capacity(buffers + 8),
            engine: self.clone(),
            signer: self.client.signer().clone(),
            policy,
            compute_running: false,
            wake,
            progress,
        };
        // TLS connections are opened and handshaken now, before the clock.
        if self.tls.is_some() {
            let tls_conns: Vec<usize> = (0..buffers)
                .filter(|&c| transport.gateway(c).server_name.is_some())
                .collect();
            for c in tls_conns {
                transport.open_tls(c).map_err(|(errno, failure)| {
                    let gateway = transport.gateway(c).url.clone();
                    RankError::Request(match failure {
                        Some(reason) => RequestError::Tls {
                            operation: self.client.operation("GET", None),
                            reason,
                        },
                        None => RequestError::Unreachable {
                            operation: self.client.operation("GET", None),
                            reason: format!(
                                "cannot connect to {gateway} ({}); is the server running? \
                                 check --endpoint",
                                std::io::Error::from_raw_os_error(errno)
                            ),
                        },
                    })
                })?;
            }
        }
        Ok(WindowedRank::new(
            Window::new(gets, prefetch, epochs, self.client.location()),
            transport,
            barrier,
            policy.longest_request(),
        ))
    }
}

/// One rank's I/O on the io_uring engine.
pub type UringRank<'a> = WindowedRank<'a, RingIo<'a>>;

/// The uring engine's transport: one ring, its connections, and the completion loop.
#[derive(Debug)]
pub struct RingIo<'a> {
    ring: Ring,
    conns: Vec<Conn>,
    /// `conn_endpoint[c]`: the endpoint connection `c` goes to (an index of
    /// `UringEngine::endpoints`).
    conn_endpoint: Vec<usize>,
    /// Connections per reader: reader `r` owns `r × prefetch ..`.
    prefetch: usize,
    /// Each TLS connection's session (`None`: plain, or not open).
    tls: Vec<Option<tls::Session>>,
    /// The operation a TLS connection's ciphertext receive in flight is for.
    tls_read: Vec<Option<Op>>,
    /// Why a TLS connection failed: (during its handshake, the words).
    tls_failure: Vec<Option<(bool, String)>>,
    /// Completions made without the ring (TLS plaintext already decrypted), handled before
    /// the ring is waited on.
    ready: std::collections::VecDeque<(usize, i32)>,
    /// `paths[reader][get]`: the GET's object path, formatted once.
    paths: Vec<Vec<String>>,
    /// The completions of one poll (reused).
    completions: Vec<Completion>,
    engine: UringEngine,
    signer: Signer,
    policy: RetryPolicy,
    compute_running: bool,
    wake: Arc<OwnedFd>,
    progress: &'a Progress,
}

/// The window as the uring engine keeps it: a GET in flight knows its connection, an arrived
/// one holds its registered buffer.
type UringWindow = Window<usize, BufIndex>;

impl RingIo<'_> {
    fn engine_error(what: &str, e: std::io::Error) -> RankError {
        RankError::Engine(format!("io_uring: {what}: {e}"))
    }

    /// The lowest-numbered idle connection of `reader` (the baseline takes the lowest free
    /// slot the same way, so both engines send a reader's GETs to the same endpoints).
    fn free_conn(&self, reader: usize) -> Option<usize> {
        let first = reader * self.prefetch;
        let own = &self.conns[first..(first + self.prefetch).min(self.conns.len())];
        own.iter().position(Conn::is_free).map(|i| first + i)
    }

    fn gateway(&self, c: usize) -> &Gateway {
        &self.engine.endpoints[self.conn_endpoint[c]]
    }

    /// The ring, and connection `c`'s socket to queue an operation on.
    fn ring_and_socket(&mut self, c: usize) -> Result<(&mut Ring, BorrowedFd<'_>), RankError> {
        let socket = self.conns[c]
            .socket
            .as_ref()
            .ok_or_else(|| RankError::Engine(format!("connection {c} has no socket (a bug)")))?;
        Ok((&mut self.ring, socket.as_fd()))
    }

    /// Sets `SO_RCVLOWAT` on connection `c` to `bytes` if it is not that already.
    fn set_rcvlowat(&mut self, c: usize, bytes: usize) -> Result<(), RankError> {
        if self.conns[c].rcvlowat_bytes == bytes {
            return Ok(());
        }
        let (_, fd) = self.ring_and_socket(c)?;
        ring::set_rcvlowat(fd, bytes).map_err(|e| Self::engine_error("SO_RCVLOWAT", e))?;
        self.conns[c].rcvlowat_bytes = bytes;
        Ok(())
    }

    /// The job connection `c` serves; a connection with an operation in flight has one.
    fn job(&self, c: usize) -> Result<Job, RankError> {
        self.conns[c]
            .job()
            .copied()
            .ok_or_else(|| RankError::Engine(format!("connection {c} has no GET (a bug)")))
    }

    /// Queues the operation connection `c` asked for.
    fn queue(&mut self, window: &UringWindow, c: usize, op: Op) -> Result<(), RankError> {
        if self.gateway(c).server_name.is_some() {
            return self.queue_tls(window, c, op);
        }
        let queued = |e| Self::engine_error("queueing an operation", e);
        match op {
            Op::Connect => {
                let addr = self.gateway(c).addr;
                let family = match addr {
                    SocketAddr::V4(_) => AddressFamily::INET,
                    SocketAddr::V6(_) => AddressFamily::INET6,
                };
                let socket = rustix::net::socket_with(
                    family,
                    SocketType::STREAM,
                    SocketFlags::CLOEXEC,
                    None,
                )
                .map_err(|e| Self::engine_error("socket", e.into()))?;
                rustix::net::sockopt::set_tcp_nodelay(&socket, true)
                    .map_err(|e| Self::engine_error("TCP_NODELAY", e.into()))?;
                self.ring
                    .connect(c, socket.as_fd(), &addr)
                    .map_err(queued)?;
                self.conns[c].set_socket(socket);
                Ok(())
            }
            Op::SendRequest => {
                self.format_request(window, c)?;
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.send(c, fd, 0).map_err(queued)
            }
            Op::SendRest { from } => {
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.send(c, fd, from).map_err(queued)
            }
            Op::Peek { at } => {
                self.set_rcvlowat(c, 1)?;
                let len = self.ring.scratch_len(c) - at;
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.recv(c, fd, at, len, true).map_err(queued)
            }
            Op::Recv { at, len } => {
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.recv(c, fd, at, len, false).map_err(queued)
            }
            Op::Body { offset, len, lowat } => {
                let tail = lowat < self.conns[c].rcvlowat_bytes;
                self.set_rcvlowat(c, lowat)?;
                if tail {
                    // While a MiB or more sits unread, Linux leaves the ACK to the reader. A
                    // sender with Nagle on (garage, s3s-fs) then holds the body's last partial
                    // segment until the delayed-ACK timer fires: ~40 ms per GET. Send that ACK
                    // now, once per GET, as the last MiB is read.
                    let (_, fd) = self.ring_and_socket(c)?;
                    ring::quickack(fd).map_err(|e| Self::engine_error("TCP_QUICKACK", e))?;
                }
                let buf = self.job(c)?.buf;
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.read_fixed(c, fd, buf, offset, len).map_err(queued)
            }
        }
    }

    /// Opens connection `c` to its (TLS) gateway and handshakes, blocking (bounded by the
    /// connect timeout). `Err((errno, words))`: the connect failed (no words), or the handshake
    /// did.
    fn open_tls(&mut self, c: usize) -> Result<(), (i32, Option<String>)> {
        let gateway = self.gateway(c).clone();
        let (Some(name), Some(config)) = (gateway.server_name.clone(), self.engine.tls.clone())
        else {
            return Err((
                libc::EINVAL,
                Some("a TLS connection without TLS (a bug)".into()),
            ));
        };
        let family = match gateway.addr {
            SocketAddr::V4(_) => AddressFamily::INET,
            SocketAddr::V6(_) => AddressFamily::INET6,
        };
        let errno = |e: rustix::io::Errno| (e.raw_os_error(), None);
        let socket =
            rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)
                .map_err(errno)?;
        rustix::net::sockopt::set_tcp_nodelay(&socket, true).map_err(errno)?;
        // Bounds the connect as well as the handshake's writes.
        rustix::net::sockopt::set_socket_timeout(
            &socket,
            rustix::net::sockopt::Timeout::Send,
            Some(self.policy.connect_timeout),
        )
        .map_err(errno)?;
        rustix::net::connect(&socket, &gateway.addr).map_err(errno)?;
        let endpoint =
            crate::s3::Endpoint::parse(&gateway.url).map_err(|e| (libc::EINVAL, Some(e)))?;
        let hostname = gateway.host.clone();
        let describe = |e: &std::io::Error| crate::s3::tls::describe(e, &endpoint, &hostname);
        let (_, stage) = self.ring.scratch_and_stage(c);
        let session = tls::Session::handshake(
            socket.as_fd(),
            &config,
            name,
            self.policy.connect_timeout,
            stage,
            &describe,
        )
        .map_err(|e| (libc::EPROTO, Some(e.0)))?;
        self.engine.client.note_tls_negotiated(&session.negotiated);
        self.conns[c].set_socket(socket);
        self.tls[c] = Some(session);
        self.tls_read[c] = None;
        Ok(())
    }

    /// [`RingIo::queue`] for a TLS connection: connects and handshakes on the rank thread;
    /// seals requests; serves reads from decrypted plaintext when there is some, else receives
    /// ciphertext into the staging area.
    fn queue_tls(&mut self, window: &UringWindow, c: usize, op: Op) -> Result<(), RankError> {
        let queued = |e| Self::engine_error("queueing an operation", e);
        match op {
            Op::Connect => {
                let result = match self.open_tls(c) {
                    Ok(()) => 0,
                    Err((errno, words)) => {
                        if let Some(words) = words {
                            self.tls_failure[c] = Some((true, words));
                        }
                        -errno
                    }
                };
                self.ready.push_back((c, result));
                Ok(())
            }
            Op::SendRequest => {
                self.format_request(window, c)?;
                let session = self.tls[c].as_mut().ok_or_else(|| {
                    RankError::Engine(format!("connection {c} has no TLS session (a bug)"))
                })?;
                session
                    .seal(self.ring.request_buffer(c))
                    .map_err(RankError::Engine)?;
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.send(c, fd, 0).map_err(queued)
            }
            Op::SendRest { from } => {
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.send(c, fd, from).map_err(queued)
            }
            Op::Peek { .. } | Op::Recv { .. } | Op::Body { .. } => {
                let Some(session) = self.tls[c].as_ref() else {
                    return Err(RankError::Engine(format!(
                        "connection {c} has no TLS session (a bug)"
                    )));
                };
                if session.pending() > 0 || session.closed() {
                    let n = self.deliver(c, op)?;
                    self.ready.push_back((c, n as i32));
                    return Ok(());
                }
                // A body's ciphertext lands in its own buffer; a head's, in the staging area
                // (read as it comes: a head is small).
                if let Op::Body { offset, lowat, .. } = op {
                    return self.read_in_place(c, op, offset, lowat);
                }
                let lowat = 1;
                self.set_rcvlowat(c, lowat)?;
                let at = self.tls[c].as_ref().map_or(0, tls::Session::free_from);
                self.tls_read[c] = Some(op);
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.recv_stage(c, fd, at, tls::STAGE_BYTES - at)
                    .map_err(queued)
            }
        }
    }

    /// Landing in place: receives a body's ciphertext straight into the GET's registered
    /// buffer, behind the partial record already there (moved from the staging area first).
    fn read_in_place(
        &mut self,
        c: usize,
        op: Op,
        offset: usize,
        lowat: usize,
    ) -> Result<(), RankError> {
        let buf = self.job(c)?.buf;
        let bug = || RankError::Engine(format!("connection {c} has no TLS session (a bug)"));
        let session = self.tls[c].as_mut().ok_or_else(bug)?;
        if !session.in_body() {
            let partial = session.free_from();
            self.ring.stage_into_buffer(c, 0..partial, buf, offset);
            self.tls[c].as_mut().ok_or_else(bug)?.enter_body();
        }
        let at = offset + self.tls[c].as_ref().ok_or_else(bug)?.free_from();
        if lowat < self.conns[c].rcvlowat_bytes {
            let (_, fd) = self.ring_and_socket(c)?;
            ring::quickack(fd).map_err(|e| Self::engine_error("TCP_QUICKACK", e))?;
        }
        self.set_rcvlowat(c, lowat)?;
        self.tls_read[c] = Some(op);
        let len = self.ring.pool().buffer_bytes() - at;
        let (ring, fd) = self.ring_and_socket(c)?;
        ring.read_fixed(c, fd, buf, at, len)
            .map_err(|e| Self::engine_error("queueing an operation", e))
    }

    /// Landing in place: `n` ciphertext bytes landed in the body's buffer: decrypts them there
    /// and hands the body its plaintext, already where it belongs.
    fn received_in_place(
        &mut self,
        window: &mut UringWindow,
        c: usize,
        op: Op,
        n: usize,
    ) -> Result<(), RankError> {
        let Op::Body { offset, len, lowat } = op else {
            return Err(RankError::Engine(format!(
                "connection {c}: an in-place TLS read for a head (a bug)"
            )));
        };
        let buf = self.job(c)?.buf;
        let bug = || RankError::Engine(format!("connection {c} has no TLS session (a bug)"));
        let decrypted = {
            let region = self.ring.buffer_from_mut(buf, offset);
            self.tls[c].as_mut().ok_or_else(bug)?.received(region, n)
        };
        if let Err(reason) = decrypted {
            self.tls_failure[c] = Some((false, reason.to_string()));
            return self.on_completion(window, c, -libc::EBADMSG);
        }
        let session = self.tls[c].as_mut().ok_or_else(bug)?;
        let plain = session.pending();
        if plain == 0 && !session.closed() {
            return self.read_in_place(c, op, offset, lowat);
        }
        let give = plain.min(len);
        if give == len {
            // The body is whole: what came after it goes back to the staging area.
            let rest = session.leave_body(give);
            self.ring
                .buffer_into_stage(c, buf, offset + rest.start..offset + rest.end);
        } else {
            session.advance_body(give);
        }
        self.on_completion(window, c, give as i32)
    }

    /// Hands decrypted plaintext to the operation `op` of TLS connection `c`, as the socket
    /// would have: a peek copies without consuming, a receive consumes, a body read lands in
    /// the GET's buffer. Returns the bytes handed (0 once the server closed).
    fn deliver(&mut self, c: usize, op: Op) -> Result<usize, RankError> {
        let buf = self.conns[c].job().map(|j| j.buf);
        let Some(session) = self.tls[c].as_mut() else {
            return Err(RankError::Engine(format!(
                "connection {c} has no TLS session (a bug)"
            )));
        };
        let plain = session.plaintext();
        let (scratch, stage) = self.ring.scratch_and_stage(c);
        Ok(match op {
            Op::Peek { at } => {
                let n = plain.len().min(scratch.len() - at);
                scratch[at..at + n].copy_from_slice(&stage[plain.start..plain.start + n]);
                n
            }
            Op::Recv { at, len } => {
                let n = plain.len().min(len);
                scratch[at..at + n].copy_from_slice(&stage[plain.start..plain.start + n]);
                session.consume(stage, n);
                n
            }
            Op::Body { offset, len, .. } => {
                let n = plain.len().min(len);
                let buf = buf.ok_or_else(|| {
                    RankError::Engine(format!("connection {c} has no GET (a bug)"))
                })?;
                self.ring
                    .stage_into_buffer(c, plain.start..plain.start + n, buf, offset);
                let (_, stage) = self.ring.scratch_and_stage(c);
                if let Some(session) = self.tls[c].as_mut() {
                    session.consume(stage, n);
                }
                n
            }
            Op::Connect | Op::SendRequest | Op::SendRest { .. } => {
                return Err(RankError::Engine(format!(
                    "connection {c}: a TLS delivery for a send (a bug)"
                )));
            }
        })
    }

    /// A ciphertext receive of TLS connection `c` for `op` completed with `result`: decrypts,
    /// then hands plaintext on, or receives again when only part of a record came.
    fn tls_received(
        &mut self,
        window: &mut UringWindow,
        c: usize,
        op: Op,
        result: i32,
    ) -> Result<(), RankError> {
        if result <= 0 {
            return self.on_completion(window, c, result);
        }
        if self.tls[c].as_ref().is_some_and(tls::Session::in_body) {
            return self.received_in_place(window, c, op, result as usize);
        }
        let decrypted = {
            let (_, stage) = self.ring.scratch_and_stage(c);
            match self.tls[c].as_mut() {
                Some(session) => session.received(stage, result as usize),
                None => Err("no TLS session (a bug)".into()),
            }
        };
        if let Err(reason) = decrypted {
            self.tls_failure[c] = Some((false, reason.to_string()));
            return self.on_completion(window, c, -libc::EBADMSG);
        }
        let session = self.tls[c].as_ref();
        if session.is_some_and(|s| s.pending() > 0 || s.closed()) {
            let n = self.deliver(c, op)?;
            return self.on_completion(window, c, n as i32);
        }
        // Part of a record: receive the rest.
        self.queue_tls(window, c, op)
    }

    /// Formats (and signs, when keys are set) the request head of connection `c`'s GET.
    fn format_request(&mut self, window: &UringWindow, c: usize) -> Result<(), RankError> {
        let job = self.job(c)?;
        let get = window.get(job.reader, job.get);
        let path = &self.paths[job.reader][job.get];
        let gateway = &self.engine.endpoints[self.conn_endpoint[c]];
        let signed = if self.signer.signs() {
            let url = format!("{}{path}", gateway.url_prefix);
            let range = get.range_header();
            let to_sign = [("host", gateway.host.as_str()), ("range", range.as_str())];
            self.signer
                .headers("GET", &url, &to_sign, Payload::Unsigned, SystemTime::now())
                .map_err(RankError::Engine)?
        } else {
            Vec::new()
        };
        http::request_head(
            self.ring.request_buffer(c),
            path,
            &gateway.host,
            get,
            &signed,
        );
        Ok(())
    }

    /// `GET s3://bucket/key (bytes=a-b)`, for errors.
    fn operation(&self, get: &RangedGet) -> String {
        format!(
            "{} ({})",
            self.engine.client.operation("GET", Some(&get.key)),
            get.range_header()
        )
    }

    /// A failed attempt, in words that name the GET.
    fn request_error(
        &self,
        window: &UringWindow,
        c: usize,
        get: &RangedGet,
        failure: Failure,
    ) -> RequestError {
        let operation = self.operation(get);
        if let (Failure::Io { .. }, Some((handshake, reason))) =
            (&failure, self.tls_failure.get(c).cloned().flatten())
        {
            return if handshake {
                RequestError::Tls { operation, reason }
            } else {
                RequestError::Transport {
                    operation,
                    reason: format!("TLS: {reason}"),
                }
            };
        }
        match failure {
            Failure::TimedOut(what) => RequestError::Timeout {
                operation,
                after: match what {
                    Wait::Connect => self.policy.connect_timeout,
                    Wait::FirstByte => self.policy.first_byte_timeout,
                    Wait::Idle => self.policy.idle_timeout,
                    Wait::Request => self.policy.timeout,
                },
                what,
            },
            Failure::Io { errno, connecting } => {
                let error = std::io::Error::from_raw_os_error(errno);
                let refused = matches!(
                    errno,
                    libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH
                );
                if connecting && refused {
                    RequestError::Unreachable {
                        operation,
                        reason: format!(
                            "cannot connect to {} ({error}); is the server running? check --endpoint",
                            self.gateway(c).url
                        ),
                    }
                } else {
                    RequestError::Transport {
                        operation,
                        reason: error.to_string(),
                    }
                }
            }
            Failure::Transport(reason) => RequestError::Transport { operation, reason },
            Failure::BadResponse(reason) => RequestError::BadResponse { operation, reason },
            // Garbage where a head should start, on a socket that carried a response: what
            // followed that response's body. The baseline's pool drops such a connection too.
            Failure::Head {
                error: http::HeadError::Malformed(_),
                after: Some((reader, index)),
                ..
            } => RequestError::StrayBytes {
                operation,
                after: self.operation(window.get(reader, index)),
            },
            Failure::Head { error, reused, .. } => match error {
                http::HeadError::Closed(0) if reused => RequestError::Transport {
                    operation,
                    reason: "the server closed the keep-alive connection before answering".into(),
                },
                http::HeadError::Closed(_) => RequestError::Transport {
                    operation,
                    reason: error.to_string(),
                },
                http::HeadError::TooLong(_) | http::HeadError::Malformed(_) => {
                    RequestError::BadResponse {
                        operation,
                        reason: error.to_string(),
                    }
                }
            },
            Failure::Status {
                status,
                document,
                retry_after,
            } => RequestError::from_response(
                operation,
                status,
                &document,
                &self.engine.client.hint_context(),
            )
            .with_retry_after(retry_after.as_deref()),
        }
    }

    /// Handles one completion of connection `c`.
    fn on_completion(
        &mut self,
        window: &mut UringWindow,
        c: usize,
        result: i32,
    ) -> Result<(), RankError> {
        let job = self.job(c)?;
        if self.conns[c].is_reading_body() && result > 0 {
            self.progress
                .bytes_received
                .fetch_add(result as u64, Ordering::Relaxed);
        }
        let get = window.get(job.reader, job.get);
        let request_len = self.ring.request_len(c);
        let step = self.conns[c]
            .on_completion(
                result,
                self.ring.scratch(c),
                request_len,
                get,
                Instant::now(),
            )
            .map_err(|bug| RankError::Engine(format!("connection {c}: {bug} (a bug)")))?;
        match step {
            Step::Queue(op) => self.queue(window, c, op),
            Step::Arrived => {
                let job = self.conns[c]
                    .finish()
                    .ok_or_else(|| RankError::Engine("an arrival without a GET (a bug)".into()))?;
                let endpoint = self.conn_endpoint[c];
                let arrival = Fetched {
                    retries: job.retries,
                    first_byte: job.first_byte,
                    total: job.first_started.elapsed(),
                    endpoint,
                };
                let len = window.get(job.reader, job.get).len_bytes as usize;
                window.verify(
                    job.reader,
                    job.get,
                    endpoint,
                    self.ring.filled(job.buf, len),
                )?;
                window.arrived(job.reader, job.get, job.buf, arrival)?;
                Ok(())
            }
            Step::Failed(failure) => {
                let error = self.request_error(window, c, get, failure);
                self.attempt_failed(window, c, job.retries, error)
            }
        }
    }

    /// An attempt failed: its connection is closed; the GET is retried after the backoff, or
    /// fails and gives its buffer back.
    fn attempt_failed(
        &mut self,
        window: &mut UringWindow,
        c: usize,
        retries: u32,
        error: RequestError,
    ) -> Result<(), RankError> {
        let retry_at = (error.retryable() && retries < self.policy.retries)
            .then(|| Instant::now() + self.policy.delay(retries, error.retry_after()));
        if let RequestError::StrayBytes { after, .. } = &error {
            window.stray_bytes(1, after);
        }
        let endpoint = self.conn_endpoint[c];
        if retry_at.is_some() {
            window.retrying(error.cause(), endpoint);
        }
        let failed = self.conns[c].attempt_failed(retry_at);
        self.tls_failure[c] = None;
        if self.conns[c].socket.is_none() {
            self.tls[c] = None;
            self.tls_read[c] = None;
        }
        if let Some(job) = failed {
            window.failed(job.reader, job.get, endpoint, job.retries, error)?;
            self.ring.pool_mut().give(job.buf);
        }
        Ok(())
    }

    /// One round of the completion loop: submit, wait until something completes or `until`
    /// (at most [`POLL`]), handle what completed, then the timers.
    fn poll_once(
        &mut self,
        window: &mut UringWindow,
        until: Option<Instant>,
    ) -> Result<(), RankError> {
        let now = Instant::now();
        let mut wake = until.unwrap_or(now + POLL).min(now + POLL);
        for conn in &self.conns {
            if let Some(at) = conn.wake_at(&self.policy) {
                wake = wake.min(at);
            }
        }
        if !self.ready.is_empty() {
            wake = now;
        }
        let mut completions = std::mem::take(&mut self.completions);
        let waited = self
            .ring
            .wait(Some(wake.saturating_duration_since(now)), &mut completions);
        let handled = waited
            .map_err(|e| Self::engine_error("io_uring_enter", e))
            .and_then(|()| self.handle(window, &completions));
        self.completions = completions;
        handled?;
        self.timers(window)
    }

    fn handle(
        &mut self,
        window: &mut UringWindow,
        completions: &[Completion],
    ) -> Result<(), RankError> {
        for &completion in completions {
            match completion.tag {
                COMPUTE_TAG => self.compute_running = false,
                WAKE_TAG => {
                    let wake = Arc::clone(&self.wake);
                    self.ring
                        .watch(wake.as_fd())
                        .map_err(|e| Self::engine_error("re-arming the barrier's eventfd", e))?;
                }
                tag => {
                    let c = tag as usize;
                    match self.tls_read.get_mut(c).and_then(Option::take) {
                        Some(op) => self.tls_received(window, c, op, completion.result)?,
                        None => self.on_completion(window, c, completion.result)?,
                    }
                }
            }
        }
        self.handle_ready(window)
    }

    /// Completions made without the ring, in order; handling one may make more.
    fn handle_ready(&mut self, window: &mut UringWindow) -> Result<(), RankError> {
        while let Some((c, result)) = self.ready.pop_front() {
            self.on_completion(window, c, result)?;
        }
        Ok(())
    }

    /// Starts GETs whose backoff is over; shuts down attempts past their timeout (their
    /// operation then completes and reports the timeout).
    fn timers(&mut self, window: &UringWindow) -> Result<(), RankError> {
        let now = Instant::now();
        for c in 0..self.conns.len() {
            match self.conns[c].on_timer(now, &self.policy) {
                TimerAction::None => {}
                TimerAction::Retry => {
                    let op = self.conns[c].start_attempt(now);
                    self.queue(window, c, op)?;
                }
                TimerAction::ShutDown => {
                    if let Some(socket) = &self.conns[c].socket {
                        let _ = rustix::net::shutdown(socket, rustix::net::Shutdown::Both);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Transport for RingIo<'_> {
    type InFlight = usize;
    type Held = BufIndex;

    /// Starts the GET on a free connection, into a free buffer.
    fn start(
        &mut self,
        window: &UringWindow,
        reader: usize,
        get: usize,
    ) -> Result<usize, RankError> {
        let c = self.free_conn(reader).ok_or_else(|| {
            RankError::Engine("no idle connection inside the window (a bug)".into())
        })?;
        // The window makes both impossible to miss: see the pool's docs.
        let buf = self.ring.pool_mut().take().ok_or_else(|| {
            RankError::Engine("the buffer pool ran dry inside the prefetch window (a bug)".into())
        })?;
        let now = Instant::now();
        self.conns[c].assign(Job::new(reader, get, buf, now));
        let op = self.conns[c].start_attempt(now);
        self.queue(window, c, op)?;
        Ok(c)
    }

    fn progress(&mut self, window: &mut UringWindow, until: Instant) -> Result<(), RankError> {
        self.poll_once(window, Some(until))
    }

    fn compute(&mut self, window: &mut UringWindow, duration: Duration) -> Result<(), RankError> {
        if duration.is_zero() {
            return Ok(());
        }
        self.ring
            .timeout(duration)
            .map_err(|e| Self::engine_error("queueing the compute timer", e))?;
        self.compute_running = true;
        // Bounded: the timer completes after `duration` whatever else happens.
        while self.compute_running {
            self.poll_once(window, None)?;
        }
        Ok(())
    }

    fn barrier(
        &mut self,
        window: &mut UringWindow,
        barrier: &StepBarrier,
    ) -> Result<(), RankError> {
        let arrival = barrier.arrive()?;
        loop {
            if barrier.passed(&arrival)? {
                return Ok(());
            }
            // Woken by the eventfd when the barrier turns; completions go on meanwhile.
            self.poll_once(window, None)?;
        }
    }

    fn give_back(&mut self, buf: BufIndex) {
        self.ring.pool_mut().give(buf);
    }

    fn check_idle(&self) -> Result<(), RankError> {
        let pool = self.ring.pool();
        if pool.free_count() == pool.count() {
            return Ok(());
        }
        Err(RankError::Engine(format!(
            "{} of {} buffers are not back in the pool at the end of an epoch (a bug)",
            pool.count() - pool.free_count(),
            pool.count()
        )))
    }
}

#[cfg(test)]
impl UringRank<'_> {
    /// The body of an arrived GET, as the kernel wrote it into the pool.
    fn body(&self, reader: usize, get: usize) -> &[u8] {
        let super::window::Slot::Arrived(buf) = *self.window.slot(reader, get) else {
            panic!("GET {reader}.{get} has not arrived");
        };
        let len = self.window.get(reader, get).len_bytes as usize;
        self.transport.ring.filled(buf, len)
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    //! The engine against a scripted HTTP server on a real loopback socket: each accepted
    //! connection reads request heads and answers each with the next scripted response, written
    //! in the pieces the script gives (with pauses, so they arrive apart), or closes.
    use super::*;
    use crate::rank::RankIo;
    use crate::s3::{Endpoint, Target};
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    #[derive(Clone)]
    enum Piece {
        Write(Vec<u8>),
        Pause,
        Close,
    }

    /// The bytes of `get`'s range: a pattern that shows any shift or loss.
    fn pattern(get: &RangedGet) -> Vec<u8> {
        (get.offset..get.offset + get.len_bytes)
            .map(|i| (i % 251) as u8)
            .collect()
    }

    fn head_206(get: &RangedGet) -> Vec<u8> {
        format!(
            "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes {}-{}/1000000\r\n\
             content-length: {}\r\n\r\n",
            get.offset,
            get.last_byte(),
            get.len_bytes
        )
        .into_bytes()
    }

    fn whole(get: &RangedGet) -> Vec<Piece> {
        vec![Piece::Write([head_206(get), pattern(get)].concat())]
    }

    struct Scripted {
        url: String,
        accepted: Arc<AtomicUsize>,
    }

    /// Serves `responses` in order, one per request, over however many connections it takes.
    fn serve(responses: Vec<Vec<Piece>>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let script = Arc::new(Mutex::new(responses.into_iter()));
        let counter = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                let script = Arc::clone(&script);
                std::thread::spawn(move || answer(stream, &script));
            }
        });
        Scripted { url, accepted }
    }

    fn answer(mut stream: TcpStream, script: &Mutex<std::vec::IntoIter<Vec<Piece>>>) {
        stream.set_nodelay(true).unwrap();
        loop {
            // Read one request head.
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match stream.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => return,
                }
            }
            let Some(pieces) = script.lock().unwrap().next() else {
                return;
            };
            for piece in pieces {
                match piece {
                    Piece::Write(bytes) => {
                        if stream.write_all(&bytes).is_err() {
                            return;
                        }
                    }
                    Piece::Pause => std::thread::sleep(Duration::from_millis(3)),
                    Piece::Close => return,
                }
            }
        }
    }

    fn get(offset: u64, len_bytes: u64) -> RangedGet {
        RangedGet {
            key: "train/f.parquet".into(),
            offset,
            len_bytes,
            check: None,
        }
    }

    fn policy(retries: u32, timeout_ms: u64) -> RetryPolicy {
        RetryPolicy {
            retries,
            timeout: Duration::from_millis(timeout_ms),
            first_backoff: Duration::from_millis(5),
            ..RetryPolicy::default()
        }
    }

    fn uring(url: &str, policy: RetryPolicy) -> Option<UringEngine> {
        if let Some(cause) = unavailable_cause() {
            eprintln!("skipping: io_uring is not available here: {cause}");
            return None;
        }
        let target = Target::simple(Endpoint::parse(url).unwrap(), "b", None);
        Some(UringEngine::new(Client::new(target, policy).unwrap()).unwrap())
    }

    /// Runs one reader's GETs one at a time (prefetch 1); the error of the first that fails.
    fn fetch_all(
        url: &str,
        policy: RetryPolicy,
        gets: Vec<RangedGet>,
    ) -> Option<(Result<(), RankError>, crate::metrics::RequestStats)> {
        let uring = uring(url, policy)?;
        let barrier = StepBarrier::new(1, Duration::from_secs(10));
        let progress = Progress::default();
        let n = gets.len();
        let expected: Vec<Vec<u8>> = gets.iter().map(pattern).collect();
        let largest = gets.iter().map(|g| g.len_bytes as usize).max().unwrap_or(1);
        let mut rank = uring
            .rank(
                vec![gets],
                1,
                1,
                0,
                largest.next_multiple_of(4096),
                &barrier,
                &progress,
            )
            .unwrap();
        let result = (|| {
            rank.start_epoch()?;
            for i in 0..n {
                rank.wait_for(0, i)?;
                assert_eq!(rank.body(0, i), &expected[i][..], "GET {i}'s body");
                rank.release(0, i)?;
            }
            rank.end_epoch()
        })();
        Some((result, rank.stats().clone()))
    }

    #[test]
    fn a_head_in_pieces_and_body_bytes_arriving_with_it() {
        let g = get(1000, 3000);
        let head = head_206(&g);
        let body = pattern(&g);
        // The head a byte at a time for its first 40 bytes, then its rest with 100 body bytes,
        // then the body in three pieces.
        let mut pieces = Vec::new();
        for b in &head[..40] {
            pieces.push(Piece::Write(vec![*b]));
            pieces.push(Piece::Pause);
        }
        pieces.push(Piece::Write([&head[40..], &body[..100]].concat()));
        pieces.push(Piece::Pause);
        pieces.push(Piece::Write(body[100..1500].to_vec()));
        pieces.push(Piece::Pause);
        pieces.push(Piece::Write(body[1500..].to_vec()));
        // The head and the whole body in one write.
        let server = serve(vec![pieces, whole(&get(5, 4000))]);
        let Some((result, stats)) = fetch_all(&server.url, policy(0, 5000), vec![g, get(5, 4000)])
        else {
            return;
        };
        result.unwrap();
        assert_eq!(
            (stats.requests, stats.bytes_read, stats.retries),
            (2, 7000, 0)
        );
        // Both over one keep-alive connection.
        assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn wrong_answers_are_errors_and_are_not_retried() {
        let g = get(0, 100);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n".to_vec(),
                "answered 200 instead of 206 Partial Content: the server ignores Range",
            ),
            (
                b"HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 0-98/1000\r\ncontent-length: 99\r\n\r\n".to_vec(),
                "Content-Range is 'bytes 0-98/1000'",
            ),
            (
                b"HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 0-99/1000\r\ncontent-length: 101\r\n\r\n".to_vec(),
                "Content-Length is 101",
            ),
            (
                {
                    let doc = "<Error><Code>AccessDenied</Code><Message>no</Message></Error>";
                    format!("HTTP/1.1 403 Forbidden\r\ncontent-length: {}\r\n\r\n{doc}", doc.len())
                        .into_bytes()
                },
                "HTTP 403 AccessDenied (no)",
            ),
        ];
        for (answer, expected) in cases {
            let server = serve(vec![vec![Piece::Write(answer.clone())]]);
            let Some((result, stats)) = fetch_all(&server.url, policy(3, 5000), vec![g.clone()])
            else {
                return;
            };
            let err = result.unwrap_err().to_string();
            assert!(err.contains(expected), "{expected}: {err}");
            assert!(
                err.contains("GET s3://b/train/f.parquet (bytes=0-99)"),
                "{err}"
            );
            assert_eq!((stats.retries, stats.errors), (0, 1), "{expected}");
        }
    }

    #[test]
    fn a_connection_closed_mid_body_is_retried_then_reported() {
        let g = get(0, 5000);
        let cut = vec![
            Piece::Write([head_206(&g), pattern(&g)[..2000].to_vec()].concat()),
            Piece::Close,
        ];
        // Retried: the second connection answers whole.
        let server = serve(vec![cut.clone(), whole(&g)]);
        let Some((result, stats)) = fetch_all(&server.url, policy(1, 5000), vec![g.clone()]) else {
            return;
        };
        result.unwrap();
        assert_eq!(
            (stats.requests, stats.retries, stats.bytes_read),
            (1, 1, 5000)
        );
        assert_eq!(server.accepted.load(Ordering::SeqCst), 2);

        // Out of retries: reported, promptly.
        let server = serve(vec![cut.clone(), cut]);
        let started = Instant::now();
        let (result, stats) = fetch_all(&server.url, policy(1, 5000), vec![g]).unwrap();
        let err = result.unwrap_err().to_string();
        assert!(
            err.contains("the connection ended after 2000 of 5000 body bytes"),
            "{err}"
        );
        assert_eq!((stats.retries, stats.errors), (1, 1));
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn a_server_error_is_retried_and_a_silent_server_times_out() {
        let g = get(0, 100);
        let slow_down = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n".to_vec();
        let server = serve(vec![vec![Piece::Write(slow_down)], whole(&g)]);
        let Some((result, stats)) = fetch_all(&server.url, policy(2, 5000), vec![g.clone()]) else {
            return;
        };
        result.unwrap();
        assert_eq!(stats.retries, 1);

        // Reads the request and never answers.
        let server = serve(vec![vec![Piece::Pause; 2000]]);
        let started = Instant::now();
        let (result, _) = fetch_all(&server.url, policy(0, 300), vec![g]).unwrap();
        let err = result.unwrap_err().to_string();
        assert!(err.contains("no complete response within 300ms"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn error_documents_without_a_length_end_the_attempt_at_once() {
        let g = get(0, 100);
        let chunked = |status: &str, doc: &str| {
            format!(
                "HTTP/1.1 {status}\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{doc}\r\n0\r\n\r\n",
                doc.len()
            )
            .into_bytes()
        };
        // A 503 sent chunked on a kept-alive connection: retried at once, not after the
        // request timeout (5 s here).
        let slow_down = chunked(
            "503 Slow Down",
            "<Error><Code>SlowDown</Code><Message>m</Message></Error>",
        );
        let server = serve(vec![vec![Piece::Write(slow_down)], whole(&g)]);
        let started = Instant::now();
        let Some((result, stats)) = fetch_all(&server.url, policy(2, 5000), vec![g.clone()]) else {
            return;
        };
        result.unwrap();
        assert_eq!((stats.retries, stats.requests), (1, 1));
        assert!(started.elapsed() < Duration::from_secs(3));

        // A 403 sent chunked: reported at once with its code, and not retried.
        let denied = chunked(
            "403 Forbidden",
            "<Error><Code>AccessDenied</Code><Message>no</Message></Error>",
        );
        let server = serve(vec![vec![Piece::Write(denied)]]);
        let started = Instant::now();
        let (result, stats) = fetch_all(&server.url, policy(2, 5000), vec![g]).unwrap();
        let err = result.unwrap_err().to_string();
        assert!(err.contains("HTTP 403 AccessDenied (no)"), "{err}");
        assert_eq!((stats.retries, stats.errors), (0, 1));
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn retry_after_is_waited_out_before_the_retry() {
        let g = get(0, 100);
        let slow_down =
            b"HTTP/1.1 503 Slow Down\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n".to_vec();
        let server = serve(vec![vec![Piece::Write(slow_down)], whole(&g)]);
        let started = Instant::now();
        let Some((result, stats)) = fetch_all(&server.url, policy(2, 5000), vec![g]) else {
            return;
        };
        result.unwrap();
        assert_eq!(stats.retries, 1);
        // The backoff alone is at most 5 ms here: the second is the server's.
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn bytes_after_a_body_drop_the_connection_and_the_next_get_is_retried() {
        let (first, second) = (get(0, 100), get(100, 100));
        let stray = [head_206(&first), pattern(&first), b"GARBAGE\r\n".to_vec()].concat();
        // The second GET's answer comes after the garbage on the same connection, and again
        // on a new one.
        let server = serve(vec![
            vec![Piece::Write(stray)],
            whole(&second),
            whole(&second),
        ]);
        let Some((result, stats)) = fetch_all(&server.url, policy(2, 5000), vec![first, second])
        else {
            return;
        };
        result.unwrap();
        assert_eq!((stats.requests, stats.retries), (2, 1));
        assert_eq!(stats.retries_by_cause.get("stray_bytes"), Some(&1));
        assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn nothing_listening_is_unreachable() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let Some((result, _)) = fetch_all(&url, policy(1, 1000), vec![get(0, 10)]) else {
            return;
        };
        let err = result.unwrap_err();
        assert!(
            matches!(&err, RankError::Request(RequestError::Unreachable { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("is the server running?"), "{err}");
    }

    #[test]
    fn the_pool_never_runs_dry_inside_the_window() {
        // Two readers, prefetch 2, six GETs each, released in the order the step loop does.
        let readers: Vec<Vec<RangedGet>> = (0..2)
            .map(|r| (0..6).map(|i| get(r * 100_000 + i * 1000, 1000)).collect())
            .collect();
        // Requests go out in whatever order connections become free: answer each by its range.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut byte = [0u8; 1];
                    loop {
                        buf.clear();
                        while !buf.ends_with(b"\r\n\r\n") {
                            if !matches!(stream.read(&mut byte), Ok(1)) {
                                return;
                            }
                            buf.push(byte[0]);
                        }
                        let text = String::from_utf8_lossy(&buf);
                        let range = text
                            .lines()
                            .find_map(|l| l.strip_prefix("Range: bytes="))
                            .unwrap();
                        let (a, b) = range.split_once('-').unwrap();
                        let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
                        let g = get(a, b - a + 1);
                        if stream
                            .write_all(&[head_206(&g), pattern(&g)].concat())
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        let Some(uring) = uring(&url, policy(0, 5000)) else {
            return;
        };
        let barrier = StepBarrier::new(1, Duration::from_secs(10));
        let progress = Progress::default();
        let mut rank = uring
            .rank(readers.clone(), 2, 2, 0, 4096, &barrier, &progress)
            .unwrap();
        assert_eq!(rank.transport.ring.pool().count(), 4);
        for _ in 0..2 {
            rank.start_epoch().unwrap();
            assert_eq!(
                rank.transport.ring.pool().free_count(),
                0,
                "the window fills the pool"
            );
            for i in 0..6 {
                for r in 0..2 {
                    rank.wait_for(r, i).unwrap();
                    assert_eq!(rank.body(r, i), &pattern(&readers[r][i])[..]);
                    rank.release(r, i).unwrap();
                    let held = rank.window.held();
                    assert_eq!(held + rank.transport.ring.pool().free_count(), 4);
                }
            }
            rank.end_epoch().unwrap();
            assert_eq!(rank.transport.ring.pool().free_count(), 4);
        }
        assert_eq!(rank.stats().requests, 24);
        // Releasing what is not held is a bug, reported as one.
        assert!(
            rank.release(0, 0)
                .unwrap_err()
                .to_string()
                .contains("a bug")
        );
    }
}
