//! The device under a data directory, as `/proc/diskstats` shows it: the milliseconds it was
//! busy (`io_ticks`) and the sectors it read and wrote, read before and after the clock so a
//! run can say what share of it the device was busy. A directory on a file system without a
//! block device of its own (tmpfs, NFS, overlay, btrfs's anonymous devices) has none.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// One reading of a device's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiskReading {
    /// Milliseconds with I/O in flight (`io_ticks`).
    pub busy_ms: u64,
    pub sectors_read: u64,
    pub sectors_written: u64,
}

/// The block device a path lives on, by its `major:minor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// Its name in `/proc/diskstats` (`vda1`, `loop3`, `nvme0n1p2`).
    pub name: String,
    major: u64,
    minor: u64,
}

impl Disk {
    /// The device of the file system holding `path`, if `/proc/diskstats` lists it.
    pub fn of(path: &Path) -> Option<Disk> {
        let dev = std::fs::metadata(path).ok()?.dev();
        let (major, minor) = (
            u64::from(rustix::fs::major(dev)),
            u64::from(rustix::fs::minor(dev)),
        );
        let text = std::fs::read_to_string("/proc/diskstats").ok()?;
        text.lines().find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 13 && f[0].parse() == Ok(major) && f[1].parse() == Ok(minor)).then(|| {
                Disk {
                    name: f[2].to_string(),
                    major,
                    minor,
                }
            })
        })
    }

    /// The device's counters now.
    pub fn read(&self) -> Option<DiskReading> {
        let text = std::fs::read_to_string("/proc/diskstats").ok()?;
        text.lines().find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 13 || f[0].parse() != Ok(self.major) || f[1].parse() != Ok(self.minor) {
                return None;
            }
            Some(DiskReading {
                sectors_read: f[5].parse().ok()?,
                sectors_written: f[9].parse().ok()?,
                busy_ms: f[12].parse().ok()?,
            })
        })
    }
}

/// What the device did between two readings over `wall_s` seconds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DiskSummary {
    pub device: String,
    /// The share of the time the device had I/O in flight.
    pub busy_fraction: f64,
    /// Bytes the device read and wrote (512-byte sectors, as diskstats counts them).
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl DiskSummary {
    pub fn between(disk: &Disk, before: DiskReading, after: DiskReading, wall_s: f64) -> Self {
        let busy_s = after.busy_ms.saturating_sub(before.busy_ms) as f64 / 1000.0;
        DiskSummary {
            device: disk.name.clone(),
            busy_fraction: if wall_s > 0.0 {
                (busy_s / wall_s).min(1.0)
            } else {
                0.0
            },
            bytes_read: after.sectors_read.saturating_sub(before.sectors_read) * 512,
            bytes_written: after.sectors_written.saturating_sub(before.sectors_written) * 512,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_share_is_the_ticks_over_the_wall_time() {
        let disk = Disk {
            name: "vda".into(),
            major: 1,
            minor: 2,
        };
        let before = DiskReading {
            busy_ms: 1000,
            sectors_read: 10,
            sectors_written: 0,
        };
        let after = DiskReading {
            busy_ms: 1500,
            sectors_read: 2058,
            sectors_written: 8,
        };
        let s = DiskSummary::between(&disk, before, after, 2.0);
        assert_eq!(s.busy_fraction, 0.25);
        assert_eq!((s.bytes_read, s.bytes_written), (2048 * 512, 4096));
    }

    #[test]
    fn a_directory_on_a_block_device_finds_it_or_says_none() {
        // /proc has no block device; the test's temporary directory may (ext4) or may not
        // (tmpfs): either way, a device found reads.
        assert!(Disk::of(Path::new("/proc")).is_none());
        if let Some(disk) = Disk::of(&std::env::temp_dir()) {
            assert!(disk.read().is_some(), "{disk:?}");
        }
    }
}
