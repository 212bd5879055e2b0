//! One keep-alive connection's state machine, apart from the ring.
//!
//! As io-uring's `tcp_echo` example keeps each connection's state beside the ring, a [`Conn`]
//! never touches the ring or a socket: it is told what completed and answers with a [`Step`] —
//! the next [`Op`] to queue, the GET's arrival, or why the attempt failed. The engine
//! (`mod.rs`) queues the operations and words the failures; tests drive a `Conn` with made-up
//! completions. A GET goes:
//!
//! ```text
//! Idle ─▶ Connecting (only if the socket is closed) ─▶ Sending ─▶ Peeking ⇄ Consuming ─▶ Body
//!                                                                        └─▶ ErrorBody
//! ```
//!
//! One method per phase; each phase has exactly one operation in flight, except `Idle` and
//! `Backoff`, which have none.
//!
//! The same machine carries the checkpoint writer's requests (`objects.rs`): a job with
//! `body_bytes` sends that many bytes from its registered buffer after the head
//! (`Sending ─▶ SendingBody ─▶ Peeking`), and a job that [`Expect`]s a document takes a `2xx`
//! answer's body (an XML document, or nothing) into the scratch buffer and ends with
//! [`Step::Answered`] instead of reading a `206` body.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use super::fetch::Part;
use super::http::{self, HeadError, HeadReader, HeadStep, ResponseHead};
use super::ring::Ring;
use crate::engine::pool::BufIndex;
use crate::plan::RangedGet;
use crate::rank::RankError;
use crate::s3::{RetryPolicy, Wait};

/// `SO_RCVLOWAT` while a body streams.
pub const RCVLOWAT_BYTES: usize = 1 << 20;

/// The GET a connection serves, and its attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    pub reader: usize,
    pub get: usize,
    pub buf: BufIndex,
    /// Attempts beyond the first so far.
    pub retries: u32,
    pub first_started: Instant,
    pub attempt_started: Instant,
    /// From the attempt's start to its complete response head.
    pub first_byte: Duration,
    /// When the attempt last received bytes (its start, before any).
    pub last_progress: Instant,
    /// The attempt ran past one of the policy's limits, and its socket was shut down.
    pub timed_out: Option<Wait>,
    /// Request body bytes sent from `buf` after the head (0: none, as for a GET).
    pub body_bytes: usize,
    /// When the attempt's request body was sent whole: the answer's wait counts from then.
    pub body_sent: Option<Instant>,
    /// What answer the request waits for.
    pub expect: Expect,
    /// One request of a GET sent as several (s3dlio's fetch of an object: its HEAD, or one
    /// range; a column subset's chunk), instead of the GET itself.
    pub part: Option<Part>,
}

/// The answer a job waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expect {
    /// `206 Partial Content`, its body read into the job's buffer (a ranged GET).
    #[default]
    Partial,
    /// A `2xx` whose body, if any, is a small document read into the scratch buffer
    /// (a PUT, an upload's creation or completion, an abort). A `2xx` document that ends
    /// before its length, or outgrows the scratch buffer, fails the attempt: a result cut
    /// short never counts.
    Document,
    /// A HEAD: its answer is whole at its head, whatever length the head names.
    Head,
}

impl Job {
    pub fn new(reader: usize, get: usize, buf: BufIndex, now: Instant) -> Job {
        Job {
            reader,
            get,
            buf,
            retries: 0,
            first_started: now,
            attempt_started: now,
            first_byte: Duration::ZERO,
            last_progress: now,
            timed_out: None,
            body_bytes: 0,
            body_sent: None,
            expect: Expect::Partial,
            part: None,
        }
    }

    /// A request that sends `body_bytes` from `buf` after its head (0: none) and waits for a
    /// document: `tag` is the caller's, kept in `get`.
    pub fn request(tag: usize, buf: BufIndex, body_bytes: usize, now: Instant) -> Job {
        Job {
            body_bytes,
            expect: Expect::Document,
            ..Job::new(0, tag, buf, now)
        }
    }
}

/// The operation a connection needs queued next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Open a socket and connect it.
    Connect,
    /// Format the GET's request head into the connection's request buffer and send it.
    SendRequest,
    /// Send the rest of the request head, from byte `from`.
    SendRest { from: usize },
    /// Send the job's body bytes `from..len` from its registered buffer.
    SendBody { from: usize, len: usize },
    /// Peek at what has arrived, into `scratch[at..]`, with `SO_RCVLOWAT` 1: a head is small,
    /// so the receive must complete on its first byte.
    Peek { at: usize },
    /// Receive exactly `len` bytes into `scratch[at..]`: head bytes already peeked, or an
    /// error document.
    Recv { at: usize, len: usize },
    /// Read `len` body bytes into the GET's registered buffer at `offset`, with `SO_RCVLOWAT`
    /// `lowat`.
    Body {
        offset: usize,
        len: usize,
        lowat: usize,
    },
}

/// Why an attempt failed. The engine words it as a `RequestError` that names the GET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The attempt waited past a limit for what it names (its socket was shut down).
    TimedOut(Wait),
    /// An operation failed with `errno`; `connecting` when it was the connect.
    Io { errno: i32, connecting: bool },
    /// The connection ended early or broke the protocol.
    Transport(String),
    /// The answer is not the one asked for.
    BadResponse(String),
    /// No response head could be read; `reused` when the socket had carried a response before,
    /// `after` the GET (reader, index) whose response it carried last.
    Head {
        error: HeadError,
        reused: bool,
        after: Option<(usize, usize)>,
    },
    /// An error status, with its document (at most the scratch buffer's size of it) and its
    /// `Retry-After` header.
    Status {
        status: u16,
        document: Vec<u8>,
        retry_after: Option<String>,
    },
}

/// What a completion led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Queue(Op),
    /// The body is whole: take the job with [`Conn::finish`].
    Arrived,
    /// A [`Expect::Document`] job was answered `2xx`: its status, document and `ETag`; take
    /// the job with [`Conn::finish`].
    Answered {
        status: u16,
        document: Vec<u8>,
        etag: Option<String>,
        /// The head's `Content-Length` (a HEAD's: the object's size).
        length: Option<u64>,
        /// The object's checksum (a HEAD with `x-amz-checksum-mode: ENABLED`).
        checksum: Option<crate::checksum::StoredChecksum>,
    },
    Failed(Failure),
}

/// What the timers ask of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerAction {
    None,
    /// The backoff is over: start the attempt again ([`Conn::start_attempt`]).
    Retry,
    /// The attempt ran past its timeout: shut its socket down, so that its operation completes
    /// and the next completion reports the timeout.
    ShutDown,
}

/// How an error document's end is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// `Content-Length` bytes (capped at the scratch buffer).
    Length(usize),
    /// `Transfer-Encoding: chunked`: the last chunk ends it.
    Chunked,
    /// Neither: the server closes the connection after it.
    UntilClose,
}

/// What a connection is waiting for.
#[derive(Debug, Default)]
enum Phase {
    #[default]
    Idle,
    Connecting,
    Sending {
        sent: usize,
    },
    SendingBody {
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
    /// An error document, or a [`Expect::Document`] job's `2xx` one.
    ErrorBody {
        status: u16,
        received: usize,
        framing: Framing,
        retry_after: Option<String>,
    },
    /// Waiting to try the GET again.
    Backoff {
        until: Instant,
    },
}

/// One keep-alive connection.
#[derive(Debug, Default)]
pub struct Conn {
    /// The socket, while open. Set by the engine after it queues the connect.
    pub socket: Option<OwnedFd>,
    /// `SO_RCVLOWAT` as last set on the socket (a new socket's is 1).
    pub rcvlowat_bytes: usize,
    /// The socket has carried a response (a close before the next one is the server's
    /// keep-alive timeout, not a failure of this GET).
    reused: bool,
    /// The GET (reader, index) whose response the open socket carried last.
    previous: Option<(usize, usize)>,
    /// The `ETag` of the answer being read (document and HEAD jobs).
    etag: Option<String>,
    /// The `Content-Length` of the answer being read (document and HEAD jobs).
    length: Option<u64>,
    /// The object's checksum in the answer being read (HEAD jobs).
    checksum: Option<crate::checksum::StoredChecksum>,
    job: Option<Job>,
    phase: Phase,
    /// An answer arrived while the body was being sent (seen by an answer watch,
    /// [`Conn::on_watch`]): the send's completion reads it instead of sending on, and the
    /// connection (its sending side shut) is not used again.
    answered_early: bool,
    /// The body was not sent whole when the answer was read: a `2xx` then is refused.
    cut_short: bool,
    /// Its socket was shut down by a stop: not used again, whatever its answer ([`Conn::stop`]).
    stopped: bool,
}

impl Conn {
    /// Free for a new GET.
    pub fn is_free(&self) -> bool {
        self.job.is_none() && matches!(self.phase, Phase::Idle)
    }

    pub fn job(&self) -> Option<&Job> {
        self.job.as_ref()
    }

    /// Whether an operation of the connection is in flight (not idle, not waiting to retry).
    pub fn in_flight(&self) -> bool {
        !matches!(self.phase, Phase::Idle | Phase::Backoff { .. })
    }

    /// Whether the operation in flight sends body bytes.
    pub fn is_sending_body(&self) -> bool {
        matches!(self.phase, Phase::SendingBody { .. })
    }

    /// An answer watch (a peek armed beside a plain-HTTP body's sends) completed with
    /// `result`: while the body is still being sent, bytes mean the server answered before
    /// reading it all (`404 NoSuchUpload`, `403`, a `503`…); the send in flight then ends (the
    /// engine shuts the socket's sending side, true returned) and its completion reads the
    /// answer instead of sending on. Anything else (the peer closed, an error) is left to the
    /// send to report.
    pub fn on_watch(&mut self, result: i32) -> bool {
        if result <= 0 || !self.is_sending_body() {
            return false;
        }
        self.answered_early = true;
        true
    }

    /// Whether the operation in flight reads body bytes.
    pub fn is_reading_body(&self) -> bool {
        matches!(self.phase, Phase::Body { .. })
    }

    /// Takes a GET; then [`Conn::start_attempt`].
    pub fn assign(&mut self, job: Job) {
        debug_assert!(self.is_free(), "a connection serves one GET at a time");
        self.job = Some(job);
    }

    /// Starts an attempt of the job: connect if the socket is closed, else send.
    pub fn start_attempt(&mut self, now: Instant) -> Op {
        if let Some(job) = &mut self.job {
            job.attempt_started = now;
            job.last_progress = now;
            job.timed_out = None;
            job.body_sent = None;
        }
        self.answered_early = false;
        self.cut_short = false;
        if self.socket.is_some() {
            self.phase = Phase::Sending { sent: 0 };
            return Op::SendRequest;
        }
        self.phase = Phase::Connecting;
        self.reused = false;
        self.previous = None;
        Op::Connect
    }

    /// The job's body goes as `n` bytes from its buffer: over TLS, its sealed records, whose
    /// length is known once the request head before them is sealed.
    pub fn set_body_bytes(&mut self, n: usize) {
        if let Some(job) = &mut self.job {
            job.body_bytes = n;
        }
    }

    /// The socket a connect was queued for.
    pub fn set_socket(&mut self, socket: OwnedFd) {
        self.socket = Some(socket);
        self.rcvlowat_bytes = 1;
    }

    /// Handles the completion of the connection's operation: `result` is bytes or `-errno`;
    /// `scratch` the connection's scratch buffer; `request_len` the request head's length;
    /// `get` the GET the job is for. `Err` is a completion for a connection with nothing in
    /// flight (a bug).
    pub fn on_completion(
        &mut self,
        result: i32,
        scratch: &[u8],
        request_len: usize,
        get: &RangedGet,
        now: Instant,
    ) -> Result<Step, String> {
        let body_len = get.len_bytes as usize;
        if let Some(what) = self.job.and_then(|j| j.timed_out) {
            return Ok(Step::Failed(Failure::TimedOut(what)));
        }
        if result > 0
            && let Some(job) = &mut self.job
        {
            job.last_progress = now;
        }
        let reset = matches!(-result, libc::EPIPE | libc::ECONNRESET);
        if result < 0 && (self.answered_early || reset) && self.is_sending_body() {
            // The server answered first (seen, or its close reset the send): read the answer.
            return Ok(self.read_early_answer());
        }
        if result < 0 {
            return Ok(Step::Failed(Failure::Io {
                errno: -result,
                connecting: matches!(self.phase, Phase::Connecting),
            }));
        }
        let n = result as usize;
        if let Phase::SendingBody { sent } = self.phase
            && self.answered_early
            && sent + n < self.job.map_or(0, |j| j.body_bytes)
        {
            return Ok(self.read_early_answer());
        }
        Ok(match std::mem::take(&mut self.phase) {
            Phase::Connecting => self.on_connected(),
            Phase::Sending { sent } => self.on_sent(sent + n, request_len),
            Phase::SendingBody { sent } => self.on_body_sent(sent + n),
            Phase::Peeking(reader) => self.on_peeked(reader, scratch, n, get, now),
            Phase::Consuming {
                reader,
                n: want,
                head,
            } => self.on_consumed(reader, n, want, head, scratch.len(), body_len),
            Phase::Body { received } => self.on_body(received, n, body_len),
            Phase::ErrorBody {
                status,
                received,
                framing,
                retry_after,
            } => self.on_error_body(status, retry_after, scratch, received + n, n, framing),
            Phase::Idle | Phase::Backoff { .. } => {
                return Err("a completion for a connection with nothing in flight".into());
            }
        })
    }

    /// The server answered before the body went whole: read that answer, still in the socket.
    fn read_early_answer(&mut self) -> Step {
        self.cut_short = true;
        self.peek(HeadReader::new())
    }

    fn on_connected(&mut self) -> Step {
        self.phase = Phase::Sending { sent: 0 };
        Step::Queue(Op::SendRequest)
    }

    fn on_sent(&mut self, sent: usize, request_len: usize) -> Step {
        if sent < request_len {
            self.phase = Phase::Sending { sent };
            return Step::Queue(Op::SendRest { from: sent });
        }
        self.on_body_sent(0)
    }

    /// `sent` of the job's body bytes are out: send the rest, or read the answer.
    fn on_body_sent(&mut self, sent: usize) -> Step {
        let len = self.job.map_or(0, |j| j.body_bytes);
        if sent < len {
            self.phase = Phase::SendingBody { sent };
            return Step::Queue(Op::SendBody { from: sent, len });
        }
        if let Some(job) = &mut self.job
            && len > 0
        {
            // Set to this completion's time just before.
            job.body_sent = Some(job.last_progress);
        }
        self.peek(HeadReader::new())
    }

    fn peek(&mut self, reader: HeadReader) -> Step {
        let at = reader.peek_at();
        self.phase = Phase::Peeking(reader);
        Step::Queue(Op::Peek { at })
    }

    fn on_peeked(
        &mut self,
        mut reader: HeadReader,
        scratch: &[u8],
        n: usize,
        get: &RangedGet,
        now: Instant,
    ) -> Step {
        let body_len = get.len_bytes as usize;
        match reader.on_peek(scratch, n, get) {
            Ok(HeadStep::Consume(n)) => {
                let at = reader.peek_at();
                self.phase = Phase::Consuming {
                    reader,
                    n,
                    head: None,
                };
                Step::Queue(Op::Recv { at, len: n })
            }
            Ok(HeadStep::Complete { head, consume }) => {
                if let Some(job) = &mut self.job {
                    job.first_byte = now.saturating_duration_since(job.attempt_started);
                }
                if consume == 0 {
                    return self.after_head(head, scratch.len(), body_len);
                }
                let at = reader.peek_at();
                self.phase = Phase::Consuming {
                    reader,
                    n: consume,
                    head: Some(head),
                };
                Step::Queue(Op::Recv { at, len: consume })
            }
            Err(error) => Step::Failed(Failure::Head {
                error,
                reused: self.reused,
                after: self.previous,
            }),
        }
    }

    fn on_consumed(
        &mut self,
        mut reader: HeadReader,
        n: usize,
        want: usize,
        head: Option<ResponseHead>,
        scratch_len: usize,
        body_len: usize,
    ) -> Step {
        if n != want {
            return Step::Failed(Failure::Transport(format!(
                "consumed {n} of {want} peeked head bytes"
            )));
        }
        reader.on_consumed(n);
        match head {
            Some(head) => self.after_head(head, scratch_len, body_len),
            None => self.peek(reader),
        }
    }

    /// A complete, checked head: read the body, or the error document, or fail the attempt.
    fn after_head(&mut self, head: ResponseHead, scratch_len: usize, body_len: usize) -> Step {
        // After `Connection: close` the socket is dropped once this response is read.
        // An answer that came while the body was being sent shut the socket's sending side.
        self.reused = !head.closes && !self.answered_early;
        if self.cut_short {
            // The request was not sent whole: the connection is spent, and a success is not
            // one.
            self.reused = false;
            if (200..300).contains(&head.status) {
                return Step::Failed(Failure::BadResponse(format!(
                    "answered {} before its body was sent whole",
                    head.status
                )));
            }
        }
        let expect = self.job.map(|j| j.expect).unwrap_or_default();
        if expect == Expect::Head {
            // No body follows a HEAD's answer, whatever its head says (RFC 9110 §9.3.2).
            self.etag = head.etag.clone();
            self.length = head.content_length;
            self.checksum = head.checksum.clone();
            return self.answer(head.status, Vec::new(), head.retry_after);
        }
        let document = expect == Expect::Document;
        if document {
            self.etag = head.etag.clone();
            self.length = head.content_length;
            let success = (200..300).contains(&head.status);
            if let Some(len) = head
                .content_length
                .filter(|&l| success && l as usize > scratch_len)
            {
                return Step::Failed(Failure::BadResponse(format!(
                    "a {}-byte answer where at most {scratch_len} bytes of XML were expected",
                    len
                )));
            }
            // A document past the scratch buffer leaves bytes in the socket: not reused.
            if head.content_length.is_none_or(|l| l as usize > scratch_len) && !head.chunked {
                self.reused = false;
            }
        }
        // `partial` holds the check against what the GET asked for: a 206 with its range, or
        // a 200 of exactly the object's size for a whole-object GET. Any other success is
        // never read into a buffer sized for the GET.
        if (200..300).contains(&head.status) && !document {
            let head_only = self.job.is_some_and(|j| j.part.is_some_and(|p| p.head));
            return match head.partial {
                // A HEAD's answer has no body, nor has a zero-byte object's GET.
                Ok(()) if head_only || body_len == 0 => Step::Arrived,
                Ok(()) => self.body(0, body_len),
                Err(reason) => Step::Failed(Failure::BadResponse(reason)),
            };
        }
        // The error document: read by its framing, so a chunked or close-delimited one ends
        // the attempt when it is whole, not at the request timeout.
        let framing = match (head.content_length, head.chunked) {
            // 1xx, 204 and 304 answers never carry a body (RFC 9112 §6.3), whatever the head
            // says: an AbortMultipartUpload's 204 is whole at its head.
            _ if head.status == 204 || head.status == 304 || head.status < 200 => {
                Framing::Length(0)
            }
            (_, true) => Framing::Chunked,
            (Some(len), false) => Framing::Length((len as usize).min(scratch_len)),
            (None, false) => Framing::UntilClose,
        };
        if framing == Framing::Length(0) {
            return self.answer(head.status, Vec::new(), head.retry_after);
        }
        self.phase = Phase::ErrorBody {
            status: head.status,
            received: 0,
            framing,
            retry_after: head.retry_after,
        };
        let len = match framing {
            Framing::Length(len) => len,
            Framing::Chunked | Framing::UntilClose => scratch_len,
        };
        Step::Queue(Op::Recv { at: 0, len })
    }

    /// Reads the rest of the body straight into the GET's registered buffer.
    fn body(&mut self, received: usize, body_len: usize) -> Step {
        let remaining = body_len - received;
        // Never wait for more than will come: lowered for the tail. To 1, not to what remains:
        // a blocking receive with SO_RCVLOWAT just under the remaining bytes was seen to stall
        // until the server gave up (scripts/floor-reader); the tail is under a MiB of ~99.
        let lowat = if remaining >= RCVLOWAT_BYTES {
            RCVLOWAT_BYTES
        } else {
            1
        };
        self.phase = Phase::Body { received };
        Step::Queue(Op::Body {
            offset: received,
            len: remaining,
            lowat,
        })
    }

    fn on_body(&mut self, received: usize, n: usize, body_len: usize) -> Step {
        if n == 0 {
            return Step::Failed(Failure::Transport(format!(
                "the connection ended after {received} of {body_len} body bytes"
            )));
        }
        let received = received + n;
        if received < body_len {
            return self.body(received, body_len);
        }
        Step::Arrived
    }

    /// `scratch[..received]`: the document's bytes so far, `n` of them just received.
    fn on_error_body(
        &mut self,
        status: u16,
        retry_after: Option<String>,
        scratch: &[u8],
        received: usize,
        n: usize,
        framing: Framing,
    ) -> Step {
        let raw = &scratch[..received];
        let mut whole = |document: Vec<u8>| self.answer(status, document, retry_after.clone());
        match framing {
            Framing::Length(len) if received >= len => return whole(raw[..len].to_vec()),
            Framing::Chunked => match http::dechunk(raw) {
                Ok(Some(document)) => return whole(document),
                Ok(None) => {}
                // Not chunked after all: what came is the document.
                Err(_) => return whole(raw.to_vec()),
            },
            Framing::Length(_) | Framing::UntilClose => {}
        }
        // The connection ended, or the document outgrew the scratch buffer: what came is an
        // error's document (the connection is closed after a failed attempt either way); a
        // `2xx` cut short fails, unless the connection's end was its framing.
        if n == 0 || received >= scratch.len() {
            if (200..300).contains(&status) {
                if n == 0 && framing == Framing::UntilClose {
                    return whole(raw.to_vec());
                }
                return Step::Failed(Failure::Transport(if n == 0 {
                    format!("the connection ended after {received} bytes of the answer's body")
                } else {
                    format!("the answer's body passed {} bytes", scratch.len())
                }));
            }
            return whole(raw.to_vec());
        }
        self.phase = Phase::ErrorBody {
            status,
            received,
            framing,
            retry_after,
        };
        let end = match framing {
            Framing::Length(len) => len,
            Framing::Chunked | Framing::UntilClose => scratch.len(),
        };
        Step::Queue(Op::Recv {
            at: received,
            len: end - received,
        })
    }

    /// A whole answer of `status` with its document: a document job's `2xx`, else a failure.
    fn answer(&mut self, status: u16, document: Vec<u8>, retry_after: Option<String>) -> Step {
        if (200..300).contains(&status) {
            return Step::Answered {
                status,
                document,
                etag: self.etag.take(),
                length: self.length.take(),
                checksum: self.checksum.take(),
            };
        }
        Step::Failed(Failure::Status {
            status,
            document,
            retry_after,
        })
    }

    /// After [`Step::Arrived`] or [`Step::Answered`]: the connection is free for the next GET; its job.
    pub fn finish(&mut self) -> Option<Job> {
        let job = self.job.take()?;
        self.phase = Phase::Idle;
        // (`&`, not `&&`: the stop is forgotten either way.)
        if self.reused & !std::mem::take(&mut self.stopped) {
            self.previous = Some((job.reader, job.get));
        } else {
            // `Connection: close` (the server ends it), or a socket shut down by a stop.
            self.socket = None;
            self.previous = None;
        }
        Some(job)
    }

    /// After [`Step::Failed`]: the socket is closed; with `retry_at`, the GET is tried again
    /// then (its retries counted); without, the connection gives the job up.
    pub fn attempt_failed(&mut self, retry_at: Option<Instant>) -> Option<Job> {
        self.stopped = false;
        self.socket = None;
        self.reused = false;
        self.previous = None;
        match (retry_at, &mut self.job) {
            (Some(until), Some(job)) => {
                job.retries += 1;
                self.phase = Phase::Backoff { until };
                None
            }
            _ => {
                self.phase = Phase::Idle;
                self.job.take()
            }
        }
    }

    /// Moves the attempt's clocks on by `by`: its rank did something else (a checkpoint save)
    /// and read nothing meanwhile, which is no delay of the server's.
    pub fn shift_clocks(&mut self, by: Duration) {
        if let Some(job) = self.job.as_mut() {
            job.attempt_started += by;
            job.last_progress += by;
            if let Some(sent) = job.body_sent.as_mut() {
                *sent += by;
            }
        }
    }

    /// What the attempt waits for now, and until when: the earlier of the whole attempt's
    /// limit and its phase's (the connect, the response head, the next body bytes).
    fn deadline(&self, policy: &RetryPolicy) -> Option<(Wait, Instant)> {
        let job = self.job.as_ref()?;
        if job.timed_out.is_some() {
            return None;
        }
        let phase = match self.phase {
            Phase::Idle | Phase::Backoff { .. } => return None,
            Phase::Connecting => (Wait::Connect, job.attempt_started + policy.connect_timeout),
            Phase::Sending { .. } | Phase::Peeking(_) | Phase::Consuming { .. } => (
                Wait::FirstByte,
                job.body_sent.unwrap_or(job.attempt_started) + policy.first_byte_timeout,
            ),
            // A request body moves as the reader's does: bounded by the pauses between bytes.
            Phase::SendingBody { .. } | Phase::Body { .. } | Phase::ErrorBody { .. } => {
                (Wait::Idle, job.last_progress + policy.idle_timeout)
            }
        };
        let whole = (Wait::Request, job.attempt_started + policy.timeout);
        Some(if phase.1 < whole.1 { phase } else { whole })
    }

    /// When this connection's timers next need a look: the end of its backoff, or its
    /// attempt's deadline.
    pub fn wake_at(&self, policy: &RetryPolicy) -> Option<Instant> {
        match &self.phase {
            Phase::Backoff { until } => Some(*until),
            _ => self.deadline(policy).map(|(_, at)| at),
        }
    }

    /// Its socket is being shut down by its owner: spent, even if its answer still ends well.
    pub fn stop(&mut self) {
        self.stopped = self.socket.is_some();
    }

    /// What the timers ask at `now`.
    pub fn on_timer(&mut self, now: Instant, policy: &RetryPolicy) -> TimerAction {
        if let Phase::Backoff { until } = self.phase {
            if until <= now {
                self.phase = Phase::Idle;
                return TimerAction::Retry;
            }
            return TimerAction::None;
        }
        match self.deadline(policy) {
            Some((what, at)) if at <= now => {
                if let Some(job) = &mut self.job {
                    job.timed_out = Some(what);
                }
                TimerAction::ShutDown
            }
            _ => TimerAction::None,
        }
    }
}

/// The ring, and connection `c`'s socket to queue an operation on: the one lookup the
/// training window's connections and a checkpoint's share.
pub fn ring_and_socket<'a>(
    ring: &'a mut Ring,
    conns: &'a [Conn],
    c: usize,
) -> Result<(&'a mut Ring, BorrowedFd<'a>), RankError> {
    let socket = conns[c]
        .socket
        .as_ref()
        .ok_or_else(|| RankError::Engine(format!("connection {c} has no socket (a bug)")))?;
    Ok((ring, socket.as_fd()))
}

/// Sets `SO_RCVLOWAT` on connection `c` to `bytes` if it is not that already.
pub fn set_rcvlowat(conns: &mut [Conn], c: usize, bytes: usize) -> Result<(), RankError> {
    if conns[c].rcvlowat_bytes == bytes {
        return Ok(());
    }
    let socket = conns[c]
        .socket
        .as_ref()
        .ok_or_else(|| RankError::Engine(format!("connection {c} has no socket (a bug)")))?;
    super::ring::set_rcvlowat(socket.as_fd(), bytes)
        .map_err(|e| RankError::Engine(format!("io_uring: SO_RCVLOWAT: {e}")))?;
    conns[c].rcvlowat_bytes = bytes;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! A connection driven by made-up completions, as the ring would deliver them.
    use super::*;

    const SCRATCH: usize = 256;

    fn range(len_bytes: usize) -> RangedGet {
        RangedGet {
            whole: false,
            fetch: None,
            object: None,
            key: "k".into(),
            offset: 0,
            len_bytes: len_bytes as u64,
            check: None,
            extents: None,
        }
    }

    fn head(body_len: usize, extra: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes 0-{}/1000000\r\n\
             content-length: {body_len}\r\n{extra}\r\n",
            body_len - 1
        )
        .into_bytes()
    }

    /// A connection with a GET of `body_len` bytes assigned and connected, its request sent.
    fn sent(body_len: usize) -> (Conn, Instant) {
        let now = Instant::now();
        let mut conn = Conn::default();
        conn.assign(Job::new(0, 0, BufIndex(0), now));
        assert_eq!(conn.start_attempt(now), Op::Connect);
        let scratch = [0u8; SCRATCH];
        let step = conn
            .on_completion(0, &scratch, 100, &range(body_len), now)
            .unwrap();
        assert_eq!(step, Step::Queue(Op::SendRequest));
        // A short send, then the rest.
        let step = conn
            .on_completion(60, &scratch, 100, &range(body_len), now)
            .unwrap();
        assert_eq!(step, Step::Queue(Op::SendRest { from: 60 }));
        let step = conn
            .on_completion(40, &scratch, 100, &range(body_len), now)
            .unwrap();
        assert_eq!(step, Step::Queue(Op::Peek { at: 0 }));
        (conn, now)
    }

    /// A rank that saved a checkpoint read nothing meanwhile: its GETs' limits move on by the
    /// pause, so a save longer than a timeout does not time out the GETs in flight.
    #[test]
    fn a_pause_moves_the_attempts_limits_on() {
        let (mut conn, now) = sent(100);
        let policy = RetryPolicy {
            timeout: Duration::from_millis(300),
            ..RetryPolicy::default()
        };
        let before = conn.wake_at(&policy).unwrap();
        let pause = Duration::from_secs(5);
        conn.shift_clocks(pause);
        assert_eq!(conn.wake_at(&policy), Some(before + pause));
        assert_eq!(conn.on_timer(now + pause, &policy), TimerAction::None);
        // An idle connection has nothing to move.
        let mut idle = Conn::default();
        idle.shift_clocks(pause);
        assert_eq!(idle.wake_at(&policy), None);
    }

    #[test]
    fn a_head_in_two_peeks_then_the_body_in_pieces() {
        let body_len = 3 * RCVLOWAT_BYTES;
        let (mut conn, now) = sent(body_len);
        let head = head(body_len, "");
        let mut scratch = vec![0u8; SCRATCH];
        // The first peek sees 10 bytes: all head, consumed, then peek again after them.
        scratch[..10].copy_from_slice(&head[..10]);
        let step = conn
            .on_completion(10, &scratch, 100, &range(body_len), now)
            .unwrap();
        assert_eq!(step, Step::Queue(Op::Recv { at: 0, len: 10 }));
        let step = conn
            .on_completion(10, &scratch, 100, &range(body_len), now)
            .unwrap();
        assert_eq!(step, Step::Queue(Op::Peek { at: 10 }));
        // The second peek sees the rest of the head and 5 body bytes: only the head's rest
        // is consumed; the body bytes stay in the socket.
        scratch[10..head.len()].copy_from_slice(&head[10..]);
        let rest = head.len() - 10;
        let step = conn
            .on_completion(rest as i32 + 5, &scratch, 100, &range(body_len), now)
            .unwrap();
        assert_eq!(step, Step::Queue(Op::Recv { at: 10, len: rest }));
        let step = conn
            .on_completion(rest as i32, &scratch, 100, &range(body_len), now)
            .unwrap();
        let lowat = RCVLOWAT_BYTES;
        assert_eq!(
            step,
            Step::Queue(Op::Body {
                offset: 0,
                len: body_len,
                lowat
            })
        );
        assert!(conn.is_reading_body());
        // Two MiB arrive; the last MiB is read with SO_RCVLOWAT 1.
        let mib = RCVLOWAT_BYTES as i32;
        let step = conn
            .on_completion(2 * mib, &scratch, 100, &range(body_len), now)
            .unwrap();
        assert_eq!(
            step,
            Step::Queue(Op::Body {
                offset: 2 * RCVLOWAT_BYTES,
                len: RCVLOWAT_BYTES,
                lowat
            })
        );
        let step = conn
            .on_completion(mib - 1, &scratch, 100, &range(body_len), now)
            .unwrap();
        assert_eq!(
            step,
            Step::Queue(Op::Body {
                offset: body_len - 1,
                len: 1,
                lowat: 1
            })
        );
        assert_eq!(
            conn.on_completion(1, &scratch, 100, &range(body_len), now),
            Ok(Step::Arrived)
        );
        // Kept alive: the socket stays (none was set here) and the connection is free.
        let job = conn.finish().unwrap();
        assert_eq!((job.reader, job.get, job.retries), (0, 0, 0));
        assert!(conn.is_free());
    }

    #[test]
    fn failures_say_why() {
        // A body cut short.
        let (mut conn, now) = sent(100);
        let mut scratch = vec![0u8; SCRATCH];
        let h = head(100, "connection: close\r\n");
        scratch[..h.len()].copy_from_slice(&h);
        let step = conn
            .on_completion(h.len() as i32, &scratch, 100, &range(100), now)
            .unwrap();
        assert_eq!(
            step,
            Step::Queue(Op::Recv {
                at: 0,
                len: h.len()
            })
        );
        conn.on_completion(h.len() as i32, &scratch, 100, &range(100), now)
            .unwrap();
        conn.on_completion(40, &scratch, 100, &range(100), now)
            .unwrap();
        assert_eq!(
            conn.on_completion(0, &scratch, 100, &range(100), now),
            Ok(Step::Failed(Failure::Transport(
                "the connection ended after 40 of 100 body bytes".into()
            )))
        );
        // Retried after a backoff: the timer starts the attempt again on a new socket.
        let later = now + Duration::from_millis(5);
        assert_eq!(conn.attempt_failed(Some(later)), None);
        let policy = RetryPolicy::default();
        assert_eq!(conn.wake_at(&policy), Some(later));
        assert_eq!(conn.on_timer(now, &policy), TimerAction::None);
        assert_eq!(conn.on_timer(later, &policy), TimerAction::Retry);
        assert_eq!(conn.start_attempt(later), Op::Connect);
        assert_eq!(conn.job().unwrap().retries, 1);
        // A refused connect names itself as one.
        assert_eq!(
            conn.on_completion(-libc::ECONNREFUSED, &scratch, 100, &range(100), later),
            Ok(Step::Failed(Failure::Io {
                errno: libc::ECONNREFUSED,
                connecting: true
            }))
        );
        // Given up: the job comes back for the window.
        assert_eq!(conn.attempt_failed(None).map(|j| j.retries), Some(1));
        assert!(conn.is_free());

        // An error status: its document is read into the scratch buffer.
        let (mut conn, now) = sent(100);
        let doc = "<Error><Code>SlowDown</Code></Error>";
        let h = format!(
            "HTTP/1.1 503 Slow Down\r\ncontent-length: {}\r\n\r\n",
            doc.len()
        );
        scratch[..h.len()].copy_from_slice(h.as_bytes());
        conn.on_completion(h.len() as i32, &scratch, 100, &range(100), now)
            .unwrap();
        let step = conn
            .on_completion(h.len() as i32, &scratch, 100, &range(100), now)
            .unwrap();
        assert_eq!(
            step,
            Step::Queue(Op::Recv {
                at: 0,
                len: doc.len()
            })
        );
        scratch[..doc.len()].copy_from_slice(doc.as_bytes());
        assert_eq!(
            conn.on_completion(doc.len() as i32, &scratch, 100, &range(100), now),
            Ok(Step::Failed(Failure::Status {
                status: 503,
                document: doc.as_bytes().to_vec(),
                retry_after: None
            }))
        );

        // Past its limit: shut down, and the completion that follows reports which limit.
        let (mut conn, now) = sent(100);
        let policy = RetryPolicy {
            timeout: Duration::from_millis(300),
            ..RetryPolicy::default()
        };
        let timeout = policy.timeout;
        assert_eq!(conn.wake_at(&policy), Some(now + timeout));
        assert_eq!(conn.on_timer(now + timeout, &policy), TimerAction::ShutDown);
        assert_eq!(conn.wake_at(&policy), None);
        assert_eq!(
            conn.on_completion(0, &scratch, 100, &range(100), now + timeout),
            Ok(Step::Failed(Failure::TimedOut(Wait::Request)))
        );
    }

    #[test]
    fn an_error_document_ends_by_its_framing_not_by_the_timeout() {
        let doc = "<Error><Code>SlowDown</Code><Message>m</Message></Error>";
        let chunked = format!("{:x}\r\n{doc}\r\n0\r\n\r\n", doc.len());
        let framings = [
            (
                "HTTP/1.1 503 Slow Down\r\ntransfer-encoding: chunked\r\n\r\n",
                chunked.as_str(),
            ),
            // Neither length nor chunks: the document ends when the connection does.
            ("HTTP/1.1 503 Slow Down\r\nconnection: close\r\n\r\n", doc),
        ];
        for (head, body) in framings {
            let (mut conn, now) = sent(100);
            let mut scratch = vec![0u8; SCRATCH];
            scratch[..head.len()].copy_from_slice(head.as_bytes());
            let n = head.len() as i32;
            conn.on_completion(n, &scratch, 100, &range(100), now)
                .unwrap();
            let step = conn
                .on_completion(n, &scratch, 100, &range(100), now)
                .unwrap();
            assert_eq!(
                step,
                Step::Queue(Op::Recv {
                    at: 0,
                    len: SCRATCH
                }),
                "{head}"
            );
            // The body arrives in two pieces.
            let (first, rest) = body.as_bytes().split_at(7);
            scratch[..first.len()].copy_from_slice(first);
            let step = conn
                .on_completion(first.len() as i32, &scratch, 100, &range(100), now)
                .unwrap();
            assert_eq!(
                step,
                Step::Queue(Op::Recv {
                    at: 7,
                    len: SCRATCH - 7
                })
            );
            scratch[7..7 + rest.len()].copy_from_slice(rest);
            let step = conn
                .on_completion(rest.len() as i32, &scratch, 100, &range(100), now)
                .unwrap();
            let whole = Step::Failed(Failure::Status {
                status: 503,
                document: doc.as_bytes().to_vec(),
                retry_after: None,
            });
            if head.contains("chunked") {
                // Whole at its last chunk: no wait for more bytes.
                assert_eq!(step, whole);
            } else {
                assert_eq!(
                    step,
                    Step::Queue(Op::Recv {
                        at: body.len(),
                        len: SCRATCH - body.len()
                    })
                );
                let end = conn
                    .on_completion(0, &scratch, 100, &range(100), now)
                    .unwrap();
                assert_eq!(end, whole);
            }
        }
    }

    #[test]
    fn each_phase_has_its_own_limit_and_bytes_reset_the_idle_one() {
        let policy = RetryPolicy {
            timeout: Duration::from_secs(100),
            connect_timeout: Duration::from_secs(1),
            first_byte_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(3),
            ..RetryPolicy::default()
        };
        let now = Instant::now();
        let mut conn = Conn::default();
        conn.assign(Job::new(0, 0, BufIndex(0), now));
        conn.start_attempt(now);
        assert_eq!(conn.wake_at(&policy), Some(now + Duration::from_secs(1)));
        let scratch = vec![0u8; SCRATCH];
        conn.on_completion(0, &scratch, 100, &range(100), now)
            .unwrap();
        // Sending: the response head's limit, from the attempt's start.
        assert_eq!(conn.wake_at(&policy), Some(now + Duration::from_secs(2)));
        let (mut conn, now) = sent(100);
        let h = head(100, "");
        let mut scratch = vec![0u8; SCRATCH];
        scratch[..h.len()].copy_from_slice(&h);
        let n = h.len() as i32;
        conn.on_completion(n, &scratch, 100, &range(100), now)
            .unwrap();
        conn.on_completion(n, &scratch, 100, &range(100), now)
            .unwrap();
        // The body: the idle limit, from the last bytes; more bytes push it on.
        let later = now + Duration::from_secs(2);
        conn.on_completion(10, &scratch, 100, &range(100), later)
            .unwrap();
        assert_eq!(conn.wake_at(&policy), Some(later + Duration::from_secs(3)));
        assert_eq!(
            conn.on_timer(later + Duration::from_secs(3), &policy),
            TimerAction::ShutDown
        );
        assert_eq!(
            conn.on_completion(0, &scratch, 100, &range(100), later),
            Ok(Step::Failed(Failure::TimedOut(Wait::Idle)))
        );
    }

    #[test]
    fn a_request_body_then_a_document_answer() {
        let policy = RetryPolicy {
            first_byte_timeout: Duration::from_secs(2),
            ..RetryPolicy::default()
        };
        let now = Instant::now();
        let none = range(0);
        let mut conn = Conn::default();
        conn.assign(Job::request(7, BufIndex(1), 100, now));
        let mut scratch = vec![0u8; SCRATCH];
        assert_eq!(conn.start_attempt(now), Op::Connect);
        let step = |conn: &mut Conn, n: i32, scratch: &[u8], at: Instant| {
            conn.on_completion(n, scratch, 50, &none, at).unwrap()
        };
        assert_eq!(
            step(&mut conn, 0, &scratch, now),
            Step::Queue(Op::SendRequest)
        );
        // The head, then the body from the buffer in two sends.
        assert_eq!(
            step(&mut conn, 50, &scratch, now),
            Step::Queue(Op::SendBody { from: 0, len: 100 })
        );
        assert_eq!(
            step(&mut conn, 60, &scratch, now),
            Step::Queue(Op::SendBody { from: 60, len: 100 })
        );
        // The answer's wait counts from the body's end.
        let sent = now + Duration::from_secs(5);
        assert_eq!(
            step(&mut conn, 40, &scratch, sent),
            Step::Queue(Op::Peek { at: 0 })
        );
        assert_eq!(conn.wake_at(&policy), Some(sent + Duration::from_secs(2)));
        // A 200 with an ETag and no body: answered at once.
        let head = "HTTP/1.1 200 OK\r\netag: \"e1\"\r\ncontent-length: 0\r\n\r\n";
        scratch[..head.len()].copy_from_slice(head.as_bytes());
        let n = head.len() as i32;
        assert_eq!(
            step(&mut conn, n, &scratch, sent),
            Step::Queue(Op::Recv {
                at: 0,
                len: head.len()
            })
        );
        assert_eq!(
            step(&mut conn, n, &scratch, sent),
            Step::Answered {
                status: 200,
                document: Vec::new(),
                etag: Some("\"e1\"".into()),
                length: Some(0),
                checksum: None,
            }
        );
        let job = conn.finish().unwrap();
        assert_eq!((job.get, job.buf, job.body_bytes), (7, BufIndex(1), 100));
        assert!(conn.is_free());

        // No body, a 200 with an XML document: read into the scratch buffer.
        conn.set_socket(std::fs::File::open("/dev/null").unwrap().into());
        conn.assign(Job::request(0, BufIndex(0), 0, now));
        assert_eq!(conn.start_attempt(now), Op::SendRequest);
        assert_eq!(
            step(&mut conn, 50, &scratch, now),
            Step::Queue(Op::Peek { at: 0 })
        );
        let doc = "<R><UploadId>u</UploadId></R>";
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", doc.len());
        scratch[..head.len()].copy_from_slice(head.as_bytes());
        let n = head.len() as i32;
        step(&mut conn, n, &scratch, now);
        assert_eq!(
            step(&mut conn, n, &scratch, now),
            Step::Queue(Op::Recv {
                at: 0,
                len: doc.len()
            })
        );
        scratch[..doc.len()].copy_from_slice(doc.as_bytes());
        assert_eq!(
            step(&mut conn, doc.len() as i32, &scratch, now),
            Step::Answered {
                status: 200,
                document: doc.as_bytes().to_vec(),
                etag: None,
                length: Some(doc.len() as u64),
                checksum: None,
            }
        );

        // A 200 whose document the connection cuts short fails: never a result.
        conn.finish().unwrap();
        conn.set_socket(std::fs::File::open("/dev/null").unwrap().into());
        conn.assign(Job::request(0, BufIndex(0), 0, now));
        conn.start_attempt(now);
        step(&mut conn, 50, &scratch, now);
        scratch[..head.len()].copy_from_slice(head.as_bytes());
        step(&mut conn, n, &scratch, now);
        step(&mut conn, n, &scratch, now);
        scratch[..10].copy_from_slice(&doc.as_bytes()[..10]);
        assert_eq!(
            step(&mut conn, 10, &scratch, now),
            Step::Queue(Op::Recv {
                at: 10,
                len: doc.len() - 10
            })
        );
        assert!(matches!(
            step(&mut conn, 0, &scratch, now),
            Step::Failed(Failure::Transport(r)) if r.contains("after 10 bytes")
        ));
        // A 200 longer than any control-plane answer fails at its head.
        conn.attempt_failed(None);
        conn.set_socket(std::fs::File::open("/dev/null").unwrap().into());
        conn.assign(Job::request(0, BufIndex(0), 0, now));
        conn.start_attempt(now);
        step(&mut conn, 50, &scratch, now);
        let huge = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", SCRATCH + 1);
        scratch[..huge.len()].copy_from_slice(huge.as_bytes());
        step(&mut conn, huge.len() as i32, &scratch, now);
        assert!(matches!(
            step(&mut conn, huge.len() as i32, &scratch, now),
            Step::Failed(Failure::BadResponse(r)) if r.contains("at most")
        ));
    }

    #[test]
    fn a_head_is_whole_at_its_head_with_its_length_and_etag() {
        let now = Instant::now();
        let none = range(0);
        let mut conn = Conn::default();
        let mut scratch = vec![0u8; SCRATCH];
        let step = |conn: &mut Conn, n: i32, scratch: &[u8]| {
            conn.on_completion(n, scratch, 50, &none, now).unwrap()
        };
        for (head, want) in [
            (
                "HTTP/1.1 200 OK\r\netag: \"x-2\"\r\ncontent-length: 123456789\r\n\r\n",
                Step::Answered {
                    status: 200,
                    document: Vec::new(),
                    etag: Some("\"x-2\"".into()),
                    length: Some(123_456_789),
                    checksum: None,
                },
            ),
            (
                "HTTP/1.1 404 Not Found\r\ncontent-length: 200\r\n\r\n",
                Step::Failed(Failure::Status {
                    status: 404,
                    document: Vec::new(),
                    retry_after: None,
                }),
            ),
        ] {
            conn.set_socket(std::fs::File::open("/dev/null").unwrap().into());
            conn.assign(Job {
                expect: Expect::Head,
                ..Job::request(0, BufIndex(0), 0, now)
            });
            assert_eq!(conn.start_attempt(now), Op::SendRequest);
            step(&mut conn, 50, &scratch);
            scratch[..head.len()].copy_from_slice(head.as_bytes());
            let n = head.len() as i32;
            step(&mut conn, n, &scratch);
            assert_eq!(step(&mut conn, n, &scratch), want, "{head}");
            match want {
                Step::Answered { .. } => drop(conn.finish()),
                _ => drop(conn.attempt_failed(None)),
            }
        }
    }

    #[test]
    fn a_204_without_a_length_is_whole_at_its_head() {
        // AbortMultipartUpload's answer: 204, no Content-Length, the connection kept open.
        // Reading it "until close" would wait for the idle timeout and fail the abort.
        let now = Instant::now();
        let none = range(0);
        let mut conn = Conn::default();
        let mut scratch = vec![0u8; SCRATCH];
        conn.set_socket(std::fs::File::open("/dev/null").unwrap().into());
        conn.assign(Job::request(0, BufIndex(0), 0, now));
        assert_eq!(conn.start_attempt(now), Op::SendRequest);
        let step = |conn: &mut Conn, n: i32, scratch: &[u8]| {
            conn.on_completion(n, scratch, 50, &none, now).unwrap()
        };
        assert_eq!(
            step(&mut conn, 50, &scratch),
            Step::Queue(Op::Peek { at: 0 })
        );
        let head = "HTTP/1.1 204 No Content\r\nserver: x\r\n\r\n";
        scratch[..head.len()].copy_from_slice(head.as_bytes());
        let n = head.len() as i32;
        step(&mut conn, n, &scratch);
        assert_eq!(
            step(&mut conn, n, &scratch),
            Step::Answered {
                status: 204,
                document: Vec::new(),
                etag: None,
                length: None,
                checksum: None,
            }
        );
    }

    #[test]
    fn a_completion_with_nothing_in_flight_is_a_bug() {
        let mut conn = Conn::default();
        assert!(
            conn.on_completion(0, &[0u8; 8], 10, &range(10), Instant::now())
                .is_err()
        );
    }

    /// Drives a GET of 100 bytes whose head and body are both in the first peek, to its end.
    fn answered_whole(conn: &mut Conn, now: Instant) {
        let mut scratch = vec![0u8; SCRATCH];
        let h = head(100, "");
        scratch[..h.len()].copy_from_slice(&h);
        let n = h.len();
        let step = conn
            .on_completion(n as i32 + 100, &scratch, 100, &range(100), now)
            .unwrap();
        assert_eq!(step, Step::Queue(Op::Recv { at: 0, len: n }));
        let step = conn
            .on_completion(n as i32, &scratch, 100, &range(100), now)
            .unwrap();
        assert!(
            matches!(step, Step::Queue(Op::Body { offset: 0, .. })),
            "{step:?}"
        );
        let step = conn.on_completion(100, &scratch, 100, &range(100), now);
        assert_eq!(step, Ok(Step::Arrived));
    }

    /// A request whose socket its owner shut down (a stop after another request failed)
    /// may still end well, its answer in already: the connection does not keep that socket
    /// (the next request on it would fail and be counted a retry); one not stopped keeps it.
    #[test]
    fn a_stopped_connection_does_not_keep_its_socket_even_after_a_good_answer() {
        for stop in [false, true] {
            let (mut conn, now) = sent(100);
            let (socket, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
            conn.set_socket(socket.into());
            if stop {
                conn.stop();
            }
            answered_whole(&mut conn, now);
            conn.finish().unwrap();
            assert_eq!(conn.socket.is_some(), !stop, "stopped: {stop}");
            assert!(conn.is_free());
            // The next request on it connects again after a stop, and sends at once if not.
            conn.assign(Job::new(0, 1, BufIndex(0), now));
            let first = if stop { Op::Connect } else { Op::SendRequest };
            assert_eq!(conn.start_attempt(now), first);
            // A stop is forgotten with the socket: the new one is kept after its answer.
            if stop {
                let (socket, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
                conn.set_socket(socket.into());
                let scratch = [0u8; SCRATCH];
                conn.on_completion(0, &scratch, 100, &range(100), now)
                    .unwrap();
                conn.on_completion(100, &scratch, 100, &range(100), now)
                    .unwrap();
                answered_whole(&mut conn, now);
                conn.finish().unwrap();
                assert!(conn.socket.is_some());
            }
        }
    }
}
