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
//!   the last MiB (a read never waits for bytes that will not come). Never one huge
//!   `RECV | MSG_WAITALL`: the kernel would hand that to an io-wq thread.
//! - **Failures**: a retryable failure (5xx, 429, a closed or reset connection, a timeout)
//!   closes the connection, waits out the backoff and starts the GET again on a new connection,
//!   up to the policy's retries; each attempt has the policy's timeout.
//!
//! The rank thread blocks only in `io_uring_enter`: [`RankIo::compute`] is a ring timeout, and
//! [`RankIo::barrier`] keeps reaping while it waits (an eventfd read wakes the ring when the
//! barrier turns), so I/O overlaps compute and the barrier as in a real loader.
//!
//! Memory is set up before the clock starts and never allocated on the hot path, apart from
//! what SigV4 signing allocates per request when keys are set: one pool of
//! `readers × prefetch` buffers (each the largest GET), one connection per buffer, a fixed
//! scratch and request buffer per connection.

pub mod http;
pub mod pool;
pub mod ring;

use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use rustix::net::{AddressFamily, SocketFlags, SocketType};

use self::http::{HeadError, HeadReader, HeadStep, ResponseHead};
use self::pool::{BufIndex, BufferPool};
use self::ring::{COMPUTE_TAG, Completion, Ring, WAKE_TAG};
use super::{GetRecord, GetRequest, RequestStats, check_all_issued, schedule_bug};
use crate::rank::{Progress, RankIo, RunError, StepBarrier};
use crate::s3::sign::{Payload, Signer, object_path};
use crate::s3::{Client, RequestError, RetryPolicy};

/// Response heads (and error documents) are read into this much scratch per connection.
pub const SCRATCH_BYTES: usize = 16 << 10;
/// `SO_RCVLOWAT` while a body streams.
pub const RCVLOWAT_BYTES: usize = 1 << 20;
/// How often a waiting rank looks at timers and at whether another rank failed.
const POLL: Duration = Duration::from_millis(100);

/// Why io_uring cannot be used here, in words that name the cause.
pub fn unavailable_cause() -> Option<String> {
    if let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        && text.trim() == "2"
    {
        return Some("io_uring is disabled by sysctl (kernel.io_uring_disabled = 2)".into());
    }
    let err = ring::probe().err()?;
    Some(match err.raw_os_error() {
        Some(libc::ENOSYS) => {
            "the kernel has no io_uring (io_uring_setup: ENOSYS), or a seccomp filter hides it"
                .into()
        }
        Some(libc::EPERM) => "io_uring_setup was refused (EPERM): kernel.io_uring_disabled = 1 \
             without the io_uring group, or a seccomp profile (e.g. a container runtime's \
             default) blocks it"
            .into(),
        Some(libc::EINVAL) => "the kernel is too old for SINGLE_ISSUER | DEFER_TASKRUN rings \
             (io_uring_setup: EINVAL; needs Linux 6.1)"
            .into(),
        Some(libc::ENOMEM) => format!(
            "registering a buffer failed ({err}): RLIMIT_MEMLOCK is too small for registered \
             buffers"
        ),
        _ => format!("io_uring cannot be used: {err}"),
    })
}

/// What every rank of a run shares: where to connect, how to sign, how to retry.
#[derive(Debug, Clone)]
pub struct Uring {
    client: Client,
    addr: SocketAddr,
    host: String,
}

impl Uring {
    /// Resolves the endpoint once, for every rank's connections.
    pub fn new(client: Client) -> Result<Uring, RunError> {
        let endpoint = &client.target().endpoint;
        let addr = endpoint
            .resolve()
            .ok()
            .and_then(|addrs| addrs.into_iter().next())
            .ok_or_else(|| {
                RunError::Request(RequestError::Unreachable {
                    operation: client.operation("GET", None),
                    reason: format!("cannot resolve {}; check --endpoint", endpoint.host),
                })
            })?;
        let host = endpoint.host_header();
        Ok(Uring { client, addr, host })
    }

    /// The I/O of one rank, set up in full: its pool mapped, pre-faulted, locked and
    /// registered, its connections' buffers allocated. Call it in the rank's own thread.
    pub fn rank<'a>(
        &self,
        gets: Vec<Vec<GetRequest>>,
        prefetch: usize,
        buffer_bytes: usize,
        barrier: &'a StepBarrier,
        progress: &'a Progress,
    ) -> Result<UringRank<'a>, RunError> {
        let buffers = gets.len() * prefetch;
        let largest = gets
            .iter()
            .flatten()
            .map(|g| g.len_bytes)
            .max()
            .unwrap_or(0);
        if largest as usize > buffer_bytes {
            return Err(RunError::Engine(format!(
                "a GET of {largest} bytes does not fit the plan's {buffer_bytes}-byte buffers (a bug)"
            )));
        }
        let engine = |what: &str, e: std::io::Error| RunError::Engine(format!("{what}: {e}"));
        let pool = BufferPool::new(buffers.max(1), buffer_bytes)
            .map_err(|e| engine("cannot set up the buffer pool", e))?;
        let mut ring = Ring::new(buffers.max(1), SCRATCH_BYTES, pool)
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
        let bucket = &self.client.target().bucket;
        let paths = gets
            .iter()
            .map(|reader| reader.iter().map(|g| object_path(bucket, &g.key)).collect())
            .collect();
        Ok(UringRank {
            ring,
            conns: (0..buffers.max(1)).map(|_| Conn::default()).collect(),
            readers: gets
                .into_iter()
                .map(|gets| Reader {
                    slots: gets.iter().map(|_| Slot::NotIssued).collect(),
                    gets,
                    issued: 0,
                })
                .collect(),
            paths,
            completions: Vec::with_capacity(buffers.max(1) + 8),
            shared: self.clone(),
            signer: self.client.signer().clone(),
            policy,
            prefetch,
            epochs_started: 0,
            stats: RequestStats::default(),
            failure: None,
            compute_running: false,
            wake,
            barrier,
            progress,
            wait_limit: policy.longest_request(),
        })
    }
}

/// Where a GET is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    NotIssued,
    /// Being fetched on connection `conn` into `buf`.
    InFlight {
        conn: usize,
        buf: BufIndex,
    },
    /// Whole and checked in `buf`, held until the step loop releases it.
    Arrived {
        buf: BufIndex,
    },
    Released,
    Failed,
}

#[derive(Debug)]
struct Reader {
    gets: Vec<GetRequest>,
    slots: Vec<Slot>,
    issued: usize,
}

/// What a connection is waiting for. Each phase has exactly one operation in flight, except
/// `Idle` and `Backoff`, which have none.
#[derive(Debug, Default)]
enum Phase {
    #[default]
    Idle,
    Connecting,
    Sending {
        sent: usize,
    },
    Peeking(HeadReader),
    /// Consuming `n` head bytes; `head` is set when they end the head.
    Consuming {
        reader: HeadReader,
        n: usize,
        head: Option<ResponseHead>,
    },
    Body {
        received: usize,
    },
    ErrorBody {
        head: ResponseHead,
        received: usize,
        want: usize,
    },
    /// Waiting to try the GET again.
    Backoff {
        until: Instant,
    },
}

/// The GET a connection serves, and its attempt.
#[derive(Debug, Clone, Copy)]
struct Job {
    reader: usize,
    get: usize,
    buf: BufIndex,
    retries: u32,
    first_started: Instant,
    attempt_started: Instant,
    first_byte: Duration,
    /// The attempt ran past the policy's timeout and its socket was shut down.
    timed_out: bool,
}

#[derive(Debug, Default)]
struct Conn {
    socket: Option<OwnedFd>,
    /// The socket has carried a response (a close before the next one is the server's
    /// keep-alive timeout, not a failure of this GET).
    reused: bool,
    /// `SO_RCVLOWAT` as last set.
    rcvlowat: usize,
    job: Option<Job>,
    phase: Phase,
}

/// One rank's I/O on the io_uring engine.
#[derive(Debug)]
pub struct UringRank<'a> {
    ring: Ring,
    conns: Vec<Conn>,
    readers: Vec<Reader>,
    /// `paths[reader][get]`: the GET's object path, formatted once.
    paths: Vec<Vec<String>>,
    /// The completions of one turn (reused).
    completions: Vec<Completion>,
    shared: Uring,
    signer: Signer,
    policy: RetryPolicy,
    prefetch: usize,
    epochs_started: u32,
    stats: RequestStats,
    /// The first GET that failed past its retries.
    failure: Option<RequestError>,
    compute_running: bool,
    wake: Arc<OwnedFd>,
    barrier: &'a StepBarrier,
    progress: &'a Progress,
    wait_limit: Duration,
}

impl UringRank<'_> {
    fn engine_error(what: &str, e: std::io::Error) -> RunError {
        RunError::Engine(format!("io_uring: {what}: {e}"))
    }

    /// Starts reader `r`'s next GET on a free connection, into a free buffer.
    fn issue(&mut self, r: usize) -> Result<(), RunError> {
        let index = self.readers[r].issued;
        if index >= self.readers[r].gets.len() {
            return Ok(());
        }
        let conn = self.free_conn().ok_or_else(|| {
            RunError::Engine("no idle connection inside the window (a bug)".into())
        })?;
        let reader = &mut self.readers[r];
        let held = reader
            .slots
            .iter()
            .filter(|s| matches!(s, Slot::InFlight { .. } | Slot::Arrived { .. }))
            .count();
        assert!(
            held < self.prefetch,
            "reader {r} would hold {} GETs, more than prefetch {} (a bug)",
            held + 1,
            self.prefetch
        );
        // The window makes both impossible to miss: see the pool's docs.
        let buf = self.ring.pool_mut().take().ok_or_else(|| {
            RunError::Engine("the buffer pool ran dry inside the prefetch window (a bug)".into())
        })?;
        reader.issued += 1;
        reader.slots[index] = Slot::InFlight { conn, buf };
        let now = Instant::now();
        self.conns[conn].job = Some(Job {
            reader: r,
            get: index,
            buf,
            retries: 0,
            first_started: now,
            attempt_started: now,
            first_byte: Duration::ZERO,
            timed_out: false,
        });
        self.start_attempt(conn)
    }

    /// An idle connection, preferring one whose socket is open.
    fn free_conn(&self) -> Option<usize> {
        let idle = |c: &Conn| c.job.is_none() && matches!(c.phase, Phase::Idle);
        self.conns
            .iter()
            .position(|c| idle(c) && c.socket.is_some())
            .or_else(|| self.conns.iter().position(idle))
    }

    fn start_attempt(&mut self, c: usize) -> Result<(), RunError> {
        let conn = &mut self.conns[c];
        if let Some(job) = &mut conn.job {
            job.attempt_started = Instant::now();
            job.timed_out = false;
        }
        if conn.socket.is_some() {
            return self.send_request(c);
        }
        let family = match self.shared.addr {
            SocketAddr::V4(_) => AddressFamily::INET,
            SocketAddr::V6(_) => AddressFamily::INET6,
        };
        let socket =
            rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)
                .map_err(|e| Self::engine_error("socket", e.into()))?;
        rustix::net::sockopt::set_tcp_nodelay(&socket, true)
            .map_err(|e| Self::engine_error("TCP_NODELAY", e.into()))?;
        conn.rcvlowat = 1;
        conn.reused = false;
        conn.phase = Phase::Connecting;
        self.ring
            .connect(c, socket.as_fd(), &self.shared.addr)
            .map_err(|e| Self::engine_error("queueing a connect", e))?;
        self.conns[c].socket = Some(socket);
        Ok(())
    }

    fn send_request(&mut self, c: usize) -> Result<(), RunError> {
        let job = self.conns[c]
            .job
            .expect("a connection sends only for a GET");
        let get = &self.readers[job.reader].gets[job.get];
        let path = &self.paths[job.reader][job.get];
        let signed = if self.signer.signs() {
            let url = format!("{}{path}", self.shared.client.target().endpoint.url);
            let range = get.range_header();
            let to_sign = [
                ("host", self.shared.host.as_str()),
                ("range", range.as_str()),
            ];
            self.signer
                .headers("GET", &url, &to_sign, Payload::Unsigned, SystemTime::now())
                .map_err(RunError::Engine)?
        } else {
            Vec::new()
        };
        http::request_head(
            self.ring.request_buffer(c),
            path,
            &self.shared.host,
            get,
            &signed,
        );
        self.conns[c].phase = Phase::Sending { sent: 0 };
        self.queue_send(c, 0)
    }

    /// The ring, and connection `c`'s socket to queue an operation on.
    fn ring_and_socket(&mut self, c: usize) -> Result<(&mut Ring, BorrowedFd<'_>), RunError> {
        let socket = self.conns[c]
            .socket
            .as_ref()
            .ok_or_else(|| RunError::Engine(format!("connection {c} has no socket (a bug)")))?;
        Ok((&mut self.ring, socket.as_fd()))
    }

    fn queue_send(&mut self, c: usize, from: usize) -> Result<(), RunError> {
        let (ring, fd) = self.ring_and_socket(c)?;
        ring.send(c, fd, from)
            .map_err(|e| Self::engine_error("queueing a send", e))
    }

    fn queue_recv(&mut self, c: usize, at: usize, len: usize, peek: bool) -> Result<(), RunError> {
        let (ring, fd) = self.ring_and_socket(c)?;
        ring.recv(c, fd, at, len, peek)
            .map_err(|e| Self::engine_error("queueing a receive", e))
    }

    /// Sets `SO_RCVLOWAT` to `bytes` if it is not that already.
    fn lowat(&mut self, c: usize, bytes: usize) -> Result<(), RunError> {
        if self.conns[c].rcvlowat == bytes {
            return Ok(());
        }
        let (_, fd) = self.ring_and_socket(c)?;
        ring::set_rcvlowat(fd, bytes).map_err(|e| Self::engine_error("SO_RCVLOWAT", e))?;
        self.conns[c].rcvlowat = bytes;
        Ok(())
    }

    /// Peeks at the next bytes of a response head.
    fn queue_peek(&mut self, c: usize, reader: HeadReader) -> Result<(), RunError> {
        // A head is small: a receive must complete on its first byte.
        self.lowat(c, 1)?;
        let at = reader.peek_at();
        self.conns[c].phase = Phase::Peeking(reader);
        let len = self.ring.scratch_len(c) - at;
        self.queue_recv(c, at, len, true)
    }

    /// Reads the rest of the body straight into the GET's registered buffer.
    fn queue_body(&mut self, c: usize, received: usize) -> Result<(), RunError> {
        let job = self.conns[c].job.expect("a body belongs to a GET");
        let len = self.readers[job.reader].gets[job.get].len_bytes as usize;
        let remaining = len - received;
        // Never wait for more than will come: lowered for the tail. To 1, not to what remains:
        // a blocking receive with SO_RCVLOWAT just under the remaining bytes was seen to stall
        // until the server gave up (scripts/floor-reader); the tail is under a MiB of ~99.
        self.lowat(
            c,
            if remaining >= RCVLOWAT_BYTES {
                RCVLOWAT_BYTES
            } else {
                1
            },
        )?;
        self.conns[c].phase = Phase::Body { received };
        let (ring, fd) = self.ring_and_socket(c)?;
        ring.read_fixed(c, fd, job.buf, received, remaining)
            .map_err(|e| Self::engine_error("queueing a fixed-buffer read", e))
    }

    /// What `GET s3://bucket/key (bytes=a-b)` did wrong, for errors.
    fn operation(&self, c: usize) -> String {
        match self.conns[c].job {
            Some(job) => {
                let get = &self.readers[job.reader].gets[job.get];
                format!(
                    "{} ({})",
                    self.shared.client.operation("GET", Some(&get.key)),
                    get.range_header()
                )
            }
            None => self.shared.client.operation("GET", None),
        }
    }

    /// Handles one completion of connection `c`.
    fn on_completion(&mut self, c: usize, result: i32) -> Result<(), RunError> {
        if self.conns[c].job.is_some_and(|j| j.timed_out) {
            let error = RequestError::Timeout {
                operation: self.operation(c),
                after: self.policy.timeout,
            };
            return self.attempt_failed(c, error);
        }
        if result < 0 {
            let error = self.io_error(c, -result);
            return self.attempt_failed(c, error);
        }
        let n = result as usize;
        match std::mem::take(&mut self.conns[c].phase) {
            Phase::Connecting => self.send_request(c),
            Phase::Sending { sent } => {
                let sent = sent + n;
                if sent < self.ring.request_buffer(c).len() {
                    self.conns[c].phase = Phase::Sending { sent };
                    self.queue_send(c, sent)
                } else {
                    self.queue_peek(c, HeadReader::new())
                }
            }
            Phase::Peeking(mut reader) => {
                let job = self.conns[c].job.expect("a head belongs to a GET");
                let get = &self.readers[job.reader].gets[job.get];
                match reader.on_peek(self.ring.scratch(c), n, get) {
                    Ok(HeadStep::Consume(n)) => {
                        let at = reader.peek_at();
                        self.conns[c].phase = Phase::Consuming {
                            reader,
                            n,
                            head: None,
                        };
                        self.queue_recv(c, at, n, false)
                    }
                    Ok(HeadStep::Complete { head, consume }) => {
                        if let Some(job) = &mut self.conns[c].job {
                            job.first_byte = job.attempt_started.elapsed();
                        }
                        if consume == 0 {
                            return self.after_head(c, head);
                        }
                        let at = reader.peek_at();
                        self.conns[c].phase = Phase::Consuming {
                            reader,
                            n: consume,
                            head: Some(head),
                        };
                        self.queue_recv(c, at, consume, false)
                    }
                    Err(e) => {
                        let error = self.head_error(c, e);
                        self.attempt_failed(c, error)
                    }
                }
            }
            Phase::Consuming {
                mut reader,
                n: want,
                head,
            } => {
                if n != want {
                    let error = RequestError::Transport {
                        operation: self.operation(c),
                        reason: format!("consumed {n} of {want} peeked head bytes"),
                    };
                    return self.attempt_failed(c, error);
                }
                reader.on_consumed(n);
                match head {
                    Some(head) => self.after_head(c, head),
                    None => self.queue_peek(c, reader),
                }
            }
            Phase::Body { received } => {
                let job = self.conns[c].job.expect("a body belongs to a GET");
                let len = self.readers[job.reader].gets[job.get].len_bytes as usize;
                if n == 0 {
                    let error = RequestError::Transport {
                        operation: self.operation(c),
                        reason: format!(
                            "the connection ended after {received} of {len} body bytes"
                        ),
                    };
                    return self.attempt_failed(c, error);
                }
                let received = received + n;
                self.progress
                    .bytes_received
                    .fetch_add(n as u64, Ordering::Relaxed);
                if received < len {
                    return self.queue_body(c, received);
                }
                self.completed(c)
            }
            Phase::ErrorBody {
                head,
                received,
                want,
            } => {
                let received = received + n;
                if n > 0 && received < want {
                    self.conns[c].phase = Phase::ErrorBody {
                        head,
                        received,
                        want,
                    };
                    return self.queue_recv(c, received, want - received, false);
                }
                let error = RequestError::from_response(
                    self.operation(c),
                    head.status,
                    &self.ring.scratch(c)[..received],
                    &self.shared.client.hint_context(),
                );
                self.attempt_failed(c, error)
            }
            Phase::Idle | Phase::Backoff { .. } => Err(RunError::Engine(format!(
                "a completion for connection {c}, which has nothing in flight (a bug)"
            ))),
        }
    }

    /// A complete, checked head: read the body, or fail the attempt.
    fn after_head(&mut self, c: usize, head: ResponseHead) -> Result<(), RunError> {
        // After `Connection: close` the socket is dropped once this response is read.
        self.conns[c].reused = !head.closes;
        if head.status == 206 {
            return match head.partial {
                Ok(()) => self.queue_body(c, 0),
                Err(reason) => {
                    let error = RequestError::BadResponse {
                        operation: self.operation(c),
                        reason,
                    };
                    self.attempt_failed(c, error)
                }
            };
        }
        if (200..300).contains(&head.status) {
            // Never read a whole object into a range-sized buffer.
            let error = RequestError::BadResponse {
                operation: self.operation(c),
                reason: format!(
                    "answered {} instead of 206 Partial Content: the server ignores Range",
                    head.status
                ),
            };
            return self.attempt_failed(c, error);
        }
        let want = head
            .content_length
            .map_or(self.ring.scratch_len(c), |l| l as usize)
            .min(self.ring.scratch_len(c));
        if want == 0 {
            let error = RequestError::from_response(
                self.operation(c),
                head.status,
                b"",
                &self.shared.client.hint_context(),
            );
            return self.attempt_failed(c, error);
        }
        self.conns[c].phase = Phase::ErrorBody {
            head,
            received: 0,
            want,
        };
        self.queue_recv(c, 0, want, false)
    }

    /// The body is whole: the GET has arrived; the connection is free for the next one.
    fn completed(&mut self, c: usize) -> Result<(), RunError> {
        let conn = &mut self.conns[c];
        let job = conn.job.take().expect("a completed body belongs to a GET");
        conn.phase = Phase::Idle;
        if !conn.reused {
            // `Connection: close`: the server ends it.
            conn.socket = None;
        }
        let len = self.readers[job.reader].gets[job.get].len_bytes;
        self.readers[job.reader].slots[job.get] = Slot::Arrived { buf: job.buf };
        self.stats.requests += 1;
        self.stats.retries += u64::from(job.retries);
        self.stats.bytes_read += len;
        self.stats.first_byte.record(job.first_byte);
        let total = job.first_started.elapsed();
        self.stats.total.record(total);
        self.stats.trace.push(GetRecord {
            epoch: self.epochs_started - 1,
            reader: job.reader,
            get: job.get,
            attempts: job.retries + 1,
            first_byte_us: micros(job.first_byte),
            total_us: micros(total),
        });
        Ok(())
    }

    /// An attempt failed: close the connection, then retry after the backoff, or fail the GET.
    fn attempt_failed(&mut self, c: usize, error: RequestError) -> Result<(), RunError> {
        let conn = &mut self.conns[c];
        conn.socket = None;
        conn.reused = false;
        let job = conn
            .job
            .as_mut()
            .expect("a failed attempt belongs to a GET");
        if error.retryable() && job.retries < self.policy.retries {
            let until = Instant::now() + self.policy.backoff(job.retries);
            job.retries += 1;
            conn.phase = Phase::Backoff { until };
            return Ok(());
        }
        let job = conn.job.take().expect("checked above");
        conn.phase = Phase::Idle;
        self.stats.retries += u64::from(job.retries);
        self.stats.errors += 1;
        self.readers[job.reader].slots[job.get] = Slot::Failed;
        self.ring.pool_mut().give(job.buf);
        self.failure.get_or_insert(error);
        Ok(())
    }

    fn io_error(&self, c: usize, errno: i32) -> RequestError {
        let error = std::io::Error::from_raw_os_error(errno);
        let operation = self.operation(c);
        if matches!(self.conns[c].phase, Phase::Connecting)
            && matches!(
                errno,
                libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH
            )
        {
            return RequestError::Unreachable {
                operation,
                reason: format!(
                    "cannot connect to {} ({error}); is the server running? check --endpoint",
                    self.shared.client.target().endpoint
                ),
            };
        }
        RequestError::Transport {
            operation,
            reason: error.to_string(),
        }
    }

    fn head_error(&self, c: usize, e: HeadError) -> RequestError {
        let operation = self.operation(c);
        match e {
            HeadError::Closed(0) if self.conns[c].reused => RequestError::Transport {
                operation,
                reason: "the server closed the keep-alive connection before answering".into(),
            },
            HeadError::Closed(_) => RequestError::Transport {
                operation,
                reason: e.to_string(),
            },
            HeadError::TooLong(_) | HeadError::Malformed(_) => RequestError::BadResponse {
                operation,
                reason: e.to_string(),
            },
        }
    }

    /// One turn of the completion loop: submit, wait until something completes or `until`
    /// (at most [`POLL`]), handle what completed, then the timers.
    fn turn(&mut self, until: Option<Instant>) -> Result<(), RunError> {
        let now = Instant::now();
        let mut wake = until.unwrap_or(now + POLL).min(now + POLL);
        for conn in &self.conns {
            match (&conn.phase, conn.job) {
                (Phase::Backoff { until }, _) => wake = wake.min(*until),
                (Phase::Idle, _) | (_, None) => {}
                (_, Some(job)) if !job.timed_out => {
                    wake = wake.min(job.attempt_started + self.policy.timeout)
                }
                _ => {}
            }
        }
        let mut completions = std::mem::take(&mut self.completions);
        let waited = self
            .ring
            .wait(Some(wake.saturating_duration_since(now)), &mut completions);
        let handled = waited
            .map_err(|e| Self::engine_error("io_uring_enter", e))
            .and_then(|()| self.handle(&completions));
        self.completions = completions;
        handled?;
        self.timers()
    }

    fn handle(&mut self, completions: &[Completion]) -> Result<(), RunError> {
        for &completion in completions {
            match completion.tag {
                COMPUTE_TAG => self.compute_running = false,
                WAKE_TAG => {
                    let wake = Arc::clone(&self.wake);
                    self.ring
                        .watch(wake.as_fd())
                        .map_err(|e| Self::engine_error("re-arming the barrier's eventfd", e))?;
                }
                tag => self.on_completion(tag as usize, completion.result)?,
            }
        }
        Ok(())
    }

    /// Starts GETs whose backoff is over; shuts down attempts past their timeout (their
    /// operation then completes and [`Self::on_completion`] reports the timeout).
    fn timers(&mut self) -> Result<(), RunError> {
        let now = Instant::now();
        for c in 0..self.conns.len() {
            match (&self.conns[c].phase, self.conns[c].job) {
                (Phase::Backoff { until }, _) if *until <= now => {
                    self.conns[c].phase = Phase::Idle;
                    self.start_attempt(c)?;
                }
                (Phase::Idle | Phase::Backoff { .. }, _) | (_, None) => {}
                (_, Some(job))
                    if !job.timed_out && job.attempt_started + self.policy.timeout <= now =>
                {
                    if let Some(job) = &mut self.conns[c].job {
                        job.timed_out = true;
                    }
                    if let Some(socket) = &self.conns[c].socket {
                        let _ = rustix::net::shutdown(socket, rustix::net::Shutdown::Both);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn check_abort(&self) -> Result<(), RunError> {
        if self.barrier.is_aborted() {
            return Err(RunError::Aborted);
        }
        Ok(())
    }
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

impl RankIo for UringRank<'_> {
    fn start_epoch(&mut self) -> Result<(), RunError> {
        self.epochs_started += 1;
        for r in 0..self.readers.len() {
            let reader = &mut self.readers[r];
            reader.issued = 0;
            reader.slots.iter_mut().for_each(|s| *s = Slot::NotIssued);
            for _ in 0..self.prefetch.min(self.readers[r].gets.len()) {
                self.issue(r)?;
            }
        }
        Ok(())
    }

    fn wait_for(&mut self, reader: usize, get: usize) -> Result<(), RunError> {
        let deadline = Instant::now() + self.wait_limit;
        loop {
            match self.readers[reader].slots[get] {
                Slot::Arrived { .. } => return Ok(()),
                Slot::InFlight { .. } => {}
                Slot::Failed => {
                    let error = self.failure.clone().ok_or_else(|| {
                        RunError::Engine("a GET failed without an error (a bug)".into())
                    })?;
                    return Err(RunError::Request(error));
                }
                other => return Err(schedule_bug("waits for", reader, get, &other)),
            }
            self.check_abort()?;
            if Instant::now() >= deadline {
                return Err(RunError::Stalled(format!(
                    "GET {} of reader {reader} did not complete within {:?}",
                    self.readers[reader].gets[get].range_header(),
                    self.wait_limit
                )));
            }
            self.turn(Some(deadline))?;
        }
    }

    fn compute(&mut self, duration: Duration) -> Result<(), RunError> {
        if duration.is_zero() {
            return Ok(());
        }
        self.ring
            .timeout(duration)
            .map_err(|e| Self::engine_error("queueing the compute timer", e))?;
        self.compute_running = true;
        // Bounded: the timer completes after `duration` whatever else happens.
        while self.compute_running {
            self.turn(None)?;
        }
        Ok(())
    }

    fn barrier(&mut self, barrier: &StepBarrier) -> Result<(), RunError> {
        let arrival = barrier.arrive()?;
        loop {
            if barrier.passed(&arrival)? {
                return Ok(());
            }
            // Woken by the eventfd when the barrier turns; completions go on meanwhile.
            self.turn(None)?;
        }
    }

    fn release(&mut self, reader: usize, get: usize) -> Result<(), RunError> {
        let slot = &mut self.readers[reader].slots[get];
        let Slot::Arrived { buf } = *slot else {
            return Err(schedule_bug("release of", reader, get, &*slot));
        };
        *slot = Slot::Released;
        self.ring.pool_mut().give(buf);
        self.issue(reader)
    }

    fn end_epoch(&mut self) -> Result<(), RunError> {
        for r in 0..self.readers.len() {
            let reader = &self.readers[r];
            check_all_issued(r, reader.issued, reader.gets.len())?;
            for get in 0..self.readers[r].gets.len() {
                if matches!(self.readers[r].slots[get], Slot::InFlight { .. }) {
                    self.wait_for(r, get)?;
                }
                // A partly consumed last GET still holds its buffer.
                if let Slot::Arrived { buf } = self.readers[r].slots[get] {
                    self.ring.pool_mut().give(buf);
                }
                self.readers[r].slots[get] = Slot::Released;
            }
        }
        let pool = self.ring.pool();
        assert_eq!(
            pool.free_count(),
            pool.count(),
            "every buffer is back in the pool at the end of an epoch"
        );
        Ok(())
    }

    fn stats(&self) -> &RequestStats {
        &self.stats
    }
}

#[cfg(test)]
impl UringRank<'_> {
    /// The body of an arrived GET, as the kernel wrote it into the pool.
    fn body(&self, reader: usize, get: usize) -> &[u8] {
        let Slot::Arrived { buf } = self.readers[reader].slots[get] else {
            panic!("GET {reader}.{get} has not arrived");
        };
        let len = self.readers[reader].gets[get].len_bytes as usize;
        self.ring.pool().bytes(buf, len)
    }
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)]
mod tests {
    //! The engine against a scripted HTTP server on a real loopback socket: each accepted
    //! connection reads request heads and answers each with the next scripted response, written
    //! in the pieces the script gives (with pauses, so they arrive apart), or closes.
    use super::*;
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
    fn pattern(get: &GetRequest) -> Vec<u8> {
        (get.offset..get.offset + get.len_bytes)
            .map(|i| (i % 251) as u8)
            .collect()
    }

    fn head_206(get: &GetRequest) -> Vec<u8> {
        format!(
            "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes {}-{}/1000000\r\n\
             content-length: {}\r\n\r\n",
            get.offset,
            get.last_byte(),
            get.len_bytes
        )
        .into_bytes()
    }

    fn whole(get: &GetRequest) -> Vec<Piece> {
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

    fn get(offset: u64, len_bytes: u64) -> GetRequest {
        GetRequest {
            key: "train/f.parquet".into(),
            offset,
            len_bytes,
        }
    }

    fn policy(retries: u32, timeout_ms: u64) -> RetryPolicy {
        RetryPolicy {
            retries,
            timeout: Duration::from_millis(timeout_ms),
            first_backoff: Duration::from_millis(5),
        }
    }

    fn uring(url: &str, policy: RetryPolicy) -> Option<Uring> {
        if let Some(cause) = unavailable_cause() {
            eprintln!("skipping: io_uring is not available here: {cause}");
            return None;
        }
        let target = Target {
            endpoint: Endpoint::parse(url).unwrap(),
            bucket: "b".into(),
            region: "us-east-1".into(),
            credentials: None,
            credentials_from: "nowhere",
        };
        Some(Uring::new(Client::new(target, policy)).unwrap())
    }

    /// Runs one reader's GETs one at a time (prefetch 1); the error of the first that fails.
    fn fetch_all(
        url: &str,
        policy: RetryPolicy,
        gets: Vec<GetRequest>,
    ) -> Option<(Result<(), RunError>, RequestStats)> {
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
            matches!(&err, RunError::Request(RequestError::Unreachable { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("is the server running?"), "{err}");
    }

    #[test]
    fn the_pool_never_runs_dry_inside_the_window() {
        // Two readers, prefetch 2, six GETs each, released in the order the step loop does.
        let readers: Vec<Vec<GetRequest>> = (0..2)
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
            .rank(readers.clone(), 2, 4096, &barrier, &progress)
            .unwrap();
        assert_eq!(rank.ring.pool().count(), 4);
        for _ in 0..2 {
            rank.start_epoch().unwrap();
            assert_eq!(
                rank.ring.pool().free_count(),
                0,
                "the window fills the pool"
            );
            for i in 0..6 {
                for r in 0..2 {
                    rank.wait_for(r, i).unwrap();
                    assert_eq!(rank.body(r, i), &pattern(&readers[r][i])[..]);
                    rank.release(r, i).unwrap();
                    let held = rank
                        .readers
                        .iter()
                        .flat_map(|rd| &rd.slots)
                        .filter(|s| matches!(s, Slot::InFlight { .. } | Slot::Arrived { .. }));
                    assert_eq!(held.count() + rank.ring.pool().free_count(), 4);
                }
            }
            rank.end_epoch().unwrap();
            assert_eq!(rank.ring.pool().free_count(), 4);
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
