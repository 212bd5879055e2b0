//! One attempt of a ranged or whole-object GET on the baseline's hyper client, checked as the
//! io_uring engine checks it: the status, `Content-Range`, `Content-Length`, and exactly that
//! many body bytes, collected frame by frame into a fresh heap buffer.

use std::time::{Duration, Instant};

use http::header::{CONTENT_LENGTH, CONTENT_RANGE, RANGE};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Limited};

use crate::engine::common::{check_partial_content, check_whole_object};
use crate::plan::RangedGet;
use crate::s3::client::{RequestSpec, transport_error};
use crate::s3::{Client, RequestError, Wait};

/// The longest error document read from a failed GET.
const ERROR_BODY_LIMIT_BYTES: usize = 64 << 10;

/// One attempt of a GET: the body in a fresh buffer, and the time to the response head.
pub(super) async fn fetch(
    client: &Client,
    get: &RangedGet,
    endpoint: usize,
) -> Result<(Vec<u8>, Duration), RequestError> {
    let operation = || {
        format!(
            "{} ({})",
            client.operation("GET", Some(&get.key)),
            get.describe()
        )
    };
    let spec = RequestSpec {
        // A whole-object GET sends no Range.
        headers: if get.whole {
            Vec::new()
        } else {
            vec![(RANGE, get.range_header())]
        },
        endpoint,
        ..RequestSpec::new(Method::GET, Some(&get.key))
    };
    let request = client.http_request(&spec)?;
    let sent = Instant::now();
    let policy = client.policy();
    let timed_out = |what: Wait, after: Duration| RequestError::Timeout {
        operation: operation(),
        after,
        what,
    };
    // The connector bounds the connect; this, the wait for the response head.
    let response = tokio::time::timeout(policy.first_byte_timeout, client.http().request(request))
        .await
        .map_err(|_| timed_out(Wait::FirstByte, policy.first_byte_timeout))?
        .map_err(|e| transport_error(operation(), client.endpoint(endpoint), &e))?;
    let first_byte = sent.elapsed();
    let (parts, body) = response.into_parts();
    let expected = if get.whole {
        StatusCode::OK
    } else {
        StatusCode::PARTIAL_CONTENT
    };
    if parts.status != expected {
        if parts.status.is_success() {
            // Never read a whole object into a range-sized buffer.
            return Err(RequestError::BadResponse {
                operation: operation(),
                reason: if get.whole {
                    format!(
                        "answered {} to a whole-object GET instead of 200 OK",
                        parts.status
                    )
                } else {
                    format!(
                        "answered {} instead of 206 Partial Content: the server ignores Range",
                        parts.status
                    )
                },
            });
        }
        let document = Limited::new(body, ERROR_BODY_LIMIT_BYTES)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let retry_after = parts
            .headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok());
        return Err(RequestError::from_response(
            operation(),
            parts.status.as_u16(),
            &document,
            &client.hint_context(),
        )
        .with_retry_after(retry_after));
    }
    let header = |name| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let checked = if get.whole {
        check_whole_object(parts.status.as_u16(), header(CONTENT_LENGTH), get)
    } else {
        check_partial_content(header(CONTENT_RANGE), header(CONTENT_LENGTH), get)
    };
    checked.map_err(|reason| RequestError::BadResponse {
        operation: operation(),
        reason,
    })?;
    let len = get.len_bytes as usize;
    let mut buffer = Vec::with_capacity(len);
    let mut body = body;
    // A stall is caught between frames, not only by the whole attempt's limit.
    while let Some(frame) = tokio::time::timeout(policy.idle_timeout, body.frame())
        .await
        .map_err(|_| timed_out(Wait::Idle, policy.idle_timeout))?
    {
        let frame =
            frame.map_err(|e| transport_error(operation(), client.endpoint(endpoint), &e))?;
        if let Ok(data) = frame.into_data() {
            if buffer.len() + data.len() > len {
                return Err(RequestError::BadResponse {
                    operation: operation(),
                    reason: format!("the body is longer than its Content-Length of {len}"),
                });
            }
            buffer.extend_from_slice(&data);
        }
    }
    if buffer.len() != len {
        return Err(RequestError::Transport {
            operation: operation(),
            reason: format!(
                "the connection ended after {} of {len} body bytes",
                buffer.len()
            ),
        });
    }
    Ok((buffer, first_byte))
}
