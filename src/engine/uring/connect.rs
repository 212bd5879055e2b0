//! Connecting: a plain connection's socket and its connect queued on the ring, and a TLS
//! connection opened and handshaken on the rank thread (before the clock for every TLS
//! connection, and again for a connection that closed), bounded by the connect timeout.

use std::os::fd::AsFd;

use super::RingIo;
use crate::rank::RankError;

impl RingIo<'_> {
    /// Opens connection `c`'s socket (`TCP_NODELAY`) and queues its connect to the gateway: the
    /// plain-HTTP connect, on the ring. A closed connection comes back here for its next GET.
    pub(super) fn open_plain(&mut self, c: usize) -> Result<(), RankError> {
        let queued = |e| Self::engine_error("queueing an operation", e);
        let addr = self.gateway(c).addr;
        let socket = super::gateway::plain_socket(&addr).map_err(RankError::Engine)?;
        self.ring
            .connect(c, socket.as_fd(), &addr)
            .map_err(queued)?;
        self.conns[c].set_socket(socket);
        Ok(())
    }

    /// Opens connection `c` to its (TLS) gateway and handshakes, blocking (bounded by the
    /// connect timeout). `Err((errno, words))`: the connect failed (no words), or the handshake
    /// did.
    pub(super) fn open_tls(&mut self, c: usize) -> Result<(), (i32, Option<String>)> {
        let gateway = &self.engine.endpoints[self.conn_endpoint[c]];
        self.tls.open(
            &mut self.ring,
            &mut self.conns,
            c,
            gateway,
            &self.policy,
            &self.engine.client,
        )
    }
}
