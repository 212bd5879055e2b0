//! The baseline engine's checkpoint I/O ([`ObjectIo`]): the conventional writer and reader.
//!
//! Each part is a freshly allocated heap buffer that the generator fills, its checksum
//! (`--checksum`) computed over it and sent as a header, handed to hyper as the request body
//! (`x-amz-content-sha256: UNSIGNED-PAYLOAD`, or its SHA-256 computed in the generator's pass
//! with `--payload-signing sha256`), up to `parts_in_flight` tasks
//! at once on the shared runtime; each ranged GET of a restore is collected into a fresh heap
//! buffer, `read_blocks` blocks at once. Which requests go — the single-PUT rule, the parts,
//! the restore's blocks and ranges — is the plan's `checkpoint::ObjectIoShape`, the same for
//! both engines. Retries follow the client's policy per request; a part that exhausts them
//! aborts its upload.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_RANGE, ETAG, HeaderName, RANGE};
use http::{Method, StatusCode};
use tokio::task::JoinSet;

use crate::checkpoint::ObjectIoShape;
use crate::metrics::{GetRecord, thread_cpu};
use crate::rank::checkpoint::{ObjectIo, ObjectSpec, ObjectStats};
use crate::rank::journal::UploadJournal;
use crate::rank::{IoError, RankError};
use crate::s3::client::{RequestSpec, with_retries};
use crate::s3::integrity::RestoreCheck;
use crate::s3::{Client, RequestError};

/// One rank's checkpoint I/O on the baseline engine.
#[derive(Debug)]
pub struct BaselineCheckpoint {
    runtime: tokio::runtime::Handle,
    client: Client,
    shape: ObjectIoShape,
    /// `slot_endpoint[j]`: the endpoint connection slot `j` sends to (the walk both engines
    /// share, `engine::common::slot_endpoints`).
    slot_endpoint: Vec<usize>,
    stats: ObjectStats,
    /// Uploads started and not yet completed or aborted: (key, upload id).
    open: Vec<(String, String)>,
    /// The process's journal of the uploads it starts.
    journal: UploadJournal,
    /// Raised when the phase stops: no new part or GET starts.
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// The time series' counters of the rank.
    live: crate::timeseries::Counter,
}

/// A part's outcome, from its task.
struct PartDone {
    number: u32,
    /// A single PutObject, not a part of an upload.
    single: bool,
    result: Result<String, RequestError>,
    causes: Vec<&'static str>,
    bytes: u64,
    latency: Duration,
    generate_cpu: Duration,
    /// The body's checksum (`--checksum`), and the CPU it took.
    digest: Option<crate::checksum::Digest>,
    checksum_cpu: Duration,
}

/// A ranged GET's outcome, from its task.
struct RangeDone {
    block: usize,
    result: Result<(), RequestError>,
    causes: Vec<&'static str>,
    bytes: u64,
    first_byte: Duration,
    total: Duration,
    verify_cpu: Duration,
    /// The CRC of the range's bytes (restores checking the object's checksum), and its CPU.
    crc: Option<(u64, Duration)>,
    endpoint: usize,
}

impl BaselineCheckpoint {
    pub fn new(
        runtime: tokio::runtime::Handle,
        client: Client,
        shape: ObjectIoShape,
        rank: usize,
    ) -> BaselineCheckpoint {
        let slot_endpoint = super::super::common::slot_endpoints(
            client.target(),
            rank..rank + 1,
            shape.connections(),
        );
        BaselineCheckpoint {
            runtime,
            client,
            shape,
            slot_endpoint,
            stats: ObjectStats::default(),
            open: Vec::new(),
            journal: UploadJournal::off(),
            stop: None,
            live: Default::default(),
        }
    }

    fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn endpoint(&self, slot: usize) -> usize {
        self.slot_endpoint[slot % self.slot_endpoint.len().max(1)]
    }

    /// One PUT (or UploadPart with `part`) of `bytes` bytes of `object` from `offset`, with
    /// retries; the body generated into a fresh buffer first.
    fn part_task(
        &self,
        object: &ObjectSpec,
        part: Option<(&str, u32)>,
        offset: u64,
        bytes: u64,
        slot: usize,
    ) -> impl std::future::Future<Output = PartDone> + Send + 'static {
        let client = self.client.clone();
        let key = object.key.clone();
        let content = object.content;
        let upload = part.map(|(id, n)| (id.to_string(), n));
        let endpoint = self.endpoint(slot);
        let digests = super::super::common::digests(&self.shape, self.client.signer().signs());
        let shape = self.shape;
        async move {
            let mut buf = vec![0u8; bytes as usize];
            // The digests are known before the head goes: the whole body is generated first.
            let filled = super::super::common::fill_and_digest(&content, offset, &mut buf, digests);
            let (digest, generate_cpu, checksum_cpu) =
                (filled.digest, filled.generate_cpu, filled.checksum_cpu);
            let form = super::super::common::BodyForm::of(&shape, bytes, &filled);
            let headers = form
                .headers
                .into_iter()
                .map(|(name, value)| (HeaderName::from_static(name), value))
                .collect();
            let body = Bytes::from(buf);
            let number = upload.as_ref().map_or(1, |(_, n)| *n);
            let single = upload.is_none();
            let number_text = number.to_string();
            let query_storage;
            let query: &[(&str, &str)] = match &upload {
                Some((id, _)) => {
                    query_storage = [("partNumber", number_text.as_str()), ("uploadId", id)];
                    &query_storage
                }
                None => &[],
            };
            let spec = RequestSpec {
                query,
                headers,
                body,
                endpoint,
                payload_sha256: form.payload_sha256,
                chunked: form.chunked,
                ..RequestSpec::new(Method::PUT, Some(&key))
            };
            let what = match &upload {
                Some(_) => format!("part {number} of s3://…/{key}"),
                None => format!("PUT {key}"),
            };
            let started = Instant::now();
            let (result, causes) = with_retries(client.policy(), &what, || async {
                let (parts, _) = client.send_attempt(&spec).await?;
                let etag = parts.headers.get(ETAG).and_then(|v| v.to_str().ok());
                match upload {
                    // A part's ETag goes into the completion; a single PUT's is not needed.
                    None => Ok(String::new()),
                    Some(_) => crate::s3::complete::part_etag(&what, etag),
                }
            })
            .await;
            PartDone {
                number,
                single,
                result,
                causes,
                bytes,
                latency: started.elapsed(),
                generate_cpu,
                digest,
                checksum_cpu,
            }
        }
    }

    /// Records a part's outcome; `Err` is its final failure, worded.
    fn account_part(&mut self, done: &PartDone) {
        self.live.retried_n(done.causes.len() as u64);
        self.live.ended();
        if done.result.is_ok() {
            self.live.counted(0, done.bytes, done.latency);
        }
        let w = &mut self.stats.write;
        w.retries += done.causes.len() as u64;
        for cause in &done.causes {
            *w.retries_by_cause.entry(cause).or_default() += 1;
        }
        w.generate_cpu += done.generate_cpu;
        w.checksum_cpu += done.checksum_cpu;
        if done.result.is_ok() {
            if done.single {
                w.sent.put += 1;
            } else {
                w.sent.part += 1;
            }
            w.parts += 1;
            w.bytes_written += done.bytes;
            w.part_latency.record(done.latency);
        }
    }

    /// Aborts upload `id` of `key` (best effort) and forgets it.
    fn abort(&mut self, key: &str, id: &str) -> bool {
        let client = self.client.clone();
        let ok = self
            .runtime
            .block_on(async { client.abort_multipart(key, id).await })
            .is_ok();
        self.open.retain(|(k, u)| !(k == key && u == id));
        if ok {
            self.journal.done(key, id);
            self.stats.write.sent.abort += 1;
        }
        self.stats.write.aborted += 1;
        ok
    }

    fn failed(&mut self, key: &str, id: &str, what: String, error: RequestError) -> RankError {
        let aborted = self.abort(key, id);
        let mut io: IoError = error.into();
        io.message = format!(
            "{what} of checkpoint object {key} failed: {}; the upload was {}",
            io.message,
            if aborted {
                "aborted"
            } else {
                "left open (the abort failed too; the next run of this workload aborts it)"
            }
        );
        RankError::Io(io)
    }

    fn put_multipart(&mut self, object: &ObjectSpec) -> Result<(), RankError> {
        let client = self.client.clone();
        let key = object.key.clone();
        let algorithm = self.shape.checksum.algorithm();
        let id = self
            .runtime
            .block_on(async { client.create_multipart_checked(&key, algorithm).await })
            .map_err(|e| RankError::Io(e.into()))?;
        self.stats.write.sent.create += 1;
        self.open.push((key.clone(), id.clone()));
        if let Err(e) = self.journal.opened(&key, &id) {
            let aborted = self.abort(&key, &id);
            return Err(super::super::common::unjournaled(&key, &e, aborted));
        }
        let count = self.shape.part_count(object.bytes);
        let mut etags = vec![String::new(); count as usize];
        let mut digests = vec![None; count as usize];
        let mut tasks = JoinSet::new();
        let mut next = 1u32;
        let mut free_slots: Vec<usize> = (0..self.shape.parts_in_flight.max(1)).rev().collect();
        let mut slot_of = std::collections::HashMap::new();
        loop {
            if self.stopped() {
                self.runtime.block_on(async {
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {
                        // Issued and never to end: no longer in flight.
                        self.live.ended();
                    }
                });
                self.abort(&key, &id);
                return Err(RankError::Aborted);
            }
            while next <= count && !free_slots.is_empty() {
                let slot = free_slots.pop().unwrap_or(0);
                let range = self.shape.part(object.bytes, next);
                let task = self.part_task(
                    object,
                    Some((&id, next)),
                    range.start,
                    range.end - range.start,
                    slot,
                );
                let _guard = self.runtime.enter();
                tasks.spawn_on(task, &self.runtime);
                self.live.issued();
                slot_of.insert(next, slot);
                next += 1;
            }
            let Some(joined) = self.runtime.block_on(tasks.join_next()) else {
                break;
            };
            let done = match joined {
                Ok(done) => done,
                Err(e) => {
                    return Err(self.failed(
                        &key,
                        &id,
                        "an upload task".into(),
                        RequestError::Transport {
                            operation: format!("UploadPart {key}"),
                            reason: e.to_string(),
                        },
                    ));
                }
            };
            self.account_part(&done);
            if let Some(slot) = slot_of.remove(&done.number) {
                free_slots.push(slot);
            }
            match done.result {
                Ok(etag) => {
                    etags[done.number as usize - 1] = etag;
                    digests[done.number as usize - 1] = done.digest;
                }
                Err(e) => {
                    self.runtime.block_on(async {
                        tasks.abort_all();
                        while tasks.join_next().await.is_some() {
                            // Issued and never to end: no longer in flight.
                            self.live.ended();
                        }
                    });
                    return Err(self.failed(&key, &id, format!("part {}", done.number), e));
                }
            }
        }
        let checksums = algorithm.map(|a| {
            let parts: Vec<_> = digests
                .iter()
                .zip(self.shape.parts(object.bytes))
                .filter_map(|(d, (_, range))| Some(((*d)?, range.end - range.start)))
                .collect();
            crate::checksum::Completion::of(a, &parts)
        });
        let (completed, causes) = self.client.complete_upload_checked(
            &self.runtime,
            &key,
            &id,
            &etags,
            object.bytes,
            checksums.as_ref(),
        );
        let w = &mut self.stats.write;
        w.retries += causes.len() as u64;
        for cause in causes {
            *w.retries_by_cause.entry(cause).or_default() += 1;
        }
        match completed {
            Ok(crate::s3::complete::Completed::Answered { checksum }) => {
                w.sent.complete += 1;
                if !checksum && self.shape.checksum.algorithm().is_some() {
                    w.checksum_unconfirmed += 1;
                }
            }
            Ok(crate::s3::complete::Completed::SettledByHead) => {
                // The completion reached the store; its answer was lost: a HEAD settled it.
                w.sent.complete += 1;
                w.sent.head += 1;
                w.settled_by_head += 1;
            }
            Err(e) => return Err(self.failed(&key, &id, "CompleteMultipartUpload".into(), e)),
        }
        self.open.retain(|(k, u)| !(k == &key && u == &id));
        self.journal.done(&key, &id);
        Ok(())
    }

    fn put_single(&mut self, object: &ObjectSpec) -> Result<(), RankError> {
        let task = self.part_task(object, None, 0, object.bytes, 0);
        self.live.issued();
        let done = self.runtime.block_on(task);
        self.account_part(&done);
        match done.result {
            Ok(_) => Ok(()),
            Err(e) => {
                let mut io: IoError = e.into();
                io.message = format!(
                    "PUT of checkpoint object {} failed: {}",
                    object.key, io.message
                );
                Err(RankError::Io(io))
            }
        }
    }

    /// A task reading `len` bytes of `object` from `offset` with one ranged GET, checking them
    /// when asked.
    fn range_task(
        &self,
        object: &ObjectSpec,
        block: usize,
        (offset, len): (u64, u64),
        crc: Option<crate::checksum::Algorithm>,
    ) -> impl std::future::Future<Output = RangeDone> + Send + 'static {
        let client = self.client.clone();
        let key = object.key.clone();
        let content = object.content;
        let verify = self.shape.verify;
        let endpoint = self.endpoint(block);
        async move {
            let last = offset + len - 1;
            let spec = RequestSpec {
                headers: vec![(RANGE, format!("bytes={offset}-{last}"))],
                endpoint,
                body_limit: len,
                ..RequestSpec::new(Method::GET, Some(&key))
            };
            let operation = client.operation("GET", Some(&key));
            let started = Instant::now();
            let (result, causes) = with_retries(client.policy(), &operation, || async {
                let attempt = Instant::now();
                let (parts, body) = client.send_attempt(&spec).await?;
                let first_byte = attempt.elapsed();
                let header = |name| {
                    parts
                        .headers
                        .get(name)
                        .and_then(|v: &http::HeaderValue| v.to_str().ok())
                };
                let expected = format!("bytes {offset}-{last}/");
                let ok = parts.status == StatusCode::PARTIAL_CONTENT
                    && header(CONTENT_RANGE).is_some_and(|r| r.starts_with(&expected))
                    && body.len() as u64 == len
                    && header(CONTENT_LENGTH).is_none_or(|l| l.trim() == len.to_string());
                if !ok {
                    return Err(RequestError::BadResponse {
                        operation: operation.clone(),
                        reason: format!(
                            "asked for bytes {offset}-{last} and got {} {} bytes ({})",
                            parts.status,
                            body.len(),
                            header(CONTENT_RANGE).unwrap_or("no Content-Range")
                        ),
                    });
                }
                Ok((body, first_byte))
            })
            .await;
            let first_byte = result.as_ref().map_or(Duration::ZERO, |(_, f)| *f);
            let total = started.elapsed();
            let mut verify_cpu = Duration::ZERO;
            let crc = match (&result, crc) {
                (Ok((body, _)), Some(algorithm)) => {
                    let cpu = thread_cpu();
                    let crc = crate::checksum::digest(algorithm, body).crc();
                    Some((crc, thread_cpu().saturating_sub(cpu)))
                }
                _ => None,
            };
            let result = result.and_then(|(body, _)| {
                if !verify {
                    return Ok(());
                }
                let cpu = thread_cpu();
                let checked = content.check(offset, &body);
                verify_cpu = thread_cpu().saturating_sub(cpu);
                checked.map_err(|at| RequestError::Corrupt {
                    operation: operation.clone(),
                    reason: content.mismatch(at),
                })
            });
            RangeDone {
                block,
                result,
                causes,
                bytes: len,
                first_byte,
                total,
                verify_cpu,
                crc,
                endpoint,
            }
        }
    }
}

impl BaselineCheckpoint {
    /// With the shape's `restore_check`: the object's check, from its checksum a HEAD
    /// returns (`None` when it cannot be checked from blocks: counted unchecked).
    fn restore_check(
        &mut self,
        object: &ObjectSpec,
        blocks: usize,
    ) -> Result<Option<RestoreCheck>, RankError> {
        if !self.shape.restore_check || blocks == 0 {
            return Ok(None);
        }
        let endpoint = self.endpoint(0);
        let stored = self
            .runtime
            .block_on(self.client.stored_checksum(&object.key, endpoint))
            .map_err(|e| RankError::Io(e.into()))?;
        self.stats.read.by_kind.head += 1;
        let check = RestoreCheck::new(stored, blocks);
        self.stats.restore.unchecked += u64::from(check.is_none());
        Ok(check)
    }
}

impl ObjectIo for BaselineCheckpoint {
    fn put(&mut self, object: &ObjectSpec) -> Result<(), RankError> {
        if self.shape.single_put(object.bytes) {
            self.put_single(object)?;
        } else {
            self.put_multipart(object)?;
        }
        self.stats.write.objects += 1;
        Ok(())
    }

    fn get(&mut self, object: &ObjectSpec) -> Result<(), RankError> {
        // The shape's blocks (as DLIO cuts them), each read with its ranged GETs one after
        // another.
        let mut gets: Vec<_> = self
            .shape
            .restore_blocks(object.bytes)
            .into_iter()
            .map(|b| self.shape.block_gets(b))
            .collect();
        let mut check = self.restore_check(object, gets.len())?;
        let algorithm = check.as_ref().map(RestoreCheck::algorithm);
        let mut tasks = JoinSet::new();
        let issue = |this: &Self,
                     tasks: &mut JoinSet<RangeDone>,
                     block: usize,
                     next: Option<std::ops::Range<u64>>| {
            if let Some(range) = next {
                let range = (range.start, range.end - range.start);
                let task = this.range_task(object, block, range, algorithm);
                tasks.spawn_on(task, &this.runtime);
                this.live.issued();
            }
        };
        for (block, g) in gets.iter_mut().enumerate() {
            issue(self, &mut tasks, block, g.next());
        }
        while let Some(joined) = self.runtime.block_on(tasks.join_next()) {
            let done =
                joined.map_err(|e| RankError::Engine(format!("a restore task failed: {e}")))?;
            self.live.retried_n(done.causes.len() as u64);
            self.live.ended();
            if done.result.is_ok() {
                self.live.counted(done.bytes, 0, done.total);
            }
            let read = &mut self.stats.read;
            read.retries += done.causes.len() as u64;
            for cause in &done.causes {
                *read.retries_by_cause.entry(cause).or_default() += 1;
            }
            if let Err(e) = done.result {
                read.errors += 1;
                *read.errors_by_cause.entry(e.cause()).or_default() += 1;
                self.runtime.block_on(async {
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {
                        // Issued and never to end: no longer in flight.
                        self.live.ended();
                    }
                });
                return Err(RankError::Io(e.into()));
            }
            read.requests += 1;
            read.by_kind.ranged_get += 1;
            read.bytes_read += done.bytes;
            read.first_byte.record(done.first_byte);
            read.total.record(done.total);
            if self.shape.verify {
                read.verify.gets += 1;
                read.verify.cpu += done.verify_cpu;
            }
            if let (Some(check), Some((crc, cpu))) = (check.as_mut(), done.crc) {
                check.push(done.block, crc, done.bytes);
                self.stats.restore.cpu += cpu;
            }
            let read = &mut self.stats.read;
            let e = read.endpoint(done.endpoint);
            e.requests += 1;
            e.bytes_read += done.bytes;
            e.retries += done.causes.len() as u64;
            read.trace.push(GetRecord {
                epoch: 0,
                reader: done.block,
                get: 0,
                attempts: done.causes.len() as u32 + 1,
                first_byte_us: done.first_byte.as_micros() as u64,
                total_us: done.total.as_micros() as u64,
                endpoint: done.endpoint,
            });
            if self.stopped() {
                self.runtime.block_on(async {
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {
                        // Issued and never to end: no longer in flight.
                        self.live.ended();
                    }
                });
                return Err(RankError::Aborted);
            }
            issue(self, &mut tasks, done.block, gets[done.block].next());
        }
        if let Some(check) = check {
            let operation = self.client.operation("GET", Some(&object.key));
            check
                .finish(&operation)
                .map_err(|e| RankError::Io(e.into()))?;
            self.stats.restore.checked += 1;
        }
        Ok(())
    }

    fn count_into(&mut self, counter: crate::timeseries::Counter) {
        self.live = counter;
    }

    fn set_stop(&mut self, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.stop = Some(stop);
    }

    fn set_journal(&mut self, journal: UploadJournal) {
        self.journal = journal;
    }

    fn abort_open(&mut self) -> usize {
        let open = std::mem::take(&mut self.open);
        open.iter().filter(|(key, id)| self.abort(key, id)).count()
    }

    fn stats(&self) -> &ObjectStats {
        &self.stats
    }
}
