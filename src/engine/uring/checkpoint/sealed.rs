//! A checkpoint over TLS on the ring: the same requests as over plain HTTP, with each part's
//! body generated into its registered buffer laid out record by record
//! ([`tls::Layout`]: room for each record's header in front of its 2^14 bytes and for its tag
//! behind) and sealed there, in place, right after the request head is sealed — the records
//! then follow one another from the buffer's start and go out with `SEND` (or `SEND_ZC`) as
//! plaintext parts do. Generating the bytes, digesting them and sealing them are the only
//! passes over a part; nothing is copied.
//!
//! A sealed buffer cannot be sent again: a retry generates the part again (counted in
//! `generate_cpu`), as does a part generated for one layout and sent on a connection that
//! negotiated another. Restores' ranges and every answer are read through the TLS layer
//! shared with the training GETs (`secure.rs`).

use std::os::fd::AsFd;

use super::{Held, RingCheckpoint};
use crate::engine::common::fill_spaced;
use crate::engine::uring::conn::Op;
use crate::engine::uring::secure::open_error;
use crate::engine::uring::tls;
use crate::engine::uring::upload::Kind;
use crate::rank::RankError;

impl RingCheckpoint {
    /// Whether connection `c` goes over TLS.
    pub(super) fn is_tls(&self, c: usize) -> bool {
        self.engine.endpoints[self.conn_endpoint[c]]
            .server_name
            .is_some()
    }

    /// The layout a body generated for connection `c` takes: its session's, or (closed now,
    /// to be opened again before it sends) any open session's; `None` over plain HTTP.
    pub(super) fn layout_for(&self, c: usize) -> Option<tls::Layout> {
        if !self.is_tls(c) {
            return None;
        }
        self.tls
            .session(c)
            .or_else(|| (0..self.conns.len()).find_map(|o| self.tls.session(o)))
            .map(tls::Session::layout)
    }

    /// Opens TLS connection `c` now, blocking (bounded by the connect timeout): set-up only.
    pub(super) fn connect_tls(&mut self, c: usize) -> Result<(), RankError> {
        let gateway = &self.engine.endpoints[self.conn_endpoint[c]];
        let opened = self.tls.open(
            &mut self.ring,
            &mut self.conns,
            c,
            gateway,
            &self.policy,
            &self.engine.client,
        );
        let operation = || self.engine.client.operation("PUT", None);
        opened.map_err(|failed| open_error(operation(), gateway, failed))
    }

    /// Queues the operation TLS connection `c` asked for.
    pub(super) fn queue_tls(&mut self, c: usize, op: Op) -> Result<(), RankError> {
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
                // A body sealed again must wait until the kernel let go of its last send.
                let body = self.request(c)?.body_bytes > 0;
                if body && self.ring.buffer_sending(self.bufs[c]) {
                    self.deferred[c] = true;
                    return Ok(());
                }
                self.format(c)?;
                self.tls.seal_request(&mut self.ring, c)?;
                if body {
                    self.seal_body(c)?;
                }
                let (ring, fd) = self.ring_and_socket(c)?;
                ring.send(c, fd, 0).map_err(queued)
            }
            Op::SendRest { .. } | Op::SendBody { .. } => self.queue_plain(c, op),
            Op::Peek { .. } | Op::Recv { .. } | Op::Body { .. } => {
                self.tls.queue_read(&mut self.ring, &mut self.conns, c, op)
            }
        }
    }

    /// Seals connection `c`'s body in its buffer, after its request head: generated again
    /// first when the buffer holds it sealed already (a retry) or laid out for another layout.
    fn seal_body(&mut self, c: usize) -> Result<(), RankError> {
        let (offset, data) = match self.request(c)?.kind {
            Kind::Part { offset, len, .. } => (offset, len),
            Kind::Put { len } => (0, len),
            _ => return Err(RankError::Engine(format!("connection {c}: a body (a bug)"))),
        };
        // The data, and an aws-chunked body's tail after it.
        let len = self.request(c)?.body_bytes;
        let layout = self.tls.session_mut(c)?.layout();
        let room = self.ring.buffer_len(self.bufs[c]);
        if layout.sealed_len(len) > room {
            return Err(RankError::Engine(format!(
                "a body of {len} bytes sealed does not fit a {room}-byte buffer (a bug: the plan \
                 sizes them)"
            )));
        }
        if self.held[c] != Held::Plain(Some(layout)) {
            let content = self.content.ok_or_else(|| {
                RankError::Engine(format!("connection {c}: a body of no object (a bug)"))
            })?;
            let buf = self.ring.buffer_from_mut(self.bufs[c], 0);
            let filled = fill_spaced(
                &content,
                offset,
                buf,
                data,
                layout.spacing(),
                Default::default(),
            );
            self.stats.write.generate_cpu += filled.generate_cpu;
        }
        self.place_tail(c, layout.spacing())?;
        let buf = self.ring.buffer_from_mut(self.bufs[c], 0);
        let sealed = self
            .tls
            .session_mut(c)?
            .seal_body(buf, len)
            .map_err(RankError::Engine)?;
        self.held[c] = Held::Sealed;
        self.conns[c].set_body_bytes(sealed);
        Ok(())
    }

    /// Requests whose sealing waited for the kernel to let go of their buffer: sent now.
    pub(super) fn send_deferred(&mut self) -> Result<(), RankError> {
        for c in 0..self.conns.len() {
            if self.deferred[c] && !self.ring.buffer_sending(self.bufs[c]) {
                self.deferred[c] = false;
                self.queue_tls(c, Op::SendRequest)?;
            }
        }
        Ok(())
    }

    /// The timer ended connection `c`'s attempt: one that waits to be sent has nothing in
    /// flight to complete, so its completion is made here.
    pub(super) fn shut_down(&mut self, c: usize) {
        if std::mem::take(&mut self.deferred[c]) {
            self.tls.push_ready(c, -libc::ETIMEDOUT);
        } else if let Some(socket) = &self.conns[c].socket {
            let _ = rustix::net::shutdown(socket.as_fd(), rustix::net::Shutdown::Both);
            // An answer already in may still end the request well: the socket is spent.
            self.conns[c].stop();
        }
    }
}
