//! What memory this process may use, probed once before planning: the kernel's MemAvailable,
//! the memory limit of the process's cgroup (v1 or v2, whichever carries the memory controller,
//! ancestors included), and RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK (the buffer pool
//! is locked into memory, so it must also fit under that limit). Probing never fails: a limit
//! that cannot be read is `None` and a note says why.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A cgroup limit at or above this is "no limit" (v1 writes 2^63 rounded down to a page).
const CGROUP_UNLIMITED_BYTES: u64 = 1 << 62;

/// The memory a cgroup allows this process, with what is already charged to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupMemory {
    /// 1 or 2.
    pub version: u8,
    /// The cgroup directory whose limit binds.
    pub path: String,
    pub limit_bytes: u64,
    pub usage_bytes: u64,
    /// Page cache charged to the cgroup, which the kernel reclaims before it kills anything.
    pub reclaimable_bytes: u64,
}

impl CgroupMemory {
    /// What the cgroup can still give: its limit less what is charged and not reclaimable.
    pub fn available_bytes(&self) -> u64 {
        let pinned = self.usage_bytes.saturating_sub(self.reclaimable_bytes);
        self.limit_bytes.saturating_sub(pinned)
    }
}

/// The limits a memory budget is checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryLimits {
    /// `MemAvailable` from /proc/meminfo.
    pub mem_available_bytes: Option<u64>,
    /// `MemTotal` from /proc/meminfo.
    pub mem_total_bytes: Option<u64>,
    /// The tightest cgroup memory limit over this process's cgroup and its ancestors.
    pub cgroup: Option<CgroupMemory>,
    /// RLIMIT_MEMLOCK (soft); `None` when unlimited.
    pub memlock_bytes: Option<u64>,
    /// With CAP_IPC_LOCK, RLIMIT_MEMLOCK does not apply.
    pub cap_ipc_lock: bool,
    /// Anything the probe could not read, and why.
    pub notes: Vec<String>,
}

impl MemoryLimits {
    /// Limits that allow anything: for plans that must not depend on the machine.
    pub fn unlimited() -> MemoryLimits {
        MemoryLimits {
            mem_available_bytes: None,
            mem_total_bytes: None,
            cgroup: None,
            memlock_bytes: None,
            cap_ipc_lock: true,
            notes: Vec::new(),
        }
    }
}

/// Reads the limits of this process on this machine.
pub fn probe() -> MemoryLimits {
    let mut notes = Vec::new();
    let (mem_available_bytes, mem_total_bytes) = match fs::read_to_string("/proc/meminfo") {
        Ok(text) => parse_meminfo(&text),
        Err(e) => {
            notes.push(format!("cannot read /proc/meminfo: {e}"));
            (None, None)
        }
    };
    let cgroup = match (
        fs::read_to_string("/proc/self/cgroup"),
        fs::read_to_string("/proc/self/mountinfo"),
    ) {
        (Ok(cgroups), Ok(mountinfo)) => cgroup_limit(&cgroups, &mountinfo, Path::new("/")),
        (Err(e), _) | (_, Err(e)) => {
            notes.push(format!("cannot read the process's cgroup: {e}"));
            None
        }
    };
    let memlock_bytes = rustix::process::getrlimit(rustix::process::Resource::Memlock).current;
    let cap_ipc_lock = match rustix::thread::capabilities(None) {
        Ok(sets) => sets
            .effective
            .contains(rustix::thread::CapabilitySet::IPC_LOCK),
        Err(e) => {
            notes.push(format!(
                "cannot read capabilities ({e}); assuming no CAP_IPC_LOCK"
            ));
            false
        }
    };
    MemoryLimits {
        mem_available_bytes,
        mem_total_bytes,
        cgroup,
        memlock_bytes,
        cap_ipc_lock,
        notes,
    }
}

/// `(MemAvailable, MemTotal)` in bytes.
fn parse_meminfo(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
            Some(kib * 1024)
        })
    };
    (field("MemAvailable"), field("MemTotal"))
}

/// A mounted cgroup hierarchy: where it is mounted and which cgroup path its root shows.
#[derive(Debug)]
struct CgroupMount {
    mount_point: PathBuf,
    root: String,
}

/// Finds the tightest memory limit on this process from /proc/self/cgroup and
/// /proc/self/mountinfo. `fs_root` prefixes every path read (tests point it at a fake tree).
fn cgroup_limit(cgroups: &str, mountinfo: &str, fs_root: &Path) -> Option<CgroupMemory> {
    let mut found: Vec<CgroupMemory> = Vec::new();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            if let Some(mount) = find_mount(mountinfo, |fstype, _| fstype == "cgroup2") {
                found.extend(walk_cgroup(&mount, path, fs_root, read_v2));
            }
        } else if controllers.split(',').any(|c| c == "memory")
            && let Some(mount) = find_mount(mountinfo, |fstype, opts| {
                fstype == "cgroup" && opts.split(',').any(|o| o == "memory")
            })
        {
            found.extend(walk_cgroup(&mount, path, fs_root, read_v1));
        }
    }
    found.into_iter().min_by_key(CgroupMemory::available_bytes)
}

fn find_mount(mountinfo: &str, pred: impl Fn(&str, &str) -> bool) -> Option<CgroupMount> {
    mountinfo.lines().find_map(|line| {
        // id parent major:minor root mount_point options [optional...] - fstype source super_opts
        let (left, right) = line.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (fstype, super_opts) = (*right.first()?, right.get(2).copied().unwrap_or(""));
        if !pred(fstype, super_opts) {
            return None;
        }
        Some(CgroupMount {
            root: (*left.get(3)?).to_string(),
            mount_point: PathBuf::from(*left.get(4)?),
        })
    })
}

/// Reads the limit of the cgroup at `path` and of each ancestor visible in the mount, and
/// returns the tightest.
fn walk_cgroup(
    mount: &CgroupMount,
    path: &str,
    fs_root: &Path,
    read: fn(&Path) -> Option<CgroupMemory>,
) -> Option<CgroupMemory> {
    let relative = path
        .strip_prefix(mount.root.as_str())
        .unwrap_or(path)
        .trim_start_matches('/');
    let base = fs_root.join(
        mount
            .mount_point
            .strip_prefix("/")
            .unwrap_or(&mount.mount_point),
    );
    let mut dir = base.join(relative);
    let mut best: Option<CgroupMemory> = None;
    // A bound on the walk: cgroup trees are shallow, and `dir` only gets shorter.
    for _ in 0..64 {
        if let Some(limit) = read(&dir)
            && best
                .as_ref()
                .is_none_or(|b| limit.available_bytes() < b.available_bytes())
        {
            best = Some(limit);
        }
        if dir == base || !dir.pop() || !dir.starts_with(&base) {
            break;
        }
    }
    best
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn stat_field(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        if key == name {
            value.trim().parse().ok()
        } else {
            None
        }
    })
}

fn read_v1(dir: &Path) -> Option<CgroupMemory> {
    let limit = read_u64(&dir.join("memory.limit_in_bytes"))?;
    if limit >= CGROUP_UNLIMITED_BYTES {
        return None;
    }
    let usage = read_u64(&dir.join("memory.usage_in_bytes")).unwrap_or(0);
    let stat = fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
    let reclaimable = stat_field(&stat, "total_inactive_file").unwrap_or(0)
        + stat_field(&stat, "total_active_file").unwrap_or(0);
    Some(CgroupMemory {
        version: 1,
        path: dir.display().to_string(),
        limit_bytes: limit,
        usage_bytes: usage,
        reclaimable_bytes: reclaimable,
    })
}

fn read_v2(dir: &Path) -> Option<CgroupMemory> {
    let max = fs::read_to_string(dir.join("memory.max")).ok()?;
    let limit: u64 = max.trim().parse().ok()?; // "max" means no limit
    if limit >= CGROUP_UNLIMITED_BYTES {
        return None;
    }
    let usage = read_u64(&dir.join("memory.current")).unwrap_or(0);
    let stat = fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
    let reclaimable = stat_field(&stat, "file").unwrap_or(0);
    Some(CgroupMemory {
        version: 2,
        path: dir.display().to_string(),
        limit_bytes: limit,
        usage_bytes: usage,
        reclaimable_bytes: reclaimable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_in_bytes() {
        let text = "MemTotal:       24576000 kB\nMemFree:  1 kB\nMemAvailable:   24372012 kB\n";
        assert_eq!(
            parse_meminfo(text),
            (Some(24_372_012 * 1024), Some(24_576_000 * 1024))
        );
        assert_eq!(parse_meminfo("garbage"), (None, None));
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn cgroup_v1_limit_with_page_cache_reclaimable() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("sys/fs/cgroup/memory/jobs/42");
        write(&dir.join("memory.limit_in_bytes"), "8589934592\n");
        write(&dir.join("memory.usage_in_bytes"), "3221225472\n");
        write(
            &dir.join("memory.stat"),
            "cache 1\ntotal_inactive_file 1073741824\ntotal_active_file 1073741824\n",
        );
        // The parent has no limit (v1 writes a huge number).
        write(
            &root
                .path()
                .join("sys/fs/cgroup/memory/jobs/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        let cgroups = "9:name=systemd:/\n4:memory:/jobs/42\n0::/\n";
        let mountinfo = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                         41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let limit = cgroup_limit(cgroups, mountinfo, root.path()).unwrap();
        assert_eq!(limit.version, 1);
        assert_eq!(limit.limit_bytes, 8 << 30);
        // 8 GiB limit, 3 GiB charged of which 2 GiB is page cache: 7 GiB available.
        assert_eq!(limit.available_bytes(), 7 << 30);
    }

    #[test]
    fn cgroup_v2_takes_the_tightest_ancestor() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join("sys/fs/cgroup");
        write(&base.join("user.slice/memory.max"), "4294967296\n");
        write(&base.join("user.slice/memory.current"), "0\n");
        write(&base.join("user.slice/job/memory.max"), "max\n");
        write(&base.join("user.slice/job/memory.current"), "1073741824\n");
        let cgroups = "0::/user.slice/job\n";
        let mountinfo = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let limit = cgroup_limit(cgroups, mountinfo, root.path()).unwrap();
        assert_eq!(limit.version, 2);
        assert_eq!(limit.limit_bytes, 4 << 30);
        assert!(limit.path.ends_with("user.slice"), "{}", limit.path);
    }

    #[test]
    fn no_cgroup_limit_is_none() {
        let root = tempfile::tempdir().unwrap();
        let cgroups = "0::/\n";
        let mountinfo = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup_limit(cgroups, mountinfo, root.path()), None);
    }

    #[test]
    fn probe_reads_this_machine() {
        let limits = probe();
        // Every Linux machine this runs on has /proc/meminfo.
        assert!(limits.mem_available_bytes.unwrap() > 0);
        assert!(limits.mem_total_bytes.unwrap() >= limits.mem_available_bytes.unwrap());
    }
}
