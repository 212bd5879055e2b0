//! One whole object fetched as the DLIO fork's s3dlio loader fetches it
//! ([`crate::loader::ObjectFetch`]): a HEAD first when the workload's records are 16 MiB or
//! more, then, for an object of the range threshold or more, concurrent ranged GETs of 4 or
//! 8 MiB (at most `concurrency_for(size)` in flight, each with its own retries, as s3dlio's
//! per-object semaphore), reassembled in offset order into one buffer of the object's size;
//! else one plain GET. Any request past its retries fails the object, as in s3dlio.
//!
//! A column subset's row groups ([`crate::extents`]) go the same way: their chunks' ranged
//! GETs one after the other, packed into the GET's one buffer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::Method;
use http::header::CONTENT_LENGTH;

use super::get::fetch;
use crate::loader::ObjectFetch;
use crate::plan::RangedGet;
use crate::ranged::Piece;
use crate::s3::client::{RequestSpec, with_retries};
use crate::s3::{Client, RequestError};

/// What fetching one object took: its bytes (or the failure), the causes of every retry of
/// its requests, and the time from its start to the first response head.
pub(super) struct Fetched {
    pub result: Result<Vec<u8>, RequestError>,
    pub retry_causes: Vec<&'static str>,
    pub first_byte: Duration,
}

/// Fetches `get` (a whole object of `get.len_bytes`) as `rules` say, through `endpoint`.
pub(super) async fn fetch_object(
    client: &Client,
    get: &RangedGet,
    rules: ObjectFetch,
    endpoint: usize,
) -> Fetched {
    // Each range lands at its offset in the object; one range is the object's plain GET.
    let pieces: Vec<Piece> = rules
        .chunks(get.len_bytes)
        .into_iter()
        .map(|(offset, len_bytes)| Piece {
            offset,
            len_bytes,
            at: offset,
        })
        .collect();
    let concurrency = rules.concurrency_for(get.len_bytes) as usize;
    fetch_pieces(client, get, rules.head, pieces, concurrency, endpoint).await
}

/// Fetches `get`'s column chunks (`get.extents`), one ranged GET after the other, packed.
pub(super) async fn fetch_extents(client: &Client, get: &RangedGet, endpoint: usize) -> Fetched {
    let pieces: Vec<Piece> = get.pieces().unwrap_or_default();
    fetch_pieces(client, get, false, pieces, 1, endpoint).await
}

/// Fetches `get` as `pieces` (a HEAD first when `head`), at most `concurrency` in flight,
/// each landing at its place in one buffer of `get.len_bytes`. A single piece of a whole
/// object is its plain GET.
async fn fetch_pieces(
    client: &Client,
    get: &RangedGet,
    head_first: bool,
    pieces: Vec<Piece>,
    concurrency: usize,
    endpoint: usize,
) -> Fetched {
    let started = Instant::now();
    let mut retry_causes = Vec::new();
    let failed = |e, causes| Fetched {
        result: Err(e),
        retry_causes: causes,
        first_byte: Duration::ZERO,
    };
    if head_first {
        let operation = client.operation("HEAD", Some(&get.key));
        let (result, causes) =
            with_retries(client.policy(), &operation, || head(client, get, endpoint)).await;
        retry_causes.extend(causes);
        if let Err(e) = result {
            return failed(e, retry_causes);
        }
    }
    let chunks = pieces;
    let concurrency = concurrency.clamp(1, chunks.len().max(1));
    let count = chunks.len();
    let chunks = Arc::new(chunks);
    let next = Arc::new(AtomicUsize::new(0));
    // Each range lands in the object's buffer as it arrives (as s3dlio copies each into the
    // object's segment), so an object holds its size and the ranges in flight, not twice.
    let (sender, mut arrivals) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (client, chunks, next) = (client.clone(), Arc::clone(&chunks), Arc::clone(&next));
        let (whole, sender) = (get.clone(), sender.clone());
        tasks.spawn(async move {
            while let Some(&piece) = chunks.get(next.fetch_add(1, Ordering::Relaxed)) {
                // One chunk of a whole object: its plain GET; else a ranged GET.
                let request = if chunks.len() == 1 && whole.whole {
                    whole.clone()
                } else {
                    piece.as_get(&whole.key)
                };
                let operation = client.operation("GET", Some(&request.key));
                let sent = started.elapsed();
                let (result, causes) = with_retries(client.policy(), &operation, || {
                    fetch(&client, &request, endpoint)
                })
                .await;
                let failed = result.is_err();
                let landed = result.map(|(body, head_after)| (piece.at, body, sent + head_after));
                if sender.send((landed, causes)).is_err() || failed {
                    return;
                }
            }
        });
    }
    drop(sender);
    let mut body = vec![0u8; get.len_bytes as usize];
    let mut first_byte: Option<Duration> = None;
    let mut landed = 0;
    while let Some((piece, causes)) = arrivals.recv().await {
        retry_causes.extend(causes);
        match piece {
            Ok((offset, bytes, head_at)) => {
                first_byte = Some(first_byte.map_or(head_at, |t| t.min(head_at)));
                let at = offset as usize;
                body[at..at + bytes.len()].copy_from_slice(&bytes);
                landed += 1;
            }
            Err(e) => {
                // The object fails with its first failed range; the others stop.
                tasks.abort_all();
                return failed(e, retry_causes);
            }
        }
    }
    if landed != count {
        return failed(
            RequestError::Transport {
                operation: client.operation("GET", Some(&get.key)),
                reason: format!("{landed} of the object's {count} ranged GETs came back"),
            },
            retry_causes,
        );
    }
    Fetched {
        result: Ok(body),
        retry_causes,
        first_byte: first_byte.unwrap_or_default(),
    }
}

/// One HEAD attempt: a `200` whose `Content-Length` is the object's size in the catalog.
async fn head(client: &Client, get: &RangedGet, endpoint: usize) -> Result<(), RequestError> {
    let spec = RequestSpec {
        endpoint,
        ..RequestSpec::new(Method::HEAD, Some(&get.key))
    };
    let (parts, _) = client.send_attempt(&spec).await?;
    let size = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if size != Some(get.len_bytes) {
        return Err(RequestError::BadResponse {
            operation: client.operation("HEAD", Some(&get.key)),
            reason: format!(
                "Content-Length {} where the listing said {} bytes",
                size.map_or("missing".to_string(), |s| s.to_string()),
                get.len_bytes
            ),
        });
    }
    Ok(())
}
