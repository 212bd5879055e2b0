//! Where a connection goes ([`Gateway`]: an endpoint resolved once, for every rank's
//! connections) and the TCP socket it starts as ([`plain_socket`]): what the connect of plain
//! HTTP, the TLS handshake and both of the ring's drivers share. A leaf of the engine.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use rustix::net::{AddressFamily, SocketFlags, SocketType};

/// One of the target's endpoints, resolved.
#[derive(Debug, Clone)]
pub struct Gateway {
    /// `http://host:port`, for messages.
    pub url: String,
    pub addr: SocketAddr,
    /// The `Host` header (with the bucket in it, virtual-hosted).
    pub host: String,
    /// `scheme://host` that request paths follow, for signing.
    pub url_prefix: String,
    /// The name TLS checks, for `https://`.
    pub server_name: Option<rustls::pki_types::ServerName<'static>>,
}

/// A new TCP socket for `addr` (`TCP_NODELAY`), to connect on the ring; the error names the
/// call that failed.
pub fn plain_socket(addr: &SocketAddr) -> Result<OwnedFd, String> {
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
