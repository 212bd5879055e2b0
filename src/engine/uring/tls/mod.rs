//! TLS 1.3 and 1.2 on the ring: rustls for the handshake, ringload's own record layer after it.
//!
//! - **Handshake**: rustls's unbuffered client API, driven over the (blocking) socket until it
//!   may send application data, within one deadline (the connect timeout) for the whole
//!   handshake, as the baseline's; then `dangerous_into_kernel_connection` hands over the
//!   traffic secrets and a [`KernelConnection`] that keeps session tickets (so a reconnect
//!   resumes) and key updates. This is the seam kTLS would use: where [`Session::handshake`]
//!   returns, the keys would go to the socket (`setsockopt(SOL_TLS)`) and `READ_FIXED` would
//!   land plaintext. Connections are handshaken when the rank is set up, before the clock; a
//!   connection opened again after a failure is handshaken on the rank thread, resuming.
//! - **Bodies** land in place: the ring's `READ_FIXED` receives ciphertext straight into the
//!   GET's registered buffer (behind a partial record, if one is there), and each complete
//!   record is decrypted with `ring`'s AES-GCM or ChaCha20-Poly1305 straight to where its
//!   plaintext belongs, over the headers (and tags, and TLS 1.2's explicit nonces) of the
//!   records before it (`open_within`: decryption and move in one pass), so the buffer holds
//!   `[plaintext][a partial record]`. The plan's budget gives each buffer room for one record
//!   beyond the body (`budget::TLS_RECORD_SLACK_BYTES`). A read's `SO_RCVLOWAT` never exceeds
//!   the ciphertext certain still to come ([`body_lowat`]); what follows a body goes back to
//!   the staging area, and more than it holds is cut short ([`Session::leave_body`]). Each
//!   body byte gets two passes: the kernel's copy into the buffer and the decryption (a read
//!   and a write); beyond them, the partial record behind the plaintext (under 17 KiB) is
//!   still moved down once per receive. Decrypting in place and then moving the plaintext down, and receiving into
//!   the staging area and copying the plaintext out, both cost more (BENCHMARKS.md, "What TLS
//!   costs") and were dropped.
//! - **Heads** (and what follows a body) are received into the connection's staging area (part
//!   of its memory, owned by [`super::ring`]), decrypted there, and handed to the connection's
//!   state machine as the socket would: a peek copies, a receive consumes.
//! - **Requests** are sealed into one record in place in the request buffer.
//!
//! **Versions**: TLS 1.3 with its three AEAD suites, and TLS 1.2's AEAD suites (AES-128/256-GCM
//! with their explicit nonce, ChaCha20-Poly1305), from rustls's secrets for either ([`record`]
//! says how each protects a record). rustls's default client offers no TLS 1.2 CBC suite.
//!
//! **The rules the record layer keeps** (RFC 8446 §4.6, §5; RFC 5246 §7.4.1.1):
//! - a KeyUpdate is validated (a one-byte body, 0 or 1, ending its record) and switches the
//!   receive key; one that asks for ours (`update_requested`) is answered: our own KeyUpdate
//!   goes out, under the old key, in front of the next request, which is sealed under the new;
//! - ChangeCipherSpec after the handshake is fatal, as is any unexpected content type;
//! - nothing after close_notify is delivered;
//! - plaintext over 2^14 bytes (TLS 1.3: 2^14 + 1 with the inner type) is `record_overflow`;
//! - a handshake message may be split over records (it is gathered, up to a bound);
//! - a sequence number is never wrapped: the connection ends instead;
//! - a TLS 1.2 HelloRequest (renegotiation) ends the connection with its own cause,
//!   [`RENEGOTIATION`], and the GET is tried again on a new one.

mod record;

pub use self::record::MAX_PLAINTEXT;

#[cfg(test)]
pub(crate) mod harness;
#[cfg(test)]
mod tests;

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ProtocolVersion;
use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::unbuffered::{ConnectionState, EncodeError};

use self::record::{
    ALERT, APPLICATION_DATA, CHANGE_CIPHER_SPEC, HANDSHAKE, HEADER, Keys, MAX_CIPHERTEXT, Version,
};

/// Each connection's staging area for ciphertext: four full records per receive. It fits in
/// the memory budget's per-connection allowance (`budget::CONNECTION_OVERHEAD_BYTES`).
pub const STAGE_BYTES: usize = 64 << 10;
/// The retry cause of a connection ended by a TLS 1.2 renegotiation request (HelloRequest).
pub const RENEGOTIATION: &str = "tls_renegotiation";
/// The retry cause of a connection ended by any other breach of the record layer's rules.
pub const PROTOCOL: &str = "connection";
/// The most a post-handshake handshake message may be, gathered over records: a
/// NewSessionTicket's ticket and extensions are at most 2 × 2^16 bytes.
const MAX_HANDSHAKE_MESSAGE: usize = 3 << 16;
const NEW_SESSION_TICKET: u8 = 4;
const KEY_UPDATE: u8 = 24;
const HELLO_REQUEST: u8 = 0;
/// Alerts: close_notify ends the data; user_canceled is a warning (a close_notify follows).
const CLOSE_NOTIFY: u8 = 0;
const USER_CANCELED: u8 = 90;

// The budget's room beyond each body is one whole record.
const _: () = assert!(crate::budget::TLS_RECORD_SLACK_BYTES as usize == HEADER + MAX_CIPHERTEXT);

/// What decrypting newly received records led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// Plaintext may be pending (or a partial record waits for more).
    Data,
    /// The server sent close_notify: no more data will come.
    Closed,
}

/// How a request body is laid out in its buffer so that it is sealed where it is generated:
/// record `i`'s plaintext (2^14 bytes, the last one shorter) at `i × stride + lead`, with room
/// for its header (and explicit nonce) in front and its trail (inner type, tag) behind, so the
/// sealed records follow one another from the buffer's start with no move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub lead: usize,
    pub trail: usize,
}

/// The most a record carries beyond its plaintext in any suite the engine speaks (TLS 1.2
/// AES-GCM: header 5, explicit nonce 8, tag 16): what a buffer holding a body laid out for
/// sealing needs per 2^14 bytes.
pub const MAX_RECORD_OVERHEAD: usize = HEADER + record::EXPLICIT_NONCE + record::TAG;

impl Layout {
    /// From one record's start to the next's.
    pub fn stride(&self) -> usize {
        self.lead + record::MAX_PLAINTEXT + self.trail
    }

    /// The records of `len` plaintext bytes, end to end.
    pub fn sealed_len(&self, len: usize) -> usize {
        len + len.div_ceil(record::MAX_PLAINTEXT) * (self.lead + self.trail)
    }

    /// The spacing a body's generator writes it with: one piece per record.
    pub fn spacing(&self) -> crate::engine::common::Spacing {
        crate::engine::common::Spacing {
            lead: self.lead,
            stride: self.stride(),
            piece: record::MAX_PLAINTEXT,
        }
    }

    /// The buffer ranges the plaintext of `len` bytes goes to, record by record, in order.
    pub fn pieces(&self, len: usize) -> impl Iterator<Item = std::ops::Range<usize>> + use<> {
        let (lead, stride) = (self.lead, self.stride());
        (0..len.div_ceil(record::MAX_PLAINTEXT)).map(move |i| {
            let start = i * stride + lead;
            start..start + (len - i * record::MAX_PLAINTEXT).min(record::MAX_PLAINTEXT)
        })
    }
}

// The budget's room for sealing a body in place is the widest record's overhead.
const _: () = assert!(crate::budget::TLS_SEAL_BYTES_PER_RECORD as usize == MAX_RECORD_OVERHEAD);

/// The `SO_RCVLOWAT` a TLS body read may wait for: `lowat`, the threshold the plaintext owed
/// asks for, only while the ciphertext certain still to arrive reaches it, else 1 (as for the
/// tail of a plain body: a read never waits for bytes that will not come). `owed` plaintext
/// bytes of the body are still to come and `held` ciphertext bytes of a record are already
/// here: each held byte carries at most one of them and each other one comes in at least one
/// byte, so at least `owed - held` bytes will arrive. Records add their overhead and padding
/// on top, which may be too little to make up for the part held (22 bytes a record in TLS 1.3
/// with AES-GCM against up to 16 KiB held): waiting for `lowat` there would wait out the idle
/// timeout.
pub fn body_lowat(lowat: usize, owed: usize, held: usize) -> usize {
    if owed.saturating_sub(held) >= lowat {
        lowat
    } else {
        1
    }
}

/// Why the record layer ended a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// The peer broke a rule of the protocol (or a record failed authentication).
    Protocol(String),
    /// A TLS 1.2 server asked to renegotiate, which the engine does not do.
    Renegotiation,
}

impl RecordError {
    /// The cause a retry is counted under: [`RENEGOTIATION`] or [`PROTOCOL`].
    pub fn cause(&self) -> &'static str {
        match self {
            RecordError::Protocol(_) => PROTOCOL,
            RecordError::Renegotiation => RENEGOTIATION,
        }
    }
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Protocol(reason) => f.write_str(reason),
            RecordError::Renegotiation => f.write_str(
                "the TLS 1.2 server asked to renegotiate (HelloRequest), which the io_uring \
                 engine does not do; turn renegotiation off on the gateway, or use --engine \
                 baseline",
            ),
        }
    }
}

impl From<String> for RecordError {
    fn from(reason: String) -> RecordError {
        RecordError::Protocol(reason)
    }
}

impl From<&str> for RecordError {
    fn from(reason: &str) -> RecordError {
        RecordError::Protocol(reason.to_string())
    }
}

fn protocol<T>(reason: impl Into<String>) -> Result<T, RecordError> {
    Err(RecordError::Protocol(reason.into()))
}

/// One connection's TLS session after the handshake, and where its staging area stands:
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
    /// The server asked for our KeyUpdate: it goes out in front of the next request.
    key_update_owed: bool,
    /// A post-handshake handshake message gathered over records, not yet whole.
    handshake: Vec<u8>,
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

/// Where the handshake's bytes go and come from: the socket, or (in tests) a server in memory.
pub(crate) trait Wire {
    fn send(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Some bytes into `into` (0: the peer closed).
    fn recv(&mut self, into: &mut [u8]) -> std::io::Result<usize>;
}

/// The blocking socket, every read and write bounded by what is left of one deadline.
struct SocketWire<'a> {
    fd: BorrowedFd<'a>,
    deadline: Instant,
}

impl SocketWire<'_> {
    fn bound(&self, which: rustix::net::sockopt::Timeout) -> std::io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "timed out",
            ));
        }
        // A zero timeout means none: at least a microsecond is left here.
        rustix::net::sockopt::set_socket_timeout(self.fd, which, Some(left)).map_err(io_error)
    }
}

fn timed_out(e: rustix::io::Errno) -> std::io::Error {
    if e == rustix::io::Errno::AGAIN {
        std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out")
    } else {
        io_error(e)
    }
}

// A blocking call on the rank thread is interrupted (EINTR) whenever the ring has work for
// the thread (another connection's operation completing): it is made again, within the same
// deadline.
impl Wire for SocketWire<'_> {
    fn send(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            self.bound(rustix::net::sockopt::Timeout::Send)?;
            match rustix::io::write(self.fd, bytes) {
                Ok(n) => bytes = &bytes[n..],
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(timed_out(e)),
            }
        }
        Ok(())
    }

    fn recv(&mut self, into: &mut [u8]) -> std::io::Result<usize> {
        loop {
            self.bound(rustix::net::sockopt::Timeout::Recv)?;
            match rustix::io::read(self.fd, &mut *into) {
                Err(rustix::io::Errno::INTR) => {}
                read => return read.map_err(timed_out),
            }
        }
    }
}

impl Session {
    /// Runs the handshake on the connected, blocking socket `fd`, all of it within `timeout`,
    /// for `name`. Ciphertext that arrived after the handshake is put at the start of `stage`.
    pub fn handshake(
        fd: BorrowedFd<'_>,
        config: &Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
        timeout: Duration,
        stage: &mut [u8],
        describe: &dyn Fn(&std::io::Error) -> String,
    ) -> Result<Session, HandshakeError> {
        let mut wire = SocketWire {
            fd,
            deadline: Instant::now() + timeout,
        };
        let session = Session::handshake_over(&mut wire, config, name, stage, describe)?;
        for which in [
            rustix::net::sockopt::Timeout::Recv,
            rustix::net::sockopt::Timeout::Send,
        ] {
            rustix::net::sockopt::set_socket_timeout(fd, which, None)
                .map_err(|e| HandshakeError(describe(&io_error(e))))?;
        }
        Ok(session)
    }

    /// The handshake over `wire`, and the hand-over to the record layer.
    pub(crate) fn handshake_over(
        wire: &mut dyn Wire,
        config: &Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
        stage: &mut [u8],
        describe: &dyn Fn(&std::io::Error) -> String,
    ) -> Result<Session, HandshakeError> {
        let fail = |e: std::io::Error| HandshakeError(describe(&e));
        let rustls_fail =
            |e: rustls::Error| fail(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
        let mut conn =
            UnbufferedClientConnection::new(config.clone(), name).map_err(rustls_fail)?;
        let mut incoming = vec![0u8; 64 << 10];
        let mut filled = 0usize;
        let mut outgoing = vec![0u8; 16 << 10];
        let mut queued = 0usize;
        // Each turn sends, receives or finishes; a handshake needs a few dozen at most.
        for _ in 0..10_000 {
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
                    wire.send(&outgoing[..queued]).map_err(fail)?;
                    queued = 0;
                    transmit.done();
                    false
                }
                ConnectionState::BlockedHandshake => {
                    if filled == incoming.len() {
                        if filled >= 1 << 20 {
                            return Err(HandshakeError(
                                "TLS handshake: the server sent over 1 MiB of handshake".into(),
                            ));
                        }
                        incoming.resize(filled * 2, 0);
                    }
                    let n = wire.recv(&mut incoming[filled..]).map_err(fail)?;
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
                return Session::after_handshake(conn, &incoming[..filled], stage);
            }
        }
        Err(HandshakeError(
            "TLS handshake: the server never finished it".into(),
        ))
    }

    /// Hands the finished handshake over to the record layer; `rest` arrived after it.
    fn after_handshake(
        conn: UnbufferedClientConnection,
        rest: &[u8],
        stage: &mut [u8],
    ) -> Result<Session, HandshakeError> {
        let (secrets, kernel) = conn
            .dangerous_into_kernel_connection()
            .map_err(|e| HandshakeError(format!("TLS handshake: {e}")))?;
        let version = match kernel.protocol_version() {
            ProtocolVersion::TLSv1_3 => Version::Tls13,
            ProtocolVersion::TLSv1_2 => Version::Tls12,
            other => {
                return Err(HandshakeError(format!(
                    "the server negotiated {other:?}; the io_uring engine speaks TLS 1.3 and \
                     1.2 (run with --engine baseline)"
                )));
            }
        };
        let negotiated = format!(
            "{:?} {:?}",
            kernel.protocol_version(),
            kernel.negotiated_cipher_suite().suite()
        );
        let (rx_seq, rx) = secrets.rx;
        let (tx_seq, tx) = secrets.tx;
        let mut session = Session {
            rx: Keys::new(version, rx_seq, rx).map_err(HandshakeError)?,
            tx: Keys::new(version, tx_seq, tx).map_err(HandshakeError)?,
            kernel,
            in_body: false,
            plain_start: 0,
            plain_end: 0,
            fill: 0,
            closed: false,
            key_update_owed: false,
            handshake: Vec::new(),
            negotiated,
        };
        if rest.len() > stage.len() {
            return Err(HandshakeError(
                "the server sent more after its handshake than a connection stages".into(),
            ));
        }
        stage[..rest.len()].copy_from_slice(rest);
        session.fill = rest.len();
        session
            .decrypt(stage)
            .map_err(|e| HandshakeError(e.to_string()))?;
        Ok(session)
    }

    /// Bytes each record carries beyond its plaintext (header, tag, TLS 1.3's inner type,
    /// TLS 1.2 AES-GCM's explicit nonce; a TLS 1.3 peer may add padding): 22 in TLS 1.3, 29 in
    /// TLS 1.2 with AES-GCM, 21 in TLS 1.2 with ChaCha20-Poly1305.
    pub fn record_overhead(&self) -> usize {
        self.rx.overhead()
    }

    /// Seals the plaintext in `buf` into application-data records, in place: one for a
    /// request head, as many as 2^14-byte pieces for a longer request (a
    /// CompleteMultipartUpload's XML). When the server asked for our KeyUpdate, it goes first,
    /// and the request is sealed under the new key.
    pub fn seal(&mut self, buf: &mut Vec<u8>) -> Result<(), String> {
        if !self.key_update_owed {
            return self.seal_records(buf);
        }
        // update_not_requested: one byte, 0.
        let mut update = vec![KEY_UPDATE, 0, 0, 1, 0];
        self.tx.seal(HANDSHAKE, &mut update, 0, 0)?;
        let (seq, secrets) = self
            .kernel
            .update_tx_secret()
            .map_err(|e| format!("a TLS key update: {e}"))?;
        self.tx = Keys::new(self.tx.version(), seq, secrets)?;
        self.key_update_owed = false;
        self.seal_records(buf)?;
        buf.splice(0..0, update);
        Ok(())
    }

    fn seal_records(&mut self, buf: &mut Vec<u8>) -> Result<(), String> {
        if buf.len() <= record::MAX_PLAINTEXT {
            return self.tx.seal(APPLICATION_DATA, buf, 0, 0);
        }
        let plain = std::mem::take(buf);
        for piece in plain.chunks(record::MAX_PLAINTEXT) {
            let from = buf.len();
            buf.extend_from_slice(piece);
            self.tx.seal(APPLICATION_DATA, buf, from, 0)?;
        }
        Ok(())
    }

    /// How a request body is laid out to be sealed where it is generated, for this session's
    /// version and suite.
    pub fn layout(&self) -> Layout {
        Layout {
            lead: self.tx.lead(),
            trail: self.tx.trail(),
        }
    }

    /// Seals a request body of `len` plaintext bytes laid out in `buf` as [`Session::layout`]
    /// says, in place, into records that follow one another: the ciphertext is
    /// `buf[..layout.sealed_len(len)]`, sent as it is. Call it after the request's head is
    /// sealed (the records take the sequence numbers after it).
    pub fn seal_body(&mut self, buf: &mut [u8], len: usize) -> Result<usize, String> {
        if self.key_update_owed {
            return Err("a body sealed before its request head (a bug)".into());
        }
        let layout = self.layout();
        let mut sealed = 0;
        for (i, piece) in layout.pieces(len).enumerate() {
            let at = i * layout.stride();
            debug_assert_eq!(at, sealed);
            sealed += self.tx.seal_laid_out(
                APPLICATION_DATA,
                &mut buf[at..],
                piece.len(),
                0,
                record::MAX_PLAINTEXT,
            )?;
        }
        Ok(sealed)
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
    /// them (plaintext, then a partial record) must go back to the start of the staging area,
    /// which holds `room` bytes: its range in the region is returned, and offsets count from
    /// the staging area again.
    ///
    /// More than `room` can only be plaintext after the body (a partial record is under
    /// 17 KiB): bytes a server must not send, as over plain HTTP. The first `room` of them are
    /// kept for the next response head to find (a `stray_bytes` retry), the rest is dropped
    /// and nothing more is read: the session ends as at close_notify.
    pub fn leave_body(&mut self, from: usize, room: usize) -> std::ops::Range<usize> {
        let mut rest = from..self.fill;
        if rest.len() > room {
            let kept = (self.plain_end - from).min(room);
            rest = from..from + kept;
            self.plain_end = rest.end;
            self.fill = rest.end;
            self.closed = true;
        }
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
    pub fn received(&mut self, stage: &mut [u8], n: usize) -> Result<Received, RecordError> {
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

    /// Decrypts the complete records in `[plain_end..fill)`, each one's plaintext straight to
    /// `plain_end`. After close_notify, whatever follows is dropped.
    fn decrypt(&mut self, stage: &mut [u8]) -> Result<(), RecordError> {
        let mut at = self.plain_end;
        while !self.closed && self.fill - at >= HEADER {
            let header: [u8; HEADER] = [
                stage[at],
                stage[at + 1],
                stage[at + 2],
                stage[at + 3],
                stage[at + 4],
            ];
            let wire = usize::from(u16::from_be_bytes([header[3], header[4]]));
            if wire > MAX_CIPHERTEXT {
                return protocol(format!(
                    "a TLS record of {wire} bytes is over 2^14 + 256 (record_overflow)"
                ));
            }
            if header[1..3] != [3, 3] {
                return protocol(format!(
                    "a TLS record says version {}.{}, not 3.3",
                    header[1], header[2]
                ));
            }
            match (header[0], self.rx.version()) {
                (APPLICATION_DATA, _) | (ALERT | HANDSHAKE, Version::Tls12) => {}
                (CHANGE_CIPHER_SPEC, _) => {
                    return protocol(
                        "the server sent ChangeCipherSpec after the handshake (unexpected_message)",
                    );
                }
                (other, _) => {
                    return protocol(format!(
                        "an unprotected TLS record of type {other} (unexpected_message)"
                    ));
                }
            }
            if self.fill - at < HEADER + wire {
                break;
            }
            let body = at + HEADER..at + HEADER + wire;
            at = body.end;
            // Decrypted straight to `plain_end`, over the gaps of the records before it: one
            // pass, not a decryption and then a move.
            let to = self.plain_end;
            let opened = self
                .rx
                .open_within(header, &mut stage[to..body.end], body.start - to)?;
            let content = to + opened.content.start..to + opened.content.end;
            match opened.content_type {
                APPLICATION_DATA => self.plain_end += content.len(),
                HANDSHAKE => self.handshake_record(&stage[content])?,
                ALERT => match stage[content] {
                    [_, CLOSE_NOTIFY] => self.closed = true,
                    [_, USER_CANCELED] => {}
                    [_, alert] => return protocol(format!("the server sent TLS alert {alert}")),
                    _ => return protocol("a TLS alert record that is not one alert"),
                },
                other => {
                    return protocol(format!(
                        "a TLS record of content type {other} (unexpected_message)"
                    ));
                }
            }
        }
        if self.closed {
            // Data after close_notify is not delivered.
            at = self.fill;
        }
        // The partial record (if any) follows the plaintext.
        stage.copy_within(at..self.fill, self.plain_end);
        self.fill = self.plain_end + (self.fill - at);
        Ok(())
    }

    /// One record's worth of post-handshake handshake messages, gathered with what earlier
    /// records left of a message split over them: session tickets are kept for resumption;
    /// a key update changes the receive key (and, asked, ours before the next request); a
    /// TLS 1.2 HelloRequest ends the connection.
    fn handshake_record(&mut self, bytes: &[u8]) -> Result<(), RecordError> {
        if self.handshake.len() + bytes.len() > MAX_HANDSHAKE_MESSAGE {
            return protocol("a TLS handshake message after the handshake is over its bound");
        }
        self.handshake.extend_from_slice(bytes);
        let mut gathered = std::mem::take(&mut self.handshake);
        let used = self.handshake_messages(&gathered)?;
        // A message split over records: its start waits for the rest.
        gathered.drain(..used);
        self.handshake = gathered;
        Ok(())
    }

    /// Handles the whole messages at the start of `gathered`; returns the bytes they took.
    fn handshake_messages(&mut self, gathered: &[u8]) -> Result<usize, RecordError> {
        let mut message = gathered;
        while message.len() >= 4 {
            let kind = message[0];
            let len = u32::from_be_bytes([0, message[1], message[2], message[3]]) as usize;
            if 4 + len > MAX_HANDSHAKE_MESSAGE {
                return protocol("a TLS handshake message after the handshake is over its bound");
            }
            let Some(payload) = message.get(4..4 + len) else {
                break;
            };
            let rest = &message[4 + len..];
            match (self.rx.version(), kind) {
                (Version::Tls13, NEW_SESSION_TICKET) => self
                    .kernel
                    .handle_new_session_ticket(payload)
                    .map_err(|e| format!("a TLS session ticket: {e}"))?,
                (Version::Tls13, KEY_UPDATE) => {
                    let requested = match payload {
                        [0] => false,
                        [1] => true,
                        _ => {
                            return protocol(
                                "a TLS KeyUpdate whose body is not 0 or 1 (decode_error)",
                            );
                        }
                    };
                    if !rest.is_empty() {
                        return protocol(
                            "a TLS KeyUpdate does not end its record (unexpected_message)",
                        );
                    }
                    let (seq, secrets) = self
                        .kernel
                        .update_rx_secret()
                        .map_err(|e| format!("a TLS key update: {e}"))?;
                    self.rx = Keys::new(Version::Tls13, seq, secrets)?;
                    self.key_update_owed |= requested;
                }
                (Version::Tls12, HELLO_REQUEST) => return Err(RecordError::Renegotiation),
                (_, other) => {
                    return protocol(format!(
                        "a TLS handshake message of type {other} after the handshake"
                    ));
                }
            }
            message = rest;
        }
        Ok(gathered.len() - message.len())
    }
}
