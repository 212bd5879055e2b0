//! The page cache, as a file run needs to know it: how much memory the host has and how much
//! of it caches files (`/proc/meminfo`), how many of a file's pages are resident (`mincore`),
//! and dropping clean caches before the clock (`--drop-caches`, as root).
#![allow(unsafe_code)]

use std::os::fd::AsFd;
use std::path::Path;

/// A `/proc/meminfo` field in bytes (`MemTotal`, `Cached`, …).
pub fn meminfo(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    })
}

/// Bytes of the file at `path` resident in the page cache, by `mincore` over a read-only
/// mapping of it (nothing is read: the mapping is never touched).
pub fn resident_bytes(path: &Path) -> std::io::Result<u64> {
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len() as usize;
    if len == 0 {
        return Ok(0);
    }
    // SAFETY: sysconf reads a constant of the system; it touches no memory of ours.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(1);
    let pages = len.div_ceil(page);
    // SAFETY: a fresh shared read-only mapping of a file this function opened; it is only
    // passed to mincore (never dereferenced) and unmapped before returning.
    let base = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::SHARED,
            file.as_fd(),
            0,
        )
    }?;
    let mut vec = vec![0u8; pages];
    // SAFETY: `base..base + len` is the mapping made above; `vec` has one byte per page.
    let rc = unsafe { libc::mincore(base, len, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: the mapping made above, unmapped once.
    let _ = unsafe { rustix::mm::munmap(base, len) };
    if rc != 0 {
        return Err(err);
    }
    let resident = vec.iter().filter(|&&b| b & 1 == 1).count();
    Ok((resident * page).min(len) as u64)
}

/// Writes dirty pages back and drops the clean page cache, dentries and inodes
/// (`sync; echo 3 > /proc/sys/vm/drop_caches`): root only. The error is the line to print.
pub fn drop_caches() -> Result<(), String> {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", b"3\n").map_err(|e| {
        format!(
            "--drop-caches: cannot write /proc/sys/vm/drop_caches ({e}); run as root, or drop \
             --drop-caches and drop the caches yourself before the run"
        )
    })
}

/// The page-cache rule of a buffered run (`--direct off`), as MLPerf states it for training
/// (its dataset must be at least 5× the host's memory, so the cache cannot hold it): the
/// bytes a host's ranks read against its memory. The line to print and keep.
pub fn cache_rule_note(read_bytes: u64, mem_total: u64) -> String {
    let ratio = read_bytes as f64 / mem_total.max(1) as f64;
    let (read, memory) = (
        crate::units::bytes(read_bytes),
        crate::units::bytes(mem_total),
    );
    if read_bytes <= mem_total {
        format!(
            "--direct off: the {read} this host reads fit in its {memory} of memory \
             ({ratio:.2}×): the page cache can serve them (MLPerf asks for a dataset of at least \
             5× memory; --drop-caches as root empties the cache before the clock)"
        )
    } else if ratio < 5.0 {
        format!(
            "--direct off: this host reads {read}, {ratio:.2}× its {memory} of memory: more than \
             the page cache can hold, less than MLPerf's 5× rule"
        )
    } else {
        format!(
            "--direct off: this host reads {read}, {ratio:.2}× its {memory} of memory (MLPerf's \
             rule: at least 5×)"
        )
    }
}

/// The page cache around a buffered run's clock: of the files this host's ranks read, the
/// bytes resident when the clock started (what the cache could serve) and when it stopped,
/// and the host's `Cached` figure at both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PageCacheSummary {
    /// The distinct files the host's ranks read, and their bytes.
    pub files: u64,
    pub file_bytes: u64,
    pub resident_before_bytes: u64,
    pub resident_after_bytes: u64,
    pub cached_before_bytes: u64,
    pub cached_after_bytes: u64,
    /// `--drop-caches` emptied the cache before the clock.
    pub dropped: bool,
}

/// The bytes of `paths` resident in the page cache (files that cannot be looked at count 0).
pub fn resident_of<'a>(paths: impl Iterator<Item = &'a Path>) -> u64 {
    paths.map(|p| resident_bytes(p).unwrap_or(0)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_and_a_file_just_written_is_resident() {
        assert!(meminfo("MemTotal").is_some_and(|m| m > 0));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, vec![7u8; 1 << 20]).unwrap();
        let resident = resident_bytes(&f).unwrap();
        assert!(resident <= 1 << 20);
        // tmpfs and ext4 alike keep a file just written in the cache.
        assert!(resident > 0, "{resident}");
        let empty = dir.path().join("e");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(resident_bytes(&empty).unwrap(), 0);
    }

    #[test]
    fn the_cache_rule_says_which_side_of_memory_and_of_5x() {
        assert!(cache_rule_note(1 << 30, 8 << 30).contains("fit in"));
        assert!(cache_rule_note(16 << 30, 8 << 30).contains("less than MLPerf's 5×"));
        assert!(cache_rule_note(80 << 30, 8 << 30).contains("at least 5×"));
    }
}
