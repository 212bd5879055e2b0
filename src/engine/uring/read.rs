//! Reading over TLS: ciphertext received into the staging area (heads) or straight into the
//! GET's registered buffer behind the partial record already there (bodies, each record
//! decrypted to where its plaintext belongs, over the gaps of the records before it), and
//! decrypted plaintext handed to the operation that asked for it as the socket would have.

use super::conn::Op;
use super::{RingIo, TlsFailure, UringWindow, ring, tls};
use crate::rank::RankError;

impl RingIo<'_> {
    /// Landing in place: receives a body's ciphertext straight into the GET's registered
    /// buffer, behind the partial record already there (moved from the staging area first).
    pub(super) fn read_in_place(&mut self, c: usize, op: Op) -> Result<(), RankError> {
        let Op::Body {
            offset,
            len: owed,
            lowat,
        } = op
        else {
            return Err(Self::head_in_place(c));
        };
        let buf = self.job(c)?.buf;
        let session = self.tls[c].as_mut().ok_or_else(|| Self::no_session(c))?;
        if !session.in_body() {
            self.ring
                .stage_into_buffer(c, 0..session.free_from(), buf, offset);
            session.enter_body();
        }
        let held = session.free_from();
        let at = offset + held;
        // The threshold the plaintext asks for, unless the ciphertext still to come may not
        // reach it (a record partly held here).
        let lowat = tls::body_lowat(lowat, owed, held);
        if lowat < self.conns[c].rcvlowat_bytes {
            let (_, fd) = self.ring_and_socket(c)?;
            ring::quickack(fd).map_err(|e| Self::engine_error("TCP_QUICKACK", e))?;
        }
        self.set_rcvlowat(c, lowat)?;
        self.tls_read[c] = Some(op);
        let len = self.ring.buffer_len(buf) - at;
        let (ring, fd) = self.ring_and_socket(c)?;
        ring.read_fixed(c, fd, buf, at, len)
            .map_err(|e| Self::engine_error("queueing an operation", e))
    }

    /// Landing in place: `n` ciphertext bytes landed in the body's buffer: decrypts them there
    /// and hands the body its plaintext, already where it belongs.
    pub(super) fn received_in_place(
        &mut self,
        window: &mut UringWindow,
        c: usize,
        op: Op,
        n: usize,
    ) -> Result<(), RankError> {
        let Op::Body { offset, len, .. } = op else {
            return Err(Self::head_in_place(c));
        };
        let buf = self.job(c)?.buf;
        let bug = || Self::no_session(c);
        let decrypted = {
            let region = self.ring.buffer_from_mut(buf, offset);
            self.tls[c].as_mut().ok_or_else(bug)?.received(region, n)
        };
        if let Err(reason) = decrypted {
            self.tls_failure[c] = Some(TlsFailure::Record(reason));
            return self.on_completion(window, c, -libc::EBADMSG);
        }
        let session = self.tls[c].as_mut().ok_or_else(bug)?;
        let plain = session.pending();
        if plain == 0 && !session.closed() {
            return self.read_in_place(c, op);
        }
        let give = plain.min(len);
        if give == len {
            // The body is whole: what came after it goes back to the staging area (what does
            // not fit there is dropped, and the connection with it).
            let rest = session.leave_body(give, tls::STAGE_BYTES);
            self.ring
                .buffer_into_stage(c, buf, offset + rest.start..offset + rest.end);
        } else {
            session.advance_body(give);
        }
        self.on_completion(window, c, give as i32)
    }

    /// An in-place read asked for by anything but a body.
    fn head_in_place(c: usize) -> RankError {
        RankError::Engine(format!(
            "connection {c}: an in-place TLS read for a head (a bug)"
        ))
    }

    fn no_session(c: usize) -> RankError {
        RankError::Engine(format!("connection {c} has no TLS session (a bug)"))
    }

    /// Hands decrypted plaintext to the operation `op` of TLS connection `c`, as the socket
    /// would have: a peek copies without consuming, a receive consumes, a body read lands in
    /// the GET's buffer. Returns the bytes handed (0 once the server closed).
    pub(super) fn deliver(&mut self, c: usize, op: Op) -> Result<usize, RankError> {
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
            Op::Connect | Op::SendRequest | Op::SendRest { .. } | Op::SendBody { .. } => {
                return Err(RankError::Engine(format!(
                    "connection {c}: a TLS delivery for a send (a bug)"
                )));
            }
        })
    }

    /// A ciphertext receive of TLS connection `c` for `op` completed with `result`: decrypts,
    /// then hands plaintext on, or receives again when only part of a record came.
    pub(super) fn tls_received(
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
            self.tls_failure[c] = Some(TlsFailure::Record(reason));
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
}
