//! What a catalog holds and how it travels: its memory for the budget (the largest footer
//! decoded, the spans, chunk lists and extents kept; a whole-object catalog's listing), and its
//! bytes for another process under mpirun.

use std::sync::Arc;

use super::{Catalog, Chunk, RowGroupSpan};
use crate::extents;

/// Memory per byte of a footer's Thrift metadata while arrow-rs holds it decoded, or its writer
/// holds it for a probe: measured ~20 with DLRM's 768 row groups × 200 columns (a 12 MB footer
/// peaked at 270 MB in `ringload plan`).
pub const FOOTER_DECODE_FACTOR: u64 = 20;

impl Catalog {
    /// The catalog, chunk lists (`--verify`) and column extents included, as bytes for
    /// another process.
    pub fn to_wire(&self) -> Vec<u8> {
        let chunks: Vec<Option<Vec<Chunk>>> = self
            .files
            .iter()
            .map(|f| f.chunks.as_ref().map(|c| c.to_vec()))
            .collect();
        let extents: Vec<Option<Vec<extents::Extent>>> = self
            .files
            .iter()
            .map(|f| f.extents.as_ref().map(|e| e.to_vec()))
            .collect();
        serde_json::to_vec(&(self, chunks, extents)).unwrap_or_default()
    }

    /// A catalog from [`Catalog::to_wire`]'s bytes.
    pub fn from_wire(bytes: &[u8]) -> Result<Catalog, String> {
        type Wire = (
            Catalog,
            Vec<Option<Vec<Chunk>>>,
            Vec<Option<Vec<extents::Extent>>>,
        );
        let (mut catalog, chunks, extents): Wire =
            serde_json::from_slice(bytes).map_err(|e| format!("a catalog from process 0: {e}"))?;
        for ((file, chunks), extents) in catalog.files.iter_mut().zip(chunks).zip(extents) {
            file.chunks = chunks.map(Arc::from);
            file.extents = extents.map(Arc::from);
        }
        Ok(catalog)
    }

    /// The memory the catalog holds at its peak, for the budget: a whole-object catalog's
    /// listing and its compact form, or a Parquet catalog's footers and what it keeps.
    pub fn listing_bytes(&self) -> u64 {
        match &self.objects {
            Some(o) => o.listing_bytes + o.heap_bytes() as u64,
            None => self.footer_bytes_held(),
        }
    }

    /// A Parquet catalog's memory at its peak: the largest footer as arrow-rs decodes it (and
    /// as its writer holds it while a probe writes the file: [`FOOTER_DECODE_FACTOR`] × its
    /// Thrift bytes), and what the catalog keeps per file (row-group spans, the chunk lists of
    /// `--verify`, a column subset's extents, each shared list once).
    fn footer_bytes_held(&self) -> u64 {
        use std::mem::size_of;
        let largest = self
            .files
            .iter()
            .map(|f| f.metadata_bytes)
            .max()
            .unwrap_or(0);
        let mut shared = std::collections::HashSet::new();
        let mut kept = 0u64;
        for file in &self.files {
            kept += (file.row_groups.len() * size_of::<RowGroupSpan>()) as u64;
            if let Some(chunks) = &file.chunks
                && shared.insert(Arc::as_ptr(chunks).cast::<u8>() as usize)
            {
                kept += (chunks.len() * size_of::<Chunk>()) as u64;
            }
            if let Some(extents) = &file.extents
                && shared.insert(Arc::as_ptr(extents).cast::<u8>() as usize)
            {
                kept += (extents.len() * size_of::<extents::Extent>()) as u64;
            }
        }
        largest * FOOTER_DECODE_FACTOR + kept
    }
}
