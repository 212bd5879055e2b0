//! Test-only: the engine's client handshake against a real rustls server, in memory, handed
//! over to the record layer exactly as the engine does (`dangerous_into_kernel_connection`),
//! then records fed to [`Session`] as receives would bring them.
//!
//! Two ways to drive the server side after the handshake:
//! - **live**: the rustls `ServerConnection` goes on — it writes data, updates its keys, reads
//!   what the client seals (so rustls itself checks our records and our KeyUpdate);
//! - **crafted**: the server's traffic secrets are extracted and the test seals whatever
//!   records it likes (padding, alerts, KeyUpdates with bad bodies, oversized plaintext…) with
//!   the record layer's own sealing, under the server's key.

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::crypto::ring::cipher_suite as suites;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConnection, SupportedCipherSuite};

use super::record::{Keys, Version};
use super::{RecordError, STAGE_BYTES, Session, Wire};

/// Every suite the record layer speaks, with its version.
pub(crate) fn all_suites() -> [(Version, SupportedCipherSuite); 6] {
    [
        (Version::Tls13, suites::TLS13_AES_128_GCM_SHA256),
        (Version::Tls13, suites::TLS13_AES_256_GCM_SHA384),
        (Version::Tls13, suites::TLS13_CHACHA20_POLY1305_SHA256),
        (
            Version::Tls12,
            suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        ),
        (
            Version::Tls12,
            suites::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        ),
        (
            Version::Tls12,
            suites::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        ),
    ]
}

/// A CA and a certificate it signs for `localhost`, made once per test process.
struct Pki {
    ca: CertificateDer<'static>,
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).expect("a CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);
        let params = CertificateParams::new(vec!["localhost".to_string()]).expect("names");
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &issuer).expect("a certificate");
        Pki {
            ca: ca.der().clone(),
            cert: cert.der().clone(),
            key: key.serialize_der(),
        }
    })
}

fn provider(suite: Option<SupportedCipherSuite>) -> Arc<rustls::crypto::CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(suite) = suite {
        provider.cipher_suites = vec![suite];
    }
    Arc::new(provider)
}

fn versions(version: Version) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static TLS12: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS12];
    static TLS13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    match version {
        Version::Tls12 => &TLS12,
        Version::Tls13 => &TLS13,
    }
}

/// The client configuration the engine uses (every default suite offered, secrets
/// extractable), trusting the test CA, for `version`.
pub(crate) fn client_config(version: Version) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki().ca.clone()).expect("the CA");
    let mut config = rustls::ClientConfig::builder_with_provider(provider(None))
        .with_protocol_versions(versions(version))
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.enable_secret_extraction = true;
    Arc::new(config)
}

/// A server that speaks only `suite` (of `version`).
pub(crate) fn server_config(
    version: Version,
    suite: SupportedCipherSuite,
) -> Arc<rustls::ServerConfig> {
    let pki = pki();
    let key = PrivateKeyDer::try_from(pki.key.clone()).expect("the key");
    let mut config = rustls::ServerConfig::builder_with_provider(provider(Some(suite)))
        .with_protocol_versions(versions(version))
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![pki.cert.clone()], key)
        .expect("the certificate");
    config.enable_secret_extraction = true;
    Arc::new(config)
}

/// The handshake's bytes, shuttled in memory to and from the server.
struct MemoryWire<'a> {
    server: &'a mut ServerConnection,
}

impl Wire for MemoryWire<'_> {
    fn send(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            self.server.read_tls(&mut bytes)?;
            self.server
                .process_new_packets()
                .map_err(std::io::Error::other)?;
        }
        Ok(())
    }

    fn recv(&mut self, mut into: &mut [u8]) -> std::io::Result<usize> {
        let n = self.server.write_tls(&mut into)?;
        if n == 0 {
            // The client waits for a server that has nothing to say: a deadlock.
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
}

fn pull(server: &mut ServerConnection, wire: &mut Vec<u8>) {
    while server.wants_write() {
        server.write_tls(wire).expect("server output");
    }
}

/// The engine's client handshake against a server speaking `suite` of `version`.
fn handshake(
    version: Version,
    suite: SupportedCipherSuite,
) -> (Session, Vec<u8>, ServerConnection) {
    let mut server = ServerConnection::new(server_config(version, suite)).expect("a server");
    let mut stage = vec![0u8; STAGE_BYTES];
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    let session = Session::handshake_over(
        &mut MemoryWire {
            server: &mut server,
        },
        &client_config(version),
        name,
        &mut stage,
        &|e| e.to_string(),
    )
    .unwrap_or_else(|e| panic!("handshake: {}", e.0));
    assert!(!server.is_handshaking());
    (session, stage, server)
}

/// The server's side after the handshake.
pub(crate) enum Peer {
    Live(ServerConnection),
    /// The server's keys: `tx` seals what the client receives, `rx` opens what it sends.
    Crafted {
        tx: Keys,
        rx: Keys,
    },
}

/// A handshaken session, its staging area, and the server.
pub(crate) struct Harness {
    pub session: Session,
    pub stage: Vec<u8>,
    pub peer: Peer,
    /// Server bytes not yet fed to the client.
    pub wire: Vec<u8>,
}

impl Harness {
    /// Handshakes with a server speaking `suite` of `version`; the server's post-handshake
    /// bytes (TLS 1.3 session tickets) wait in `wire`.
    pub fn live(version: Version, suite: SupportedCipherSuite) -> Harness {
        let (session, stage, mut server) = handshake(version, suite);
        let mut wire = Vec::new();
        pull(&mut server, &mut wire);
        Harness {
            session,
            stage,
            peer: Peer::Live(server),
            wire,
        }
    }

    /// The same, with the server's keys taken to craft records (after its tickets are in
    /// `wire`).
    pub fn crafted(version: Version, suite: SupportedCipherSuite) -> Harness {
        let (session, stage, mut server) = handshake(version, suite);
        let mut wire = Vec::new();
        pull(&mut server, &mut wire);
        let secrets = server.dangerous_extract_secrets().expect("server secrets");
        Harness {
            session,
            stage,
            peer: Peer::Crafted {
                tx: Keys::new(version, secrets.tx.0, secrets.tx.1).expect("tx keys"),
                rx: Keys::new(version, secrets.rx.0, secrets.rx.1).expect("rx keys"),
            },
            wire,
        }
    }

    pub fn server(&mut self) -> &mut ServerConnection {
        match &mut self.peer {
            Peer::Live(server) => server,
            Peer::Crafted { .. } => panic!("a crafted harness has no live server"),
        }
    }

    /// Moves what the live server has written into `wire`.
    pub fn pull(&mut self) {
        if let Peer::Live(server) = &mut self.peer {
            pull(server, &mut self.wire);
        }
    }

    /// The live server sends `data` as application data (into `wire`).
    pub fn server_sends(&mut self, data: &[u8]) {
        self.server()
            .writer()
            .write_all(data)
            .expect("server write");
        self.pull();
    }

    /// One record under the server's key: `content` of `content_type`, with `padding` zeros
    /// after a TLS 1.3 inner type.
    pub fn craft(&mut self, content_type: u8, content: &[u8], padding: usize) -> Vec<u8> {
        let Peer::Crafted { tx, .. } = &mut self.peer else {
            panic!("a live harness crafts nothing");
        };
        let mut record = content.to_vec();
        tx.seal(content_type, &mut record, 0, padding)
            .expect("a crafted record");
        record
    }

    pub fn server_tx(&mut self) -> &mut Keys {
        match &mut self.peer {
            Peer::Crafted { tx, .. } => tx,
            Peer::Live(_) => panic!("a live harness has no keys at hand"),
        }
    }

    /// Feeds `bytes` to the session in receives of at most `chunk` bytes (as much as the
    /// staging area has room for), delivering all plaintext as it comes. Returns the plaintext
    /// and whether the server closed.
    pub fn feed(&mut self, bytes: &[u8], chunk: usize) -> Result<(Vec<u8>, bool), RecordError> {
        let mut plain = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() && !self.session.closed() {
            let at = self.session.free_from();
            let n = rest.len().min(chunk.max(1)).min(self.stage.len() - at);
            assert!(n > 0, "the staging area is full of undelivered bytes");
            self.stage[at..at + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            self.session.received(&mut self.stage, n)?;
            let range = self.session.plaintext();
            plain.extend_from_slice(&self.stage[range.clone()]);
            self.session.consume(&mut self.stage, range.len());
        }
        Ok((plain, self.session.closed()))
    }

    /// Feeds everything waiting in `wire`, in receives of `chunk` bytes.
    pub fn deliver(&mut self, chunk: usize) -> Result<(Vec<u8>, bool), RecordError> {
        let wire = std::mem::take(&mut self.wire);
        self.feed(&wire, chunk)
    }

    /// The client seals `request` as the engine does and the live server reads it; returns
    /// what the server read (rustls checked every record, a KeyUpdate included).
    pub fn client_sends(&mut self, request: &[u8]) -> Vec<u8> {
        let mut buf = request.to_vec();
        self.session.seal(&mut buf).expect("seal");
        self.server_reads(&buf)
    }

    /// The live server reads the client's records `wire`; returns what it read (rustls
    /// checked every record).
    pub fn server_reads(&mut self, wire: &[u8]) -> Vec<u8> {
        let server = self.server();
        let mut wire = wire;
        let mut read = Vec::new();
        while !wire.is_empty() {
            server.read_tls(&mut wire).expect("server read");
            server
                .process_new_packets()
                .unwrap_or_else(|e| panic!("the server refused our records: {e}"));
            // What it decrypted, taken as it comes (rustls holds only so much).
            match server.reader().read_to_end(&mut read) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("server reader: {e}"),
            }
        }
        self.pull();
        read
    }

    /// The client seals `request`; the crafted server opens its records: `(content type,
    /// content)` for each, up to the first its keys do not open.
    pub fn client_records(&mut self, request: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut buf = request.to_vec();
        self.session.seal(&mut buf).expect("seal");
        let Peer::Crafted { rx, .. } = &mut self.peer else {
            panic!("a live harness opens nothing");
        };
        let mut records = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            let header: [u8; 5] = buf[at..at + 5].try_into().expect("a header");
            let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
            let body = &mut buf[at + 5..at + 5 + len];
            let Ok(opened) = rx.open(header, body) else {
                break;
            };
            records.push((opened.content_type, body[opened.content].to_vec()));
            at += 5 + len;
        }
        records
    }
}

/// A TLS server on a real socket, for the engine's tests: rustls makes the handshake, then the
/// test seals whatever records it likes under the server's key and writes their bytes in the
/// pieces it chooses (a record cut in two, a renegotiation request, bytes after a body).
pub(crate) struct SocketPeer {
    stream: std::net::TcpStream,
    tx: Keys,
    rx: Keys,
    /// Ciphertext sealed and not yet written.
    pub sealed: Vec<u8>,
    /// Request plaintext read and not yet taken.
    plain: Vec<u8>,
}

/// A TLS 1.2 HelloRequest (a renegotiation request): type 0, empty.
pub(crate) const HELLO_REQUEST: &[u8] = &[0, 0, 0, 0];
pub(crate) const HANDSHAKE_RECORD: u8 = super::record::HANDSHAKE;
pub(crate) const APPLICATION_DATA_RECORD: u8 = super::record::APPLICATION_DATA;

impl SocketPeer {
    /// Handshakes on an accepted connection as a server speaking `suite` (TLS 1.3 when
    /// `tls13`, else 1.2); `None` when the client went away.
    pub fn accept(
        mut stream: std::net::TcpStream,
        tls13: bool,
        suite: SupportedCipherSuite,
    ) -> Option<SocketPeer> {
        let version = if tls13 {
            Version::Tls13
        } else {
            Version::Tls12
        };
        stream.set_nodelay(true).ok()?;
        let mut server = ServerConnection::new(server_config(version, suite)).ok()?;
        while server.is_handshaking() {
            server.complete_io(&mut stream).ok()?;
        }
        while server.wants_write() {
            server.write_tls(&mut stream).ok()?;
        }
        // The client's first request may have come with its last handshake message.
        let mut plain = Vec::new();
        match server.reader().read_to_end(&mut plain) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
        let secrets = server.dangerous_extract_secrets().ok()?;
        Some(SocketPeer {
            stream,
            tx: Keys::new(version, secrets.tx.0, secrets.tx.1).ok()?,
            rx: Keys::new(version, secrets.rx.0, secrets.rx.1).ok()?,
            sealed: Vec::new(),
            plain,
        })
    }

    /// Reads the client's records up to the end of a request head; `None` when it closed.
    pub fn read_request(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(end) = self.plain.windows(4).position(|w| w == b"\r\n\r\n") {
                return Some(self.plain.drain(..end + 4).collect());
            }
            let mut header = [0u8; 5];
            self.stream.read_exact(&mut header).ok()?;
            let mut body = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
            self.stream.read_exact(&mut body).ok()?;
            let opened = self.rx.open(header, &mut body).ok()?;
            if opened.content_type == super::record::APPLICATION_DATA {
                self.plain.extend_from_slice(&body[opened.content]);
            }
        }
    }

    /// Seals `content` as records of `content_type` (at most 2^14 bytes each), to be written.
    pub fn seal(&mut self, content_type: u8, content: &[u8]) {
        let chunks: Vec<&[u8]> = if content.is_empty() {
            vec![content]
        } else {
            content.chunks(super::record::MAX_PLAINTEXT).collect()
        };
        for chunk in chunks {
            let mut record = chunk.to_vec();
            self.tx
                .seal(content_type, &mut record, 0, 0)
                .expect("a record");
            self.sealed.extend(record);
        }
    }

    /// Writes the first `n` sealed bytes (all of them if fewer).
    pub fn send(&mut self, n: usize) -> std::io::Result<()> {
        let n = n.min(self.sealed.len());
        let bytes: Vec<u8> = self.sealed.drain(..n).collect();
        self.stream.write_all(&bytes)
    }
}
