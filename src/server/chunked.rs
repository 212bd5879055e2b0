//! The `aws-chunked` upload body, decoded as it streams in: S3's streaming payloads
//! (`x-amz-content-sha256: STREAMING-*`, announced by `server::sigv4`'s [`Streaming`]).
//!
//! The body is a run of chunks, each `hex(size)[;chunk-signature=SIG]\r\n` + data + `\r\n`, the
//! last of size 0, then (in the trailer forms) the trailer: `x-amz-checksum-ALG:VALUE\r\n`, in
//! the signed form `x-amz-trailer-signature:SIG\r\n`, then `\r\n`. In the signed forms each
//! chunk's signature chains from the one before it, the first from the request's own
//! (`crate::s3::sigv4::chunk_signature`), and the trailer's from the final chunk's
//! (`trailer_signature`); a wrong one is `403 SignatureDoesNotMatch`.
//!
//! [`Decoder`] is a synchronous state machine fed the body's frames as they arrive, however
//! they split the framing: it hands back the data as slices of those frames (no copy, nothing
//! gathered; a chunk's data may span any number of frames), keeps only the current chunk
//! header or the trailer (each at most a few KiB), and hashes a chunk's data (SHA-256) only
//! when its signature is checked. Framing that is not this grammar is `400 InvalidRequest`
//! naming the chunk and the byte where it went wrong; a body that ends early, or whose data is
//! not `x-amz-decoded-content-length` bytes, is `400 IncompleteBody`. The trailer's checksum is
//! handed back at the end for the caller to verify over the decoded data, as it verifies an
//! `x-amz-checksum-*` header.

use bytes::{Buf, Bytes};
use http::StatusCode;
use sha2::{Digest, Sha256};

use super::error::S3Error;
use super::sigv4::{ChunkSigning, Streaming, constant_time_eq};
use crate::checksum::Algorithm;
use crate::s3::sigv4::{chunk_signature, trailer_signature};

/// The longest chunk header taken (`hex(size);chunk-signature=<64 hex>\r\n` is under 90
/// bytes).
pub const MAX_CHUNK_HEADER_BYTES: usize = 4 << 10;
/// The most bytes taken after the final chunk: the trailer's checksum line, its signature
/// line and the blank line fit in a few hundred.
pub const MAX_TRAILER_BYTES: usize = 4 << 10;

/// The checksum a body's trailer carried (base64, as the header form carries it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trailer {
    pub algorithm: Algorithm,
    pub value: String,
}

/// Where the decoder is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// A chunk header, gathered in `line` up to its `\n`.
    Header,
    /// `left` bytes of the chunk's data still to come.
    Data { left: u64 },
    /// The `\r\n` after a chunk's data, `seen` of its two bytes taken.
    DataEnd { seen: usize },
    /// Past the final chunk: the rest, gathered in `line` and read at the end.
    Tail,
}

/// Decodes one aws-chunked body (see the module documentation).
#[derive(Debug)]
pub struct Decoder {
    signed: bool,
    trailer: Option<Algorithm>,
    decoded_length: u64,
    /// What signatures are checked with; `None` checks none (a server without credentials).
    signing: Option<ChunkSigning>,
    /// The signature the next one chains from: the seed, then each chunk's.
    previous: String,
    part: Part,
    /// The chunk header, or the tail, as far as it has arrived.
    line: Vec<u8>,
    /// The current chunk's signature as its header gives it.
    signature: String,
    /// The current chunk's data hash, when its signature is checked.
    hasher: Option<Sha256>,
    /// The current chunk, from 1, and the body offset of its header.
    chunk: u64,
    chunk_at: u64,
    /// Body bytes taken, and data bytes among them.
    wire_bytes: u64,
    decoded_bytes: u64,
    /// The data byte `serve --faults flip-upload=N` inverts, as it arrives: before the chunk's
    /// signature and the checksum see it, as a byte changed in flight would be.
    flip: Option<u64>,
}

fn malformed(message: String) -> S3Error {
    S3Error::new(StatusCode::BAD_REQUEST, "InvalidRequest", message)
}

fn incomplete(message: String) -> S3Error {
    S3Error::new(StatusCode::BAD_REQUEST, "IncompleteBody", message)
}

fn mismatch(message: String) -> S3Error {
    S3Error::new(StatusCode::FORBIDDEN, "SignatureDoesNotMatch", message)
}

/// A chunk size: 1 to 16 hex digits (no sign, no space).
fn parse_size(text: &str) -> Option<u64> {
    let ok = (1..=16).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| u64::from_str_radix(text, 16).ok()).flatten()
}

/// A chunk header without its `\r\n`: the size, and the signature when `signed`.
fn parse_header(text: &[u8], signed: bool) -> Result<(u64, &str), String> {
    let text =
        std::str::from_utf8(text).map_err(|_| "the chunk header is not ASCII".to_string())?;
    let (size, extension) = match text.split_once(';') {
        Some((size, extension)) => (size, Some(extension)),
        None => (text, None),
    };
    let size = parse_size(size).ok_or_else(|| format!("'{size}' is not a hex chunk size"))?;
    match (signed, extension) {
        (false, None) => Ok((size, "")),
        (false, Some(e)) => Err(format!(
            "';{e}' after the size: an unsigned payload's chunk header is the size alone"
        )),
        (true, None) => Err("the chunk header has no ';chunk-signature='".to_string()),
        (true, Some(e)) => match e.strip_prefix("chunk-signature=") {
            Some(sig) if sig.len() == 64 && sig.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Ok((size, sig))
            }
            _ => Err(format!(
                "';{e}' is not ';chunk-signature=' and 64 hex digits"
            )),
        },
    }
}

/// The first line of `bytes` and what follows it: a line ends in `\r\n`, or, where `loose`,
/// in `\n\r\n` (as some clients end a trailer's checksum line). `Err(true)` when no line end
/// has arrived (the body ended early), `Err(false)` when it is not one.
fn split_line(bytes: &[u8], loose: bool) -> Result<(&[u8], &[u8]), bool> {
    let at = bytes.iter().position(|&b| b == b'\n').ok_or(true)?;
    if at > 0 && bytes[at - 1] == b'\r' {
        return Ok((&bytes[..at - 1], &bytes[at + 1..]));
    }
    let rest = &bytes[at + 1..];
    match rest {
        [b'\r', b'\n', ..] if loose => Ok((&bytes[..at], &rest[2..])),
        [] | [b'\r'] if loose => Err(true),
        _ => Err(false),
    }
}

impl Decoder {
    pub fn new(streaming: &Streaming) -> Decoder {
        let signing = streaming.signing.clone().filter(|_| streaming.signed);
        Decoder {
            signed: streaming.signed,
            trailer: streaming.trailer,
            decoded_length: streaming.decoded_length,
            previous: signing
                .as_ref()
                .map(|s| s.seed_signature.clone())
                .unwrap_or_default(),
            signing,
            part: Part::Header,
            line: Vec::new(),
            signature: String::new(),
            hasher: None,
            chunk: 1,
            chunk_at: 0,
            wire_bytes: 0,
            decoded_bytes: 0,
            flip: None,
        }
    }

    /// Inverts data byte `at` (`serve --faults flip-upload`) as it arrives.
    pub fn flipping(mut self, at: Option<u64>) -> Decoder {
        self.flip = at;
        self
    }

    /// Data bytes decoded so far.
    pub fn decoded_bytes(&self) -> u64 {
        self.decoded_bytes
    }

    /// Where the current chunk is, for messages.
    fn at(&self) -> String {
        format!(
            "aws-chunked body, chunk {} (its header at byte {})",
            self.chunk, self.chunk_at
        )
    }

    /// Takes one frame of the body; the data in it goes to `out`, as slices of `frame`.
    pub fn feed(&mut self, mut frame: Bytes, out: &mut impl Extend<Bytes>) -> Result<(), S3Error> {
        while !frame.is_empty() {
            let taken = match self.part {
                Part::Header => self.header_bytes(&frame)?,
                Part::Data { left } => {
                    let n = usize::try_from(left).map_or(frame.len(), |l| l.min(frame.len()));
                    let mut data = frame.split_to(n);
                    let start = self.decoded_bytes;
                    if let Some(at) = self
                        .flip
                        .filter(|at| (start..start + n as u64).contains(at))
                    {
                        let mut changed = bytes::BytesMut::from(&data[..]);
                        changed[(at - start) as usize] ^= 0xff;
                        data = changed.freeze();
                    }
                    self.data(&data)?;
                    out.extend(std::iter::once(data));
                    self.wire_bytes += n as u64;
                    continue;
                }
                Part::DataEnd { seen } => {
                    if frame[0] != b"\r\n"[seen] {
                        return Err(malformed(format!(
                            "{}: the chunk's data is not followed by CRLF (byte {})",
                            self.at(),
                            self.wire_bytes
                        )));
                    }
                    self.part = if seen == 0 {
                        Part::DataEnd { seen: 1 }
                    } else {
                        self.chunk += 1;
                        self.chunk_at = self.wire_bytes + 1;
                        Part::Header
                    };
                    1
                }
                Part::Tail => {
                    if self.line.len() + frame.len() > MAX_TRAILER_BYTES {
                        return Err(malformed(format!(
                            "{}: more than {MAX_TRAILER_BYTES} bytes after the final chunk",
                            self.at()
                        )));
                    }
                    self.line.extend_from_slice(&frame);
                    frame.len()
                }
            };
            frame.advance(taken);
            self.wire_bytes += taken as u64;
        }
        Ok(())
    }

    /// Takes chunk-header bytes from the start of `frame` (up to its `\n`); returns how many.
    fn header_bytes(&mut self, frame: &[u8]) -> Result<usize, S3Error> {
        let end = frame.iter().position(|&b| b == b'\n');
        let taken = end.map_or(frame.len(), |i| i + 1);
        if self.line.len() + taken > MAX_CHUNK_HEADER_BYTES {
            return Err(malformed(format!(
                "{}: the chunk header runs past {MAX_CHUNK_HEADER_BYTES} bytes without a line end",
                self.at()
            )));
        }
        self.line.extend_from_slice(&frame[..taken]);
        if end.is_some() {
            self.chunk_header()?;
        }
        Ok(taken)
    }

    /// A whole chunk header has arrived in `line`: the chunk's data comes next, or the end.
    fn chunk_header(&mut self) -> Result<(), S3Error> {
        let Some(text) = self.line.strip_suffix(b"\r\n") else {
            return Err(malformed(format!(
                "{}: the chunk header ends in a bare LF, not CRLF",
                self.at()
            )));
        };
        let (size, signature) = parse_header(text, self.signed)
            .map_err(|e| malformed(format!("{}: {e}", self.at())))?;
        self.signature.clear();
        self.signature.push_str(signature);
        self.line.clear();
        let room = self.decoded_length - self.decoded_bytes;
        if size > room {
            return Err(incomplete(format!(
                "{}: its {size} bytes and the {} before it are more than \
                 x-amz-decoded-content-length {}",
                self.at(),
                self.decoded_bytes,
                self.decoded_length
            )));
        }
        if size > 0 {
            self.part = Part::Data { left: size };
            self.hasher = self.signing.as_ref().map(|_| Sha256::new());
            return Ok(());
        }
        if room > 0 {
            return Err(incomplete(format!(
                "{}: the final chunk came after {} bytes of data; \
                 x-amz-decoded-content-length says {}",
                self.at(),
                self.decoded_bytes,
                self.decoded_length
            )));
        }
        self.check_signature(Sha256::digest(b"").into())?;
        self.part = Part::Tail;
        Ok(())
    }

    /// Takes a piece of the current chunk's data.
    fn data(&mut self, data: &[u8]) -> Result<(), S3Error> {
        let Part::Data { left } = self.part else {
            return Ok(());
        };
        if let Some(h) = self.hasher.as_mut() {
            h.update(data);
        }
        self.decoded_bytes += data.len() as u64;
        let left = left - data.len() as u64;
        if left > 0 {
            self.part = Part::Data { left };
            return Ok(());
        }
        self.part = Part::DataEnd { seen: 0 };
        match self.hasher.take() {
            Some(h) => self.check_signature(h.finalize().into()),
            None => Ok(()),
        }
    }

    /// The current chunk's signature against the one computed over data hashing to
    /// `data_sha256` (nothing to check without signing); it becomes the next one's `previous`.
    fn check_signature(&mut self, data_sha256: [u8; 32]) -> Result<(), S3Error> {
        let Some(s) = &self.signing else {
            return Ok(());
        };
        let expected = chunk_signature(&s.key, &s.amz_date, &s.scope, &self.previous, &data_sha256);
        if !constant_time_eq(expected.as_bytes(), self.signature.as_bytes()) {
            return Err(mismatch(format!(
                "{}: the chunk signature {} is not the one computed over its data; check the \
                 signing key and that each chunk signs the one before it",
                self.at(),
                self.signature
            )));
        }
        self.previous = expected;
        Ok(())
    }

    /// The body has ended: checks that it ended where it should and reads the trailer.
    pub fn finish(self) -> Result<Option<Trailer>, S3Error> {
        if self.part != Part::Tail {
            return Err(incomplete(format!(
                "{}: the body ended (at byte {}) after {} of x-amz-decoded-content-length {} \
                 bytes of data, before the final zero-length chunk",
                self.at(),
                self.wire_bytes,
                self.decoded_bytes,
                self.decoded_length
            )));
        }
        let at = self.wire_bytes - self.line.len() as u64;
        let ended_early = || {
            incomplete(format!(
                "aws-chunked body: the body ended in the trailer, which begins at byte {at}"
            ))
        };
        let wrong = |what: &str| {
            malformed(format!(
                "aws-chunked body, the trailer at byte {at}: {what}"
            ))
        };
        let Some(algorithm) = self.trailer else {
            return match &self.line[..] {
                b"\r\n" => Ok(None),
                b"" | b"\r" => Err(ended_early()),
                _ => Err(wrong(
                    "only CRLF belongs after the final chunk of a payload without a trailer",
                )),
            };
        };
        let (line, rest) = split_line(&self.line, true).map_err(|early| {
            if early {
                ended_early()
            } else {
                wrong("the checksum line does not end in CRLF")
            }
        })?;
        let line =
            std::str::from_utf8(line).map_err(|_| wrong("the checksum line is not ASCII"))?;
        let Some((name, value)) = line.split_once(':') else {
            return Err(wrong("the checksum line is not NAME:VALUE"));
        };
        if !name.trim().eq_ignore_ascii_case(algorithm.header()) {
            return Err(wrong(&format!(
                "it carries '{}', but x-amz-trailer named {}",
                name.trim(),
                algorithm.header()
            )));
        }
        let value = value.trim();
        let rest = if self.signed {
            let (signature, rest) = split_line(rest, false).map_err(|early| {
                if early {
                    ended_early()
                } else {
                    wrong("the signature line does not end in CRLF")
                }
            })?;
            let Some(signature) = signature.strip_prefix(b"x-amz-trailer-signature:") else {
                return Err(wrong(
                    "the checksum line is not followed by x-amz-trailer-signature:",
                ));
            };
            if let Some(s) = &self.signing {
                let signed = format!("{}:{value}\n", algorithm.header());
                let expected = trailer_signature(
                    &s.key,
                    &s.amz_date,
                    &s.scope,
                    &self.previous,
                    signed.as_bytes(),
                );
                if !constant_time_eq(expected.as_bytes(), signature) {
                    return Err(mismatch(format!(
                        "aws-chunked body, the trailer at byte {at}: x-amz-trailer-signature {} is \
                         not the one computed over '{}:{value}' and the final chunk's signature; \
                         check the signing key and that the trailer signs after the final chunk \
                         (AWS4-HMAC-SHA256-TRAILER)",
                        String::from_utf8_lossy(signature),
                        algorithm.header()
                    )));
                }
            }
            rest
        } else {
            rest
        };
        match rest {
            b"\r\n" => Ok(Some(Trailer {
                algorithm,
                value: value.to_string(),
            })),
            b"" | b"\r" => Err(ended_early()),
            _ => Err(wrong("only CRLF belongs after the trailer's lines")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::s3::sigv4::signing_key;

    /// AWS's example credentials and request (S3 API reference, "Transferring Payload in
    /// Multiple Chunks"): the seed is that request's header signature.
    fn signing() -> ChunkSigning {
        ChunkSigning {
            key: signing_key(
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "20130524",
                "us-east-1",
                "s3",
            ),
            amz_date: "20130524T000000Z".into(),
            scope: "20130524/us-east-1/s3/aws4_request".into(),
            seed_signature: "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
                .into(),
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Form {
        UnsignedTrailer,
        Signed,
        SignedTrailer,
    }

    const FORMS: [Form; 3] = [Form::UnsignedTrailer, Form::Signed, Form::SignedTrailer];

    fn streaming(form: Form, decoded_length: u64, signing: Option<ChunkSigning>) -> Streaming {
        Streaming {
            signed: form != Form::UnsignedTrailer,
            trailer: (form != Form::Signed).then_some(Algorithm::Crc32c),
            decoded_length,
            signing,
        }
    }

    /// `data` as a client sends it in `form`, in chunks of `chunk_bytes`, signed with
    /// [`signing`], the trailer carrying the data's CRC32C.
    fn encode(form: Form, data: &[u8], chunk_bytes: usize) -> Vec<u8> {
        let s = signing();
        let mut previous = s.seed_signature.clone();
        let mut out = Vec::new();
        for piece in data.chunks(chunk_bytes).chain([&[][..]]) {
            if form == Form::UnsignedTrailer {
                out.extend(format!("{:x}\r\n", piece.len()).bytes());
            } else {
                let hash = Sha256::digest(piece).into();
                previous = chunk_signature(&s.key, &s.amz_date, &s.scope, &previous, &hash);
                out.extend(format!("{:x};chunk-signature={previous}\r\n", piece.len()).bytes());
            }
            if !piece.is_empty() || form == Form::Signed {
                out.extend_from_slice(piece);
                out.extend_from_slice(b"\r\n");
            }
        }
        let line = format!(
            "x-amz-checksum-crc32c:{}",
            crate::checksum::digest(Algorithm::Crc32c, data).base64()
        );
        match form {
            Form::Signed => {}
            Form::UnsignedTrailer => out.extend(format!("{line}\r\n\r\n").bytes()),
            Form::SignedTrailer => {
                let signed = format!("{line}\n");
                let sig =
                    trailer_signature(&s.key, &s.amz_date, &s.scope, &previous, signed.as_bytes());
                out.extend(format!("{line}\r\nx-amz-trailer-signature:{sig}\r\n\r\n").bytes());
            }
        }
        out
    }

    /// Feeds `body` in frames cut at `cuts` (offsets, ascending); the data and the trailer.
    fn decode_cut(
        streaming: &Streaming,
        body: &[u8],
        cuts: &[usize],
    ) -> Result<(Vec<u8>, Option<Trailer>), S3Error> {
        let body = Bytes::copy_from_slice(body);
        let range = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
        let mut decoder = Decoder::new(streaming);
        let mut pieces: Vec<Bytes> = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain([&body.len()]) {
            decoder.feed(body.slice(from..to), &mut pieces)?;
            from = to;
        }
        // Every piece is a slice of the body as it arrived: nothing copied.
        for piece in &pieces {
            assert!(!piece.is_empty());
            assert!(range.contains(&(piece.as_ptr() as usize)), "a copied piece");
        }
        let data: Vec<u8> = pieces.concat();
        assert_eq!(decoder.decoded_bytes(), data.len() as u64);
        Ok((data, decoder.finish()?))
    }

    fn decode_every(streaming: &Streaming, body: &[u8], step: usize) -> Result<Vec<u8>, S3Error> {
        let cuts: Vec<usize> = (step..body.len()).step_by(step).collect();
        decode_cut(streaming, body, &cuts).map(|(data, _)| data)
    }

    fn sample(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn each_form_decodes_whatever_the_frames_split() {
        let data = sample(250);
        let crc = crate::checksum::digest(Algorithm::Crc32c, &data).base64();
        for form in FORMS {
            let body = encode(form, &data, 100);
            let s = streaming(form, data.len() as u64, Some(signing()));
            let want_trailer = (form != Form::Signed).then(|| Trailer {
                algorithm: Algorithm::Crc32c,
                value: crc.clone(),
            });
            // Two frames cut at every offset: inside each chunk header, each CRLF, the
            // signatures and the trailer.
            for cut in 0..=body.len() {
                let (got, trailer) = decode_cut(&s, &body, &[cut]).unwrap();
                assert_eq!(got, data, "{form:?} cut at {cut}");
                assert_eq!(trailer, want_trailer, "{form:?} cut at {cut}");
            }
            for step in [1, 2, 3, 7, 64, 101] {
                assert_eq!(
                    decode_every(&s, &body, step).unwrap(),
                    data,
                    "{form:?} by {step}"
                );
            }
            // A server without credentials decodes the signed forms without checking them.
            let unchecked = streaming(form, data.len() as u64, None);
            assert_eq!(decode_every(&unchecked, &body, 5).unwrap(), data);
        }
    }

    /// AWS's documented signed upload: 66,560 bytes of 'a' in chunks of 64 KiB, 1 KiB and 0,
    /// with the chunk signatures AWS lists.
    #[test]
    fn the_aws_documented_body_decodes_and_a_changed_byte_is_refused() {
        let data = vec![b'a'; 66560];
        let body = encode(Form::Signed, &data, 65536);
        let text = String::from_utf8_lossy(&body);
        for sig in [
            "10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n",
            "400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n",
            "0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n",
        ] {
            assert!(text.contains(sig), "{sig}");
        }
        // AWS's Content-Length for this body.
        assert_eq!(body.len(), 66824);
        let s = streaming(Form::Signed, 66560, Some(signing()));
        assert_eq!(decode_every(&s, &body, 1000).unwrap(), data);
        let mut changed = body.clone();
        changed[66000] = b'b';
        let refused = decode_every(&s, &changed, 1000).unwrap_err();
        assert_eq!(refused.code, "SignatureDoesNotMatch");
        assert!(refused.message.contains("chunk 2"), "{}", refused.message);
    }

    /// `serve --faults flip-upload=N` inverts decoded byte N as it arrives, before the chunk's
    /// signature is checked: a signed chunk is refused, an unsigned one passes it on changed.
    #[test]
    fn a_flipped_byte_is_changed_before_the_chunk_signature_sees_it() {
        let data = sample(250);
        for form in FORMS {
            let body = encode(form, &data, 100);
            let s = streaming(form, 250, Some(signing()));
            let mut decoder = Decoder::new(&s).flipping(Some(150));
            let mut out: Vec<Bytes> = Vec::new();
            let fed = decoder.feed(Bytes::from(body), &mut out);
            if form == Form::UnsignedTrailer {
                fed.unwrap();
                let got: Vec<u8> = out.iter().flat_map(|b| b.iter().copied()).collect();
                assert_eq!(got[150], data[150] ^ 0xff);
                assert_eq!(got[..150], data[..150]);
            } else {
                let refused = fed.unwrap_err();
                assert_eq!(refused.code, "SignatureDoesNotMatch", "{form:?}");
                assert!(refused.message.contains("chunk 2"), "{}", refused.message);
            }
        }
    }

    /// Where `needle` first is in `body`, and everywhere it is.
    fn find(body: &[u8], needle: &str) -> Option<usize> {
        find_all(body, needle).into_iter().next()
    }

    fn find_all(body: &[u8], needle: &str) -> Vec<usize> {
        let needle = needle.as_bytes();
        (0..=body.len().saturating_sub(needle.len()))
            .filter(|&i| body[i..].starts_with(needle))
            .collect()
    }

    /// `body` with the first `from` replaced by `to`.
    fn replaced(body: &[u8], from: &str, to: &str) -> Vec<u8> {
        let at = find(body, from).unwrap_or_else(|| panic!("no {from:?}"));
        [&body[..at], to.as_bytes(), &body[at + from.len()..]].concat()
    }

    fn refused(s: &Streaming, body: &[u8]) -> S3Error {
        decode_every(s, body, 3).unwrap_err()
    }

    #[test]
    fn wrong_chunk_and_trailer_signatures_are_refused_with_403() {
        let data = sample(250);
        for form in [Form::Signed, Form::SignedTrailer] {
            let body = encode(form, &data, 100);
            let s = streaming(form, 250, Some(signing()));
            // Each chunk's signature, the final one's included, one hex digit changed.
            for (n, at) in find_all(&body, "chunk-signature=").into_iter().enumerate() {
                let mut wrong = body.clone();
                let digit = at + "chunk-signature=".len() + 10;
                wrong[digit] = if wrong[digit] == b'0' { b'1' } else { b'0' };
                let e = refused(&s, &wrong);
                assert_eq!((e.code, e.status.as_u16()), ("SignatureDoesNotMatch", 403));
                assert!(
                    e.message.contains(&format!("chunk {}", n + 1)),
                    "{}",
                    e.message
                );
            }
        }
        // The trailer's signature, and a trailer value changed under a right signature.
        let body = encode(Form::SignedTrailer, &data, 100);
        let s = streaming(Form::SignedTrailer, 250, Some(signing()));
        let at = find(&body, "x-amz-trailer-signature:").unwrap() + 30;
        let mut wrong = body.clone();
        wrong[at] = if wrong[at] == b'0' { b'1' } else { b'0' };
        assert_eq!(refused(&s, &wrong).code, "SignatureDoesNotMatch");
        let crc = crate::checksum::digest(Algorithm::Crc32c, &data).base64();
        let other = crate::checksum::digest(Algorithm::Crc32c, b"other").base64();
        let wrong = replaced(&body, &crc, &other);
        assert_eq!(refused(&s, &wrong).code, "SignatureDoesNotMatch");
        // AWS's first line, not garage 2.5's: a trailer signed with -PAYLOAD is refused.
        let sig_at = at - 30 + "x-amz-trailer-signature:".len();
        let good = String::from_utf8_lossy(&body[sig_at..sig_at + 64]).into_owned();
        let k = signing();
        let last_at = find_all(&body, "0;chunk-signature=").pop().unwrap() + 18;
        let last = String::from_utf8_lossy(&body[last_at..last_at + 64]).into_owned();
        let line_hash =
            crate::s3::sigv4::hex(&Sha256::digest(format!("x-amz-checksum-crc32c:{crc}\n")));
        let garage = crate::s3::sigv4::hex(&crate::s3::sigv4::hmac_sha256(
            &k.key,
            format!(
                "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{last}\n{line_hash}",
                k.amz_date, k.scope
            )
            .as_bytes(),
        ));
        assert_eq!(
            refused(&s, &replaced(&body, &good, &garage)).code,
            "SignatureDoesNotMatch"
        );
    }

    #[test]
    fn a_body_cut_short_anywhere_is_an_incomplete_body() {
        let data = sample(250);
        for form in FORMS {
            let body = encode(form, &data, 100);
            let s = streaming(form, 250, Some(signing()));
            for end in 0..body.len() {
                let e = decode_cut(&s, &body[..end], &[end / 2]).unwrap_err();
                assert_eq!(
                    e.code, "IncompleteBody",
                    "{form:?} ended at {end}: {}",
                    e.message
                );
            }
        }
    }

    #[test]
    fn data_that_is_not_the_decoded_length_is_an_incomplete_body_naming_both() {
        let data = sample(250);
        for form in FORMS {
            let body = encode(form, &data, 100);
            let short = refused(&streaming(form, 251, Some(signing())), &body);
            assert_eq!(short.code, "IncompleteBody");
            assert!(
                short.message.contains("250") && short.message.contains("251"),
                "{}",
                short.message
            );
            let long = refused(&streaming(form, 249, Some(signing())), &body);
            assert_eq!(long.code, "IncompleteBody");
            assert!(long.message.contains("249"), "{}", long.message);
        }
    }

    #[test]
    fn malformed_framing_is_refused_naming_the_chunk() {
        let data = sample(250);
        let unsigned = streaming(Form::UnsignedTrailer, 250, None);
        let body = encode(Form::UnsignedTrailer, &data, 100);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                replaced(&body, "64\r\n", "6x\r\n"),
                "'6x' is not a hex chunk size",
            ),
            (
                replaced(&body, "64\r\n", "+64\r\n"),
                "'+64' is not a hex chunk size",
            ),
            (replaced(&body, "32\r\n", "32\n"), "bare LF"),
            (replaced(&body, "32\r\n", "32;x=y\r\n"), "the size alone"),
            ([b"0".repeat(5000), body.clone()].concat(), "runs past 4096"),
        ];
        for (wrong, what) in &cases {
            let e = refused(&unsigned, wrong);
            assert_eq!(e.code, "InvalidRequest", "{what}: {}", e.message);
            assert!(e.message.contains(what), "{what}: {}", e.message);
            assert!(e.message.contains("chunk"), "{}", e.message);
        }
        // The second chunk's data runs one byte into where its CRLF belongs.
        let mut wrong = body.clone();
        let second = 4 + 100 + 2 + 4 + 100;
        wrong[second] = b'x';
        let e = refused(&unsigned, &wrong);
        assert!(
            e.message.contains("chunk 2") && e.message.contains("CRLF"),
            "{}",
            e.message
        );
        // Past the final chunk: a trailer other than x-amz-trailer's, too long, or extra bytes.
        let crc = crate::checksum::digest(Algorithm::Crc32c, &data).base64();
        for (from, to) in [
            ("x-amz-checksum-crc32c:", "x-amz-checksum-crc32:"),
            ("\r\n\r\n", "\r\nextra\r\n\r\n"),
            (crc.as_str(), &"A".repeat(5000)),
        ] {
            let tail = body.len() - 40;
            let wrong = [&body[..tail], &replaced(&body[tail..], from, to)].concat();
            assert_eq!(refused(&unsigned, &wrong).code, "InvalidRequest", "{to}");
        }
        // A signed chunk header without its signature.
        let signed = encode(Form::Signed, &data, 100);
        let s = streaming(Form::Signed, 250, Some(signing()));
        let e = refused(
            &s,
            &[
                b"64\r\n",
                &signed[signed.iter().position(|&b| b == b'\n').unwrap() + 1..],
            ]
            .concat(),
        );
        assert!(e.message.contains("chunk-signature"), "{}", e.message);
    }

    #[test]
    fn a_checksum_line_ending_in_lf_crlf_is_taken() {
        let data = sample(250);
        let body = encode(Form::UnsignedTrailer, &data, 100);
        let crc = crate::checksum::digest(Algorithm::Crc32c, &data).base64();
        let loose = replaced(&body, &format!("{crc}\r\n"), &format!("{crc}\n\r\n"));
        let s = streaming(Form::UnsignedTrailer, 250, None);
        for cut in 0..=loose.len() {
            let (got, trailer) = decode_cut(&s, &loose, &[cut]).unwrap();
            assert_eq!(got, data);
            assert_eq!(trailer.unwrap().value, crc);
        }
    }
}
