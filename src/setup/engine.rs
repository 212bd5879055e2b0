//! The one engine choice every session makes — a training run, a checkpoint run, a sweep's
//! default axis: `--engine baseline` is taken as asked; otherwise the io_uring engine, unless
//! this kernel lacks what it needs or its locked buffer pool exceeds `RLIMIT_MEMLOCK` (without
//! `CAP_IPC_LOCK`). Then an explicit
//! `--engine uring` is a usage error naming the cause, and the default falls back to the
//! baseline with a note naming it.

use crate::budget::MemoryLimits;
use crate::checkpoint::SendZc;
use crate::engine::EngineKind;
use crate::units;

/// What the run asks of its engine.
#[derive(Debug, Clone, Default)]
pub struct EngineNeeds {
    /// The io_uring engine's locked, registered buffer pool on this host.
    pub pool_bytes: u64,
    /// The run is on a mounted file system (`--data-dir`): the file engine reads it.
    pub files: bool,
}

/// The engine chosen, and the note to print and keep when the default fell back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineChoice {
    pub kind: EngineKind,
    pub note: Option<String>,
}

/// Whether a checkpoint's bodies go with `SEND_ZC`, and the note when `auto` fell back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendZcChoice {
    pub on: bool,
    pub note: Option<String>,
}

/// `--send-zc` on the engine chosen: only the io_uring engine sends with `SEND_ZC`, and only
/// where `probe` (a real `SEND_ZC` with the usage-report flag, `uring::send_zc_cause`) finds
/// no cause against it; then `auto` (which asks for it off loopback) falls back to `SEND` with
/// a note, and `on` is the usage line returned.
pub fn send_zc(
    asked: SendZc,
    loopback: bool,
    kind: EngineKind,
    probe: impl FnOnce() -> Option<String>,
) -> Result<SendZcChoice, String> {
    if kind != EngineKind::Uring || !asked.enabled(loopback) {
        return Ok(SendZcChoice {
            on: false,
            note: None,
        });
    }
    match (asked, probe()) {
        (_, None) => Ok(SendZcChoice {
            on: true,
            note: None,
        }),
        (SendZc::On, Some(cause)) => Err(format!(
            "--send-zc on: {cause}; run with --send-zc auto or off"
        )),
        (_, Some(cause)) => Ok(SendZcChoice {
            on: false,
            note: Some(format!(
                "SEND_ZC cannot be used here ({cause}); parts are sent with SEND"
            )),
        }),
    }
}

/// Chooses the engine (see the module docs). The error is the usage line for an explicit
/// `--engine uring` that cannot work here.
pub fn choose(
    asked: Option<EngineKind>,
    needs: &EngineNeeds,
    limits: &MemoryLimits,
) -> Result<EngineChoice, String> {
    if needs.files {
        return choose_files(asked, needs, limits);
    }
    if asked == Some(EngineKind::File) {
        return Err(
            "--engine file reads a mounted file system: add --data-dir DIR (or \
             storage.storage_type=local_fs), or drop --engine file"
                .into(),
        );
    }
    if asked == Some(EngineKind::Baseline) {
        return Ok(EngineChoice {
            kind: EngineKind::Baseline,
            note: None,
        });
    }
    let cause = crate::engine::uring::unavailable_cause()
        .or_else(|| memlock_cause(needs.pool_bytes, limits));
    match (asked, cause) {
        (_, None) => Ok(EngineChoice {
            kind: EngineKind::Uring,
            note: None,
        }),
        (Some(_), Some(cause)) => Err(format!(
            "--engine uring: {cause}; run with --engine baseline"
        )),
        (None, Some(cause)) => Ok(EngineChoice {
            kind: EngineKind::Baseline,
            note: Some(format!(
                "io_uring cannot be used here ({cause}); ran the baseline engine"
            )),
        }),
    }
}

/// The engine of a run on a file system: the file engine, which needs io_uring and its locked
/// pool (there is no other engine for files to fall back to).
fn choose_files(
    asked: Option<EngineKind>,
    needs: &EngineNeeds,
    limits: &MemoryLimits,
) -> Result<EngineChoice, String> {
    if let Some(kind @ (EngineKind::Uring | EngineKind::Baseline)) = asked {
        return Err(format!(
            "--engine {kind} reads an S3 store; a run on a file system (--data-dir) reads with \
             --engine file: drop --engine {kind}"
        ));
    }
    let cause = crate::engine::uring::unavailable_cause()
        .or_else(|| memlock_cause(needs.pool_bytes, limits));
    match cause {
        None => Ok(EngineChoice {
            kind: EngineKind::File,
            note: None,
        }),
        Some(cause) => Err(format!(
            "the file engine needs io_uring and its locked buffers: {cause}"
        )),
    }
}

/// The engine a sweep's points take by default, before any point is planned: io_uring where
/// this kernel has it (each point's own run makes the full choice).
pub fn default_kind() -> EngineKind {
    match crate::engine::uring::unavailable_cause() {
        None => EngineKind::Uring,
        Some(_) => EngineKind::Baseline,
    }
}

/// Why `RLIMIT_MEMLOCK` rules the io_uring engine's pool of `pool_bytes` out, if it does.
fn memlock_cause(pool_bytes: u64, limits: &MemoryLimits) -> Option<String> {
    let memlock = limits
        .memlock_bytes
        .filter(|&m| !limits.cap_ipc_lock && m < pool_bytes)?;
    Some(format!(
        "RLIMIT_MEMLOCK {} is smaller than the buffer pool {} (its buffers are locked and \
         registered; raise it with `ulimit -l unlimited` or grant CAP_IPC_LOCK)",
        units::bytes(memlock),
        units::bytes(pool_bytes)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(memlock_bytes: Option<u64>) -> MemoryLimits {
        MemoryLimits {
            memlock_bytes,
            cap_ipc_lock: false,
            ..MemoryLimits::unlimited()
        }
    }

    #[test]
    fn send_zc_is_probed_only_where_asked_and_a_refusal_falls_back_or_is_refused() {
        let refused = || Some("EINVAL".to_string());
        let never = || -> Option<String> { panic!("probed where SEND_ZC was not asked for") };
        // Loopback with auto, and the baseline engine: no SEND_ZC, no probe.
        assert!(
            !send_zc(SendZc::Auto, true, EngineKind::Uring, never)
                .unwrap()
                .on
        );
        assert!(
            !send_zc(SendZc::On, false, EngineKind::Baseline, never)
                .unwrap()
                .on
        );
        assert!(
            !send_zc(SendZc::Off, false, EngineKind::Uring, never)
                .unwrap()
                .on
        );
        // Off loopback with auto: the probe decides; a refusal is SEND with a note.
        assert_eq!(
            send_zc(SendZc::Auto, false, EngineKind::Uring, || None).unwrap(),
            SendZcChoice {
                on: true,
                note: None
            }
        );
        let fell_back = send_zc(SendZc::Auto, false, EngineKind::Uring, refused).unwrap();
        assert!(!fell_back.on && fell_back.note.unwrap().contains("EINVAL"));
        // `on` and a refusal: one line naming the flag and the way out.
        let line = send_zc(SendZc::On, true, EngineKind::Uring, refused).unwrap_err();
        assert!(line.starts_with("--send-zc on: EINVAL") && line.contains("auto or off"));
    }

    #[test]
    fn an_explicit_uring_that_cannot_work_is_refused_and_the_default_falls_back() {
        let needs = EngineNeeds {
            pool_bytes: 1 << 30,
            files: false,
        };
        let small = limits(Some(8 << 20));
        let err = choose(Some(EngineKind::Uring), &needs, &small).unwrap_err();
        assert!(
            err.starts_with("--engine uring: ") && err.ends_with("--engine baseline"),
            "{err}"
        );
        let choice = choose(None, &needs, &small).unwrap();
        assert_eq!(choice.kind, EngineKind::Baseline);
        assert!(choice.note.unwrap().contains("ran the baseline engine"));
        let asked = choose(Some(EngineKind::Baseline), &needs, &small).unwrap();
        assert_eq!((asked.kind, asked.note), (EngineKind::Baseline, None));
    }

    #[test]
    fn a_file_run_takes_the_file_engine_and_the_s3_engines_refuse_it() {
        let files = EngineNeeds {
            pool_bytes: 1 << 20,
            files: true,
        };
        let roomy = limits(None);
        if crate::engine::uring::unavailable_cause().is_none() {
            for asked in [None, Some(EngineKind::File)] {
                let choice = choose(asked, &files, &roomy).unwrap();
                assert_eq!((choice.kind, choice.note), (EngineKind::File, None));
            }
        }
        for kind in [EngineKind::Uring, EngineKind::Baseline] {
            let err = choose(Some(kind), &files, &roomy).unwrap_err();
            assert!(
                err.contains("--engine file") && !err.contains('\n'),
                "{err}"
            );
        }
        let s3 = EngineNeeds {
            files: false,
            ..files
        };
        let err = choose(Some(EngineKind::File), &s3, &roomy).unwrap_err();
        assert!(err.contains("--data-dir"), "{err}");
    }

    #[test]
    fn a_pool_over_rlimit_memlock_rules_uring_out_unless_cap_ipc_lock() {
        let needs = EngineNeeds {
            pool_bytes: 1 << 30,
            files: false,
        };
        let small = limits(Some(8 << 20));
        if crate::engine::uring::unavailable_cause().is_none() {
            let choice = choose(None, &needs, &small).unwrap();
            assert_eq!(choice.kind, EngineKind::Baseline);
            assert!(choice.note.unwrap().contains("RLIMIT_MEMLOCK"));
            let capable = MemoryLimits {
                cap_ipc_lock: true,
                ..small
            };
            assert_eq!(
                choose(None, &needs, &capable).unwrap().kind,
                EngineKind::Uring
            );
        }
    }
}
