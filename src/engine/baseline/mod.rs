//! The baseline engine: the conventional loader, kept conventional on purpose.
//!
//! One tokio multi-thread runtime for the whole run (a worker per core), hyper's pooled HTTP/1.1
//! client with keep-alive connection reuse, and each GET's body collected, frame by frame, into
//! a freshly allocated heap buffer of the range's size — as a Python or Rust loader built on a
//! stock HTTP client does. The buffer is freed when the step loop releases the GET. Bytes are
//! copied once by the kernel into hyper's read buffer and once more into the GET's buffer.
//!
//! The rank thread drives it through the shared reader window ([`super::window`]): it spawns a
//! GET task per request (the first `prefetch` per reader at the epoch's start, then one per
//! release), and waits for outcomes on a channel.
//! Responses are checked like the io_uring engine checks them: `206`, `Content-Range`,
//! `Content-Length`, and exactly that many body bytes.

pub mod checkpoint;
mod get;
mod s3dlio;

use self::get::fetch;

use std::ops::Range;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use super::window::{Fetched, Transport, Window, WindowedRank};
use crate::budget::SmallBuffers;
use crate::plan::RangedGet;
use crate::rank::{Progress, RankError, StepBarrier};
use crate::s3::client::with_retries;
use crate::s3::{Client, RequestError};

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

    /// The I/O of one rank: its readers' GETs in order, `prefetch` in flight per reader, for
    /// `epochs` epochs.
    ///
    /// `first_reader` numbers the rank's first reader among every rank's (rank × RT): with
    /// several endpoints, slot `j` of reader `g` sends to endpoint `(g × prefetch + j) mod E`,
    /// as the io_uring engine assigns its connections.
    #[allow(clippy::too_many_arguments)]
    pub fn rank<'a>(
        &self,
        gets: Vec<Vec<RangedGet>>,
        prefetch: usize,
        small: Option<SmallBuffers>,
        epochs: u32,
        first_reader: usize,
        barrier: &'a StepBarrier,
        progress: &'a Progress,
    ) -> BaselineRank<'a> {
        let (sender, arrivals) = mpsc::channel();
        // A GET may take every attempt's timeout and every backoff; then some slack.
        let wait_limit = self.client.policy().longest_request();
        let transport = Tasks {
            runtime: self.runtime.handle().clone(),
            client: self.client.clone(),
            sender,
            arrivals,
            progress,
            busy: vec![vec![false; prefetch.max(1)]; gets.len()],
            slot_endpoints: super::common::slot_endpoints(
                self.client.target(),
                first_reader..first_reader + gets.len(),
                prefetch.max(1),
            ),
        };
        WindowedRank::new(
            Window::new(gets, prefetch, small, epochs, self.client.location()),
            transport,
            barrier,
            wait_limit,
        )
    }

    /// With `https://` endpoints: opens as many connections to each endpoint as the slots of
    /// `readers` (numbered over every rank) will use, `prefetch` per reader, and leaves them in
    /// hyper's pool, so the TLS handshakes happen now, before the clock.
    pub fn preconnect(&self, readers: Range<usize>, prefetch: usize) -> Result<(), RequestError> {
        let target = self.client.target();
        if !target.endpoints.iter().any(|e| e.is_tls()) {
            return Ok(());
        }
        let mut per_endpoint = vec![0usize; target.endpoints.len()];
        for endpoint in super::common::slot_endpoints(target, readers, prefetch) {
            per_endpoint[endpoint] += 1;
        }
        self.open_connections(&per_endpoint)
    }

    /// Opens `per_endpoint[e]` connections to each endpoint `e` (each with its handshake) and
    /// leaves them in hyper's pool, by as many concurrent bucket checks.
    pub fn open_connections(&self, per_endpoint: &[usize]) -> Result<(), RequestError> {
        self.runtime.block_on(async {
            let mut checks = tokio::task::JoinSet::new();
            for (endpoint, &n) in per_endpoint.iter().enumerate() {
                for _ in 0..n {
                    let client = self.client.clone();
                    checks.spawn(async move { client.check_bucket_at(endpoint).await });
                }
            }
            while let Some(done) = checks.join_next().await {
                match done {
                    Ok(result) => result?,
                    Err(e) => {
                        return Err(RequestError::Transport {
                            operation: self.client.operation("GET", None),
                            reason: format!("opening connections: {e}"),
                        });
                    }
                }
            }
            Ok(())
        })
    }

    /// The checkpoint I/O of rank `rank`, on the shared runtime and client.
    pub fn checkpoint(
        &self,
        rank: usize,
        shape: crate::checkpoint::ObjectIoShape,
    ) -> checkpoint::BaselineCheckpoint {
        checkpoint::BaselineCheckpoint::new(
            self.runtime.handle().clone(),
            self.client.clone(),
            shape,
            rank,
        )
    }

    /// Stops the runtime; GETs still running (after a failure) are dropped.
    pub fn shutdown(self) {
        self.runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

/// One rank's I/O on the baseline engine.
pub type BaselineRank<'a> = WindowedRank<'a, Tasks<'a>>;

/// A GET's outcome, sent from its task to the rank thread.
#[derive(Debug)]
struct Outcome {
    reader: usize,
    get: usize,
    /// The reader's slot it took, and the endpoint that slot sends to.
    slot: usize,
    endpoint: usize,
    result: Result<Vec<u8>, RequestError>,
    /// The cause of each retry.
    retry_causes: Vec<&'static str>,
    first_byte: Duration,
    total: Duration,
}

/// The baseline's transport: a task per GET on the shared runtime, outcomes on a channel.
#[derive(Debug)]
pub struct Tasks<'a> {
    runtime: tokio::runtime::Handle,
    client: Client,
    sender: Sender<Outcome>,
    arrivals: Receiver<Outcome>,
    progress: &'a Progress,
    /// `busy[reader][slot]`: a GET of the reader is in flight in that slot.
    busy: Vec<Vec<bool>>,
    /// `slot_endpoints[reader × prefetch + slot]`: the endpoint that slot sends to.
    slot_endpoints: Vec<usize>,
}

impl Tasks<'_> {
    /// Reports an outcome to the window.
    fn accept(
        &mut self,
        window: &mut Window<(), Vec<u8>>,
        outcome: Outcome,
    ) -> Result<(), RankError> {
        self.busy[outcome.reader][outcome.slot] = false;
        for cause in &outcome.retry_causes {
            window.retrying(cause, outcome.endpoint);
        }
        let retries = outcome.retry_causes.len() as u32;
        match outcome.result {
            Ok(body) => {
                self.progress
                    .bytes_received
                    .fetch_add(body.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let arrival = Fetched {
                    retries,
                    first_byte: outcome.first_byte,
                    total: outcome.total,
                    endpoint: outcome.endpoint,
                };
                window.verify(outcome.reader, outcome.get, outcome.endpoint, &body)?;
                window.arrived(outcome.reader, outcome.get, body, arrival)
            }
            Err(e) => window.failed(outcome.reader, outcome.get, outcome.endpoint, retries, e),
        }
    }
}

impl Transport for Tasks<'_> {
    type InFlight = ();
    /// The body, held (not read) until the step loop releases it, as a loader holds a batch
    /// while the accelerator trains on it.
    type Held = Vec<u8>;

    fn start(
        &mut self,
        window: &Window<(), Vec<u8>>,
        reader: usize,
        index: usize,
        // The body gets a buffer of its own size: the window's size classes bound how many
        // large ones a reader holds, as they bound the io_uring engine's registered buffers.
        _class: usize,
    ) -> Result<(), RankError> {
        let get = window.get(reader, index).clone();
        let client = self.client.clone();
        let sender = self.sender.clone();
        let prefetch = self.busy[reader].len();
        let slot = self.busy[reader]
            .iter()
            .position(|busy| !busy)
            .ok_or_else(|| RankError::Engine("no free slot inside the window (a bug)".into()))?;
        self.busy[reader][slot] = true;
        let endpoint = self.slot_endpoints[reader * prefetch + slot];
        self.runtime.spawn(async move {
            let started = Instant::now();
            let (result, retry_causes, first_byte) = match get.fetch {
                // The DLIO fork's s3dlio loader: a HEAD, ranged chunks.
                Some(rules) => {
                    let done = s3dlio::fetch_object(&client, &get, rules, endpoint).await;
                    (done.result, done.retry_causes, done.first_byte)
                }
                // A column subset: its chunks' ranged GETs, one after the other.
                None if get.extents.is_some() => {
                    let done = s3dlio::fetch_extents(&client, &get, endpoint).await;
                    (done.result, done.retry_causes, done.first_byte)
                }
                None => {
                    let operation = client.operation("GET", Some(&get.key));
                    let (result, causes) = with_retries(client.policy(), &operation, || {
                        fetch(&client, &get, endpoint)
                    })
                    .await;
                    match result {
                        Ok((body, first_byte)) => (Ok(body), causes, first_byte),
                        Err(e) => (Err(e), causes, Duration::ZERO),
                    }
                }
            };
            // The rank may have stopped after another failure; then nobody listens.
            let _ = sender.send(Outcome {
                reader,
                get: index,
                slot,
                endpoint,
                result,
                retry_causes,
                first_byte,
                total: started.elapsed(),
            });
        });
        Ok(())
    }

    fn progress(
        &mut self,
        window: &mut Window<(), Vec<u8>>,
        until: Instant,
    ) -> Result<(), RankError> {
        // Woken at least every ABORT_POLL, so the caller sees another rank's failure.
        let wait = until
            .saturating_duration_since(Instant::now())
            .min(ABORT_POLL);
        let result = match self.arrivals.recv_timeout(wait) {
            Ok(outcome) => self.accept(window, outcome),
            Err(RecvTimeoutError::Timeout) => Ok(()),
            Err(RecvTimeoutError::Disconnected) => {
                Err(RankError::Engine("the GET tasks' channel closed".into()))
            }
        };
        // Connections hyper's pool dropped for bytes after a body, counted by whichever rank
        // looks first. The bytes are seen as the body's end is read, before its GET is
        // reported: looking after each arrival misses none.
        if let Some((connections, after)) = self.client.stray_bytes().take_new() {
            window.stray_bytes(connections, &after);
        }
        result
    }

    fn compute(
        &mut self,
        _window: &mut Window<(), Vec<u8>>,
        duration: Duration,
    ) -> Result<(), RankError> {
        // GETs go on in the runtime; their outcomes queue on the channel.
        std::thread::sleep(duration);
        Ok(())
    }

    fn give_back(&mut self, body: Vec<u8>) {
        drop(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rank::RankIo;
    use crate::s3::{Endpoint, RetryPolicy, Target};
    use std::io::{Read, Write};
    use std::net::TcpListener;

    fn head_206(offset: u64, len: u64) -> Vec<u8> {
        format!(
            "HTTP/1.1 206 Partial Content\r\ncontent-range: bytes {offset}-{}/1000\r\n\
             content-length: {len}\r\n\r\n",
            offset + len - 1
        )
        .into_bytes()
    }

    /// Bytes after a body on a kept-alive connection: the pooled connection is dropped and the
    /// next GET still arrives, as the io_uring engine also does (there it is counted as
    /// `stray_bytes`; hyper's pool drops such a connection without telling).
    #[test]
    fn bytes_after_a_body_do_not_fail_the_next_get() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                std::thread::spawn(move || {
                    let mut byte = [0u8; 1];
                    loop {
                        let mut head = Vec::new();
                        while !head.ends_with(b"\r\n\r\n") {
                            if !matches!(stream.read(&mut byte), Ok(1)) {
                                return;
                            }
                            head.push(byte[0]);
                        }
                        let text = String::from_utf8_lossy(&head).to_lowercase();
                        let offset: u64 = if text.contains("range: bytes=0-") {
                            0
                        } else {
                            100
                        };
                        let mut answer = head_206(offset, 100);
                        answer.extend(std::iter::repeat_n(7u8, 100));
                        // The first answer carries garbage after its body.
                        if offset == 0 {
                            answer.extend_from_slice(b"GARBAGE\r\n");
                        }
                        if stream.write_all(&answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let target = Target::simple(Endpoint::parse(&url).unwrap(), "b", None);
        let policy = RetryPolicy {
            retries: 2,
            first_backoff: Duration::from_millis(5),
            ..RetryPolicy::default()
        };
        let baseline = Baseline::new(Client::new(target, policy).unwrap(), 1).unwrap();
        let barrier = StepBarrier::new(1, Duration::from_secs(10));
        let progress = Progress::default();
        let gets = (0..2)
            .map(|i| RangedGet {
                whole: false,
                fetch: None,
                object: None,
                key: "f".into(),
                offset: i * 100,
                len_bytes: 100,
                check: None,
                extents: None,
            })
            .collect();
        let mut rank = baseline.rank(vec![gets], 1, None, 1, 0, &barrier, &progress);
        rank.start_epoch().unwrap();
        for i in 0..2 {
            rank.wait_for(0, i).unwrap();
            rank.release(0, i).unwrap();
        }
        rank.end_epoch().unwrap();
        assert_eq!((rank.stats().requests, rank.stats().errors), (2, 0));
        drop(rank);
        baseline.shutdown();
    }
}
