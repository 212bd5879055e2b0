//! How hyper's client (the control plane, and the baseline engine's GETs) opens a connection:
//! the request's host name through `--resolve` pins or DNS, a TCP connect with the policy's
//! timeout and `TCP_NODELAY`, TLS (rustls, [`super::tls`]) for `https://`, and the socket
//! [`Watched`] for bytes after a body ([`super::framing`]).
//!
//! A failed handshake is a [`TlsFailure`] in the error's chain, already worded; the client
//! turns it into [`super::RequestError::Tls`] (exit 2, not retried).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::framing::{StrayLog, Watched};
use super::stream::Stream;
use super::target::{Endpoint, Pin as ResolvePin, TlsOptions};

/// A TLS handshake that failed, worded by [`super::tls::describe`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsFailure(pub String);

/// What every connection of a client needs: the endpoints (to word failures), the pins, TLS,
/// the connect timeout.
#[derive(Debug)]
struct Shared {
    endpoints: Vec<Endpoint>,
    pins: Vec<ResolvePin>,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Where the trusted CAs came from, for a refused certificate's message.
    trust: TlsOptions,
    connect_timeout: Duration,
    log: Arc<StrayLog>,
    /// The TLS version and cipher suite the first handshake negotiated, for the summary.
    negotiated: std::sync::OnceLock<String>,
}

/// hyper's connector: resolves, connects, speaks TLS when the URL says `https`, and watches.
#[derive(Debug, Clone)]
pub struct Connector {
    shared: Arc<Shared>,
}

impl Connector {
    pub fn new(
        endpoints: Vec<Endpoint>,
        pins: Vec<ResolvePin>,
        tls: Option<Arc<rustls::ClientConfig>>,
        trust: TlsOptions,
        connect_timeout: Duration,
        log: Arc<StrayLog>,
    ) -> Connector {
        Connector {
            shared: Arc::new(Shared {
                endpoints,
                pins,
                tls,
                trust,
                connect_timeout,
                log,
                negotiated: std::sync::OnceLock::new(),
            }),
        }
    }

    /// `TLSv1_3 TLS13_AES_256_GCM_SHA384`, once a TLS connection was made.
    pub fn negotiated(&self) -> Option<&str> {
        self.shared.negotiated.get().map(String::as_str)
    }

    /// Records what a connection made elsewhere (the io_uring engine's) negotiated, if none
    /// was recorded yet.
    pub fn note_negotiated(&self, negotiated: &str) {
        let _ = self.shared.negotiated.set(negotiated.to_string());
    }
}

/// The addresses for `host:port`: its `--resolve` pins, else DNS.
pub async fn lookup(pins: &[ResolvePin], host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let pinned: Vec<SocketAddr> = pins
        .iter()
        .filter(|p| p.host == bare && p.port == port)
        .map(|p| SocketAddr::new(p.addr, port))
        .collect();
    if !pinned.is_empty() {
        return Ok(pinned);
    }
    let found: Vec<SocketAddr> = tokio::net::lookup_host((bare.as_str(), port))
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("failed to lookup address {bare}: {e}")))?
        .collect();
    if found.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("failed to lookup address {bare}: no address"),
        ));
    }
    Ok(found)
}

type Connecting = Pin<
    Box<
        dyn Future<Output = Result<TokioIo<Watched>, Box<dyn std::error::Error + Send + Sync>>>
            + Send,
    >,
>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Watched>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let shared = self.shared.clone();
        Box::pin(async move {
            let https = uri.scheme_str() == Some("https");
            let host = uri.host().unwrap_or_default().to_string();
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let addrs = lookup(&shared.pins, &host, port).await?;
            let mut last = None;
            let mut tcp = None;
            for addr in addrs {
                match tokio::time::timeout(shared.connect_timeout, TcpStream::connect(addr)).await {
                    Ok(Ok(s)) => {
                        tcp = Some(s);
                        break;
                    }
                    Ok(Err(e)) => last = Some(e),
                    Err(_) => {
                        last = Some(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("connect to {addr} timed out"),
                        ))
                    }
                }
            }
            let tcp = tcp.ok_or_else(|| {
                last.unwrap_or_else(|| io::Error::other(format!("no address for {host}")))
            })?;
            tcp.set_nodelay(true)?;
            let stream = if https {
                let Some(config) = &shared.tls else {
                    return Err("an https:// URL on a client set up without TLS (a bug)".into());
                };
                let name = super::tls::server_name(&host).map_err(TlsFailure)?;
                let endpoint = shared
                    .endpoints
                    .iter()
                    .find(|e| e.port == port && host.ends_with(e.host.as_str()))
                    .cloned()
                    .unwrap_or_else(|| Endpoint {
                        url: format!("https://{host}:{port}"),
                        scheme: super::Scheme::Https,
                        host: host.clone(),
                        port,
                    });
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                let tls =
                    tokio::time::timeout(shared.connect_timeout, connector.connect(name, tcp))
                        .await
                        .map_err(|_| {
                            TlsFailure(format!(
                                "the TLS handshake with {endpoint} took longer than the connect \
                             timeout; is it a TLS server? (raise --connect-timeout)"
                            ))
                        })?
                        .map_err(|e| {
                            TlsFailure(super::tls::describe(&e, &endpoint, &host, &shared.trust))
                        })?;
                let (_, session) = tls.get_ref();
                if let (Some(version), Some(suite)) = (
                    session.protocol_version(),
                    session.negotiated_cipher_suite(),
                ) {
                    let _ = shared
                        .negotiated
                        .set(format!("{version:?} {:?}", suite.suite()));
                }
                Stream::Tls(Box::new(tls))
            } else {
                Stream::Plain(tcp)
            };
            Ok(TokioIo::new(Watched::new(stream, shared.log.clone())))
        })
    }
}
