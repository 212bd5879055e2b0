//! TLS 1.3 on the ring: rustls for the handshake, ringload's own record layer after it.
//!
//! - **Handshake**: rustls's unbuffered client API, driven over the (blocking) socket with the
//!   connect timeout, until it may send application data; then
//!   `dangerous_into_kernel_connection` hands over the traffic secrets and a
//!   [`KernelConnection`] that keeps session tickets (so a reconnect resumes) and key
//!   updates. This is the seam kTLS would use: where [`Session::handshake`] returns, the keys
//!   would go to the socket (`setsockopt(SOL_TLS)`) and `READ_FIXED` would land plaintext.
//!   Connections are handshaken when the rank is set up, before the clock; a connection opened
//!   again after a failure is handshaken on the rank thread, resuming the session.
//! - **Bodies** land in place: the ring's `READ_FIXED` receives ciphertext straight into the
//!   GET's registered buffer (behind a partial record, if one is there), each complete record
//!   is decrypted in place with `ring`'s AES-GCM or ChaCha20-Poly1305, and its plaintext moved
//!   down over the header and tag before it, so the buffer holds `[plaintext][a partial
//!   record]`. The plan's budget gives each buffer room for one record beyond the body
//!   (`budget::TLS_RECORD_SLACK_BYTES`). Each body byte gets three passes: the kernel's copy
//!   into the buffer, the decryption (a read and a write), and the move that closes the
//!   record's gap (on bytes still in cache). Receiving into the staging area and copying the
//!   plaintext out instead cost twice the CPU over plain HTTP (BENCHMARKS.md, "What TLS
//!   costs"), and was dropped.
//! - **Heads** (and what follows a body) are received into the connection's staging area (part
//!   of its memory, owned by [`super::ring`]), decrypted there, and handed to the connection's
//!   state machine as the socket would: a peek copies, a receive consumes.
//! - **Requests** are sealed into one record in place in the request buffer.
//!
//! TLS 1.3 only: a server that negotiates TLS 1.2 is refused at the handshake with a line
//! saying to use the baseline engine.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::unbuffered::{ConnectionState, EncodeError};
use rustls::{ConnectionTrafficSecrets, ProtocolVersion};

/// Each connection's staging area for ciphertext: four full records per receive. It fits in
/// the memory budget's per-connection allowance (`budget::CONNECTION_OVERHEAD_BYTES`).
pub const STAGE_BYTES: usize = 64 << 10;
/// The largest TLS 1.3 record on the wire (the room the budget leaves beyond each body).
const MAX_RECORD: usize = crate::budget::TLS_RECORD_SLACK_BYTES as usize;
const HEADER: usize = 5;
const TAG: usize = 16;
const APPLICATION_DATA: u8 = 23;
const HANDSHAKE: u8 = 22;
const ALERT: u8 = 21;
const CHANGE_CIPHER_SPEC: u8 = 20;

/// One direction's key and record sequence number.
struct Keys {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl Keys {
    fn new(seq: u64, secrets: ConnectionTrafficSecrets) -> Result<Keys, String> {
        let (algorithm, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv)
            }
            _ => return Err("the negotiated cipher is not supported".into()),
        };
        let key = UnboundKey::new(algorithm, key.as_ref())
            .map_err(|_| "the negotiated key does not fit its cipher".to_string())?;
        let iv: [u8; 12] = iv
            .as_ref()
            .try_into()
            .map_err(|_| "the negotiated IV is not 12 bytes".to_string())?;
        Ok(Keys {
            key: LessSafeKey::new(key),
            iv,
            seq,
        })
    }

    /// The next record's nonce: the IV with the sequence number XORed into its last 8 bytes.
    fn nonce(&mut self) -> Nonce {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        self.seq += 1;
        Nonce::assume_unique_for_key(nonce)
    }
}

/// What decrypting newly received records led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// Plaintext may be pending (or a partial record waits for more).
    Data,
    /// The server sent close_notify: no more data will come.
    Closed,
}

/// One connection's TLS 1.3 session after the handshake, and where its staging area stands:
/// `[plain_start..plain_end)` decrypted, not yet delivered; `[plain_end..fill)` received, not
/// yet a complete record.
pub struct Session {
    rx: Keys,
    tx: Keys,
    kernel: KernelConnection<ClientConnectionData>,
    /// Whether the offsets below are in the staging area or (landing in place) in the body's
    /// buffer, from the body read's offset.
    in_body: bool,
    plain_start: usize,
    plain_end: usize,
    fill: usize,
    closed: bool,
    /// `TLSv1_3 TLS13_AES_256_GCM_SHA384`.
    pub negotiated: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("negotiated", &self.negotiated)
            .field("plain", &(self.plain_start..self.plain_end))
            .field("fill", &self.fill)
            .finish_non_exhaustive()
    }
}

/// Why a handshake failed, worded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeError(pub String);

fn io_error(e: rustix::io::Errno) -> std::io::Error {
    std::io::Error::from(e)
}

impl Session {
    /// Runs the handshake on the connected, blocking socket `fd` (each read and write bounded
    /// by `timeout`), for `name`. Ciphertext that arrived after the handshake is put at the
    /// start of `stage`.
    pub fn handshake(
        fd: BorrowedFd<'_>,
        config: &Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
        timeout: Duration,
        stage: &mut [u8],
        describe: &dyn Fn(&std::io::Error) -> String,
    ) -> Result<Session, HandshakeError> {
        let fail = |e: std::io::Error| HandshakeError(describe(&e));
        let rustls_fail =
            |e: rustls::Error| fail(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
        rustix::net::sockopt::set_socket_timeout(
            fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(timeout),
        )
        .map_err(|e| fail(io_error(e)))?;
        rustix::net::sockopt::set_socket_timeout(
            fd,
            rustix::net::sockopt::Timeout::Send,
            Some(timeout),
        )
        .map_err(|e| fail(io_error(e)))?;
        let mut conn =
            UnbufferedClientConnection::new(config.clone(), name).map_err(rustls_fail)?;
        let mut incoming = vec![0u8; 64 << 10];
        let mut filled = 0usize;
        let mut outgoing = vec![0u8; 16 << 10];
        let mut queued = 0usize;
        loop {
            let status = conn.process_tls_records(&mut incoming[..filled]);
            let discard = status.discard;
            let state = status.state.map_err(rustls_fail)?;
            let done = match state {
                ConnectionState::EncodeTlsData(mut encode) => {
                    loop {
                        match encode.encode(&mut outgoing[queued..]) {
                            Ok(n) => {
                                queued += n;
                                break;
                            }
                            Err(EncodeError::InsufficientSize(need)) => {
                                outgoing.resize(queued + need.required_size, 0);
                            }
                            Err(e) => {
                                return Err(HandshakeError(format!("TLS handshake: {e}")));
                            }
                        }
                    }
                    false
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    write_all(fd, &outgoing[..queued]).map_err(fail)?;
                    queued = 0;
                    transmit.done();
                    false
                }
                ConnectionState::BlockedHandshake => {
                    if filled == incoming.len() {
                        incoming.resize(filled * 2, 0);
                    }
                    let n = rustix::io::read(fd, &mut incoming[filled..]).map_err(|e| {
                        fail(if e == rustix::io::Errno::AGAIN {
                            std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out")
                        } else {
                            io_error(e)
                        })
                    })?;
                    if n == 0 {
                        return Err(fail(std::io::ErrorKind::UnexpectedEof.into()));
                    }
                    filled += n;
                    false
                }
                ConnectionState::WriteTraffic(_) => true,
                ConnectionState::Closed | ConnectionState::PeerClosed => {
                    return Err(fail(std::io::ErrorKind::UnexpectedEof.into()));
                }
                other => {
                    return Err(HandshakeError(format!(
                        "TLS handshake: unexpected state {other:?}"
                    )));
                }
            };
            incoming.copy_within(discard..filled, 0);
            filled -= discard;
            if done {
                break;
            }
        }
        rustix::net::sockopt::set_socket_timeout(fd, rustix::net::sockopt::Timeout::Recv, None)
            .map_err(|e| fail(io_error(e)))?;
        rustix::net::sockopt::set_socket_timeout(fd, rustix::net::sockopt::Timeout::Send, None)
            .map_err(|e| fail(io_error(e)))?;
        let (secrets, kernel) = conn
            .dangerous_into_kernel_connection()
            .map_err(rustls_fail)?;
        if kernel.protocol_version() != ProtocolVersion::TLSv1_3 {
            return Err(HandshakeError(format!(
                "the server negotiated {:?}; the io_uring engine speaks TLS 1.3 only (run with \
                 --engine baseline)",
                kernel.protocol_version()
            )));
        }
        let negotiated = format!(
            "{:?} {:?}",
            kernel.protocol_version(),
            kernel.negotiated_cipher_suite().suite()
        );
        let (rx_seq, rx) = secrets.rx;
        let (tx_seq, tx) = secrets.tx;
        let mut session = Session {
            rx: Keys::new(rx_seq, rx).map_err(HandshakeError)?,
            tx: Keys::new(tx_seq, tx).map_err(HandshakeError)?,
            kernel,
            in_body: false,
            plain_start: 0,
            plain_end: 0,
            fill: 0,
            closed: false,
            negotiated,
        };
        if filled > stage.len() {
            return Err(HandshakeError(
                "the server sent more after its handshake than a connection stages".into(),
            ));
        }
        stage[..filled].copy_from_slice(&incoming[..filled]);
        session.fill = filled;
        session.decrypt(stage).map_err(HandshakeError)?;
        Ok(session)
    }

    /// Seals the plaintext in `buf` into one application-data record, in place.
    pub fn seal(&mut self, buf: &mut Vec<u8>) -> Result<(), String> {
        let len = buf.len();
        if len + 1 > 1 << 14 {
            return Err(format!(
                "a {len}-byte request head does not fit one TLS record"
            ));
        }
        buf.push(APPLICATION_DATA);
        let wire = (len + 1 + TAG) as u16;
        let header = [APPLICATION_DATA, 3, 3, (wire >> 8) as u8, wire as u8];
        let nonce = self.tx.nonce();
        let tag = self
            .tx
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(header), &mut buf[..])
            .map_err(|_| "cannot seal a TLS record".to_string())?;
        buf.extend_from_slice(tag.as_ref());
        buf.splice(0..0, header);
        Ok(())
    }

    /// Where the next receive lands in the staging area (or, in the body, after the partial
    /// record at the read's offset).
    pub fn free_from(&self) -> usize {
        self.fill
    }

    pub fn in_body(&self) -> bool {
        self.in_body
    }

    /// Landing in place: the ciphertext in the staging area (a partial record, no plaintext)
    /// was moved to the body's buffer at the read's offset; offsets now count from there.
    pub fn enter_body(&mut self) {
        debug_assert_eq!(self.pending(), 0);
        self.in_body = true;
    }

    /// Landing in place: `n` plaintext bytes at the region's start were handed to the body.
    /// The partial record behind them is where the next read's region starts.
    pub fn advance_body(&mut self, n: usize) {
        self.plain_start = 0;
        self.plain_end -= n;
        self.fill -= n;
    }

    /// Landing in place: the body is whole after `from` bytes of the region; what followed
    /// them (plaintext, then a partial record) must go back to the start of the staging area:
    /// its range in the region is returned, and offsets count from the staging area again.
    pub fn leave_body(&mut self, from: usize) -> std::ops::Range<usize> {
        let rest = from..self.fill;
        self.plain_start = 0;
        self.plain_end -= from;
        self.fill -= from;
        self.in_body = false;
        rest
    }

    /// Plaintext decrypted and not yet delivered.
    pub fn pending(&self) -> usize {
        self.plain_end - self.plain_start
    }

    pub fn closed(&self) -> bool {
        self.closed
    }

    /// `n` more bytes were received at [`Session::free_from`]: decrypts every complete record.
    pub fn received(&mut self, stage: &mut [u8], n: usize) -> Result<Received, String> {
        self.fill += n;
        self.decrypt(stage)?;
        Ok(if self.closed {
            Received::Closed
        } else {
            Received::Data
        })
    }

    /// The pending plaintext (to copy from `stage`), without delivering it.
    pub fn plaintext(&self) -> std::ops::Range<usize> {
        self.plain_start..self.plain_end
    }

    /// `n` bytes of the pending plaintext were delivered. When none is left, the partial
    /// record behind it moves to the start of the staging area.
    pub fn consume(&mut self, stage: &mut [u8], n: usize) {
        self.plain_start += n.min(self.pending());
        if self.plain_start == self.plain_end {
            stage.copy_within(self.plain_end..self.fill, 0);
            self.fill -= self.plain_end;
            self.plain_start = 0;
            self.plain_end = 0;
        }
    }

    /// Decrypts the complete records in `[plain_end..fill)`, moving each one's plaintext to
    /// `plain_end`.
    fn decrypt(&mut self, stage: &mut [u8]) -> Result<(), String> {
        let mut at = self.plain_end;
        while self.fill - at >= HEADER {
            let wire = usize::from(u16::from_be_bytes([stage[at + 3], stage[at + 4]]));
            if HEADER + wire > MAX_RECORD {
                return Err(format!("a TLS record of {wire} bytes is over the limit"));
            }
            if self.fill - at < HEADER + wire {
                break;
            }
            let header: [u8; 5] = [
                stage[at],
                stage[at + 1],
                stage[at + 2],
                stage[at + 3],
                stage[at + 4],
            ];
            let body = at + HEADER..at + HEADER + wire;
            at = body.end;
            match header[0] {
                APPLICATION_DATA => {}
                CHANGE_CIPHER_SPEC => continue,
                other => return Err(format!("an unprotected TLS record of type {other}")),
            }
            let nonce = self.rx.nonce();
            let plain_len = self
                .rx
                .key
                .open_in_place(nonce, Aad::from(header), &mut stage[body.clone()])
                .map_err(|_| "a TLS record failed authentication".to_string())?
                .len();
            // The inner content type is the last non-zero byte; zeros after it are padding.
            let inner = &stage[body.start..body.start + plain_len];
            let Some(type_at) = inner.iter().rposition(|&b| b != 0) else {
                return Err("a TLS record has no content type".into());
            };
            let content = body.start..body.start + type_at;
            match inner[type_at] {
                APPLICATION_DATA => {
                    stage.copy_within(content.clone(), self.plain_end);
                    self.plain_end += content.len();
                }
                HANDSHAKE => {
                    let message = stage[content].to_vec();
                    self.handshake_messages(&message)?;
                }
                ALERT => {
                    let alert = &stage[content];
                    if alert.get(1) == Some(&0) {
                        self.closed = true;
                    } else {
                        return Err(format!(
                            "the server sent TLS alert {}",
                            alert.get(1).copied().unwrap_or(0)
                        ));
                    }
                }
                other => return Err(format!("a TLS record of content type {other}")),
            }
        }
        // The partial record (if any) follows the plaintext.
        stage.copy_within(at..self.fill, self.plain_end);
        self.fill = self.plain_end + (self.fill - at);
        Ok(())
    }

    /// Post-handshake messages: session tickets are kept for resumption; a key update
    /// changes the receive key (one that asks for ours in return ends the connection, which
    /// is then opened again).
    fn handshake_messages(&mut self, mut message: &[u8]) -> Result<(), String> {
        while message.len() >= 4 {
            let kind = message[0];
            let len = u32::from_be_bytes([0, message[1], message[2], message[3]]) as usize;
            let Some(payload) = message.get(4..4 + len) else {
                return Err("a TLS handshake message is cut short".into());
            };
            match kind {
                4 => self
                    .kernel
                    .handle_new_session_ticket(payload)
                    .map_err(|e| format!("a TLS session ticket: {e}"))?,
                24 => {
                    let (seq, secrets) = self
                        .kernel
                        .update_rx_secret()
                        .map_err(|e| format!("a TLS key update: {e}"))?;
                    self.rx = Keys::new(seq, secrets)?;
                    if payload.first() == Some(&1) {
                        return Err("the server asked for a TLS key update in return".into());
                    }
                }
                other => return Err(format!("a TLS handshake message of type {other}")),
            }
            message = &message[4 + len..];
        }
        Ok(())
    }
}

fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let n = rustix::io::write(fd, bytes).map_err(io_error)?;
        bytes = &bytes[n..];
    }
    Ok(())
}
