//! The baseline engine: the conventional loader, kept conventional on purpose.
//!
//! One tokio multi-thread runtime for the whole run (a worker per core), hyper's pooled HTTP/1.1
//! client with keep-alive connection reuse, and each GET's body collected, frame by frame, into
//! a freshly allocated heap buffer of the range's size — as a Python or Rust loader built on a
//! stock HTTP client does. The buffer is freed when the step loop releases the GET. Bytes are
//! copied once by the kernel into hyper's read buffer and once more into the GET's buffer.
//!
//! The rank thread drives it: it spawns a GET task per request (the first `prefetch` per
//! reader at the epoch's start, then one per release), and waits for arrivals on a channel.
//! Responses are checked like the io_uring engine checks them: `206`, `Content-Range`,
//! `Content-Length`, and exactly that many body bytes.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use http::header::{CONTENT_LENGTH, CONTENT_RANGE, RANGE};
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Limited};
use tokio::runtime::Runtime;

use super::{
    GetRecord, GetRequest, RequestStats, check_all_issued, check_partial_content, schedule_bug,
};
use crate::rank::{Progress, RankIo, RunError, StepBarrier};
use crate::s3::client::{RequestSpec, transport_error, with_retries};
use crate::s3::{Client, RequestError};

/// The longest error document read from a failed GET.
const ERROR_BODY_LIMIT_BYTES: usize = 64 << 10;
/// How often a waiting rank checks whether another rank failed.
const ABORT_POLL: Duration = Duration::from_millis(100);

/// The runtime and client every rank shares.
#[derive(Debug)]
pub struct Baseline {
    runtime: Runtime,
    client: Client,
}

impl Baseline {
    /// A runtime with `worker_threads` workers, and the client whose pool its GETs share.
    pub fn new(client: Client, worker_threads: usize) -> std::io::Result<Baseline> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(worker_threads.max(1))
            .thread_name("ringload-baseline")
            .enable_all()
            .build()?;
        Ok(Baseline { runtime, client })
    }

    /// The I/O of one rank: its readers' GETs in order, `prefetch` in flight per reader.
    pub fn rank<'a>(
        &self,
        gets: Vec<Vec<GetRequest>>,
        prefetch: usize,
        barrier: &'a StepBarrier,
        progress: &'a Progress,
    ) -> BaselineRank<'a> {
        let (sender, arrivals) = mpsc::channel();
        let policy = self.client.policy();
        // A GET may take every attempt's timeout and every backoff; then some slack.
        let wait_limit = policy.longest_request();
        BaselineRank {
            runtime: self.runtime.handle().clone(),
            client: self.client.clone(),
            readers: gets
                .into_iter()
                .map(|gets| Reader {
                    slots: gets.iter().map(|_| Slot::NotIssued).collect(),
                    gets,
                    issued: 0,
                })
                .collect(),
            prefetch,
            sender,
            arrivals,
            stats: RequestStats::default(),
            epochs_started: 0,
            barrier,
            progress,
            wait_limit,
        }
    }

    /// Stops the runtime; GETs still running (after a failure) are dropped.
    pub fn shutdown(self) {
        self.runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

/// Where a GET is.
enum Slot {
    NotIssued,
    InFlight,
    /// The body, held (not read) until the step loop releases it, as a loader holds a batch
    /// while the accelerator trains on it.
    Arrived(#[allow(dead_code)] Vec<u8>),
    Released,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Slot::NotIssued => "not issued yet",
            Slot::InFlight => "in flight",
            Slot::Arrived(_) => "arrived",
            Slot::Released => "released already",
        })
    }
}

#[derive(Debug)]
struct Reader {
    gets: Vec<GetRequest>,
    slots: Vec<Slot>,
    /// GETs issued this epoch (the next one to issue).
    issued: usize,
}

/// A GET's outcome, sent from its task to the rank thread.
#[derive(Debug)]
struct Arrival {
    reader: usize,
    get: usize,
    result: Result<Vec<u8>, RequestError>,
    retries: u32,
    first_byte: Duration,
    total: Duration,
}

/// One rank's I/O on the baseline engine.
#[derive(Debug)]
pub struct BaselineRank<'a> {
    runtime: tokio::runtime::Handle,
    client: Client,
    readers: Vec<Reader>,
    prefetch: usize,
    sender: Sender<Arrival>,
    arrivals: Receiver<Arrival>,
    stats: RequestStats,
    epochs_started: u32,
    barrier: &'a StepBarrier,
    progress: &'a Progress,
    /// The longest a rank waits for one GET before calling the run stalled.
    wait_limit: Duration,
}

impl BaselineRank<'_> {
    /// Starts reader `r`'s next GET.
    fn issue(&mut self, r: usize) {
        let reader = &mut self.readers[r];
        let index = reader.issued;
        let Some(get) = reader.gets.get(index).cloned() else {
            return;
        };
        reader.issued += 1;
        reader.slots[index] = Slot::InFlight;
        let client = self.client.clone();
        let sender = self.sender.clone();
        self.runtime.spawn(async move {
            let started = Instant::now();
            let operation = client.operation("GET", Some(&get.key));
            let (result, retries) =
                with_retries(client.policy(), &operation, || fetch(&client, &get)).await;
            let (result, first_byte) = match result {
                Ok((body, first_byte)) => (Ok(body), first_byte),
                Err(e) => (Err(e), Duration::ZERO),
            };
            // The rank may have stopped after another failure; then nobody listens.
            let _ = sender.send(Arrival {
                reader: r,
                get: index,
                result,
                retries,
                first_byte,
                total: started.elapsed(),
            });
        });
    }

    /// Records an arrival; a failed GET ends the rank.
    fn accept(&mut self, arrival: Arrival) -> Result<(), RunError> {
        self.stats.retries += u64::from(arrival.retries);
        match arrival.result {
            Ok(body) => {
                self.stats.requests += 1;
                self.stats.bytes_read += body.len() as u64;
                self.stats.first_byte.record(arrival.first_byte);
                self.stats.total.record(arrival.total);
                self.stats.trace.push(GetRecord {
                    epoch: self.epochs_started - 1,
                    reader: arrival.reader,
                    get: arrival.get,
                    attempts: arrival.retries + 1,
                    first_byte_us: arrival.first_byte.as_micros() as u64,
                    total_us: arrival.total.as_micros() as u64,
                });
                self.progress
                    .bytes_received
                    .fetch_add(body.len() as u64, std::sync::atomic::Ordering::Relaxed);
                self.readers[arrival.reader].slots[arrival.get] = Slot::Arrived(body);
                Ok(())
            }
            Err(e) => {
                self.stats.errors += 1;
                Err(RunError::Request(e))
            }
        }
    }
}

impl RankIo for BaselineRank<'_> {
    fn start_epoch(&mut self) -> Result<(), RunError> {
        self.epochs_started += 1;
        for r in 0..self.readers.len() {
            let reader = &mut self.readers[r];
            reader.issued = 0;
            reader.slots.iter_mut().for_each(|s| *s = Slot::NotIssued);
            for _ in 0..self.prefetch.min(reader.gets.len()) {
                self.issue(r);
            }
        }
        Ok(())
    }

    fn wait_for(&mut self, reader: usize, get: usize) -> Result<(), RunError> {
        let deadline = Instant::now() + self.wait_limit;
        loop {
            match &self.readers[reader].slots[get] {
                Slot::Arrived(_) => return Ok(()),
                Slot::InFlight => {}
                other => return Err(schedule_bug("waits for", reader, get, &other)),
            }
            match self.arrivals.recv_timeout(ABORT_POLL) {
                Ok(arrival) => self.accept(arrival)?,
                Err(RecvTimeoutError::Timeout) => {
                    if self.barrier.is_aborted() {
                        return Err(RunError::Aborted);
                    }
                    if Instant::now() >= deadline {
                        return Err(RunError::Stalled(format!(
                            "GET {} of reader {reader} did not complete within {:?}",
                            self.readers[reader].gets[get].range_header(),
                            self.wait_limit
                        )));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(RunError::Engine("the GET tasks' channel closed".into()));
                }
            }
        }
    }

    fn compute(&mut self, duration: Duration) -> Result<(), RunError> {
        // GETs go on in the runtime; their arrivals queue on the channel.
        std::thread::sleep(duration);
        Ok(())
    }

    fn release(&mut self, reader: usize, get: usize) -> Result<(), RunError> {
        let slot = &mut self.readers[reader].slots[get];
        if !matches!(slot, Slot::Arrived(_)) {
            return Err(schedule_bug("release of", reader, get, &*slot));
        }
        *slot = Slot::Released;
        self.issue(reader);
        Ok(())
    }

    fn end_epoch(&mut self) -> Result<(), RunError> {
        for r in 0..self.readers.len() {
            let reader = &self.readers[r];
            check_all_issued(r, reader.issued, reader.gets.len())?;
            for get in 0..self.readers[r].gets.len() {
                if matches!(self.readers[r].slots[get], Slot::InFlight) {
                    self.wait_for(r, get)?;
                }
                // A partly consumed last GET still holds its buffer.
                self.readers[r].slots[get] = Slot::Released;
            }
        }
        Ok(())
    }

    fn stats(&self) -> &RequestStats {
        &self.stats
    }
}

/// One attempt of a GET: the body in a fresh buffer, and the time to the response head.
async fn fetch(client: &Client, get: &GetRequest) -> Result<(Vec<u8>, Duration), RequestError> {
    let operation = || {
        format!(
            "{} ({})",
            client.operation("GET", Some(&get.key)),
            get.range_header()
        )
    };
    let spec = RequestSpec {
        headers: vec![(RANGE, get.range_header())],
        ..RequestSpec::new(Method::GET, Some(&get.key))
    };
    let request = client.http_request(&spec)?;
    let sent = Instant::now();
    let response = client
        .http()
        .request(request)
        .await
        .map_err(|e| transport_error(operation(), client.target(), &e))?;
    let first_byte = sent.elapsed();
    let (parts, body) = response.into_parts();
    if parts.status != StatusCode::PARTIAL_CONTENT {
        if parts.status.is_success() {
            // Never read a whole object into a range-sized buffer.
            return Err(RequestError::BadResponse {
                operation: operation(),
                reason: format!(
                    "answered {} instead of 206 Partial Content: the server ignores Range",
                    parts.status
                ),
            });
        }
        let document = Limited::new(body, ERROR_BODY_LIMIT_BYTES)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        return Err(RequestError::from_response(
            operation(),
            parts.status.as_u16(),
            &document,
            &client.hint_context(),
        ));
    }
    let header = |name| parts.headers.get(name).and_then(|v| v.to_str().ok());
    check_partial_content(header(CONTENT_RANGE), header(CONTENT_LENGTH), get).map_err(
        |reason| RequestError::BadResponse {
            operation: operation(),
            reason,
        },
    )?;
    let len = get.len_bytes as usize;
    let mut buffer = Vec::with_capacity(len);
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| transport_error(operation(), client.target(), &e))?;
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
