//! `serve --request-log FILE`: every request the server answers, one JSON line each — method,
//! path, query, `Range`, status — so a user (or a test) can see exactly what a client sent: a
//! checkpoint's parts and ranged GETs, a loader's HEADs. Written as each answer is made, one
//! `write` per line on a file opened for appending, so lines never interleave and nothing
//! waits in a buffer when the server stops. Headers are not logged, and query parameters that
//! carry a presigned URL's signature or credential (SigV4's `X-Amz-*`, SigV2's `Signature` and
//! `AWSAccessKeyId`) are left out.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// One request as the log records it.
#[derive(Debug, serde::Serialize)]
pub struct LoggedRequest<'a> {
    pub method: &'a str,
    /// The path as sent (`/bucket/key`, percent-encoded).
    pub path: &'a str,
    /// The query string as sent, less any `X-Amz-*` parameter.
    pub query: String,
    /// The `Range` header, when there was one.
    pub range: Option<&'a str>,
    pub status: u16,
}

/// The open log.
#[derive(Debug)]
pub struct RequestLog {
    file: File,
}

impl RequestLog {
    /// Creates (or truncates) `path`; the error names the file and the fix.
    pub fn create(path: &Path) -> Result<RequestLog, String> {
        File::create(path)
            .and_then(|_| std::fs::OpenOptions::new().append(true).open(path))
            .map(|file| RequestLog { file })
            .map_err(|e| {
                format!(
                    "cannot write the request log {}: {e}; pass a file in a directory you can \
                     write",
                    path.display()
                )
            })
    }

    /// Appends one request; a failed write is dropped (the log never fails a request).
    pub fn record(&self, request: &LoggedRequest<'_>) {
        if let Ok(mut line) = serde_json::to_vec(request) {
            line.push(b'\n');
            let _ = (&self.file).write_all(&line);
        }
    }
}

/// `query` without the parameters that carry a presigned request's credential or signature:
/// SigV4's `X-Amz-*`, SigV2's `Signature` and `AWSAccessKeyId` (names compared decoded, in any
/// case).
pub fn without_secrets(query: &str) -> String {
    let secret = |param: &str| {
        let name = param.split_once('=').map_or(param, |(n, _)| n);
        let name = percent_encoding::percent_decode_str(name)
            .decode_utf8_lossy()
            .to_ascii_lowercase();
        name.starts_with("x-amz-") || name == "signature" || name == "awsaccesskeyid"
    };
    query
        .split('&')
        .filter(|p| !p.is_empty() && !secret(p))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presigned_parameters_are_left_out() {
        assert_eq!(
            without_secrets(
                "partNumber=2&X-Amz-Credential=AK%2F1&uploadId=u&x-amz-signature=abc&uploads\
                 &Signature=s&AWSAccessKeyId=AK&%58-Amz-Security-Token=t"
            ),
            "partNumber=2&uploadId=u&uploads"
        );
        assert_eq!(without_secrets(""), "");
    }

    #[test]
    fn each_request_is_one_json_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.jsonl");
        let log = RequestLog::create(&path).unwrap();
        for status in [200, 206] {
            log.record(&LoggedRequest {
                method: "GET",
                path: "/b/k",
                query: String::new(),
                range: Some("bytes=0-9"),
                status,
            });
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["status"], 206);
        assert_eq!(lines[0]["range"], "bytes=0-9");
        let err = RequestLog::create(&dir.path().join("no/such/dir/log")).unwrap_err();
        assert!(err.contains("no/such/dir/log"), "{err}");
    }
}
