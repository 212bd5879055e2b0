//! A restore on the ring: an object read back as the plan's blocks (`ObjectIoShape::
//! restore_blocks`), block `c` on connection `c`, each block's ranged GETs one after another
//! into its registered buffer, each checked under `verify` and counted. With the shape's
//! `restore_check`, one HEAD first (`x-amz-checksum-mode: ENABLED`) gets the object's
//! checksum, each range's bytes go into its block's CRC as they arrive, and the blocks' CRCs
//! combined must be the object's (`s3::integrity::RestoreCheck`, the same on both engines).

use super::{Outcome, RingCheckpoint};
use crate::checksum::StoredChecksum;
use crate::engine::uring::conn::{Conn, Job};
use crate::engine::uring::upload::{Kind, Request};
use crate::metrics::thread_cpu;
use crate::rank::RankError;
use crate::rank::checkpoint::ObjectSpec;
use crate::s3::RequestError;
use crate::s3::integrity::{CHECKSUM_MODE, RestoreCheck};

impl RingCheckpoint {
    /// A ranged GET arrived on connection `c`: checked and counted (and, with `crcs`, its
    /// bytes added to block `c`'s CRC, timed apart).
    fn arrived(
        &mut self,
        c: usize,
        job: &Job,
        object: &ObjectSpec,
        check: Option<&mut RestoreCheck>,
    ) -> Result<(), RankError> {
        let get = self.request(c)?.get.clone();
        let len = get.len_bytes as usize;
        if let Some(check) = check {
            let cpu = thread_cpu();
            check.update(c, self.ring.filled(self.bufs[c], len));
            self.stats.restore.cpu += thread_cpu().saturating_sub(cpu);
        }
        if self.shape.verify {
            let cpu = thread_cpu();
            let checked = object
                .content
                .check(get.offset, self.ring.filled(self.bufs[c], len));
            self.stats.read.verify.gets += 1;
            self.stats.read.verify.cpu += thread_cpu().saturating_sub(cpu);
            if let Err(at) = checked {
                return Err(RankError::Io(
                    RequestError::Corrupt {
                        operation: self.engine.client.operation("GET", Some(&object.key)),
                        reason: format!(
                            "{} (read with {})",
                            object.content.mismatch(at),
                            get.range_header()
                        ),
                    }
                    .into(),
                ));
            }
        }
        let read = &mut self.stats.read;
        let total = job.first_started.elapsed();
        self.live.counted(len as u64, 0, total);
        read.requests += 1;
        read.retries += u64::from(job.retries);
        read.bytes_read += len as u64;
        read.first_byte.record(job.first_byte);
        read.total.record(total);
        let by_endpoint = read.endpoint(self.conn_endpoint[c]);
        by_endpoint.requests += 1;
        by_endpoint.bytes_read += len as u64;
        by_endpoint.total.record(total);
        Ok(())
    }

    /// The object's checksum, from one HEAD with `x-amz-checksum-mode: ENABLED`.
    fn stored_checksum(
        &mut self,
        object: &ObjectSpec,
    ) -> Result<Option<StoredChecksum>, RankError> {
        let path = self.path(&object.key);
        let mut head = Request::new(Kind::Head, &object.key, &path, &[]);
        head.headers
            .push((CHECKSUM_MODE.0, CHECKSUM_MODE.1.to_string()));
        match self.one(0, head)? {
            (_, Outcome::Answered { checksum, .. }) => Ok(checksum),
            (_, Outcome::Failed(error)) => Err(RankError::Io(error.into())),
            (_, Outcome::Arrived) => Err(RankError::Engine("a HEAD read a body (a bug)".into())),
        }
    }

    pub(super) fn read_blocks(&mut self, object: &ObjectSpec) -> Result<(), RankError> {
        // Block `c` is read on connection `c`: the shape cuts at most `read_blocks` of them,
        // and a rank has at least as many connections.
        let blocks = self.shape.restore_blocks(object.bytes);
        let readers = blocks.len();
        let mut check = match self.shape.restore_check && readers > 0 {
            true => {
                let check = RestoreCheck::new(self.stored_checksum(object)?, readers);
                self.stats.restore.unchecked += u64::from(check.is_none());
                check
            }
            false => None,
        };
        // Each block's ranged GETs, sent one after another on its connection.
        let mut gets: Vec<_> = blocks
            .iter()
            .map(|b| self.shape.block_gets(b.clone()).peekable())
            .collect();
        let path = self.path(&object.key);
        loop {
            self.check_stop()?;
            for (c, block) in gets.iter_mut().enumerate() {
                // `ready`: not while a SEND_ZC of the last upload may still read the buffer.
                if block.peek().is_some() && self.ready(c) {
                    let range = block.next().unwrap_or_default();
                    self.start(c, Request::range(&object.key, &path, range))?;
                }
            }
            let reading = gets.iter_mut().any(|b| b.peek().is_some());
            if !reading && self.conns[..readers].iter().all(Conn::is_free) {
                if let Some(check) = check {
                    let cpu = thread_cpu();
                    let operation = self.engine.client.operation("GET", Some(&object.key));
                    let checked = check.finish(&operation);
                    self.stats.restore.cpu += thread_cpu().saturating_sub(cpu);
                    checked.map_err(|e| RankError::Io(e.into()))?;
                    self.stats.restore.checked += 1;
                }
                return Ok(());
            }
            self.poll()?;
            let ended = std::mem::take(&mut self.ended);
            for (c, job, outcome) in ended {
                match outcome {
                    Outcome::Arrived => self.arrived(c, &job, object, check.as_mut())?,
                    Outcome::Failed(error) => {
                        let read = &mut self.stats.read;
                        read.retries += u64::from(job.retries);
                        read.errors += 1;
                        read.endpoint(self.conn_endpoint[c]).errors += 1;
                        *read.errors_by_cause.entry(error.cause()).or_default() += 1;
                        return Err(RankError::Io(error.into()));
                    }
                    Outcome::Answered { .. } => {
                        return Err(RankError::Engine(
                            "a GET answered a document (a bug)".into(),
                        ));
                    }
                }
            }
        }
    }
}
