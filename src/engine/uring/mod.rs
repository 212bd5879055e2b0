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
//! connection's state machine, apart from the ring; this file sets a rank up (its pool, ring
//! and connections) and is the [`Transport`] of the shared reader window; `issue.rs` queues
//! the operation a connection asks for; `connect.rs` opens connections (a TLS one handshaken
//! on the rank thread); `read.rs` receives and decrypts TLS bytes, bodies in place;
//! `dispatch.rs` is the completion loop and words failed attempts; [`http`] formats requests
//! and reads heads; [`tls`] is the record layer; [`ring`] and [`pool`] own every piece of
//! memory the kernel writes into, and hold the engine's only `unsafe`.
//!
//! The rank thread blocks only in `io_uring_enter`: [`RankIo::compute`] is a ring timeout, and
//! [`RankIo::barrier`] keeps reaping while it waits (an eventfd read wakes the ring when the
//! barrier turns), so I/O overlaps compute and the barrier as in a real loader.
//!
//! Memory is set up before the clock starts and never allocated on the hot path, apart from
//! what SigV4 signing allocates per request when keys are set: one pool of
//! `readers × prefetch` buffers (each the largest GET), one connection per buffer, a fixed
//! scratch and request buffer per connection.

pub mod checkpoint;
pub mod conn;
mod connect;
mod dispatch;
mod fetch;
mod gateway;
pub mod http;
mod issue;
pub mod probe;
pub mod ring;
mod s3dlio;
mod secure;
pub mod tls;
mod upload;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::probe::{send_zc_cause, unavailable_cause};

use self::conn::{Conn, Job};
use self::gateway::Gateway;
use self::ring::{Completion, Ring};
use self::secure::TlsConns;
use super::window::{Transport, Window, WindowedRank};
use crate::budget::SmallBuffers;
use crate::engine::pool::{BufIndex, BufferPool};
use crate::plan::RangedGet;
use crate::rank::{Progress, RankError, StepBarrier};
use crate::s3::sign::Signer;
use crate::s3::{Client, RequestError, RetryPolicy, Target};

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
        let endpoints =
            target
                .endpoints
                .iter()
                .map(|endpoint| {
                    let addr =
                        target
                            .addresses(endpoint)
                            .ok()
                            .and_then(|addrs| addrs.into_iter().next())
                            .ok_or_else(|| {
                                RankError::Io(RequestError::Unreachable {
                            operation: client.operation("GET", None),
                            reason: format!(
                                "cannot resolve {}; check --endpoint (or pin the name with \
                                 --resolve HOST:PORT:ADDR)",
                                target.request_hostname(endpoint)
                            ),
                        }.into())
                            })?;
                    let server_name = if endpoint.is_tls() {
                        let name = target.request_hostname(endpoint);
                        Some(crate::s3::tls::server_name(&name).map_err(|reason| {
                            RankError::Io(
                                RequestError::Tls {
                                    operation: client.operation("GET", None),
                                    reason,
                                }
                                .into(),
                            )
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
    /// Each reader has `prefetch` connections of its own (× `slot_conns`, the most requests
    /// an object fetched as s3dlio fetches it keeps in flight; else 1); connection `j` of
    /// reader `g` (`g = first_reader + reader`, counting every rank's readers) goes to endpoint
    /// `(g × prefetch + j) mod E`, as the baseline assigns its slots.
    #[allow(clippy::too_many_arguments)]
    pub fn rank<'a>(
        &self,
        gets: Vec<Vec<RangedGet>>,
        prefetch: usize,
        small: Option<SmallBuffers>,
        slot_conns: usize,
        epochs: u32,
        first_reader: usize,
        buffer_bytes: usize,
        barrier: &'a StepBarrier,
        progress: &'a Progress,
    ) -> Result<UringRank<'a>, RankError> {
        let buffers = (gets.len() * prefetch).max(1);
        let conns = buffers * slot_conns.max(1);
        let readers: Vec<&[RangedGet]> = gets.iter().map(Vec::as_slice).collect();
        self.check_fit(&readers, buffer_bytes)?;
        let engine = |what: &str, e: std::io::Error| RankError::Engine(format!("{what}: {e}"));
        // With size classes each reader has `per_reader` small buffers among its `prefetch`:
        // class 0 (large) then class 1 (small), as the window hands them out.
        let small_per_reader = small.map_or(0, |s| s.per_reader as usize).min(prefetch);
        let small_buffers = gets.len() * small_per_reader;
        let pool = BufferPool::with_classes(&[
            (buffers - small_buffers, buffer_bytes),
            (
                small_buffers,
                small.map_or(4096, |s| s.buffer_bytes as usize),
            ),
        ])
        .map_err(|e| engine("cannot set up the buffer pool", e))?;
        let stage_bytes = if self.tls.is_some() {
            tls::STAGE_BYTES
        } else {
            0
        };
        let mut ring = Ring::new(conns, SCRATCH_BYTES, stage_bytes, pool)
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
        let paths = request_paths(target, &readers);
        let per_reader = prefetch.max(1) * slot_conns.max(1);
        let mut conn_endpoint = super::common::slot_endpoints(
            target,
            first_reader..first_reader + gets.len().max(1),
            per_reader,
        );
        // Without readers the ring still has one (idle) connection.
        conn_endpoint.truncate(conns);
        let mut transport = RingIo {
            ring,
            // A connection per buffer (× an s3dlio fetch's ranges in flight), `per_reader` per
            // reader: every request the window holds can be in flight.
            conns: (0..conns).map(|_| Conn::default()).collect(),
            conn_endpoint,
            prefetch: per_reader,
            objects: vec![None; buffers],
            tls: TlsConns::new(self.tls.clone(), conns),
            paths,
            completions: Vec::with_capacity(conns + 8),
            engine: self.clone(),
            signer: self.client.signer().clone(),
            policy,
            compute_running: false,
            wake,
            progress,
        };
        // TLS connections are opened and handshaken now, before the clock.
        if self.tls.is_some() {
            let tls_conns: Vec<usize> = (0..conns)
                .filter(|&c| transport.gateway(c).server_name.is_some())
                .collect();
            for c in tls_conns {
                transport.open_tls(c).map_err(|failed| {
                    let gateway = transport.gateway(c);
                    secure::open_error(self.client.operation("GET", None), gateway, failed)
                })?;
            }
        }
        Ok(WindowedRank::new(
            Window::new(gets, prefetch, small, epochs, self.client.location()),
            transport,
            barrier,
            policy.longest_request(),
        ))
    }
}

impl UringEngine {
    /// Whether every GET of `gets` fits a buffer of `buffer_bytes` (with a TLS record beside
    /// it when TLS bodies are decrypted in place): the plan sized them so.
    fn check_fit(&self, gets: &[&[RangedGet]], buffer_bytes: usize) -> Result<(), RankError> {
        let largest = gets.iter().copied().flatten().map(|g| g.len_bytes).max();
        let largest = largest.unwrap_or(0);
        if largest as usize > buffer_bytes {
            return Err(RankError::Engine(format!(
                "a GET of {largest} bytes does not fit the plan's {buffer_bytes}-byte buffers (a bug)"
            )));
        }
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
        Ok(())
    }
}

/// `paths[reader][get]`: each GET's request path, formatted before the clock.
fn request_paths(target: &Target, gets: &[&[RangedGet]]) -> Vec<Vec<String>> {
    let path = |g: &RangedGet| target.request_path(Some(&g.key));
    gets.iter()
        .map(|reader| reader.iter().map(path).collect())
        .collect()
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
    /// `objects[buf]`: where the object fetched into buffer `buf` as s3dlio fetches it is.
    objects: Vec<Option<fetch::ObjectState>>,
    /// Each TLS connection's session, and completions made without the ring.
    tls: TlsConns,
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
        conn::ring_and_socket(&mut self.ring, &self.conns, c)
    }

    /// Sets `SO_RCVLOWAT` on connection `c` to `bytes` if it is not that already.
    fn set_rcvlowat(&mut self, c: usize, bytes: usize) -> Result<(), RankError> {
        conn::set_rcvlowat(&mut self.conns, c, bytes)
    }

    /// The job connection `c` serves; a connection with an operation in flight has one.
    fn job(&self, c: usize) -> Result<Job, RankError> {
        self.conns[c]
            .job()
            .copied()
            .ok_or_else(|| RankError::Engine(format!("connection {c} has no GET (a bug)")))
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
        class: usize,
    ) -> Result<usize, RankError> {
        // The dlio loader on whole objects: a HEAD, then the object's ranges.
        if let Some(rules) = window.get(reader, get).fetch.filter(|f| f.head) {
            return self.start_object(window, reader, get, class, fetch::Pieces::Object(rules));
        }
        // A column subset: its chunks' ranged GETs, one after the other.
        if window.get(reader, get).extents.is_some() {
            return self.start_object(window, reader, get, class, fetch::Pieces::Extents);
        }
        let c = self.free_conn(reader).ok_or_else(|| {
            RankError::Engine("no idle connection inside the window (a bug)".into())
        })?;
        // The window makes both impossible to miss: see the pool's docs.
        let buf = self.ring.take_buffer_of(class).ok_or_else(|| {
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
        self.ring.give_buffer(buf);
    }

    /// Nothing was read while the rank saved a checkpoint: the GETs in flight lose no time.
    fn paused(&mut self, pause: Duration) {
        for conn in &mut self.conns {
            conn.shift_clocks(pause);
        }
    }

    /// A reshuffled epoch's GETs: checked against the buffers, their paths formatted now,
    /// before the epoch's barrier.
    fn load(&mut self, window: &UringWindow) -> Result<(), RankError> {
        let gets: Vec<&[RangedGet]> = (0..window.readers()).map(|r| window.gets(r)).collect();
        self.engine.check_fit(&gets, self.ring.largest_buffer())?;
        self.paths = request_paths(self.engine.client.target(), &gets);
        Ok(())
    }

    fn check_idle(&self) -> Result<(), RankError> {
        let (count, free) = self.ring.buffers();
        if free == count {
            return Ok(());
        }
        Err(RankError::Engine(format!(
            "{} of {count} buffers are not back in the pool at the end of an epoch (a bug)",
            count - free
        )))
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_checkpoint;
#[cfg(test)]
mod tests_tls;
