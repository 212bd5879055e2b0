//! When a multipart upload counts as complete, the same on both engines.
//!
//! S3 sends CompleteMultipartUpload's `200` before its result, and the result can still be an
//! error: a Complete counts only on a parsed `CompleteMultipartUploadResult` with an `ETag`. A
//! `200` carrying an `<Error>` is retried when its code is one S3 retries (`InternalError`,
//! `SlowDown`, …), and is final otherwise. An answer cut or cut short is a transport failure,
//! and so is XML that cannot be read: the upload may have completed, so [`complete`] settles it
//! with a HEAD of the object — its size, and its ETag where S3's multipart formula can be
//! computed from the parts' ETags — before it tries again or gives up. A part's answer without
//! an ETag is a failure ([`part_etag`]).
//!
//! The engines send the requests their own way; [`complete`] is the shape they share: which
//! answers count, when to HEAD, when to try again.

use md5::{Digest, Md5};

use super::RequestError;

/// What a CompleteMultipartUpload's `2xx` body says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteAnswer {
    /// A `CompleteMultipartUploadResult` with its `ETag`, and the object's checksum when the
    /// result carries one (`<ChecksumCRC32C>`, …).
    Completed {
        etag: String,
        checksum: Option<String>,
    },
    /// An `<Error>` document in a `200`.
    Error {
        code: String,
        message: Option<String>,
    },
    /// Neither: empty, cut short, or not S3's XML.
    Unreadable(String),
}

/// Reads a CompleteMultipartUpload answer's document.
pub fn read_answer(document: &[u8]) -> CompleteAnswer {
    let (mut root, mut etag, mut code, mut message) = (None, None, None, None);
    let mut checksum = None;
    let walked = super::xml::walk(document, |path, text| {
        if path.len() == 1 && root.is_none() {
            root = Some(path[0].clone());
        }
        match path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["CompleteMultipartUploadResult", "ETag"] => etag = Some(text),
            ["CompleteMultipartUploadResult", name]
                if name.starts_with("Checksum") && name != "ChecksumType" && !text.is_empty() =>
            {
                checksum = Some(text)
            }
            ["Error", "Code"] => code = Some(text),
            ["Error", "Message"] => message = Some(text),
            _ => {}
        }
        Ok(())
    });
    if let Err(reason) = walked {
        return CompleteAnswer::Unreadable(format!("its XML cannot be read ({reason})"));
    }
    match (root.as_deref(), etag, code) {
        (Some("CompleteMultipartUploadResult"), Some(etag), _) if !etag.is_empty() => {
            CompleteAnswer::Completed { etag, checksum }
        }
        (Some("CompleteMultipartUploadResult"), ..) => {
            CompleteAnswer::Unreadable("its CompleteMultipartUploadResult has no ETag".into())
        }
        (Some("Error"), _, Some(code)) if !code.is_empty() => {
            CompleteAnswer::Error { code, message }
        }
        (None, ..) if document.iter().all(u8::is_ascii_whitespace) => {
            CompleteAnswer::Unreadable("its body is empty".into())
        }
        (root, ..) => CompleteAnswer::Unreadable(format!(
            "it is not a CompleteMultipartUploadResult ({})",
            root.map_or("no XML element".to_string(), |r| format!("<{r}>"))
        )),
    }
}

/// The error codes of a `200`-with-`<Error>` that S3 documents as worth another try.
const RETRIED_CODES: [&str; 5] = [
    "InternalError",
    "SlowDown",
    "ServiceUnavailable",
    "RequestTimeout",
    "OperationAborted",
];

/// Whether a `200` carrying `<Error><Code>code` is tried again.
pub fn retried_in_200(code: &str) -> bool {
    RETRIED_CODES.contains(&code)
}

/// The answer as the request's outcome: `Ok` with whether it carries the object's checksum,
/// or the error it is.
pub fn answer_result(operation: &str, document: &[u8]) -> Result<bool, RequestError> {
    match read_answer(document) {
        CompleteAnswer::Completed { checksum, .. } => Ok(checksum.is_some()),
        CompleteAnswer::Error { code, message } => Err(RequestError::Status {
            operation: operation.to_string(),
            status: 200,
            code: Some(code),
            message,
            hint: "the store answered 200 and put an error in the body".into(),
            retry_after: None,
        }),
        CompleteAnswer::Unreadable(reason) => Err(RequestError::Transport {
            operation: operation.to_string(),
            reason: format!("the answer does not say the upload completed: {reason}"),
        }),
    }
}

/// A part's ETag from its answer's header: a part without one fails (it could not be listed
/// in the completion).
pub fn part_etag(operation: &str, etag: Option<&str>) -> Result<String, RequestError> {
    match etag
        .map(str::trim)
        .filter(|e| !e.is_empty() && *e != "\"\"")
    {
        Some(etag) => Ok(etag.to_string()),
        None => Err(RequestError::BadResponse {
            operation: operation.to_string(),
            reason: "the part was answered without an ETag, so it cannot be listed in the \
                     completion (is this an S3 store?)"
                .into(),
        }),
    }
}

/// S3's ETag of a completed multipart upload: the MD5 of the parts' binary MD5s, then `-N`.
/// `None` when a part's ETag is not 32 hex digits (a store whose part ETags are not MD5s).
pub fn multipart_etag(part_etags: &[String]) -> Option<String> {
    let mut md5 = Md5::new();
    for etag in part_etags {
        let hex = etag.trim().trim_matches('"');
        if hex.len() != 32 {
            return None;
        }
        for pair in hex.as_bytes().chunks(2) {
            let text = std::str::from_utf8(pair).ok()?;
            md5.update([u8::from_str_radix(text, 16).ok()?]);
        }
    }
    let digest = md5.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{hex}-{}", part_etags.len()))
}

/// What a HEAD of the object said after an unclear Complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadAnswer {
    pub size: u64,
    pub etag: Option<String>,
}

/// Whether the object `head` describes is the upload just completed: its size, and its ETag
/// where the multipart formula gives one (an older object of the same key and size, from an
/// earlier run, does not pass). `Err` says why not.
pub fn settled_by(head: &HeadAnswer, size: u64, part_etags: &[String]) -> Result<(), String> {
    if head.size != size {
        return Err(format!(
            "a HEAD finds {} bytes under the key, not the upload's {size}",
            head.size
        ));
    }
    let expected = multipart_etag(part_etags);
    let found = head.etag.as_deref().map(|e| e.trim().trim_matches('"'));
    match (expected, found) {
        (Some(expected), Some(found)) if !found.eq_ignore_ascii_case(&expected) => Err(format!(
            "a HEAD finds an object of the right size whose ETag {found} is not this upload's \
             ({expected}): an older object"
        )),
        _ => Ok(()),
    }
}

/// How a Complete ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completed {
    /// Answered with a CompleteMultipartUploadResult; `checksum`: it carries the object's
    /// checksum (a store that took the upload's checksums echoes it; one that ignores them
    /// does not).
    Answered { checksum: bool },
    /// The answer was lost or unclear, and a HEAD found the object as the upload made it.
    SettledByHead,
}

/// Completes an upload the way both engines do: `send` sends the CompleteMultipartUpload once
/// (its own transport retries included) and returns the answer's document; `head` HEADs the
/// object (`None`: not there); `wait(n, error)` waits out the backoff before try `n + 2`, at
/// most `retries` times. `size` and `part_etags` describe the upload. Returns how it
/// completed, and the failures that were tried again (their causes).
pub fn complete(
    retries: u32,
    operation: &str,
    size: u64,
    part_etags: &[String],
    mut send: impl FnMut() -> Result<Vec<u8>, RequestError>,
    mut head: impl FnMut() -> Result<Option<HeadAnswer>, RequestError>,
    mut wait: impl FnMut(u32, &RequestError),
) -> (Result<Completed, RequestError>, Vec<&'static str>) {
    let mut causes = Vec::new();
    loop {
        let error = match send().and_then(|document| answer_result(operation, &document)) {
            Ok(checksum) => return (Ok(Completed::Answered { checksum }), causes),
            Err(error) => error,
        };
        // The upload may have completed though its answer says otherwise (a cut answer, or
        // NoSuchUpload to a second try of one that did): a HEAD settles it.
        let settled = match head() {
            Ok(Some(answer)) => settled_by(&answer, size, part_etags),
            Ok(None) => Err("a HEAD finds no object under the key".into()),
            Err(e) => Err(format!("a HEAD to settle it failed too: {e}")),
        };
        if settled.is_ok() {
            return (Ok(Completed::SettledByHead), causes);
        }
        let retryable = match &error {
            RequestError::Status {
                status: 200,
                code: Some(code),
                ..
            } => retried_in_200(code),
            e => e.retryable(),
        };
        let tries = causes.len() as u32;
        if !retryable || tries >= retries {
            return (Err(error), causes);
        }
        wait(tries, &error);
        causes.push(error.cause());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
        <CompleteMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
        <Location>http://h/b/k</Location><Bucket>b</Bucket><Key>k</Key>\
        <ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag></CompleteMultipartUploadResult>";

    #[test]
    fn only_a_result_with_an_etag_counts() {
        assert_eq!(
            read_answer(DONE.as_bytes()),
            CompleteAnswer::Completed {
                etag: "\"3858f62230ac3c915f300c664312c11f-9\"".into(),
                checksum: None,
            }
        );
        // Cut anywhere, the answer does not count.
        for cut in [0, 10, 60, DONE.len() / 2, DONE.len() - 40] {
            let answer = read_answer(&DONE.as_bytes()[..cut]);
            assert!(
                matches!(answer, CompleteAnswer::Unreadable(_)),
                "cut at {cut}: {answer:?}"
            );
        }
        // A store that took the upload's checksums echoes the object's; one that ignores them
        // does not.
        let with_crc = DONE.replace(
            "</CompleteMultipartUploadResult>",
            "<ChecksumCRC32C>yZRlqg==</ChecksumCRC32C><ChecksumType>FULL_OBJECT</ChecksumType>\
             </CompleteMultipartUploadResult>",
        );
        assert!(matches!(
            read_answer(with_crc.as_bytes()),
            CompleteAnswer::Completed { checksum: Some(c), .. } if c == "yZRlqg=="
        ));
        assert_eq!(answer_result("op", with_crc.as_bytes()).ok(), Some(true));
        assert_eq!(answer_result("op", DONE.as_bytes()).ok(), Some(false));
        let error = "<Error><Code>InternalError</Code><Message>try again</Message></Error>";
        assert_eq!(
            read_answer(error.as_bytes()),
            CompleteAnswer::Error {
                code: "InternalError".into(),
                message: Some("try again".into())
            }
        );
        assert!(matches!(
            read_answer(b"<CompleteMultipartUploadResult><Key>k</Key></CompleteMultipartUploadResult>"),
            CompleteAnswer::Unreadable(r) if r.contains("no ETag")
        ));
        assert!(
            matches!(read_answer(b"<html>oops</html>"), CompleteAnswer::Unreadable(r) if r.contains("<html>"))
        );
        assert!(retried_in_200("InternalError") && !retried_in_200("InvalidPart"));
    }

    #[test]
    fn parts_without_an_etag_fail() {
        assert_eq!(part_etag("p", Some("\"ab\"")).unwrap(), "\"ab\"");
        for missing in [None, Some(""), Some("  "), Some("\"\"")] {
            assert!(part_etag("UploadPart k", missing).is_err(), "{missing:?}");
        }
    }

    #[test]
    fn the_multipart_etag_is_s3s_formula() {
        // Two parts whose MD5s are those of "a" and "b": the MD5 of their 32 binary bytes.
        let a = "0cc175b9c0f1b6a831c399e269772661".to_string();
        let b = "\"92eb5ffee6ae2fec3ad71c777531578f\"".to_string();
        let mut both = Md5::new();
        both.update(Md5::digest(b"a"));
        both.update(Md5::digest(b"b"));
        let hex: String = both.finalize().iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(multipart_etag(&[a.clone(), b]), Some(format!("{hex}-2")));
        assert_eq!(multipart_etag(&[a, "tag-1".into()]), None);
    }

    #[test]
    fn a_head_settles_only_this_uploads_object() {
        let parts = vec!["0cc175b9c0f1b6a831c399e269772661".to_string()];
        let etag = multipart_etag(&parts);
        let head = |size, etag: Option<String>| HeadAnswer { size, etag };
        assert!(settled_by(&head(10, etag.clone()), 10, &parts).is_ok());
        assert!(settled_by(&head(10, etag.map(|e| format!("\"{e}\""))), 10, &parts).is_ok());
        assert!(settled_by(&head(9, None), 10, &parts).is_err());
        let older = head(10, Some("\"ffffffffffffffffffffffffffffffff-1\"".into()));
        assert!(
            settled_by(&older, 10, &parts)
                .unwrap_err()
                .contains("older object")
        );
        // Part ETags that are not MD5s: the size decides.
        assert!(settled_by(&head(10, Some("x".into())), 10, &["t".into()]).is_ok());
    }

    #[test]
    fn a_200_error_is_tried_again_and_a_lost_answer_settled_by_a_head() {
        let error = b"<Error><Code>InternalError</Code></Error>".to_vec();
        let mut answers = vec![Ok(DONE.as_bytes().to_vec()), Ok(error)];
        let (mut heads, mut slept) = (0, 0);
        let (result, causes) = complete(
            3,
            "Complete k",
            10,
            &[],
            || answers.pop().unwrap(),
            || {
                heads += 1;
                Ok(None)
            },
            |_, _| slept += 1,
        );
        assert_eq!(result.ok(), Some(Completed::Answered { checksum: false }));
        assert_eq!((causes.len(), heads, slept), (1, 1, 1));

        // The answer cut, then NoSuchUpload (the first try did complete): the HEAD says so.
        let parts = vec!["0cc175b9c0f1b6a831c399e269772661".to_string()];
        let mut tries = 0;
        let (result, _) = complete(
            3,
            "Complete k",
            10,
            &parts,
            || {
                tries += 1;
                Err(RequestError::Transport {
                    operation: "Complete k".into(),
                    reason: "cut".into(),
                })
            },
            || {
                Ok(Some(HeadAnswer {
                    size: 10,
                    etag: multipart_etag(&parts),
                }))
            },
            |_, _| {},
        );
        assert_eq!((result.ok(), tries), (Some(Completed::SettledByHead), 1));
    }

    #[test]
    fn a_final_error_or_spent_retries_fail_with_the_error() {
        let final_error = b"<Error><Code>InvalidPart</Code></Error>".to_vec();
        let (result, causes) = complete(
            3,
            "Complete k",
            10,
            &[],
            || Ok(final_error.clone()),
            || Ok(None),
            |_, _| {},
        );
        assert!(result.unwrap_err().to_string().contains("InvalidPart"));
        assert!(causes.is_empty());
        let (result, causes) = complete(
            2,
            "Complete k",
            10,
            &[],
            || Ok(b"<Comple".to_vec()),
            || {
                Ok(Some(HeadAnswer {
                    size: 3,
                    etag: None,
                }))
            },
            |_, _| {},
        );
        assert!(
            result
                .unwrap_err()
                .to_string()
                .contains("does not say the upload completed"),
        );
        assert_eq!(causes.len(), 2);
    }
}
