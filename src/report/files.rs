//! A file-system run's lines in a report: where it ran (the file system, `O_DIRECT` or the
//! page cache), what the device under it did, and what the page cache held around the clock.

use crate::files::FilesSummary;
use crate::units::{bytes, count};

/// Where the run ran: `ext4 at /data (O_DIRECT, 512-byte alignment)`.
pub fn place(f: &FilesSummary) -> String {
    let how = if f.direct {
        format!("O_DIRECT, {}-byte alignment", f.align_bytes)
    } else {
        "through the page cache".to_string()
    };
    format!("{} at {} ({how})", f.fs, f.root)
}

/// The device's and the page cache's lines (none when there is neither to say).
pub fn lines(f: &FilesSummary) -> Vec<String> {
    let mut lines = Vec::new();
    match &f.disk {
        Some(d) => lines.push(format!(
            "device {}: busy {:.0}% of the wall time; it read {} and wrote {} (the whole \
             device's traffic, /proc/diskstats)",
            d.device,
            d.busy_fraction * 100.0,
            bytes(d.bytes_read),
            bytes(d.bytes_written)
        )),
        None => lines.push(format!(
            "device: none in /proc/diskstats for {} ({}): its busy time is not known",
            f.root, f.fs
        )),
    }
    if let Some(c) = &f.page_cache {
        lines.push(format!(
            "page cache: of the {} files ({}) this host read, {} were resident when the clock \
             started{} (the cache could serve them), {} when it stopped; the host's cache {} → {}",
            count(c.files),
            bytes(c.file_bytes),
            bytes(c.resident_before_bytes),
            if c.dropped {
                ", after --drop-caches"
            } else {
                ""
            },
            bytes(c.resident_after_bytes),
            bytes(c.cached_before_bytes),
            bytes(c.cached_after_bytes)
        ));
    }
    lines
}
