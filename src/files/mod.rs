//! A mounted file system as a run reads and writes it: the data directory (`--data-dir DIR`,
//! or `storage.storage_type: local_fs` with `storage.storage_root`), the file system under it
//! (its type from `statfs`, what `O_DIRECT` needs from `statx`'s `STATX_DIOALIGN`), whether it
//! takes `O_DIRECT` at all, the page cache ([`cache`]) and the device's busy time ([`disk`]).
//! The file engine (`engine::file`) moves the bytes; this module only looks.

pub mod cache;
pub mod disk;

use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where a file run's data and checkpoints are, and how they are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    /// The directory the workload's keys (`<data_folder>/train/…`, `<checkpoint_folder>/…`)
    /// are relative to, as `ringload generate --output DIR` writes them.
    pub root: PathBuf,
    /// `O_DIRECT` reads and writes (the default), or the page cache (`--direct off`).
    pub direct: bool,
    /// The file system's type (`ext4`, `xfs`, `tmpfs`, …, or its magic number).
    pub fs: String,
    /// What `O_DIRECT` needs of an I/O's file offset and length, and of its buffer's address.
    pub align: Align,
}

/// `O_DIRECT`'s alignment on a file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Align {
    /// File offsets and lengths are multiples of this.
    pub offset: u64,
    /// Buffer addresses are multiples of this (ringload's buffers are page-aligned).
    pub memory: u64,
}

impl Align {
    /// No alignment: buffered I/O.
    pub const NONE: Align = Align {
        offset: 1,
        memory: 1,
    };

    /// `[offset, offset + len)` widened to the alignment: (start, length).
    pub fn widen(&self, offset: u64, len: u64) -> (u64, u64) {
        let a = self.offset.max(1);
        let start = offset / a * a;
        let end = (offset + len).div_ceil(a) * a;
        (start, end - start)
    }
}

impl DataDir {
    /// The data directory `root`, read with `O_DIRECT` when `direct`: checked to be a
    /// directory, its file system named. Whether `O_DIRECT` works is probed on a file
    /// ([`DataDir::probe_direct`]), once the run knows one.
    pub fn open(root: &Path, direct: bool) -> Result<DataDir, String> {
        let meta = std::fs::metadata(root).map_err(|e| {
            format!(
                "--data-dir {}: {}; give the directory that holds the dataset (as `ringload \
                 generate --output DIR` wrote it)",
                root.display(),
                describe_io(&e)
            )
        })?;
        if !meta.is_dir() {
            return Err(format!(
                "--data-dir {}: not a directory; give the directory that holds the dataset",
                root.display()
            ));
        }
        let fs = fs_name(root);
        Ok(DataDir {
            root: root.to_path_buf(),
            direct,
            fs,
            align: if direct {
                Align {
                    offset: 4096,
                    memory: 4096,
                }
            } else {
                Align::NONE
            },
        })
    }

    /// The path of key `key` (a key may be absolute, as an absolute `dataset.data_folder`).
    pub fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    /// Whether the file system serves from memory (tmpfs, ramfs): a note for the summary.
    pub fn memory_note(&self) -> Option<String> {
        matches!(self.fs.as_str(), "tmpfs" | "ramfs").then(|| {
            format!(
                "{} is on {}, which lives in memory: reads and writes there are memory copies, \
                 not a device's (no disk is measured)",
                self.root.display(),
                self.fs
            )
        })
    }

    /// With `O_DIRECT`: opens `file` (a file of the dataset, or one the run is about to
    /// write) with it, and reads the file system's alignment from `statx` (`STATX_DIOALIGN`,
    /// Linux 6.1; the logical block size, 4096, where it says nothing). A file system that
    /// refuses `O_DIRECT` (ramfs, some FUSE) gets one line naming `--direct off`.
    pub fn probe_direct(&mut self, file: &Path) -> Result<(), String> {
        if !self.direct {
            return Ok(());
        }
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(file);
        let f = match opened {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                return Err(format!(
                    "{} ({}) does not take O_DIRECT (open {}: EINVAL); run with --direct off \
                     to read through the page cache",
                    self.root.display(),
                    self.fs,
                    file.display()
                ));
            }
            Err(e) => {
                return Err(format!(
                    "cannot open {} with O_DIRECT: {}",
                    file.display(),
                    describe_io(&e)
                ));
            }
        };
        self.align = dio_align(f.as_fd()).unwrap_or(Align {
            offset: 4096,
            memory: 4096,
        });
        Ok(())
    }
}

/// What a file run reports about its file system: where, what, how, and what the device and
/// the page cache did (the summary's `target.files`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FilesSummary {
    pub root: String,
    pub fs: String,
    /// `O_DIRECT` (true) or the page cache.
    pub direct: bool,
    /// The file offset alignment reads were widened to (1 without `O_DIRECT`).
    pub align_bytes: u64,
    /// The device under the directory over the run, where `/proc/diskstats` shows one.
    pub disk: Option<disk::DiskSummary>,
    /// Without `O_DIRECT`: the page cache before and after the clock.
    pub page_cache: Option<cache::PageCacheSummary>,
}

impl DataDir {
    /// The summary of a run on this directory.
    pub fn summary(
        &self,
        disk: Option<disk::DiskSummary>,
        page_cache: Option<cache::PageCacheSummary>,
    ) -> FilesSummary {
        FilesSummary {
            root: self.root.display().to_string(),
            fs: self.fs.clone(),
            direct: self.direct,
            align_bytes: self.align.offset,
            disk,
            page_cache,
        }
    }
}

impl DataDir {
    /// [`DataDir::probe_direct`] on a file made for it in `folder` (created if missing), as
    /// a run that writes there needs: then removed.
    pub fn probe_direct_in(&mut self, folder: &Path) -> Result<(), String> {
        if !self.direct {
            return Ok(());
        }
        let fail = |e: io::Error| {
            format!(
                "cannot write in {}: {}; give a --data-dir you can write",
                folder.display(),
                describe_io(&e)
            )
        };
        std::fs::create_dir_all(folder).map_err(fail)?;
        let probe = folder.join(format!(".ringload-direct-probe-{}", std::process::id()));
        std::fs::write(&probe, [0u8; 4096]).map_err(fail)?;
        let probed = self.probe_direct(&probe);
        let _ = std::fs::remove_file(&probe);
        probed
    }
}

/// `statx`'s `STATX_DIOALIGN` of an open file, when the file system reports it.
fn dio_align(fd: std::os::fd::BorrowedFd<'_>) -> Option<Align> {
    use rustix::fs::{AtFlags, StatxFlags};
    let st = rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN).ok()?;
    if st.stx_mask & StatxFlags::DIOALIGN.bits() == 0 || st.stx_dio_offset_align == 0 {
        return None;
    }
    Some(Align {
        offset: u64::from(st.stx_dio_offset_align),
        memory: u64::from(st.stx_dio_mem_align.max(1)),
    })
}

/// The type of the file system holding `path`, by `statfs`'s magic number.
pub fn fs_name(path: &Path) -> String {
    let Ok(st) = rustix::fs::statfs(path) else {
        return "unknown".into();
    };
    let magic = st.f_type as u64;
    match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0x6969 => "nfs",
        0x9123_683E => "btrfs",
        0x794c_7630 => "overlayfs",
        0x6573_5546 => "fuse",
        0x0BD0_0BD0 => "lustre",
        0x4750_4653 => "gpfs",
        0xFF53_4D42 => "cifs",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0x6a65_6a6a => "beegfs",
        _ => return format!("0x{magic:x}"),
    }
    .to_string()
}

/// An I/O error as a line: the cause in words for the ones a user can fix.
pub fn describe_io(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT) => "no such file or directory".into(),
        Some(libc::EACCES) | Some(libc::EPERM) => {
            "permission denied (check the file's owner and mode)".into()
        }
        Some(libc::ENOSPC) => "no space left on the device".into(),
        Some(libc::EDQUOT) => "the disk quota is exceeded".into(),
        Some(libc::EROFS) => "the file system is read-only".into(),
        Some(libc::EIO) => "an I/O error on the device (EIO)".into(),
        _ => e.to_string(),
    }
}

/// The cause of an I/O error, as a counter's name.
pub fn cause_of(errno: i32) -> &'static str {
    match errno {
        libc::ENOENT => "missing",
        libc::EACCES | libc::EPERM => "permission",
        libc::ENOSPC | libc::EDQUOT => "no_space",
        libc::EIO => "eio",
        _ => "io",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_widened_to_the_alignment() {
        let a = Align {
            offset: 4096,
            memory: 4096,
        };
        assert_eq!(a.widen(0, 4096), (0, 4096));
        assert_eq!(a.widen(100, 10), (0, 4096));
        assert_eq!(a.widen(4095, 2), (0, 8192));
        // The example, a small model's 18,089,216-byte file: its tail widened to a block.
        assert_eq!(a.widen(8192, 18_089_216), (8192, 18_092_032));
        assert_eq!(Align::NONE.widen(7, 5), (7, 5));
    }

    #[test]
    fn a_missing_or_plain_file_is_refused_in_one_line() {
        let err = DataDir::open(Path::new("/nonexistent/ringload"), true).unwrap_err();
        assert!(err.contains("--data-dir /nonexistent/ringload") && !err.contains('\n'));
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let err = DataDir::open(tmp.path(), true).unwrap_err();
        assert!(err.contains("not a directory"), "{err}");
    }

    #[test]
    fn the_file_system_is_named_and_direct_probed() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = DataDir::open(dir.path(), true).unwrap();
        assert!(!d.fs.is_empty());
        let f = dir.path().join("f");
        std::fs::write(&f, vec![1u8; 8192]).unwrap();
        // Whatever the file system here: taking O_DIRECT gives an alignment, refusing it a
        // line naming --direct off.
        match d.probe_direct(&f) {
            Ok(()) => assert!(d.align.offset >= 512 && d.align.offset.is_power_of_two()),
            Err(line) => assert!(line.contains("--direct off"), "{line}"),
        }
    }
}
