//! What a failed S3 request means, in one line that names the likely cause and the fix.
//!
//! An error response's XML (`<Error><Code>…</Code><Message>…</Message></Error>`) is decoded
//! into its code and message; the common ones (missing bucket, unknown key id, wrong secret,
//! access denied) get a hint. Errors the configuration causes (4xx) exit 2; the storage failing
//! (5xx, broken connections, timeouts, answers that break the protocol), after retries, exits 3.

use std::time::Duration;

use crate::exit::{self, ExitClass};

/// A request that did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RequestError {
    /// The server answered with an error status (and usually an S3 error document).
    #[error("{}", status_line(.operation, *.status, .code.as_deref(), .message.as_deref(), .hint))]
    Status {
        /// `GET s3://bucket/key` and the like.
        operation: String,
        status: u16,
        code: Option<String>,
        message: Option<String>,
        /// A likely cause and fix, or empty.
        hint: String,
        /// The server's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// Nothing listens at the endpoint (connection refused) or its name does not resolve.
    #[error("{operation}: {reason}")]
    Unreachable { operation: String, reason: String },
    /// The connection failed: reset, closed mid-response.
    #[error("{operation}: {reason}")]
    Transport { operation: String, reason: String },
    /// The TLS handshake failed (an untrusted or wrong certificate, a plain-HTTP server at an
    /// `https://` URL): worded with the flag that fixes it; not retried.
    #[error("{operation}: {reason}")]
    Tls { operation: String, reason: String },
    /// The connection's TLS records broke the protocol, or a TLS 1.2 server asked to
    /// renegotiate (the io_uring engine's record layer): the connection is dropped and the GET
    /// tried again on a new one, counted under the record layer's `cause` (`connection`, or
    /// `tls_renegotiation`).
    #[error("{operation}: TLS: {reason}")]
    TlsRecord {
        operation: String,
        reason: String,
        cause: &'static str,
    },
    /// Something did not come within the time allowed for it.
    #[error(
        "{operation}: no {} within {after:?} ({} sets this limit); the server is stalled or too \
         slow (raise {} for a slow server, lower it to give up sooner)",
        what.awaited(),
        what.flag(),
        what.flag()
    )]
    Timeout {
        operation: String,
        after: Duration,
        what: Wait,
    },
    /// A kept-alive connection carried bytes after the previous response's body, where the
    /// next response head should start: the server sent more than its Content-Length. The
    /// connection is dropped and the GET tried again on a new one.
    #[error(
        "{operation}: the response head is not HTTP: bytes followed the body of {after} on this \
         keep-alive connection (the server sent more than its Content-Length); the connection \
         is dropped"
    )]
    StrayBytes { operation: String, after: String },
    /// The answer broke the protocol: a `200` where `206` was asked for, a `Content-Range` or
    /// length that does not match the request, XML that cannot be read.
    #[error("{operation}: {reason}")]
    BadResponse { operation: String, reason: String },
    /// The endpoint does not speak HTTP (an SSH daemon, a database): worded with what it
    /// sent instead; not retried.
    #[error("{operation}: {reason}")]
    NotS3 { operation: String, reason: String },
    /// `--verify` found bytes that are not what the file holds. Not retried: the store (or
    /// something between) returned wrong data with a success status.
    #[error("{operation}: the bytes are not what the file holds: {reason}")]
    Corrupt { operation: String, reason: String },
    /// A file of a `--data-dir` run could not be read or written: missing, unreadable,
    /// shorter than planned, the disk full. Not retried.
    #[error("{operation}: {reason}")]
    File {
        operation: String,
        reason: String,
        /// `missing`, `permission`, `short_file`, `no_space`, `eio`, `io`.
        cause: &'static str,
    },
}

fn status_line(
    operation: &str,
    status: u16,
    code: Option<&str>,
    message: Option<&str>,
    hint: &str,
) -> String {
    let mut text = format!("{operation}: HTTP {status}");
    if let Some(code) = code {
        text.push(' ');
        text.push_str(code);
    }
    if let Some(message) = message.filter(|m| !m.is_empty()) {
        text.push_str(" (");
        text.push_str(message);
        text.push(')');
    }
    if !hint.is_empty() {
        text.push_str("; ");
        text.push_str(hint);
    }
    text
}

impl RequestError {
    /// Whether trying again may help: server errors, throttling, broken connections, timeouts.
    /// The same error, its operation saying which endpoint (of several) it went to.
    pub fn at_endpoint(mut self, endpoint: &super::Endpoint) -> RequestError {
        match &mut self {
            RequestError::Status { operation, .. }
            | RequestError::Unreachable { operation, .. }
            | RequestError::Transport { operation, .. }
            | RequestError::Tls { operation, .. }
            | RequestError::TlsRecord { operation, .. }
            | RequestError::Timeout { operation, .. }
            | RequestError::StrayBytes { operation, .. }
            | RequestError::BadResponse { operation, .. }
            | RequestError::NotS3 { operation, .. }
            | RequestError::Corrupt { operation, .. }
            | RequestError::File { operation, .. } => {
                operation.push_str(&format!(" at {endpoint}"));
            }
        }
        self
    }

    pub fn retryable(&self) -> bool {
        match self {
            // A checksum the store found wrong: the bytes changed between here and there (the
            // client re-sends the same bytes from its buffer), so tried again as a 5xx is.
            RequestError::Status { status, code, .. } => {
                *status >= 500 || *status == 429 || (*status == 400 && bad_digest(code.as_deref()))
            }
            RequestError::Unreachable { .. }
            | RequestError::Transport { .. }
            | RequestError::TlsRecord { .. }
            | RequestError::StrayBytes { .. }
            | RequestError::Timeout { .. } => true,
            RequestError::BadResponse { .. }
            | RequestError::NotS3 { .. }
            | RequestError::Corrupt { .. }
            | RequestError::File { .. }
            | RequestError::Tls { .. } => false,
        }
    }

    /// What kind of failure this is, as a summary counts retries and errors: the status for
    /// the common ones (`503`, `500`, `429`, …), else `5xx`, `4xx`, `timeout`, `connection`,
    /// `unreachable`, `bad_response`, or a TLS record layer's own (`tls_renegotiation`).
    pub fn cause(&self) -> &'static str {
        match self {
            RequestError::Status {
                status: 400, code, ..
            } if bad_digest(code.as_deref()) => "bad_digest",
            RequestError::Status { status, .. } => match status {
                500 => "500",
                502 => "502",
                503 => "503",
                504 => "504",
                429 => "429",
                403 => "403",
                404 => "404",
                s if *s >= 500 => "5xx",
                _ => "4xx",
            },
            RequestError::Timeout { .. } => "timeout",
            RequestError::Transport { .. } => "connection",
            RequestError::Tls { .. } => "tls",
            RequestError::TlsRecord { cause, .. } => cause,
            RequestError::StrayBytes { .. } => "stray_bytes",
            RequestError::Unreachable { .. } => "unreachable",
            RequestError::BadResponse { .. } => "bad_response",
            RequestError::NotS3 { .. } => "not_s3",
            RequestError::Corrupt { .. } => "content_mismatch",
            RequestError::File { cause, .. } => cause,
        }
    }

    /// The S3 error code, if the server sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            RequestError::Status { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// The error of a response with status `status` and body `body`.
    pub fn from_response(
        operation: String,
        status: u16,
        body: &[u8],
        context: &HintContext<'_>,
    ) -> RequestError {
        let (code, message) = error_document(body);
        let hint = match code {
            None => not_s3_hint(
                status,
                body,
                context.endpoint,
                operation.starts_with("HEAD"),
            ),
            Some(_) => None,
        }
        .unwrap_or_else(|| {
            if refuses_streaming(status, code.as_deref(), message.as_deref()) {
                "the store does not take aws-chunked bodies (a checksum trailer, chunk \
                 signatures) as sent, each part one chunk (MinIO takes chunks of 16 MiB at \
                 most: --part-size 16MiB); or run with --checksum-form header and \
                 --payload-signing unsigned or sha256"
                    .into()
            } else if refuses_checksums(status, code.as_deref(), message.as_deref()) {
                "the store does not take S3's additional checksums (x-amz-checksum-*) as sent; \
                 run with --checksum none, or another --checksum it supports"
                    .into()
            } else {
                hint_for(status, code.as_deref(), context)
            }
        });
        RequestError::Status {
            operation,
            status,
            code,
            message,
            hint,
            retry_after: None,
        }
    }

    /// A NoSuchBucket's hint with the buckets the endpoint listed (`None`: it would not say).
    pub fn with_buckets(mut self, names: Option<&[String]>) -> RequestError {
        if let (RequestError::Status { hint, .. }, Some(names)) = (&mut self, names) {
            let shown: Vec<&str> = names.iter().take(10).map(String::as_str).collect();
            let more = names.len().saturating_sub(shown.len());
            hint.push_str(&match (shown.is_empty(), more) {
                (true, _) => "; the endpoint has no buckets".to_string(),
                (false, 0) => format!("; the endpoint has: {}", shown.join(", ")),
                (false, n) => format!("; the endpoint has: {}, and {n} more", shown.join(", ")),
            });
        }
        self
    }

    /// The same error, carrying the answer's `Retry-After` header value (if it parses).
    pub fn with_retry_after(mut self, header: Option<&str>) -> RequestError {
        if let RequestError::Status { retry_after, .. } = &mut self {
            *retry_after = header.and_then(parse_retry_after);
        }
        self
    }

    /// How long the server asked to wait before retrying, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            RequestError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// A `Retry-After` value (RFC 9110 §10.2.3): seconds, or an HTTP date (its distance from now;
/// a date in the past is no wait).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// What a request waited for when it timed out; each has its own limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The TCP connection.
    Connect,
    /// The response head, from the request's start.
    FirstByte,
    /// More body bytes, since the last ones.
    Idle,
    /// The whole attempt.
    Request,
}

impl Wait {
    /// What did not come, for messages.
    pub fn awaited(self) -> &'static str {
        match self {
            Wait::Connect => "connection",
            Wait::FirstByte => "response head",
            Wait::Idle => "more body bytes",
            Wait::Request => "complete response",
        }
    }

    /// The flag that sets this limit.
    pub fn flag(self) -> &'static str {
        match self {
            Wait::Connect => "--connect-timeout",
            Wait::FirstByte => "--first-byte-timeout",
            Wait::Idle => "--idle-timeout",
            Wait::Request => "--request-timeout",
        }
    }
}

/// Whether `code` says a checksum did not match the bytes received (AWS: `BadDigest`; garage,
/// MinIO: `InvalidDigest`, `XAmzContentChecksumMismatch`): the same failure.
pub fn bad_digest(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("BadDigest" | "InvalidDigest" | "XAmzContentChecksumMismatch")
    )
}

/// Whether an error says the store refuses an aws-chunked body (`STREAMING-*`, a trailer, a
/// chunk too big).
fn refuses_streaming(status: u16, code: Option<&str>, message: Option<&str>) -> bool {
    let names_streaming = message.is_some_and(|m| {
        let m = m.to_ascii_lowercase();
        [
            "aws-chunked",
            "streaming-",
            "x-amz-trailer",
            "x-amz-decoded-content-length",
            "chunk too big",
            "chunk size",
        ]
        .iter()
        .any(|name| m.contains(name))
    });
    names_streaming
        && matches!(
            (status, code),
            (501, _)
                | (_, Some("NotImplemented"))
                | (
                    400,
                    Some("InvalidRequest" | "InvalidArgument" | "UnsupportedHeader")
                )
        )
}

/// Whether a refusal reads as the store not taking S3's additional checksums: a `501`, or a
/// `400` whose code says the request is not understood and whose message names a checksum.
fn refuses_checksums(status: u16, code: Option<&str>, message: Option<&str>) -> bool {
    let names_checksum = message.is_some_and(|m| m.to_ascii_lowercase().contains("checksum"));
    match (status, code) {
        (501, _) | (_, Some("NotImplemented")) => {
            names_checksum || message.is_none_or(|m| m.to_ascii_lowercase().contains("header"))
        }
        (400, Some("InvalidRequest" | "InvalidArgument" | "UnsupportedHeader")) => names_checksum,
        _ => false,
    }
}

/// What a hint may name.
#[derive(Debug, Clone, Copy)]
pub struct HintContext<'a> {
    pub bucket: &'a str,
    pub endpoint: &'a str,
    /// Whether requests were signed, and where the keys came from.
    pub signed: bool,
    pub credentials_from: &'a str,
}

fn hint_for(status: u16, code: Option<&str>, c: &HintContext<'_>) -> String {
    let keys = if c.credentials_from == "--access-key" {
        "--access-key/--secret-key"
    } else if c.credentials_from == "AWS_ACCESS_KEY_ID" {
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
    } else {
        "storage.storage_options.access_key_id/secret_access_key"
    };
    match (status, code) {
        (404, Some("NoSuchBucket")) => format!(
            "bucket '{}' does not exist at {}; create it, or pass the right --bucket \
             (storage.storage_root)",
            c.bucket, c.endpoint
        ),
        (404, Some("NoSuchKey")) => {
            "the object does not exist (was it deleted since listing?)".into()
        }
        (403, Some("InvalidAccessKeyId")) => {
            format!("the server does not know the access key; check {keys}")
        }
        (403, Some("SignatureDoesNotMatch")) => format!(
            "the secret key is wrong, or the region differs from the server's; check {keys} and \
             --region (AWS_REGION)"
        ),
        (403, Some("RequestTimeTooSkewed")) => "this machine's clock is off; fix the time".into(),
        (403, _) | (401, _) if !c.signed => format!(
            "the request was unsigned: give keys with --access-key/--secret-key or \
             AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (bucket '{}')",
            c.bucket
        ),
        (403, _) => format!(
            "the keys from {keys} are refused or lack permission on bucket '{}'",
            c.bucket
        ),
        (400, code) if bad_digest(code) => "the checksum did not match the bytes the store \
             received, on every try: bytes changed between here and the store (a NIC, a proxy, \
             memory); if the store computes checksums differently, run with --checksum none"
            .into(),
        (400, Some("AuthorizationHeaderMalformed")) => {
            "the region is probably wrong; set --region (AWS_REGION) to the server's".into()
        }
        (301, _) | (307, _) => {
            "the server redirects: the bucket is in another region or needs another endpoint".into()
        }
        (503, Some("SlowDown")) | (429, _) => {
            "the server is throttling; retried and gave up".into()
        }
        (s, _) if s >= 500 => "the storage failed the request, also on every retry".into(),
        _ => String::new(),
    }
}

/// Why a client error (4xx) with a body but no S3 error document says the endpoint is not S3:
/// S3 answers every such error with `<Error><Code>…`; a web server answers with a page.
/// An empty 404 to anything but a HEAD (which has no body to send) is not S3's either: S3
/// names a missing bucket or key in its `<Error>` document.
fn not_s3_hint(status: u16, body: &[u8], endpoint: &str, head: bool) -> Option<String> {
    let text = String::from_utf8_lossy(&body[..body.len().min(512)]).to_ascii_lowercase();
    let text = text.trim_start();
    if status == 404 && text.is_empty() && !head {
        return Some(format!(
            "this does not look like an S3 endpoint: {endpoint} answered HTTP 404 with an empty \
             body, where S3 names a missing bucket or key in an <Error> document (NoSuchBucket, \
             NoSuchKey); check --endpoint (the S3 API's address and port, not another server's)"
        ));
    }
    if !(400..500).contains(&status) || text.is_empty() {
        return None;
    }
    let body = if text.contains("<html") || text.starts_with("<!doctype html") {
        "an HTML body and no S3 error XML"
    } else if text.starts_with('{') || text.starts_with('[') {
        "a JSON body and no S3 error XML"
    } else if text.starts_with('<') {
        "XML that is not an S3 <Error> document"
    } else {
        "a text body and no S3 error XML"
    };
    Some(format!(
        "this does not look like an S3 endpoint: {endpoint} answered HTTP {status} with {body}; \
         check --endpoint (the S3 API's address and port, not a web server's)"
    ))
}

/// The `Code` and `Message` of an S3 error document; `(None, None)` if the body is not one.
pub fn error_document(body: &[u8]) -> (Option<String>, Option<String>) {
    let (mut code, mut message) = (None, None);
    let _ = super::xml::walk(body, |path, text| {
        match path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["Error", "Code"] => code = Some(text),
            ["Error", "Message"] => message = Some(text),
            _ => {}
        }
        Ok(())
    });
    (code.filter(|c| !c.is_empty()), message)
}

impl ExitClass for RequestError {
    /// 2 when the configuration is the likely cause (a 4xx: keys, bucket, key; an endpoint
    /// where nothing listens, or something that is not S3), else 3.
    fn exit_code(&self) -> u8 {
        match self {
            RequestError::Unreachable { .. }
            | RequestError::Tls { .. }
            | RequestError::NotS3 { .. } => exit::USAGE,
            RequestError::Status { status, .. }
                if (400..500).contains(status) && *status != 429 =>
            {
                exit::USAGE
            }
            _ => exit::FAILED,
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_wrong_checksum_is_tried_again_and_a_refused_one_names_checksum_none() {
        let context = HintContext {
            bucket: "b",
            endpoint: "http://h",
            signed: false,
            credentials_from: "",
        };
        let answer = |status, code: &str, message: &str| {
            let body = format!("<Error><Code>{code}</Code><Message>{message}</Message></Error>");
            RequestError::from_response(
                "UploadPart k (part 2)".into(),
                status,
                body.as_bytes(),
                &context,
            )
        };
        for code in ["BadDigest", "InvalidDigest"] {
            let e = answer(400, code, "checksum mismatch");
            assert!(e.retryable(), "{code}");
            assert_eq!(e.cause(), "bad_digest");
            assert!(e.to_string().contains("--checksum none"), "{e}");
        }
        let refused = answer(
            400,
            "InvalidRequest",
            "x-amz-checksum-crc64nvme is not supported",
        );
        assert!(!refused.retryable());
        assert!(refused.to_string().contains("--checksum none"), "{refused}");
        let other = answer(400, "InvalidRequest", "something else");
        assert!(!other.to_string().contains("--checksum"), "{other}");
        assert!(
            answer(
                501,
                "NotImplemented",
                "A header you provided implies functionality that is not implemented"
            )
            .to_string()
            .contains("--checksum none")
        );
        // A store that refuses aws-chunked bodies is named as such, with the header forms.
        for (status, code, message) in [
            (
                501,
                "NotImplemented",
                "x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER is not implemented",
            ),
            (
                400,
                "InvalidArgument",
                "aws-chunked encoding is not supported",
            ),
            (400, "InvalidRequest", "x-amz-trailer is not supported"),
        ] {
            let e = answer(status, code, message).to_string();
            assert!(
                e.contains("--checksum-form header") && e.contains("aws-chunked"),
                "{e}"
            );
        }
    }

    use super::*;

    const CONTEXT: HintContext<'static> = HintContext {
        bucket: "data",
        endpoint: "http://127.0.0.1:9000",
        signed: true,
        credentials_from: "AWS_ACCESS_KEY_ID",
    };

    #[test]
    fn error_documents_become_one_line_with_a_hint() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>
<BucketName>data</BucketName></Error>"#;
        let e = RequestError::from_response("LIST s3://data/x/".into(), 404, body, &CONTEXT);
        let text = e.to_string();
        assert_eq!(
            text,
            "LIST s3://data/x/: HTTP 404 NoSuchBucket (The specified bucket does not exist); \
             bucket 'data' does not exist at http://127.0.0.1:9000; create it, or pass the right \
             --bucket (storage.storage_root)"
        );
        assert!(!text.contains('\n'));
        assert_eq!((e.exit_code(), e.retryable()), (exit::USAGE, false));

        let e = RequestError::from_response(
            "GET".into(),
            403,
            b"<Error><Code>SignatureDoesNotMatch</Code><Message>m</Message></Error>",
            &CONTEXT,
        );
        assert!(e.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{e}");
        assert_eq!(e.code(), Some("SignatureDoesNotMatch"));

        // A web server's page, JSON, foreign XML: not S3, said with the evidence. An empty
        // body (a HEAD's) says nothing.
        for (body, evidence) in [
            (
                &b"<!DOCTYPE html><html><h1>Not Found</h1></html>"[..],
                "an HTML body",
            ),
            (b"{\"error\": \"not found\"}", "a JSON body"),
            (
                b"<?xml version=\"1.0\"?><Fault/>",
                "XML that is not an S3 <Error>",
            ),
            (b"404 page not found", "a text body"),
        ] {
            let e = RequestError::from_response("GET".into(), 404, body, &CONTEXT);
            let text = e.to_string();
            assert!(text.contains("does not look like an S3 endpoint"), "{text}");
            assert!(
                text.contains(&format!("HTTP 404 with {evidence}")),
                "{text}"
            );
            assert_eq!(e.exit_code(), exit::USAGE);
        }
        let e = RequestError::from_response("HEAD".into(), 404, b"", &CONTEXT);
        assert!(!e.to_string().contains("S3 endpoint"), "{e}");

        let e = RequestError::from_response("GET".into(), 503, b"not xml", &CONTEXT);
        assert_eq!(e.code(), None);
        assert_eq!((e.exit_code(), e.retryable()), (exit::FAILED, true));

        let unsigned = HintContext {
            signed: false,
            ..CONTEXT
        };
        let e = RequestError::from_response(
            "GET".into(),
            403,
            b"<Error><Code>AccessDenied</Code></Error>",
            &unsigned,
        );
        assert!(e.to_string().contains("unsigned"), "{e}");
    }

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        let later =
            httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(120));
        let wait = parse_retry_after(&later).unwrap();
        assert!(wait > Duration::from_secs(100) && wait <= Duration::from_secs(120));
        assert_eq!(parse_retry_after("soon"), None);
        let e = RequestError::from_response("GET".into(), 503, b"", &CONTEXT)
            .with_retry_after(Some("2"));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
    }
}
