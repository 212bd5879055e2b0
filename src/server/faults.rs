//! Fault injection (`ringload serve --faults SPEC`): a misbehaving store on demand, so that a
//! client's handling of each fault can be seen and tested.
//!
//! A spec is a comma-separated list of faults, each `KIND[=ARG][@TARGET][/WHEN]`:
//!
//! | kind | what the answer does |
//! |---|---|
//! | `503`, `500`, `403` | that status with an S3 error document (`SlowDown`, `InternalError`, `AccessDenied`), with a Content-Length |
//! | `503-chunked`, `500-chunked`, `403-chunked` | the same, sent with `Transfer-Encoding: chunked` |
//! | `503-retry-after=S` | `503 SlowDown` with `Retry-After: S` |
//! | `cut=N` | the body fails after N bytes: the connection is dropped mid-body |
//! | `short=N` | the body ends N bytes before its Content-Length, and the connection closes |
//! | `stall=N` | after N body bytes nothing more is sent; the connection stays open |
//! | `drip=B` | the body is sent at B bytes/s |
//! | `extra=N` | N bytes that are not HTTP follow the body on the kept-alive connection, past its Content-Length |
//! | `flip=N` | body byte N (the last, if the body is shorter) is inverted: a `206` with wrong data, which only `run --verify` notices |
//! | `wrong-range` | `Content-Range` names the range shifted by one byte |
//! | `ok-200` | `200 OK` instead of `206 Partial Content` |
//! | `corrupt-footer` | the object's last bytes (the footer's length and `PAR1`) are garbled |
//! | `bad-xml` | the listing is cut in half: XML that ends early |
//! | `repeat-token` | the listing says it is truncated and gives the same continuation token every time |
//! | `hang` | the request is read and never answered |
//! | `key-update` | over TLS 1.3, after this answer the server updates its keys and asks for the client's (a KeyUpdate, as rustls sends after 2^23 records); nothing over HTTP or TLS 1.2 |
//! | `200-error` | (`@complete` only) `200 OK` whose body is an `<Error>` document (`InternalError`), as S3 may answer a CompleteMultipartUpload that failed |
//! | `200-cut` | (`@complete` only) the upload is completed, then its `200` is cut after half its body: the connection drops |
//! | `200-short` | (`@complete` only) the upload is completed, then its `200` carries only half its XML, with a Content-Length to match (the HTTP framing intact) |
//! | `no-etag` | (`@part` only) the part is stored, and its answer carries no `ETag` |
//! | `ignore-prefix` | (`@list` only) ListMultipartUploads answers as if no `prefix` had been asked: every upload open in the bucket (`nth`, `every`, `rate` count those listings) |
//! | `flip-upload=N` | (`@part` or `@put` only; `@part` by default) byte N of the received body (the last, if the body is shorter) is inverted before the checksum check and the store see it, as a changed byte between the client and the store: a request carrying a checksum is answered `400 BadDigest` |
//! | `early=CODE` | (`@part` or `@put` only; `@part` by default) answered as soon as its head is read, before the body, as a store that refuses an upload at its head does: `404 NoSuchUpload`, `403 AccessDenied`, `400 EntityTooLarge`, `503 SlowDown` or `500 InternalError` with its S3 document and `Connection: close`; the body is then read and dropped behind the answer (a lingering close, as nginx and S3 do) and the connection closes |
//! | `early-reset=CODE` | as `early=CODE`, but the body is not read: the connection closes at once, resetting the client while it sends (the answer already in its socket) |
//! | `ignore-checksums` | (`@any` only, its default) the request's `x-amz-checksum-*` headers are dropped before the server reads it: a store that neither checks nor keeps checksums, whose CompleteMultipartUpload result then carries none back (`every=1` for every request) |
//! | `pause=MS` | the whole server pauses for MS milliseconds: this answer and every other one that is ready meanwhile, on every connection, is held until the pause ends (bodies already being sent go on); on a write target the write goes to the store and its answer is held |
//!
//! `TARGET` is what the fault applies to: `rg` (ranged GETs of row groups: every ranged GET
//! whose range ends before the object's last byte), `footer` (ranged GETs that reach the
//! object's end), `list` (ListObjects), `part` (UploadPart), `complete`
//! (CompleteMultipartUpload), `put` (PutObject) or `any` request. The default is `rg`;
//! `bad-xml` and `repeat-token` apply only to `list`, `corrupt-footer` only to `footer`,
//! `200-error` only to `complete` (its default).
//!
//! On the write targets (`part`, `complete`, `put`) a fault acts on the request before the
//! store sees it, so what it fails is not stored: an error status (`503`, `500`, `403`, their
//! `-chunked` forms, `503-retry-after=S`, `200-error`) is answered after the body has been read
//! and dropped (the connection stays usable, the upload stays open); `cut=N` reads N body bytes
//! (all of a shorter body) and closes the connection without an answer; `hang` reads the body
//! and never answers. Other kinds are refused there. E.g. `503@part/nth=3` fails the third
//! part, `cut=1000000@part/every=4` cuts every fourth part 1 MB in, `500@complete/every=1`
//! fails every completion.
//!
//! `WHEN`: `nth=N` (the Nth request of the target, once), `every=N` (every Nth), or `rate=P`
//! (each request with probability P, drawn from `--faults-seed`). The default is `nth=1`.
//!
//! Each fault counts what it injected; `ServerStats::faults` reports the counts by spec.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

use super::body::{Body, Ending};
use super::trailing::Trailing;

/// What a fault does to an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// An error status with its S3 code; `chunked` sends the document without a length.
    Status {
        status: u16,
        chunked: bool,
        retry_after_s: Option<u64>,
    },
    Cut(u64),
    Short(u64),
    Stall(u64),
    Drip(u64),
    Flip(u64),
    Extra(u64),
    WrongRange,
    Ok200,
    CorruptFooter,
    BadXml,
    RepeatToken,
    Hang,
    KeyUpdate,
    /// `200 OK` with an `<Error>` document (a failed CompleteMultipartUpload, as S3 answers).
    ErrorIn200,
    /// Every answer of the server held for this many milliseconds from now.
    Pause(u64),
    /// The write is stored, then its `200`'s body is cut halfway (the connection drops).
    CutAfterStore,
    /// The write is stored, then its `200`'s XML is cut in half, its length to match.
    ShortAfterStore,
    /// The part is stored, and its answer carries no `ETag`.
    NoEtag,
    /// ListMultipartUploads ignores its `prefix`.
    IgnorePrefix,
    /// Body byte N of an upload inverted before the store (and its checksum check) sees it.
    FlipUpload(u64),
    /// Answered with this status before the body is read; the connection closes after it:
    /// once the body is drained behind the answer (`true`, a lingering close), or at once,
    /// the body unread (`false`: the client is reset while it sends).
    Early(u16, bool),
    /// The request's `x-amz-checksum-*` headers are dropped before the server reads it.
    IgnoreChecksums,
}

/// A request extension: the body byte `flip-upload=N` inverts (see [`FaultKind::FlipUpload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlipUpload(pub u64);

impl FaultKind {
    /// Acts on the answer after the store took the write.
    fn after_store(self) -> bool {
        matches!(
            self,
            FaultKind::CutAfterStore | FaultKind::ShortAfterStore | FaultKind::NoEtag
        )
    }
}

/// What a request is, for matching faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    RowGroup,
    Footer,
    List,
    /// UploadPart.
    Part,
    /// CompleteMultipartUpload.
    Complete,
    /// PutObject.
    Put,
    Any,
}

impl Target {
    /// A write, whose faults act before the store sees the request.
    pub fn is_write(self) -> bool {
        matches!(self, Target::Part | Target::Complete | Target::Put)
    }
}

/// What a write's fault does, before the store sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFault {
    /// Read the body, then answer this.
    Answer(FaultKind),
    /// Read this many body bytes, then close the connection without an answer.
    Cut(u64),
    /// Read the body, never answer.
    Hang,
    /// Let the store take the write, then change its answer ([`after_store`]).
    AfterStore(FaultKind),
    /// Invert this body byte before the store sees it.
    Flip(u64),
    /// Answer this status without reading the body, and close the connection (after draining
    /// the body with `true`).
    Early(u16, bool),
}

/// When a fault fires among the requests of its target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum When {
    Nth(u64),
    Every(u64),
    Rate(f64),
}

/// One fault of a spec, with its counters.
#[derive(Debug)]
pub struct Fault {
    /// As written in the spec, for reports.
    pub text: String,
    pub kind: FaultKind,
    pub target: Target,
    pub when: When,
    /// Requests of the target seen so far.
    seen: AtomicU64,
    /// Faults injected so far.
    pub injected: AtomicU64,
}

/// The faults a server injects.
#[derive(Debug, Default)]
pub struct Faults {
    faults: Vec<Fault>,
    rng: Mutex<u64>,
    /// The end of the pause under way (`pause=MS`), in ns after `since`; 0: none yet.
    paused_until_ns: AtomicU64,
    since: Option<std::time::Instant>,
}

/// Why `kind` cannot aim at `target` (`Ok`: it can).
fn check_target(kind: FaultKind, target: Target) -> Result<(), &'static str> {
    match (kind, target) {
        (FaultKind::ErrorIn200 | FaultKind::CutAfterStore | FaultKind::ShortAfterStore, t)
            if t != Target::Complete =>
        {
            Err("this kind applies to CompleteMultipartUpload only: @complete")
        }
        (FaultKind::NoEtag, t) if t != Target::Part => {
            Err("this kind applies to UploadPart only: @part")
        }
        (FaultKind::FlipUpload(_) | FaultKind::Early(..), t)
            if t != Target::Part && t != Target::Put =>
        {
            Err("this kind applies to upload bodies only: @part or @put")
        }
        (FaultKind::IgnoreChecksums, t) if t != Target::Any => {
            Err("this kind applies to every request: @any")
        }
        (FaultKind::BadXml | FaultKind::RepeatToken | FaultKind::IgnorePrefix, t)
            if t != Target::List =>
        {
            Err("this kind applies to listings only: @list")
        }
        (FaultKind::CorruptFooter, t) if t != Target::Footer => {
            Err("this kind applies to footer reads only: @footer")
        }
        (
            FaultKind::Status { .. }
            | FaultKind::Cut(_)
            | FaultKind::Hang
            | FaultKind::Pause(_)
            | FaultKind::ErrorIn200
            | FaultKind::CutAfterStore
            | FaultKind::ShortAfterStore
            | FaultKind::NoEtag
            | FaultKind::FlipUpload(_)
            | FaultKind::Early(..)
            | FaultKind::IgnoreChecksums,
            _,
        ) => Ok(()),
        (_, t) if t.is_write() => Err(
            "on part, complete and put only an error status (503, 500, 403, their -chunked \
             forms, 503-retry-after=S, 200-error), cut=N, hang, pause=MS, 200-cut, 200-short, \
             no-etag, flip-upload=N, early=CODE or early-reset=CODE apply",
        ),
        _ => Ok(()),
    }
}

fn parse_one(text: &str) -> Result<Fault, String> {
    let bad =
        |why: &str| format!("fault '{text}': {why}; see 'ringload serve --help' for the forms");
    let (rest, when) = match text.split_once('/') {
        Some((rest, when)) => (rest, Some(when)),
        None => (text, None),
    };
    let (kind_text, target_text) = match rest.split_once('@') {
        Some((k, t)) => (k, Some(t)),
        None => (rest, None),
    };
    let (name, arg) = match kind_text.split_once('=') {
        Some((n, a)) => (n, Some(a)),
        None => (kind_text, None),
    };
    let number = |what: &str| -> Result<u64, String> {
        arg.and_then(|a| a.trim().parse::<u64>().ok())
            .ok_or_else(|| bad(&format!("{name} needs {what}, e.g. {name}=1000")))
    };
    let status = |status, chunked| FaultKind::Status {
        status,
        chunked,
        retry_after_s: None,
    };
    let kind = match name {
        "503" => status(503, false),
        "500" => status(500, false),
        "403" => status(403, false),
        "503-chunked" => status(503, true),
        "500-chunked" => status(500, true),
        "403-chunked" => status(403, true),
        "503-retry-after" => FaultKind::Status {
            status: 503,
            chunked: false,
            retry_after_s: Some(number("seconds")?),
        },
        "cut" => FaultKind::Cut(number("a byte count")?),
        "short" => FaultKind::Short(number("a byte count")?),
        "stall" => FaultKind::Stall(number("a byte count")?),
        "drip" => match number("bytes per second")? {
            0 => return Err(bad("drip needs a rate above 0")),
            rate => FaultKind::Drip(rate),
        },
        "flip" => FaultKind::Flip(number("a byte offset")?),
        "extra" => match number("a byte count")? {
            0 => return Err(bad("extra needs a count above 0")),
            n => FaultKind::Extra(n),
        },
        "wrong-range" => FaultKind::WrongRange,
        "ok-200" => FaultKind::Ok200,
        "corrupt-footer" => FaultKind::CorruptFooter,
        "bad-xml" => FaultKind::BadXml,
        "repeat-token" => FaultKind::RepeatToken,
        "hang" => FaultKind::Hang,
        "key-update" => FaultKind::KeyUpdate,
        "200-error" => FaultKind::ErrorIn200,
        "200-cut" => FaultKind::CutAfterStore,
        "200-short" => FaultKind::ShortAfterStore,
        "no-etag" => FaultKind::NoEtag,
        "ignore-prefix" => FaultKind::IgnorePrefix,
        "ignore-checksums" => FaultKind::IgnoreChecksums,
        "flip-upload" => FaultKind::FlipUpload(number("a byte offset")?),
        "early" | "early-reset" => match number("a status")? {
            code @ (400 | 403 | 404 | 500 | 503) => FaultKind::Early(code as u16, name == "early"),
            _ => return Err(bad("early takes 400, 403, 404, 500 or 503")),
        },
        "pause" => match number("milliseconds")? {
            0 => return Err(bad("pause needs milliseconds above 0")),
            ms => FaultKind::Pause(ms),
        },
        _ => return Err(bad("unknown kind")),
    };
    let target = match (target_text, kind) {
        (None, FaultKind::BadXml | FaultKind::RepeatToken | FaultKind::IgnorePrefix) => {
            Target::List
        }
        (None, FaultKind::IgnoreChecksums) => Target::Any,
        (None, FaultKind::CorruptFooter) => Target::Footer,
        (None, FaultKind::ErrorIn200 | FaultKind::CutAfterStore | FaultKind::ShortAfterStore) => {
            Target::Complete
        }
        (None, FaultKind::NoEtag | FaultKind::FlipUpload(_) | FaultKind::Early(..)) => Target::Part,
        (None, _) => Target::RowGroup,
        (Some("rg"), _) => Target::RowGroup,
        (Some("footer"), _) => Target::Footer,
        (Some("list"), _) => Target::List,
        (Some("part"), _) => Target::Part,
        (Some("complete"), _) => Target::Complete,
        (Some("put"), _) => Target::Put,
        (Some("any"), _) => Target::Any,
        (Some(other), _) => {
            return Err(bad(&format!(
                "unknown target '{other}'; use rg, footer, list, part, complete, put or any"
            )));
        }
    };
    check_target(kind, target).map_err(&bad)?;
    let when = match when.map(|w| w.split_once('=')) {
        None => When::Nth(1),
        Some(Some(("nth", n))) => When::Nth(
            n.parse()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| bad("nth needs a count of 1 or more"))?,
        ),
        Some(Some(("every", n))) => When::Every(
            n.parse()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| bad("every needs a count of 1 or more"))?,
        ),
        Some(Some(("rate", p))) => When::Rate(
            p.parse()
                .ok()
                .filter(|p: &f64| (0.0..=1.0).contains(p))
                .ok_or_else(|| bad("rate needs a probability from 0 to 1"))?,
        ),
        Some(_) => return Err(bad("WHEN is nth=N, every=N or rate=P")),
    };
    Ok(Fault {
        text: text.to_string(),
        kind,
        target,
        when,
        seen: AtomicU64::new(0),
        injected: AtomicU64::new(0),
    })
}

impl Faults {
    /// Parses a spec; the error names the fault that is wrong and why.
    pub fn parse(spec: &str, seed: u64) -> Result<Faults, String> {
        let faults = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(parse_one)
            .collect::<Result<Vec<_>, _>>()?;
        if faults.is_empty() {
            return Err("--faults names no fault; e.g. --faults 503@rg/nth=2".into());
        }
        Ok(Faults {
            faults,
            rng: Mutex::new(seed),
            paused_until_ns: AtomicU64::new(0),
            since: Some(std::time::Instant::now()),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }

    /// Whether this ListMultipartUploads is to ignore its prefix (`ignore-prefix`), counted.
    pub fn ignores_prefix(&self) -> bool {
        self.faults
            .iter()
            .any(|f| f.kind == FaultKind::IgnorePrefix)
            && self.pick_kind(Target::List, FaultKind::IgnorePrefix)
    }

    /// Whether this request's checksum headers are to be dropped (`ignore-checksums`),
    /// counted.
    pub fn ignores_checksums(&self) -> bool {
        self.faults
            .iter()
            .any(|f| f.kind == FaultKind::IgnoreChecksums)
            && self.pick_kind(Target::Any, FaultKind::IgnoreChecksums)
    }

    /// Whether a fault of `kind` aimed at `target` fires now (counted when it does).
    fn pick_kind(&self, target: Target, kind: FaultKind) -> bool {
        self.faults
            .iter()
            .filter(|f| f.kind == kind && f.target == target)
            .any(|f| self.fires(f))
    }

    /// Counts a request of `fault`'s target; whether the fault fires for it (counted as
    /// injected when it does).
    fn fires(&self, fault: &Fault) -> bool {
        let n = fault.seen.fetch_add(1, Ordering::Relaxed) + 1;
        let fires = match fault.when {
            When::Nth(k) => n == k,
            When::Every(k) => n.is_multiple_of(k),
            When::Rate(p) => self.draw() < p,
        };
        if fires {
            fault.injected.fetch_add(1, Ordering::Relaxed);
        }
        fires
    }

    /// `(spec, injected)` for every fault.
    pub fn counts(&self) -> Vec<(String, u64)> {
        self.faults
            .iter()
            .map(|f| (f.text.clone(), f.injected.load(Ordering::Relaxed)))
            .collect()
    }

    fn draw(&self) -> f64 {
        // splitmix64: a seeded, reproducible sequence.
        let mut state = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (((z ^ (z >> 31)) >> 11) as f64) / (1u64 << 53) as f64
    }

    /// The fault that fires for a write (`target` is `part`, `complete` or `put`), before the
    /// store sees it; only faults aimed at that target count it (`@any` faults act on the
    /// answer, as for every request).
    pub fn pick_write(&self, target: Target) -> Option<WriteFault> {
        self.pick_among(target, false).and_then(|kind| match kind {
            FaultKind::Cut(n) => Some(WriteFault::Cut(n)),
            FaultKind::Hang => Some(WriteFault::Hang),
            FaultKind::FlipUpload(n) => Some(WriteFault::Flip(n)),
            FaultKind::Early(status, linger) => Some(WriteFault::Early(status, linger)),
            kind if kind.after_store() => Some(WriteFault::AfterStore(kind)),
            // The write is stored; its answer is held with every other one ([`Faults::apply`]).
            FaultKind::Pause(ms) => {
                self.pause(ms);
                None
            }
            kind => Some(WriteFault::Answer(kind)),
        })
    }

    /// Starts a pause of the whole server: every answer is held until `ms` from now (a pause
    /// under way is extended, never shortened).
    fn pause(&self, ms: u64) {
        let Some(since) = self.since else { return };
        let until = since.elapsed() + Duration::from_millis(ms);
        let until_ns = until.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.paused_until_ns.fetch_max(until_ns, Ordering::Relaxed);
    }

    /// Waits out the pause under way, if any.
    async fn hold(&self) {
        let Some(since) = self.since else { return };
        loop {
            let until = Duration::from_nanos(self.paused_until_ns.load(Ordering::Relaxed));
            let now = since.elapsed();
            if until <= now {
                return;
            }
            tokio::time::sleep(until - now).await;
        }
    }

    /// The first fault that fires for a request of `target`, counted as injected.
    fn pick(&self, target: Target) -> Option<FaultKind> {
        self.pick_among(target, true)
    }

    fn pick_among(&self, target: Target, with_any: bool) -> Option<FaultKind> {
        for fault in &self.faults {
            if fault.target != target && !(with_any && fault.target == Target::Any) {
                continue;
            }
            // Acted out on the request, before the store (`ignores_prefix`,
            // `ignores_checksums`).
            if matches!(
                fault.kind,
                FaultKind::IgnorePrefix | FaultKind::IgnoreChecksums
            ) {
                continue;
            }
            if self.fires(fault) {
                return Some(fault.kind);
            }
        }
        None
    }

    /// Applies the fault that fires, if any, to `response`, the answer to a request that is a
    /// listing when `listing`, on the connection whose bytes-after-a-body are `trailing`.
    /// Hangs forever for `hang`.
    pub async fn apply(
        &self,
        listing: bool,
        response: Response<Body>,
        trailing: Option<Arc<Trailing>>,
    ) -> Response<Body> {
        let target = if listing {
            Target::List
        } else {
            match range_end(&response) {
                Some(true) => Target::Footer,
                Some(false) => Target::RowGroup,
                None => Target::Any,
            }
        };
        let picked = self.pick(target);
        if let Some(FaultKind::Pause(ms)) = picked {
            self.pause(ms);
        }
        self.hold().await;
        match picked {
            None | Some(FaultKind::Pause(_)) => response,
            Some(kind) => inject(kind, response, trailing).await,
        }
    }
}

/// For a `206`: whether its range reaches the object's end.
fn range_end(response: &Response<Body>) -> Option<bool> {
    if response.status() != StatusCode::PARTIAL_CONTENT {
        return None;
    }
    let range = response
        .headers()
        .get(http::header::CONTENT_RANGE)?
        .to_str()
        .ok()?;
    let (span, total) = range.strip_prefix("bytes ")?.split_once('/')?;
    let last: u64 = span.split_once('-')?.1.parse().ok()?;
    Some(total.parse::<u64>().ok()? == last + 1)
}

/// A stored write's answer, changed by an [`WriteFault::AfterStore`] fault.
pub fn after_store(kind: FaultKind, response: Response<Body>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    match kind {
        FaultKind::NoEtag => {
            parts.headers.remove(http::header::ETAG);
            Response::from_parts(parts, body)
        }
        FaultKind::CutAfterStore => {
            let bytes = body.into_bytes();
            let half = bytes.len() as u64 / 2;
            let whole = Body::from_chunks(vec![Bytes::from(bytes)]);
            Response::from_parts(parts, whole.ending(Ending::FailAfter(half)))
        }
        FaultKind::ShortAfterStore => {
            let mut bytes = body.into_bytes();
            bytes.truncate(bytes.len() / 2);
            parts.headers.remove(http::header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from_chunks(vec![Bytes::from(bytes)]))
        }
        _ => Response::from_parts(parts, body),
    }
}

/// `early=CODE`'s answer: the status's S3 error document, and `Connection: close` (the body
/// was not read).
pub fn early_answer(status: u16) -> Response<Body> {
    let mut response = error_response(status, false, None);
    response
        .headers_mut()
        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The answer a write's `Answer` fault gives.
pub fn write_answer(kind: FaultKind) -> Response<Body> {
    match kind {
        FaultKind::Status {
            status,
            chunked,
            retry_after_s,
        } => error_response(status, chunked, retry_after_s),
        _ => {
            let mut response = error_response(500, false, None);
            *response.status_mut() = StatusCode::OK;
            response
        }
    }
}

fn error_response(status: u16, chunked: bool, retry_after_s: Option<u64>) -> Response<Body> {
    let (code, message) = match status {
        503 => ("SlowDown", "Please reduce your request rate."),
        403 => ("AccessDenied", "Access Denied"),
        404 => ("NoSuchUpload", "The specified upload does not exist."),
        400 => (
            "EntityTooLarge",
            "Your proposed upload exceeds the maximum allowed object size.",
        ),
        _ => (
            "InternalError",
            "We encountered an internal error. Please try again.",
        ),
    };
    let document = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>{message}</Message><Resource>injected by ringload serve --faults</Resource>\
         </Error>"
    );
    let body = Body::text(document);
    let mut response = Response::new(if chunked { body.chunked() } else { body });
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    if let Some(seconds) = retry_after_s
        && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
    {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, value);
    }
    response
}

async fn inject(
    kind: FaultKind,
    response: Response<Body>,
    trailing: Option<Arc<Trailing>>,
) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    let with_body = |parts, body| Response::from_parts(parts, body);
    match kind {
        FaultKind::Status {
            status,
            chunked,
            retry_after_s,
        } => error_response(status, chunked, retry_after_s),
        FaultKind::ErrorIn200 => {
            let mut response = error_response(500, false, None);
            *response.status_mut() = StatusCode::OK;
            response
        }
        FaultKind::Cut(n) => with_body(parts, body.ending(Ending::FailAfter(n))),
        FaultKind::Short(n) => with_body(parts, body.ending(Ending::ShortBy(n.max(1)))),
        FaultKind::Stall(n) => with_body(parts, body.ending(Ending::StallAfter(n))),
        FaultKind::Drip(rate) => with_body(parts, body.paced(Some(rate))),
        FaultKind::WrongRange => {
            let shifted = parts
                .headers
                .get(http::header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(shift_range);
            if let Some(value) = shifted.and_then(|s| HeaderValue::from_str(&s).ok()) {
                parts.headers.insert(http::header::CONTENT_RANGE, value);
            }
            with_body(parts, body)
        }
        FaultKind::Ok200 => {
            parts.status = StatusCode::OK;
            parts.headers.remove(http::header::CONTENT_RANGE);
            with_body(parts, body)
        }
        FaultKind::Extra(n) => match trailing {
            Some(trailing) => {
                let junk: Vec<u8> = b"#ringload-extra-bytes#"
                    .iter()
                    .copied()
                    .cycle()
                    .take(n as usize)
                    .collect();
                with_body(parts, body.then_send(trailing, Bytes::from(junk)))
            }
            None => with_body(parts, body),
        },
        FaultKind::KeyUpdate => match trailing {
            Some(trailing) => {
                trailing.update_keys();
                with_body(parts, body.then_send(trailing, Bytes::new()))
            }
            None => with_body(parts, body),
        },
        FaultKind::Flip(n) => {
            let mut bytes = body.into_bytes();
            let last = bytes.len().saturating_sub(1);
            if let Some(b) = bytes.get_mut((n as usize).min(last)) {
                *b = !*b;
            }
            with_body(parts, Body::from_chunks(vec![Bytes::from(bytes)]))
        }
        FaultKind::CorruptFooter => {
            let mut bytes = body.into_bytes();
            let n = bytes.len();
            for b in &mut bytes[n.saturating_sub(8)..] {
                *b ^= 0x5A;
            }
            with_body(parts, Body::from_chunks(vec![Bytes::from(bytes)]))
        }
        FaultKind::BadXml => {
            let mut bytes = body.into_bytes();
            bytes.truncate(bytes.len() / 2);
            parts.headers.remove(http::header::CONTENT_LENGTH);
            with_body(parts, Body::from_chunks(vec![Bytes::from(bytes)]))
        }
        FaultKind::RepeatToken => {
            let document = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult \
                 xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><IsTruncated>true</IsTruncated>\
                 <NextContinuationToken>injected-token</NextContinuationToken>\
                 <KeyCount>0</KeyCount></ListBucketResult>";
            parts.status = StatusCode::OK;
            parts.headers.remove(http::header::CONTENT_LENGTH);
            with_body(parts, Body::text(document.to_string()))
        }
        FaultKind::Pause(_) => with_body(parts, body),
        // Write faults only, acted out by the handler (`after_store`).
        FaultKind::CutAfterStore
        | FaultKind::ShortAfterStore
        | FaultKind::NoEtag
        | FaultKind::IgnorePrefix
        | FaultKind::FlipUpload(_)
        | FaultKind::Early(..)
        | FaultKind::IgnoreChecksums => with_body(parts, body),
        FaultKind::Hang => {
            // Read and never answered: the client's timeout ends it (or the server's shutdown).
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
    }
}

/// `bytes a-b/t` shifted by one byte: `bytes (a+1)-(b+1)/t`.
fn shift_range(range: &str) -> Option<String> {
    let (span, total) = range.strip_prefix("bytes ")?.split_once('/')?;
    let (a, b) = span.split_once('-')?;
    let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
    Some(format!("bytes {}-{}/{total}", a + 1, b + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_defaults_and_bad_ones_say_why() {
        let f = Faults::parse(
            "503, cut=1000@rg/every=3, bad-xml, hang@any/rate=0.5, key-update/every=2, \
             pause=3000@any/nth=5",
            1,
        )
        .unwrap();
        let kinds: Vec<_> = f
            .faults
            .iter()
            .map(|f| (f.kind, f.target, f.when))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (
                    FaultKind::Status {
                        status: 503,
                        chunked: false,
                        retry_after_s: None
                    },
                    Target::RowGroup,
                    When::Nth(1)
                ),
                (FaultKind::Cut(1000), Target::RowGroup, When::Every(3)),
                (FaultKind::BadXml, Target::List, When::Nth(1)),
                (FaultKind::Hang, Target::Any, When::Rate(0.5)),
                (FaultKind::KeyUpdate, Target::RowGroup, When::Every(2)),
                (FaultKind::Pause(3000), Target::Any, When::Nth(5)),
            ]
        );
        for (bad, why) in [
            ("", "names no fault"),
            ("504", "unknown kind"),
            ("cut", "cut needs a byte count"),
            ("503@disk", "unknown target 'disk'"),
            ("bad-xml@rg", "listings only"),
            ("corrupt-footer@rg", "footer reads only"),
            ("503/nth=0", "nth needs a count of 1 or more"),
            ("503/rate=2", "rate needs a probability"),
            ("503/sometimes", "WHEN is nth=N"),
            ("drip=0", "drip needs a rate above 0"),
            ("pause", "pause needs milliseconds, e.g. pause=1000"),
            ("pause=0", "pause needs milliseconds above 0"),
            ("flip=3@part", "on part, complete and put only"),
            ("200-error@part", "CompleteMultipartUpload only"),
        ] {
            let err = Faults::parse(bad, 1).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn after_store_faults_name_their_one_target() {
        let f = Faults::parse("200-cut,200-short/nth=2,no-etag", 1).unwrap();
        assert_eq!(
            f.pick_write(Target::Complete),
            Some(WriteFault::AfterStore(FaultKind::CutAfterStore))
        );
        assert_eq!(
            f.pick_write(Target::Part),
            Some(WriteFault::AfterStore(FaultKind::NoEtag))
        );
        let f = Faults::parse("ignore-prefix/every=2", 1).unwrap();
        assert_eq!(
            (0..4).map(|_| f.ignores_prefix()).collect::<Vec<_>>(),
            [false, true, false, true]
        );
        // Never acted out on an answer.
        assert_eq!(f.pick(Target::List), None);
        for bad in [
            "200-cut@part",
            "200-short@rg",
            "no-etag@complete",
            "ignore-prefix@part",
        ] {
            let e = Faults::parse(bad, 1).unwrap_err();
            assert!(e.contains(bad) && e.contains("only"), "{e}");
        }
    }

    #[test]
    fn write_faults_act_only_on_their_target() {
        let f = Faults::parse(
            "503@part/nth=3, cut=100@part/every=4, 200-error, 500@complete/every=2, hang@put",
            1,
        )
        .unwrap();
        // The first fault that fires takes the request: the cut sees parts 1, 2, 4 and 5.
        let parts: Vec<_> = (0..5).map(|_| f.pick_write(Target::Part)).collect();
        let answer = |status| {
            WriteFault::Answer(FaultKind::Status {
                status,
                chunked: false,
                retry_after_s: None,
            })
        };
        assert_eq!(
            parts,
            vec![
                None,
                None,
                Some(answer(503)),
                None,
                Some(WriteFault::Cut(100))
            ]
        );
        let completes: Vec<_> = (0..3).map(|_| f.pick_write(Target::Complete)).collect();
        assert_eq!(
            completes,
            vec![
                Some(WriteFault::Answer(FaultKind::ErrorIn200)),
                None,
                Some(answer(500))
            ]
        );
        assert_eq!(f.pick_write(Target::Put), Some(WriteFault::Hang));
        assert_eq!(
            f.pick(Target::RowGroup),
            None,
            "write faults leave reads alone"
        );
    }

    #[test]
    fn faults_fire_when_told_and_are_counted() {
        let f = Faults::parse("503/nth=2, 500@footer/every=2", 7).unwrap();
        let picks: Vec<_> = (0..4).map(|_| f.pick(Target::RowGroup)).collect();
        assert_eq!(picks.iter().filter(|p| p.is_some()).count(), 1);
        assert!(picks[1].is_some());
        let footers: Vec<_> = (0..4).map(|_| f.pick(Target::Footer).is_some()).collect();
        assert_eq!(footers, vec![false, true, false, true]);
        assert_eq!(
            f.counts(),
            vec![
                ("503/nth=2".to_string(), 1),
                ("500@footer/every=2".to_string(), 2)
            ]
        );
        // A rate is reproducible from its seed.
        let a = Faults::parse("503/rate=0.3", 42).unwrap();
        let b = Faults::parse("503/rate=0.3", 42).unwrap();
        let fired = |f: &Faults| -> Vec<bool> {
            (0..200)
                .map(|_| f.pick(Target::RowGroup).is_some())
                .collect()
        };
        let (fa, fb) = (fired(&a), fired(&b));
        assert_eq!(fa, fb);
        let n = fa.iter().filter(|x| **x).count();
        assert!((30..=90).contains(&n), "{n} of 200 at rate 0.3");
        assert_eq!(
            shift_range("bytes 4-13/100").as_deref(),
            Some("bytes 5-14/100")
        );
    }
}
