//! Connecting: a plain connection's socket and its connect queued on the ring, and a TLS
//! connection opened and handshaken on the rank thread (before the clock for every TLS
//! connection, and again for a connection that closed), bounded by the connect timeout.

use std::net::SocketAddr;
use std::os::fd::AsFd;

use std::os::fd::OwnedFd;

use rustix::net::{AddressFamily, SocketFlags, SocketType};

use super::{RingIo, tls};
use crate::rank::RankError;

impl RingIo<'_> {
    /// Opens connection `c`'s socket (`TCP_NODELAY`) and queues its connect to the gateway: the
    /// plain-HTTP connect, on the ring. A closed connection comes back here for its next GET.
    pub(super) fn open_plain(&mut self, c: usize) -> Result<(), RankError> {
        let queued = |e| Self::engine_error("queueing an operation", e);
        let addr = self.gateway(c).addr;
        let socket = plain_socket(&addr).map_err(RankError::Engine)?;
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
        let gateway = self.gateway(c).clone();
        let (Some(name), Some(config)) = (gateway.server_name.clone(), self.engine.tls.clone())
        else {
            return Err((
                libc::EINVAL,
                Some("a TLS connection without TLS (a bug)".into()),
            ));
        };
        let family = match gateway.addr {
            SocketAddr::V4(_) => AddressFamily::INET,
            SocketAddr::V6(_) => AddressFamily::INET6,
        };
        let errno = |e: rustix::io::Errno| (e.raw_os_error(), None);
        let socket =
            rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)
                .map_err(errno)?;
        rustix::net::sockopt::set_tcp_nodelay(&socket, true).map_err(errno)?;
        // Bounds the connect as well as the handshake's writes.
        rustix::net::sockopt::set_socket_timeout(
            &socket,
            rustix::net::sockopt::Timeout::Send,
            Some(self.policy.connect_timeout),
        )
        .map_err(errno)?;
        rustix::net::connect(&socket, &gateway.addr).map_err(errno)?;
        let endpoint =
            crate::s3::Endpoint::parse(&gateway.url).map_err(|e| (libc::EINVAL, Some(e)))?;
        let hostname = gateway.host.clone();
        let trust = &self.engine.client.target().tls;
        let describe =
            |e: &std::io::Error| crate::s3::tls::describe(e, &endpoint, &hostname, trust);
        let (_, stage) = self.ring.scratch_and_stage(c);
        let session = tls::Session::handshake(
            socket.as_fd(),
            &config,
            name,
            self.policy.connect_timeout,
            stage,
            &describe,
        )
        .map_err(|e| (libc::EPROTO, Some(e.0)))?;
        self.engine.client.note_tls_negotiated(&session.negotiated);
        self.conns[c].set_socket(socket);
        self.tls[c] = Some(session);
        self.tls_read[c] = None;
        Ok(())
    }
}

/// A new TCP socket for `addr` (`TCP_NODELAY`), to connect on the ring; the error names the
/// call that failed.
pub(super) fn plain_socket(addr: &SocketAddr) -> Result<OwnedFd, String> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let socket = rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)
        .map_err(|e| format!("io_uring: socket: {e}"))?;
    rustix::net::sockopt::set_tcp_nodelay(&socket, true)
        .map_err(|e| format!("io_uring: TCP_NODELAY: {e}"))?;
    Ok(socket)
}
