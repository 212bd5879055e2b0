//! A restore on the ring: an object read back as the plan's blocks (`ObjectIoShape::
//! restore_blocks`), block `c` on connection `c`, each block's ranged GETs one after another
//! into its registered buffer, each checked under `verify` and counted.

use super::{Outcome, RingCheckpoint};
use crate::engine::uring::conn::{Conn, Job};
use crate::engine::uring::upload::Request;
use crate::metrics::thread_cpu;
use crate::rank::RankError;
use crate::rank::checkpoint::ObjectSpec;
use crate::s3::RequestError;

impl RingCheckpoint {
    /// A ranged GET arrived on connection `c`: checked and counted.
    fn arrived(&mut self, c: usize, job: &Job, object: &ObjectSpec) -> Result<(), RankError> {
        let get = self.request(c)?.get.clone();
        let len = get.len_bytes as usize;
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
                            "byte {at} of the object is not what was written (read with {})",
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

    pub(super) fn read_blocks(&mut self, object: &ObjectSpec) -> Result<(), RankError> {
        // Block `c` is read on connection `c`: the shape cuts at most `read_blocks` of them,
        // and a rank has at least as many connections.
        let blocks = self.shape.restore_blocks(object.bytes);
        let readers = blocks.len();
        if readers > self.conns.len() {
            return Err(RankError::Engine(format!(
                "{readers} restore blocks for {} connections (a bug)",
                self.conns.len()
            )));
        }
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
                return Ok(());
            }
            self.poll()?;
            let ended = std::mem::take(&mut self.ended);
            for (c, job, outcome) in ended {
                match outcome {
                    Outcome::Arrived => self.arrived(c, &job, object)?,
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
