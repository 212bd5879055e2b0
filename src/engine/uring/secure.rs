//! TLS connections on the ring, for both of its drivers — the training window's
//! ([`super::RingIo`]) and a checkpoint's ([`super::checkpoint::RingCheckpoint`]): each
//! connection's [`tls::Session`], the handshake (on the rank thread, bounded by the connect
//! timeout), requests sealed in place, and reads served from decrypted plaintext.
//!
//! - **Heads** (and what follows a body) are received into the connection's staging area,
//!   decrypted there, and handed to the connection's state machine ([`Conn`]) as the socket
//!   would: a peek copies, a receive consumes.
//! - **Bodies** land in place: ciphertext received straight into the job's registered buffer
//!   behind the partial record already there, each record decrypted to where its plaintext
//!   belongs, over the gaps of the records before it. A range of an object fetched as s3dlio
//!   fetches it lands at its offset in a buffer other ranges share, where the record beyond it
//!   would overwrite its neighbour: it is received into the staging area and its plaintext
//!   copied to its offset.
//! - **Request bodies** are sealed by the driver that generated them ([`tls::Session::seal_body`]).
//!
//! A completion this layer makes without the ring (plaintext already decrypted, a handshake
//! done on the rank thread) waits in [`TlsConns::pop_ready`] for the driver to hand on.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::Arc;

use super::conn::{self, Conn, Failure, Op};
use super::gateway::{Gateway, plain_socket};
use super::ring::{self, Ring};
use super::tls;
use crate::rank::RankError;
use crate::s3::{Client, RequestError, RetryPolicy};

/// Why a TLS connection failed.
#[derive(Debug, Clone)]
pub enum TlsFailure {
    /// Its handshake, in words: not retried (`RequestError::Tls`).
    Handshake(String),
    /// The record layer ended it: retried, counted under the error's own cause.
    Record(tls::RecordError),
}

/// Every TLS connection of one ring (none when the target is plain HTTP).
#[derive(Debug)]
pub struct TlsConns {
    /// The client's TLS configuration (with secret extraction on); `None`: plain HTTP.
    config: Option<Arc<rustls::ClientConfig>>,
    /// Each connection's session (`None`: plain, or not open).
    sessions: Vec<Option<tls::Session>>,
    /// The operation a connection's ciphertext receive in flight is for.
    reading: Vec<Option<Op>>,
    /// Why a connection failed, when it did.
    failures: Vec<Option<TlsFailure>>,
    /// Completions made without the ring, handed on before the ring is waited on.
    ready: VecDeque<(usize, i32)>,
}

fn no_session(c: usize) -> RankError {
    RankError::Engine(format!("connection {c} has no TLS session (a bug)"))
}

fn engine_error(what: &str, e: std::io::Error) -> RankError {
    RankError::Engine(format!("io_uring: {what}: {e}"))
}

impl TlsConns {
    pub fn new(config: Option<Arc<rustls::ClientConfig>>, conns: usize) -> TlsConns {
        TlsConns {
            config,
            sessions: (0..conns).map(|_| None).collect(),
            reading: vec![None; conns],
            failures: vec![None; conns],
            ready: VecDeque::new(),
        }
    }

    pub fn session(&self, c: usize) -> Option<&tls::Session> {
        self.sessions.get(c).and_then(Option::as_ref)
    }

    pub fn session_mut(&mut self, c: usize) -> Result<&mut tls::Session, RankError> {
        self.sessions
            .get_mut(c)
            .and_then(Option::as_mut)
            .ok_or_else(|| no_session(c))
    }

    /// Why connection `c` failed, if its TLS layer ended it.
    pub fn failure(&self, c: usize) -> Option<TlsFailure> {
        self.failures.get(c).cloned().flatten()
    }

    /// Connection `c`'s attempt failed: its failure is forgotten, and with its socket closed,
    /// its session too.
    pub fn attempt_failed(&mut self, c: usize, socket_closed: bool) {
        self.failures[c] = None;
        if socket_closed {
            self.sessions[c] = None;
            self.reading[c] = None;
        }
    }

    /// The operation connection `c`'s ciphertext receive was for, if the completion is one.
    pub fn take_reading(&mut self, c: usize) -> Option<Op> {
        self.reading.get_mut(c).and_then(Option::take)
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    pub fn pop_ready(&mut self) -> Option<(usize, i32)> {
        self.ready.pop_front()
    }

    /// A completion for connection `c` made without the ring (an operation that was never
    /// queued, ended by its timer).
    pub fn push_ready(&mut self, c: usize, result: i32) {
        self.ready.push_back((c, result));
    }

    /// A failed attempt of `operation` on connection `c` in the TLS layer's words, when its
    /// TLS layer ended it (the failure then reads as an I/O error).
    pub fn worded(&self, c: usize, failure: &Failure, operation: &str) -> Option<RequestError> {
        let Failure::Io { .. } = failure else {
            return None;
        };
        let operation = operation.to_string();
        Some(match self.failure(c)? {
            TlsFailure::Handshake(reason) => RequestError::Tls { operation, reason },
            TlsFailure::Record(error) => RequestError::TlsRecord {
                operation,
                reason: error.to_string(),
                cause: error.cause(),
            },
        })
    }

    /// Opens connection `c` to `gateway` and handshakes, blocking (bounded by the connect
    /// timeout). `Err((errno, words))`: the connect failed (no words), or the handshake did.
    pub fn open(
        &mut self,
        ring: &mut Ring,
        conns: &mut [Conn],
        c: usize,
        gateway: &Gateway,
        policy: &RetryPolicy,
        client: &Client,
    ) -> Result<(), (i32, Option<String>)> {
        let (Some(name), Some(config)) = (gateway.server_name.clone(), self.config.clone()) else {
            return Err((
                libc::EINVAL,
                Some("a TLS connection without TLS (a bug)".into()),
            ));
        };
        let errno = |e: String| (libc::EINVAL, Some(e));
        let socket = plain_socket(&gateway.addr).map_err(errno)?;
        let errno = |e: rustix::io::Errno| (e.raw_os_error(), None);
        // Bounds the connect as well as the handshake's writes.
        rustix::net::sockopt::set_socket_timeout(
            &socket,
            rustix::net::sockopt::Timeout::Send,
            Some(policy.connect_timeout),
        )
        .map_err(errno)?;
        connect_blocking(&socket, &gateway.addr, policy.connect_timeout).map_err(errno)?;
        let endpoint =
            crate::s3::Endpoint::parse(&gateway.url).map_err(|e| (libc::EINVAL, Some(e)))?;
        let hostname = gateway.host.clone();
        let trust = &client.target().tls;
        let describe =
            |e: &std::io::Error| crate::s3::tls::describe(e, &endpoint, &hostname, trust);
        let (_, stage) = ring.scratch_and_stage(c);
        let session = tls::Session::handshake(
            socket.as_fd(),
            &config,
            name,
            policy.connect_timeout,
            stage,
            &describe,
        )
        .map_err(|e| (libc::EPROTO, Some(e.0)))?;
        client.note_tls_negotiated(&session.negotiated);
        conns[c].set_socket(socket);
        self.sessions[c] = Some(session);
        self.reading[c] = None;
        Ok(())
    }

    /// [`Op::Connect`] of a TLS connection: opened and handshaken now, on the rank thread; its
    /// completion (0, or `-errno` with the handshake's words kept) waits in the ready queue.
    pub fn connect(
        &mut self,
        ring: &mut Ring,
        conns: &mut [Conn],
        c: usize,
        gateway: &Gateway,
        policy: &RetryPolicy,
        client: &Client,
    ) {
        let result = match self.open(ring, conns, c, gateway, policy, client) {
            Ok(()) => 0,
            Err((errno, words)) => {
                if let Some(words) = words {
                    self.failures[c] = Some(TlsFailure::Handshake(words));
                }
                -errno
            }
        };
        self.ready.push_back((c, result));
    }

    /// Seals the request formatted in connection `c`'s request buffer, in place.
    pub fn seal_request(&mut self, ring: &mut Ring, c: usize) -> Result<(), RankError> {
        let session = self.session_mut(c)?;
        session
            .seal(ring.request_buffer(c))
            .map_err(RankError::Engine)
    }

    /// Queues a read of TLS connection `c` (a peek, a receive, body bytes): served from
    /// decrypted plaintext when there is some, else a ciphertext receive — into the body's
    /// buffer for a body landing in place, into the staging area otherwise.
    pub fn queue_read(
        &mut self,
        ring: &mut Ring,
        conns: &mut [Conn],
        c: usize,
        op: Op,
    ) -> Result<(), RankError> {
        let session = self.sessions[c].as_ref().ok_or_else(|| no_session(c))?;
        if session.pending() > 0 || session.closed() {
            let n = self.deliver(ring, conns, c, op)?;
            self.ready.push_back((c, n as i32));
            return Ok(());
        }
        if let Op::Body { .. } = op
            && in_place(&conns[c])
        {
            return self.read_in_place(ring, conns, c, op);
        }
        let at = session.free_from();
        conn::set_rcvlowat(conns, c, 1)?;
        self.reading[c] = Some(op);
        let (ring, fd) = conn::ring_and_socket(ring, conns, c)?;
        ring.recv_stage(c, fd, at, tls::STAGE_BYTES - at)
            .map_err(|e| engine_error("queueing an operation", e))
    }

    /// Landing in place: receives a body's ciphertext straight into the job's registered
    /// buffer, behind the partial record already there (moved from the staging area first).
    fn read_in_place(
        &mut self,
        ring: &mut Ring,
        conns: &mut [Conn],
        c: usize,
        op: Op,
    ) -> Result<(), RankError> {
        let Op::Body {
            offset,
            len: owed,
            lowat,
        } = op
        else {
            return Err(head_in_place(c));
        };
        let buf = job_buf(conns, c)?;
        let session = self.session_mut(c)?;
        if !session.in_body() {
            ring.stage_into_buffer(c, 0..session.free_from(), buf, offset);
            session.enter_body();
        }
        let held = session.free_from();
        let at = offset + held;
        // The threshold the plaintext asks for, unless the ciphertext still to come may not
        // reach it (a record partly held here).
        let lowat = tls::body_lowat(lowat, owed, held);
        if lowat < conns[c].rcvlowat_bytes {
            let (_, fd) = conn::ring_and_socket(ring, conns, c)?;
            ring::quickack(fd).map_err(|e| engine_error("TCP_QUICKACK", e))?;
        }
        conn::set_rcvlowat(conns, c, lowat)?;
        self.reading[c] = Some(op);
        let len = ring.buffer_len(buf) - at;
        let (ring, fd) = conn::ring_and_socket(ring, conns, c)?;
        ring.read_fixed(c, fd, buf, at, len)
            .map_err(|e| engine_error("queueing an operation", e))
    }

    /// A ciphertext receive of connection `c` for `op` completed with `result`: decrypts, then
    /// returns the completion to hand the connection (plaintext delivered, or the failure), or
    /// `None` when only part of a record came and the receive was queued again.
    pub fn received(
        &mut self,
        ring: &mut Ring,
        conns: &mut [Conn],
        c: usize,
        op: Op,
        result: i32,
    ) -> Result<Option<i32>, RankError> {
        if result <= 0 {
            return Ok(Some(result));
        }
        let n = result as usize;
        if self.session(c).is_some_and(tls::Session::in_body) {
            return self.received_in_place(ring, conns, c, op, n);
        }
        let decrypted = {
            let (_, stage) = ring.scratch_and_stage(c);
            self.session_mut(c)?.received(stage, n)
        };
        if let Err(reason) = decrypted {
            self.failures[c] = Some(TlsFailure::Record(reason));
            return Ok(Some(-libc::EBADMSG));
        }
        if self
            .session(c)
            .is_some_and(|s| s.pending() > 0 || s.closed())
        {
            return Ok(Some(self.deliver(ring, conns, c, op)? as i32));
        }
        // Part of a record: receive the rest.
        self.queue_read(ring, conns, c, op)?;
        Ok(None)
    }

    /// Landing in place: `n` ciphertext bytes landed in the body's buffer: decrypts them there
    /// and hands the body its plaintext, already where it belongs.
    fn received_in_place(
        &mut self,
        ring: &mut Ring,
        conns: &mut [Conn],
        c: usize,
        op: Op,
        n: usize,
    ) -> Result<Option<i32>, RankError> {
        let Op::Body { offset, len, .. } = op else {
            return Err(head_in_place(c));
        };
        let buf = job_buf(conns, c)?;
        let decrypted = {
            let region = ring.buffer_from_mut(buf, offset);
            self.session_mut(c)?.received(region, n)
        };
        if let Err(reason) = decrypted {
            self.failures[c] = Some(TlsFailure::Record(reason));
            return Ok(Some(-libc::EBADMSG));
        }
        let session = self.session_mut(c)?;
        let plain = session.pending();
        if plain == 0 && !session.closed() {
            self.read_in_place(ring, conns, c, op)?;
            return Ok(None);
        }
        let give = plain.min(len);
        if give == len {
            // The body is whole: what came after it goes back to the staging area (what does
            // not fit there is dropped, and the connection with it).
            let rest = session.leave_body(give, tls::STAGE_BYTES);
            ring.buffer_into_stage(c, buf, offset + rest.start..offset + rest.end);
        } else {
            session.advance_body(give);
        }
        Ok(Some(give as i32))
    }

    /// Hands decrypted plaintext to the operation `op` of connection `c`, as the socket would
    /// have: a peek copies without consuming, a receive consumes, a body read lands in the
    /// job's buffer (at its range's offset there). Returns the bytes handed (0 once the
    /// server closed).
    fn deliver(
        &mut self,
        ring: &mut Ring,
        conns: &[Conn],
        c: usize,
        op: Op,
    ) -> Result<usize, RankError> {
        let session = self.sessions[c].as_mut().ok_or_else(|| no_session(c))?;
        let plain = session.plaintext();
        let (scratch, stage) = ring.scratch_and_stage(c);
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
                let job = conns[c].job().ok_or_else(|| {
                    RankError::Engine(format!("connection {c} has no job (a bug)"))
                })?;
                let base = job.part.map_or(0, |p| p.at as usize);
                ring.stage_into_buffer(c, plain.start..plain.start + n, job.buf, base + offset);
                let (_, stage) = ring.scratch_and_stage(c);
                session.consume(stage, n);
                n
            }
            Op::Connect | Op::SendRequest | Op::SendRest { .. } | Op::SendBody { .. } => {
                return Err(RankError::Engine(format!(
                    "connection {c}: a TLS delivery for a send (a bug)"
                )));
            }
        })
    }
}

/// Connects the blocking `socket` to `addr`. Interrupted (EINTR: the ring has work for this
/// thread), the connect goes on in the kernel: asked again until it is done (`EISCONN`) or
/// fails, within `timeout`.
fn connect_blocking(
    socket: &std::os::fd::OwnedFd,
    addr: &std::net::SocketAddr,
    timeout: std::time::Duration,
) -> Result<(), rustix::io::Errno> {
    use rustix::io::Errno;
    let deadline = std::time::Instant::now() + timeout;
    let mut first = true;
    loop {
        match rustix::net::connect(socket, addr) {
            Err(Errno::ISCONN) if !first => return Ok(()),
            Err(Errno::INTR | Errno::ALREADY | Errno::INPROGRESS) => {
                if std::time::Instant::now() > deadline {
                    return Err(Errno::TIMEDOUT);
                }
                if !first {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            other => return other,
        }
        first = false;
    }
}

/// A connection opened before the clock that failed ([`TlsConns::open`]'s error) as the rank's
/// error: its connect (`errno`, no words: is the server running?) or its handshake (`words`),
/// naming `operation` and the gateway.
pub fn open_error(
    operation: String,
    gateway: &Gateway,
    (errno, words): (i32, Option<String>),
) -> RankError {
    RankError::Io(
        match words {
            Some(reason) => RequestError::Tls { operation, reason },
            None => RequestError::Unreachable {
                operation,
                reason: format!(
                    "cannot connect to {} ({}); is the server running? check --endpoint",
                    gateway.url,
                    std::io::Error::from_raw_os_error(errno)
                ),
            },
        }
        .into(),
    )
}

/// Whether connection `c`'s body lands in place: its own buffer from the start (a GET, a
/// restore's range, an object fetched whole), not a range sharing an object's buffer.
fn in_place(conn: &Conn) -> bool {
    conn.job()
        .is_none_or(|job| job.part.is_none_or(|p| p.whole && p.at == 0))
}

fn job_buf(conns: &[Conn], c: usize) -> Result<crate::engine::pool::BufIndex, RankError> {
    conns[c]
        .job()
        .map(|j| j.buf)
        .ok_or_else(|| RankError::Engine(format!("connection {c} has no job (a bug)")))
}

/// An in-place read asked for by anything but a body.
fn head_in_place(c: usize) -> RankError {
    RankError::Engine(format!(
        "connection {c}: an in-place TLS read for a head (a bug)"
    ))
}
