//! A checkpoint's completion loop on the ring: wait, hand each completion to its connection
//! (through the TLS layer when one is reading), do the step it returns, retry a failed attempt
//! after the backoff or end its request, the timers; stopping every request after a failure;
//! and the answer watch that sees a server answer before it has read a body (`NoSuchUpload`,
//! `AccessDenied`, a `503`…), so that the part ends with that answer's code.

use std::time::Instant;

use super::{Outcome, RingCheckpoint};
use crate::engine::uring::POLL;
use crate::engine::uring::conn::{Step, TimerAction};
use crate::engine::uring::dispatch::attempt_error;
use crate::engine::uring::ring::{self, Completion, NOTIF_TAG, ZC_COPIED};
use crate::engine::uring::upload::Kind;
use crate::rank::RankError;
use crate::s3::RequestError;

impl RingCheckpoint {
    /// One round: submit, wait until something completes (at most [`POLL`]), hand each
    /// completion to its connection, then the timers. Requests that ended are in `ended`.
    pub(super) fn poll(&mut self) -> Result<(), RankError> {
        let now = Instant::now();
        let mut wake = now + POLL;
        for conn in &self.conns {
            if let Some(at) = conn.wake_at(&self.policy) {
                wake = wake.min(at);
            }
        }
        if self.tls.has_ready() {
            wake = now;
        }
        let mut completions = std::mem::take(&mut self.completions);
        let waited = self
            .ring
            .wait(Some(wake.saturating_duration_since(now)), &mut completions);
        let handled = waited
            .map_err(|e| Self::engine_error("io_uring_enter", e))
            .and_then(|()| {
                completions
                    .iter()
                    .try_for_each(|completion| self.on_completion(*completion))
            });
        self.completions = completions;
        handled?;
        while let Some((c, result)) = self.tls.pop_ready() {
            self.on_result(c, result)?;
        }
        self.send_deferred()?;
        // A notification that never comes would hold its buffer, and every part after it,
        // for ever: it gets the whole request's limit.
        if let Some(waited) = self.ring.oldest_notification_wait()
            && waited > self.policy.timeout
        {
            return Err(RankError::Stalled(format!(
                "io_uring: a SEND_ZC notification did not come within {:?} (--request-timeout): \
                 the kernel still holds a part's buffer; run with --send-zc off",
                self.policy.timeout
            )));
        }
        self.timers()
    }

    fn on_completion(&mut self, completion: Completion) -> Result<(), RankError> {
        if completion.tag & NOTIF_TAG != 0 {
            if completion.result & ZC_COPIED != 0 {
                self.stats.write.zc_copied += 1;
            }
            return Ok(());
        }
        if let Some(c) = ring::watched(completion.tag) {
            return self.on_watch(c, completion.result);
        }
        let c = completion.tag as usize;
        if c >= self.conns.len() {
            return Err(RankError::Engine(format!(
                "a completion tagged {} (a bug)",
                completion.tag
            )));
        }
        let result = match self.tls.take_reading(c) {
            Some(op) => {
                let received =
                    self.tls
                        .received(&mut self.ring, &mut self.conns, c, op, completion.result)?;
                let Some(result) = received else {
                    return Ok(());
                };
                result
            }
            None => completion.result,
        };
        self.on_result(c, result)
    }

    /// Connection `c`'s operation ended with `result` (bytes, or `-errno`).
    fn on_result(&mut self, c: usize, result: i32) -> Result<(), RankError> {
        let request = self.requests[c]
            .as_ref()
            .ok_or_else(|| RankError::Engine(format!("connection {c} has no request (a bug)")))?;
        let step = self.conns[c]
            .on_completion(
                result,
                self.ring.scratch(c),
                self.ring.request_len(c),
                &request.get,
                Instant::now(),
            )
            .map_err(|bug| RankError::Engine(format!("connection {c}: {bug} (a bug)")))?;
        match step {
            Step::Queue(op) => self.queue(c, op),
            Step::Arrived => self.end(c, Outcome::Arrived),
            Step::Answered {
                document,
                etag,
                length,
                checksum,
                ..
            } => self.end(
                c,
                Outcome::Answered {
                    document,
                    etag,
                    length,
                    checksum,
                },
            ),
            Step::Failed(failure) => {
                let operation = request.operation(&self.engine.client, self.parts);
                let gateway = &self.engine.endpoints[self.conn_endpoint[c]].url;
                let error = match self.tls.worded(c, &failure, &operation) {
                    Some(worded) => worded,
                    None => attempt_error(
                        operation,
                        failure,
                        &self.policy,
                        gateway,
                        &self.engine.client,
                    ),
                };
                self.attempt_failed(c, error)
            }
        }
    }

    fn end(&mut self, c: usize, outcome: Outcome) -> Result<(), RankError> {
        let job = self.conns[c]
            .finish()
            .ok_or_else(|| RankError::Engine(format!("connection {c}: an end without a job")))?;
        self.live.ended();
        // An answered request, by kind, as the store saw it (a completion is counted once, from
        // its final result: `complete.rs`).
        let kind = self.request(c)?.kind.clone();
        let (write, read) = (&mut self.stats.write.sent, &mut self.stats.read.by_kind);
        match kind {
            Kind::Create => write.create += 1,
            Kind::Part { .. } => write.part += 1,
            Kind::Complete => {}
            Kind::Put { .. } => write.put += 1,
            Kind::Abort => write.abort += 1,
            Kind::Range => read.ranged_get += 1,
            Kind::Head if self.restoring => read.head += 1,
            Kind::Head => write.head += 1,
        }
        self.ended.push((c, job, outcome));
        Ok(())
    }

    /// An attempt failed: retried after the backoff, or its request ends with `error`.
    fn attempt_failed(&mut self, c: usize, error: RequestError) -> Result<(), RankError> {
        let retries = self.conns[c].job().map_or(0, |j| j.retries);
        let retry_at = (!self.draining && error.retryable() && retries < self.policy.retries)
            .then(|| Instant::now() + self.policy.delay(retries, error.retry_after()));
        if retry_at.is_some() {
            self.live.retried();
            let reading = self.requests[c]
                .as_ref()
                .is_some_and(|r| r.kind == Kind::Range);
            if reading {
                *self
                    .stats
                    .read
                    .retries_by_cause
                    .entry(error.cause())
                    .or_default() += 1;
                self.stats.read.endpoint(self.conn_endpoint[c]).retries += 1;
            } else {
                self.stats.write.retries += 1;
                *self
                    .stats
                    .write
                    .retries_by_cause
                    .entry(error.cause())
                    .or_default() += 1;
            }
        }
        // A watch still in flight ends with its socket, before the connection lets go of it.
        if self.ring.watching(c)
            && let Some(socket) = &self.conns[c].socket
        {
            let _ = rustix::net::shutdown(socket, rustix::net::Shutdown::Both);
        }
        let failed = self.conns[c].attempt_failed(retry_at);
        let closed = self.conns[c].socket.is_none();
        self.tls.attempt_failed(c, closed);
        if let Some(job) = failed {
            self.live.ended();
            self.ended.push((c, job, Outcome::Failed(error)));
        }
        Ok(())
    }

    /// Starts attempts whose backoff is over; shuts down attempts past their timeout.
    fn timers(&mut self) -> Result<(), RankError> {
        let now = Instant::now();
        for c in 0..self.conns.len() {
            match self.conns[c].on_timer(now, &self.policy) {
                TimerAction::None => {}
                TimerAction::Retry => {
                    let op = self.conns[c].start_attempt(now);
                    self.queue(c, op)?;
                }
                TimerAction::ShutDown => self.shut_down(c),
            }
        }
        Ok(())
    }

    /// Stops every request in flight (after a failure): what is waiting to retry is given
    /// up, what is in flight is shut down and reaped. Bounded by the policy's timeouts.
    pub(super) fn drain(&mut self) -> Result<(), RankError> {
        self.draining = true;
        let result = self.drain_all();
        self.draining = false;
        self.ended.clear();
        result
    }

    fn drain_all(&mut self) -> Result<(), RankError> {
        let deadline = Instant::now() + self.policy.longest_request();
        for c in 0..self.conns.len() {
            if self.conns[c].job().is_some() {
                self.shut_down(c);
                // A job waiting out its backoff ends here: no longer in flight.
                if !self.conns[c].in_flight() && self.conns[c].attempt_failed(None).is_some() {
                    self.live.ended();
                }
            }
        }
        while self.conns.iter().any(|c| !c.is_free()) {
            if Instant::now() > deadline {
                return Err(RankError::Stalled(
                    "io_uring: checkpoint requests did not stop after a failure".into(),
                ));
            }
            self.poll()?;
        }
        Ok(())
    }

    /// Arms connection `c`'s answer watch for the attempt whose body starts now (unless one
    /// is still in flight: a watch of an attempt that failed, ending on its shut socket).
    pub(super) fn watch_answer(&mut self, c: usize) -> Result<(), RankError> {
        if self.ring.watching(c) {
            return Ok(());
        }
        // A peek that waits for SO_RCVLOWAT bytes (set high by a restore) would miss a short
        // answer.
        self.set_rcvlowat(c, 1)?;
        let (ring, fd) = self.ring_and_socket(c)?;
        ring.watch_answer(c, fd)
            .map_err(|e| Self::engine_error("queueing an answer watch", e))?;
        self.watch_for[c] = self.attempt(c);
        Ok(())
    }

    /// Connection `c`'s attempt: its job's start and retries.
    pub(super) fn attempt(&self, c: usize) -> Option<(Instant, u32)> {
        self.conns[c].job().map(|j| (j.first_started, j.retries))
    }

    /// Connection `c`'s answer watch completed with `result`: the answer's first peek (the
    /// body went whole), an answer that came while the body was being sent (the socket's
    /// sending side is shut down, so the send in flight ends and its completion reads the
    /// answer), or nothing (a watch of an earlier attempt). Plain HTTP only.
    fn on_watch(&mut self, c: usize, result: i32) -> Result<(), RankError> {
        let armed_for = self.watch_for.get_mut(c).and_then(Option::take);
        if armed_for.is_none() || armed_for != self.attempt(c) {
            return Ok(());
        }
        if std::mem::take(&mut self.peek_by_watch[c]) {
            return self.on_result(c, result);
        }
        if self.conns[c].on_watch(result)
            && let Some(socket) = &self.conns[c].socket
        {
            let _ = rustix::net::shutdown(socket, rustix::net::Shutdown::Write);
        }
        Ok(())
    }
}
