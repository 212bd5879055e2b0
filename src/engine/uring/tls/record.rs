//! One direction's record protection, for both versions the engine speaks (RFC 8446 §5.2–5.3
//! for TLS 1.3; RFC 5246 §6.2.3.3 with RFC 5288 and RFC 7905 for TLS 1.2's AEAD suites).
//!
//! | version, AEAD | nonce | additional data | on the wire beyond the plaintext |
//! |---|---|---|---|
//! | 1.3, any | IV ⊕ sequence number | the record header | header 5 + inner type 1 + tag 16 = 22 (+ padding) |
//! | 1.2, AES-GCM | IV's first 4 bytes ‖ the record's 8-byte explicit nonce | seq ‖ type ‖ version ‖ plaintext length | header 5 + explicit nonce 8 + tag 16 = 29 |
//! | 1.2, ChaCha20-Poly1305 | IV ⊕ sequence number | seq ‖ type ‖ version ‖ plaintext length | header 5 + tag 16 = 21 |
//!
//! rustls's secrets give TLS 1.2 AES-GCM an IV of 12 bytes: the 4-byte salt and an 8-byte
//! starting point; the explicit nonce we send is that starting point ⊕ the sequence number, as
//! rustls's own does (unique per key, which is all RFC 5288 asks).
//!
//! A sequence number never wraps (RFC 8446 §5.3, RFC 5246 §6.1): the record that would need
//! one past `u64::MAX - 1` is refused and the connection ends (it is opened again).

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rustls::ConnectionTrafficSecrets;

pub const HEADER: usize = 5;
pub const TAG: usize = 16;
/// TLS 1.2 AES-GCM's explicit nonce, carried in each record.
pub const EXPLICIT_NONCE: usize = 8;
pub const APPLICATION_DATA: u8 = 23;
pub const HANDSHAKE: u8 = 22;
pub const ALERT: u8 = 21;
pub const CHANGE_CIPHER_SPEC: u8 = 20;
/// The most plaintext a record carries (2^14).
pub const MAX_PLAINTEXT: usize = 1 << 14;
/// The most a TLS 1.3 record's ciphertext may be (2^14 + 256): the inner plaintext with its
/// type and padding, and the tag. TLS 1.2 allows 2^14 + 2048, but its AEAD suites never send
/// more than 2^14 + 24; a peer that does is refused.
pub const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 256;
/// The highest sequence number a key may protect a record with.
pub const SEQ_LIMIT: u64 = u64::MAX - 1;

/// The protocol the keys protect records for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Tls12,
    Tls13,
}

/// One direction's key, IV and record sequence number.
pub struct Keys {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
    version: Version,
    /// TLS 1.2 AES-GCM: each record carries an 8-byte explicit nonce.
    explicit_nonce: bool,
}

/// What [`Keys::open`] found in a record: where its content lies in the record's body, and
/// its content type (TLS 1.3: the inner one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub content: std::ops::Range<usize>,
    pub content_type: u8,
}

impl Keys {
    pub fn new(
        version: Version,
        seq: u64,
        secrets: ConnectionTrafficSecrets,
    ) -> Result<Keys, String> {
        let (algorithm, key, iv, gcm) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&aead::AES_128_GCM, key, iv, true),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&aead::AES_256_GCM, key, iv, true),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (&aead::CHACHA20_POLY1305, key, iv, false)
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
            version,
            explicit_nonce: version == Version::Tls12 && gcm,
        })
    }

    pub fn version(&self) -> Version {
        self.version
    }

    /// Bytes a record carries beyond its plaintext (without TLS 1.3 padding).
    pub fn overhead(&self) -> usize {
        self.lead() + self.trail()
    }

    #[cfg(test)]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    #[cfg(test)]
    pub fn set_seq(&mut self, seq: u64) {
        self.seq = seq;
    }

    /// The next record's sequence number; refused past [`SEQ_LIMIT`] rather than wrapped.
    fn next_seq(&mut self) -> Result<u64, String> {
        let seq = self.seq;
        if seq > SEQ_LIMIT {
            return Err("the TLS record sequence number would wrap; the connection ends".into());
        }
        self.seq = seq + 1;
        Ok(seq)
    }

    /// The IV with `seq` XORed into its last 8 bytes.
    fn xor_nonce(&self, seq: u64) -> [u8; 12] {
        let mut nonce = self.iv;
        for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
            *n ^= s;
        }
        nonce
    }

    fn tls12_aad(seq: u64, content_type: u8, plain_len: usize) -> [u8; 13] {
        let mut aad = [0u8; 13];
        aad[..8].copy_from_slice(&seq.to_be_bytes());
        aad[8] = content_type;
        aad[9] = 3;
        aad[10] = 3;
        aad[11..].copy_from_slice(&(plain_len as u16).to_be_bytes());
        aad
    }

    /// Decrypts the record with `header` whose body is `body`, in place: its content ends up
    /// at `body[content]`.
    #[cfg(test)]
    pub fn open(&mut self, header: [u8; HEADER], body: &mut [u8]) -> Result<Opened, String> {
        self.open_within(header, body, 0)
    }

    /// Decrypts the record with `header` whose body is `in_out[body_from..]` to the front of
    /// `in_out`, in one pass (`ring` decrypts and moves down together): its content ends up at
    /// `in_out[content]`, from 0, and the bytes between the content and the body's end are left
    /// over. Refuses a record that fails authentication, and plaintext over the limit
    /// (`record_overflow`).
    pub fn open_within(
        &mut self,
        header: [u8; HEADER],
        in_out: &mut [u8],
        body_from: usize,
    ) -> Result<Opened, String> {
        let failed = || "a TLS record failed authentication".to_string();
        let body_len = in_out.len() - body_from;
        let seq = self.next_seq()?;
        match self.version {
            Version::Tls13 => {
                let nonce = Nonce::assume_unique_for_key(self.xor_nonce(seq));
                let inner_len = self
                    .key
                    .open_within(nonce, Aad::from(header), in_out, body_from..)
                    .map_err(|_| failed())?
                    .len();
                if inner_len > MAX_PLAINTEXT + 1 {
                    return Err(format!(
                        "a TLS record's plaintext of {inner_len} bytes is over 2^14 + 1 \
                         (record_overflow)"
                    ));
                }
                // The inner content type is the last non-zero byte; zeros after it are padding.
                let Some(type_at) = in_out[..inner_len].iter().rposition(|&b| b != 0) else {
                    return Err("a TLS record has no content type".into());
                };
                Ok(Opened {
                    content: 0..type_at,
                    content_type: in_out[type_at],
                })
            }
            Version::Tls12 => {
                let content_type = header[0];
                let skip = if self.explicit_nonce {
                    EXPLICIT_NONCE
                } else {
                    0
                };
                let Some(plain_len) = body_len.checked_sub(skip + TAG) else {
                    return Err("a TLS record is shorter than its tag".into());
                };
                let aad = Aad::from(Self::tls12_aad(seq, content_type, plain_len));
                let nonce = if self.explicit_nonce {
                    let mut nonce = [0u8; 12];
                    nonce[..4].copy_from_slice(&self.iv[..4]);
                    nonce[4..].copy_from_slice(&in_out[body_from..body_from + EXPLICIT_NONCE]);
                    nonce
                } else {
                    self.xor_nonce(seq)
                };
                let nonce = Nonce::assume_unique_for_key(nonce);
                let len = self
                    .key
                    .open_within(nonce, aad, in_out, body_from + skip..)
                    .map_err(|_| failed())?
                    .len();
                if len > MAX_PLAINTEXT {
                    return Err(format!(
                        "a TLS record's plaintext of {len} bytes is over 2^14 (record_overflow)"
                    ));
                }
                Ok(Opened {
                    content: 0..len,
                    content_type,
                })
            }
        }
    }

    /// Seals `buf[from..]` (plaintext of `content_type`) into one record in place, with
    /// `padding` zeros after a TLS 1.3 inner type (none in TLS 1.2).
    pub fn seal(
        &mut self,
        content_type: u8,
        buf: &mut Vec<u8>,
        from: usize,
        padding: usize,
    ) -> Result<(), String> {
        self.seal_within(content_type, buf, from, padding, MAX_PLAINTEXT)
    }

    /// [`Keys::seal`] past the limit, for tests of the receiving side.
    #[cfg(test)]
    pub fn seal_oversized(
        &mut self,
        content_type: u8,
        buf: &mut Vec<u8>,
        padding: usize,
    ) -> Result<(), String> {
        self.seal_within(content_type, buf, 0, padding, MAX_CIPHERTEXT)
    }

    fn seal_within(
        &mut self,
        content_type: u8,
        buf: &mut Vec<u8>,
        from: usize,
        padding: usize,
        max_plaintext: usize,
    ) -> Result<(), String> {
        let len = buf.len() - from;
        self.check_fits(len, padding, max_plaintext)?;
        let trail = self.trail() + self.padding(padding);
        buf.splice(from..from, std::iter::repeat_n(0, self.lead()));
        buf.resize(buf.len() + trail, 0);
        let sealed =
            self.seal_laid_out(content_type, &mut buf[from..], len, padding, max_plaintext)?;
        debug_assert_eq!(sealed, buf.len() - from);
        Ok(())
    }

    /// Bytes in front of a record's plaintext: the header and TLS 1.2 AES-GCM's explicit nonce.
    pub fn lead(&self) -> usize {
        HEADER
            + if self.explicit_nonce {
                EXPLICIT_NONCE
            } else {
                0
            }
    }

    /// Bytes after a record's plaintext (without TLS 1.3 padding): TLS 1.3's inner type and
    /// the tag.
    pub fn trail(&self) -> usize {
        TAG + match self.version {
            Version::Tls13 => 1,
            Version::Tls12 => 0,
        }
    }

    /// The padding a record may carry: TLS 1.3's only.
    fn padding(&self, padding: usize) -> usize {
        match self.version {
            Version::Tls13 => padding,
            Version::Tls12 => 0,
        }
    }

    fn check_fits(&self, len: usize, padding: usize, max_plaintext: usize) -> Result<(), String> {
        let fits = match self.version {
            Version::Tls13 => len + 1 + padding <= max_plaintext + 1,
            Version::Tls12 => len <= max_plaintext,
        };
        if fits {
            Ok(())
        } else {
            Err(format!("{len} bytes do not fit one TLS record"))
        }
    }

    /// Seals the record laid out at the start of `rec`, in place, and returns its length:
    /// `rec[..lead]` is room for the header (and explicit nonce), `rec[lead..lead + len]` is
    /// the plaintext of `content_type`, and `rec` has room after it for the trail (TLS 1.3's
    /// inner type and `padding` zeros, and the tag). Nothing moves: a body laid out record by
    /// record is sealed where it was generated.
    pub fn seal_laid_out(
        &mut self,
        content_type: u8,
        rec: &mut [u8],
        len: usize,
        padding: usize,
        max_plaintext: usize,
    ) -> Result<usize, String> {
        self.check_fits(len, padding, max_plaintext)?;
        let lead = self.lead();
        let padding = self.padding(padding);
        if rec.len() < lead + len + self.trail() + padding {
            return Err(format!(
                "{len} bytes laid out without room for their record"
            ));
        }
        let seq = self.next_seq()?;
        let nonce = self.xor_nonce(seq);
        let mut end = lead + len;
        let outer = match self.version {
            Version::Tls13 => {
                rec[end] = content_type;
                rec[end + 1..end + 1 + padding].fill(0);
                end += 1 + padding;
                APPLICATION_DATA
            }
            Version::Tls12 => content_type,
        };
        // The explicit nonce (if any), the sealed content and the tag.
        let wire = end - HEADER + TAG;
        let header = [outer, 3, 3, (wire >> 8) as u8, wire as u8];
        let mut aad = [0u8; 13];
        let aad_len = match self.version {
            Version::Tls13 => {
                aad[..HEADER].copy_from_slice(&header);
                HEADER
            }
            Version::Tls12 => {
                aad = Self::tls12_aad(seq, content_type, len);
                aad.len()
            }
        };
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&aad[..aad_len]),
                &mut rec[lead..end],
            )
            .map_err(|_| "cannot seal a TLS record".to_string())?;
        rec[end..end + TAG].copy_from_slice(tag.as_ref());
        rec[..HEADER].copy_from_slice(&header);
        rec[HEADER..lead].copy_from_slice(&nonce[4..4 + (lead - HEADER)]);
        Ok(end + TAG)
    }
}
