//! Whether io_uring can be used here, and if not, why, in words that name the cause and
//! what to do instead.

use super::ring;

/// Why io_uring cannot be used here, in words that name the cause.
pub fn unavailable_cause() -> Option<String> {
    if let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        && text.trim() == "2"
    {
        return Some("io_uring is disabled by sysctl (kernel.io_uring_disabled = 2)".into());
    }
    let err = ring::probe().err()?;
    Some(match err.raw_os_error() {
        Some(libc::ENOSYS) => {
            "the kernel has no io_uring (io_uring_setup: ENOSYS), or a seccomp filter hides it"
                .into()
        }
        Some(libc::EPERM) => "io_uring_setup was refused (EPERM): kernel.io_uring_disabled = 1 \
             without the io_uring group, or a seccomp profile (e.g. a container runtime's \
             default) blocks it"
            .into(),
        Some(libc::EINVAL) => "the kernel is too old for SINGLE_ISSUER | DEFER_TASKRUN rings \
             (io_uring_setup: EINVAL; needs Linux 6.1)"
            .into(),
        Some(libc::ENOMEM) => format!(
            "registering a buffer failed ({err}): RLIMIT_MEMLOCK is too small for registered \
             buffers"
        ),
        _ => format!("io_uring cannot be used: {err}"),
    })
}

/// Set to `fail` to make [`send_zc_cause`] report a refusal (tests of the fallback).
pub const SEND_ZC_PROBE_ENV: &str = "RINGLOAD_TEST_SEND_ZC_PROBE";

/// Why `SEND_ZC` with usage reports cannot be used here (`None`: it can): a real one, sent on
/// a loopback socket pair at set-up.
pub fn send_zc_cause() -> Option<String> {
    if std::env::var(SEND_ZC_PROBE_ENV).is_ok_and(|v| v == "fail") {
        return Some(format!(
            "the probe was made to fail ({SEND_ZC_PROBE_ENV}=fail)"
        ));
    }
    let err = ring::probe_send_zc().err()?;
    Some(match err.raw_os_error() {
        Some(libc::EINVAL) => format!(
            "this kernel refuses SEND_ZC with usage reports ({err}; they need Linux 6.2 or a \
             backport)"
        ),
        _ => format!("a SEND_ZC probe failed: {err}"),
    })
}
