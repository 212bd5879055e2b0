//! Submitting: the operation a connection asks for next (connect, send the request head, peek
//! or receive a response head, read body bytes) queued on the ring; over TLS, requests sealed
//! and reads served from decrypted plaintext when there is some.

use std::time::SystemTime;

use super::conn::Op;
use super::{RingIo, UringWindow, http, ring};
use crate::rank::RankError;
use crate::s3::sign::Payload;

impl RingIo<'_> {
    /// Queues the operation connection `c` asked for.
    pub(super) fn queue(
        &mut self,
        window: &UringWindow,
        c: usize,
        op: Op,
    ) -> Result<(), RankError> {
        if self.gateway(c).server_name.is_some() {
            return self.queue_tls(window, c, op);
        }
        let queued = |e| Self::engine_error("queueing an operation", e);
        match op {
            Op::Connect => self.open_plain(c),
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
            Op::SendBody { .. } => Err(RankError::Engine(format!(
                "connection {c}: a GET with a request body (a bug)"
            ))),
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
                let job = self.job(c)?;
                // A request of a GET sent as several lands at its place in the GET's buffer.
                let (buf, base) = (job.buf, job.part.map_or(0, |p| p.at as usize));
                let offset = base + offset;
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.read_fixed(c, fd, buf, offset, len).map_err(queued)
            }
        }
    }

    /// [`RingIo::queue`] for a TLS connection: connects and handshakes on the rank thread;
    /// seals requests; reads through the TLS layer (`secure.rs`).
    pub(super) fn queue_tls(
        &mut self,
        window: &UringWindow,
        c: usize,
        op: Op,
    ) -> Result<(), RankError> {
        let queued = |e| Self::engine_error("queueing an operation", e);
        match op {
            Op::Connect => {
                let gateway = &self.engine.endpoints[self.conn_endpoint[c]];
                self.tls.connect(
                    &mut self.ring,
                    &mut self.conns,
                    c,
                    gateway,
                    &self.policy,
                    &self.engine.client,
                );
                Ok(())
            }
            Op::SendRequest => {
                self.format_request(window, c)?;
                self.tls.seal_request(&mut self.ring, c)?;
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.send(c, fd, 0).map_err(queued)
            }
            Op::SendRest { from } => {
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.send(c, fd, from).map_err(queued)
            }
            Op::SendBody { .. } => Err(RankError::Engine(format!(
                "connection {c}: a GET with a request body (a bug)"
            ))),
            Op::Peek { .. } | Op::Recv { .. } | Op::Body { .. } => {
                self.tls.queue_read(&mut self.ring, &mut self.conns, c, op)
            }
        }
    }

    /// Formats (and signs, when keys are set) the request head of connection `c`'s GET.
    pub(super) fn format_request(
        &mut self,
        window: &UringWindow,
        c: usize,
    ) -> Result<(), RankError> {
        let job = self.job(c)?;
        // One request of an s3dlio fetch: its HEAD or one range of the object.
        let part = job.part.map(|p| p.as_get());
        let get = part.as_ref().unwrap_or(window.get(job.reader, job.get));
        let method = if job.part.is_some_and(|p| p.head) {
            "HEAD"
        } else {
            "GET"
        };
        let path = &self.paths[job.reader][job.get];
        let gateway = &self.engine.endpoints[self.conn_endpoint[c]];
        let signed = if self.signer.signs() {
            let url = format!("{}{path}", gateway.url_prefix);
            let range = get.range_header();
            let with_range = [("host", gateway.host.as_str()), ("range", range.as_str())];
            // A whole-object GET sends (and signs) no Range.
            let to_sign = if get.whole {
                &with_range[..1]
            } else {
                &with_range[..]
            };
            self.signer
                .headers(method, &url, to_sign, Payload::Unsigned, SystemTime::now())
                .map_err(RankError::Engine)?
        } else {
            Vec::new()
        };
        http::request_head(
            self.ring.request_buffer(c),
            method,
            path,
            &gateway.host,
            get,
            &signed,
        );
        Ok(())
    }
}
