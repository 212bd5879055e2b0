//! What limited a run, in one line: the one place it is decided (`RunSummary::limit`, the
//! report's last line).
//!
//! In this order:
//! 1. **memory**: the peak resident set went past the memory budget;
//! 2. **this machine's CPU**: the client and an in-process server together used at least
//!    [`SATURATED_SHARE`] of `wall × cores`, or the in-process server alone half of it — then
//!    the larger of the two is named: **the embedded server's CPU** (the dataset is served from
//!    the machine that measures it) or **the client's CPU** (rank threads against cores);
//! 3. **none**: the AU met its target, so nothing held the steps back;
//! 4. otherwise **the storage**: the steps waited for I/O while the CPUs had room.

use serde::Serialize;

/// The share of `wall × cores` at which a machine's CPU counts as the limit.
pub const SATURATED_SHARE: f64 = 0.85;

/// The in-process server's share of `wall × cores` that makes it the limit on its own.
pub const SERVER_SHARE: f64 = 0.5;

/// What limited a run: a word for scripts and a line for people.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunLimit {
    /// `memory`, `server_cpu`, `client_cpu`, `none` or `storage`.
    pub kind: &'static str,
    pub line: String,
}

/// The figures the limit is decided from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitFacts {
    /// The clock: every rank ready to the last step's end.
    pub wall_s: f64,
    /// The CPUs this process may use.
    pub cores: usize,
    /// Rank threads of this process.
    pub ranks: usize,
    pub client_cpu_s: f64,
    /// An in-process server's CPU over the same time (`None`: the store is elsewhere).
    pub server_cpu_s: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    pub budget_bytes: u64,
    pub au_percent: Option<f64>,
    pub au_target_percent: f64,
}

/// The run's limit (see the module docs).
pub fn run_limit(f: &LimitFacts) -> RunLimit {
    if let Some(limit) = machine_limit(f) {
        return limit;
    }
    let used = cpu_used(f);
    match f.au_percent {
        Some(au) if au >= f.au_target_percent => RunLimit {
            kind: "none",
            line: format!(
                "none reached: AU {au:.1} % met the target {} %; {used}",
                f.au_target_percent
            ),
        },
        au => RunLimit {
            kind: "storage",
            line: format!(
                "the storage: the steps waited for I/O (AU {}) while {used}",
                au.map_or("–".to_string(), |a| format!("{a:.1} %"))
            ),
        },
    }
}

/// A checkpoint run's limit: memory or this machine's CPU as for training; otherwise the
/// storage, which the saves and restores wait for (there is no compute to hide them).
pub fn checkpoint_limit(f: &LimitFacts) -> RunLimit {
    machine_limit(f).unwrap_or_else(|| RunLimit {
        kind: "storage",
        line: format!(
            "the storage: the saves and restores waited for it while {}",
            cpu_used(f)
        ),
    })
}

/// `the client used 12 % of 3.0 s × 2 cores, the embedded server 20 %`.
fn cpu_used(f: &LimitFacts) -> String {
    let wall = f.wall_s.max(1e-9);
    let cores = f.cores.max(1);
    let pct = |cpu: f64| 100.0 * cpu / (wall * cores as f64);
    format!(
        "the client used {:.0} % of {wall:.1} s × {cores} cores{}",
        pct(f.client_cpu_s),
        f.server_cpu_s
            .map(|s| format!(", the embedded server {:.0} %", pct(s)))
            .unwrap_or_default()
    )
}

/// Memory, then this machine's CPU (the embedded server's or the client's), when either
/// limited the run.
fn machine_limit(f: &LimitFacts) -> Option<RunLimit> {
    let b = crate::units::bytes;
    if let Some(peak) = f.peak_rss_bytes.filter(|&p| p > f.budget_bytes) {
        return Some(RunLimit {
            kind: "memory",
            line: format!(
                "memory: peak RSS {} went past the budget {}; the run's memory, not its I/O, is \
                 what to fix first",
                b(peak),
                b(f.budget_bytes)
            ),
        });
    }
    let wall = f.wall_s.max(1e-9);
    let cores = f.cores.max(1);
    let capacity = wall * cores as f64;
    let server = f.server_cpu_s.unwrap_or(0.0);
    let busy = f.client_cpu_s + server;
    let pct = |cpu: f64| 100.0 * cpu / capacity;
    let of_cores = format!("{wall:.1} s × {cores} cores");
    if busy >= SATURATED_SHARE * capacity || server >= SERVER_SHARE * capacity {
        if server >= f.client_cpu_s {
            return Some(RunLimit {
                kind: "server_cpu",
                line: format!(
                    "the embedded server's CPU: it took {server:.1} CPU-s of {of_cores} ({:.0} \
                     %), the client {:.1}; this machine's cores, not a store, set the pace: \
                     serve the data from another machine (`ringload serve` there, then \
                     --endpoint) to measure a store",
                    pct(server),
                    f.client_cpu_s
                ),
            });
        }
        let with_server = f
            .server_cpu_s
            .map(|s| format!(", the embedded server {s:.1}"))
            .unwrap_or_default();
        return Some(RunLimit {
            kind: "client_cpu",
            line: format!(
                "the client's CPU: {} rank threads used {:.1} CPU-s of {of_cores} ({:.0} \
                 %){with_server}; this machine, not the storage, set the pace: fewer ranks per \
                 host (--np), or more cores or hosts",
                f.ranks,
                f.client_cpu_s,
                pct(f.client_cpu_s)
            ),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> LimitFacts {
        LimitFacts {
            wall_s: 10.0,
            cores: 2,
            ranks: 1,
            client_cpu_s: 1.0,
            server_cpu_s: Some(1.0),
            peak_rss_bytes: Some(100),
            budget_bytes: 200,
            au_percent: Some(50.0),
            au_target_percent: 90.0,
        }
    }

    #[test]
    fn each_limit_in_its_order() {
        assert_eq!(run_limit(&facts()).kind, "storage");
        let met = LimitFacts {
            au_percent: Some(95.0),
            ..facts()
        };
        assert_eq!(run_limit(&met).kind, "none");
        // unet3d from the embedded default: the npz server took most of 2 cores.
        let server = LimitFacts {
            server_cpu_s: Some(12.0),
            client_cpu_s: 3.0,
            ..facts()
        };
        let limit = run_limit(&server);
        assert_eq!(limit.kind, "server_cpu");
        assert!(
            limit
                .line
                .contains("took 12.0 CPU-s of 10.0 s × 2 cores (60 %)"),
            "{}",
            limit.line
        );
        let client = LimitFacts {
            client_cpu_s: 15.0,
            server_cpu_s: Some(3.0),
            ranks: 8,
            ..facts()
        };
        let limit = run_limit(&client);
        assert_eq!(limit.kind, "client_cpu");
        assert!(
            limit.line.contains("8 rank threads used 15.0 CPU-s"),
            "{}",
            limit.line
        );
        // Memory first, whatever else.
        let memory = LimitFacts {
            peak_rss_bytes: Some(300),
            ..client
        };
        assert_eq!(run_limit(&memory).kind, "memory");
        // Below saturation, with no in-process server: the storage.
        let remote = LimitFacts {
            server_cpu_s: None,
            client_cpu_s: 16.0,
            ..facts()
        };
        assert_eq!(run_limit(&remote).kind, "storage");
        // A checkpoint has no AU: the storage unless the machine was the limit.
        let saves = checkpoint_limit(&remote);
        assert_eq!(saves.kind, "storage");
        assert!(
            saves
                .line
                .starts_with("the storage: the saves and restores"),
            "{}",
            saves.line
        );
        assert_eq!(checkpoint_limit(&server).kind, "server_cpu");
    }
}
