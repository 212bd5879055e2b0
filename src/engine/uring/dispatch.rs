//! The completion loop: wait on the ring, hand each completion to its connection's state
//! machine and do the step it returns (queue the next operation, record an arrival, or word a
//! failed attempt and retry it after the backoff), then the timers.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::conn::{Failure, Step, TimerAction};
use super::ring::{COMPUTE_TAG, Completion, WAKE_TAG};
use super::{POLL, RingIo, UringWindow, http};
use crate::engine::window::Fetched;
use crate::plan::RangedGet;
use crate::rank::RankError;
use crate::s3::{RequestError, Wait};

impl RingIo<'_> {
    /// `GET s3://bucket/key (bytes=a-b)`, for errors.
    pub(super) fn operation(&self, get: &RangedGet) -> String {
        format!(
            "{} ({})",
            self.engine.client.operation("GET", Some(&get.key)),
            get.describe()
        )
    }

    /// A failed attempt, in words that name the GET.
    pub(super) fn request_error(
        &self,
        window: &UringWindow,
        c: usize,
        get: &RangedGet,
        failure: Failure,
    ) -> RequestError {
        let operation = self.operation(get);
        if let Some(worded) = self.tls.worded(c, &failure, &operation) {
            return worded;
        }
        match failure {
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
            failure => attempt_error(
                operation,
                failure,
                &self.policy,
                &self.gateway(c).url,
                &self.engine.client,
            ),
        }
    }
}

/// A failed attempt of `operation` through `gateway_url`, in words: every failure but the two
/// only the training path words (a TLS connection's, stray bytes after a body).
pub(super) fn attempt_error(
    operation: String,
    failure: Failure,
    policy: &crate::s3::RetryPolicy,
    gateway_url: &str,
    client: &crate::s3::Client,
) -> RequestError {
    match failure {
        Failure::TimedOut(what) => RequestError::Timeout {
            operation,
            after: match what {
                Wait::Connect => policy.connect_timeout,
                Wait::FirstByte => policy.first_byte_timeout,
                Wait::Idle => policy.idle_timeout,
                Wait::Request => policy.timeout,
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
                        "cannot connect to {gateway_url} ({error}); is the server running? check --endpoint"
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
        } => RequestError::from_response(operation, status, &document, &client.hint_context())
            .with_retry_after(retry_after.as_deref()),
    }
}

impl RingIo<'_> {
    /// Handles one completion of connection `c`.
    pub(super) fn on_completion(
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
        let object = window.get(job.reader, job.get);
        // A request of an s3dlio fetch is checked as what it asked for: its range.
        let part = job.part.map(|p| p.as_get());
        let get = part.as_ref().unwrap_or(object);
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
                if job.part.is_some() {
                    return self.part_arrived(window, c, job);
                }
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
            Step::Answered { status, .. } => Err(RankError::Engine(format!(
                "a GET answered {status} as a document (a bug)"
            ))),
            Step::Failed(failure) => {
                // A request of a GET sent as several is named as itself: its key and range.
                let error = match job.part.filter(|p| !p.head) {
                    Some(p) => {
                        let piece = RangedGet {
                            key: object.key.clone(),
                            ..p.as_get()
                        };
                        self.request_error(window, c, &piece, failure)
                    }
                    None => self.request_error(window, c, object, failure),
                };
                self.attempt_failed(window, c, job.retries, error)
            }
        }
    }

    /// An attempt failed: its connection is closed; the GET is retried after the backoff, or
    /// fails and gives its buffer back.
    pub(super) fn attempt_failed(
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
        let closed = self.conns[c].socket.is_none();
        self.tls.attempt_failed(c, closed);
        if let Some(job) = failed {
            if job.part.is_some() {
                return self.part_failed(window, endpoint, job, error);
            }
            window.failed(job.reader, job.get, endpoint, job.retries, error)?;
            self.ring.give_buffer(job.buf);
        }
        Ok(())
    }

    /// One round of the completion loop: submit, wait until something completes or `until`
    /// (at most [`POLL`]), handle what completed, then the timers.
    pub(super) fn poll_once(
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
        if self.tls.has_ready() {
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

    pub(super) fn handle(
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
                    let result = match self.tls.take_reading(c) {
                        Some(op) => self.tls.received(
                            &mut self.ring,
                            &mut self.conns,
                            c,
                            op,
                            completion.result,
                        )?,
                        None => Some(completion.result),
                    };
                    if let Some(result) = result {
                        self.on_completion(window, c, result)?;
                    }
                }
            }
        }
        self.handle_ready(window)
    }

    /// Completions made without the ring, in order; handling one may make more.
    pub(super) fn handle_ready(&mut self, window: &mut UringWindow) -> Result<(), RankError> {
        while let Some((c, result)) = self.tls.pop_ready() {
            self.on_completion(window, c, result)?;
        }
        Ok(())
    }

    /// Starts GETs whose backoff is over; shuts down attempts past their timeout (their
    /// operation then completes and reports the timeout).
    pub(super) fn timers(&mut self, window: &UringWindow) -> Result<(), RankError> {
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
