//! How a part's body is made on a connection: whole before its head, or as it is sent
//! (`as_sent.rs`, which says which integrity form goes which way and why).

use std::time::Duration;

use super::as_sent::Making;
use super::{Held, RingCheckpoint};
use crate::checkpoint::ChecksumForm;
use crate::engine::common::{self, Filled, Spacing, fill_spaced};
use crate::rank::RankError;
use crate::rank::checkpoint::ObjectSpec;

impl RingCheckpoint {
    /// Makes the body of `len` bytes of `object` from `offset` for connection `c`: generated
    /// whole into its buffer now (laid out for sealing over TLS), or, as [`Making::of`] says,
    /// left to be made as it is sent. The digests known now (a trailer made as sent gets a
    /// placeholder, the digest of nothing, that gives the tail its length), and how the body
    /// is made.
    pub(super) fn make_body(
        &mut self,
        c: usize,
        object: &ObjectSpec,
        offset: u64,
        len: usize,
    ) -> (Filled, Making) {
        let digests = common::digests(&self.shape, self.engine.client.signer().signs());
        // Over TLS, laid out to be sealed where it is generated (the plan gives each buffer the
        // room: `budget::object_buffer_bytes`).
        let layout = self.layout_for(c);
        self.held[c] = Held::Plain(layout);
        let header = self.shape.checksum_form == ChecksumForm::Header;
        let digest_first = digests.payload_sha256 || (digests.checksum.is_some() && header);
        let making = Making::of(self.zc, self.is_tls(c), digest_first);
        let filled = match making {
            Making::Whole => {
                let spacing = layout.map_or_else(Spacing::contiguous, |l| l.spacing());
                let buf = self.ring.buffer_from_mut(self.bufs[c], 0);
                fill_spaced(&object.content, offset, buf, len, spacing, digests)
            }
            Making::AsSent => Filled {
                digest: digests.checksum.map(|a| crate::checksum::digest(a, &[])),
                payload_sha256: None,
                generate_cpu: Duration::ZERO,
                checksum_cpu: Duration::ZERO,
            },
        };
        self.stats.write.generate_cpu += filled.generate_cpu;
        self.stats.write.checksum_cpu += filled.checksum_cpu;
        (filled, making)
    }

    /// Makes connection `c`'s body up to byte `upto` before a send carries it, when it is made
    /// as it is sent (else nothing): the generator's and the digest's CPU timed apart.
    pub(super) fn make(&mut self, c: usize, upto: usize) -> Result<(), RankError> {
        if self.as_sent[c].is_none() {
            return Ok(());
        }
        debug_assert!(
            !self.is_tls(c),
            "a TLS body made as sent (its records are sealed whole)"
        );
        let Some(made) = &mut self.as_sent[c] else {
            return Ok(());
        };
        let buf = self.ring.buffer_from_mut(self.bufs[c], 0);
        let spent = made.make(buf, upto).map_err(RankError::Engine)?;
        self.stats.write.generate_cpu += spent.generate;
        self.stats.write.checksum_cpu += spent.checksum;
        Ok(())
    }
}
