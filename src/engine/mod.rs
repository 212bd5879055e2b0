//! Engines: how a rank's ranged GETs are sent and where their bodies land. Every engine is
//! driven through [`crate::rank::RankIo`] by the same step loop, from the same plan, through
//! the same reader window ([`window`]), and keeps the same [`crate::metrics::RequestStats`], so
//! a comparison between engines differs only in the transport. Engines never import each other.
//!
//! - [`uring`]: one io_uring per pinned rank thread, keep-alive connections driven by a
//!   completion loop, bodies read by the kernel straight into registered buffers.
//! - [`baseline`]: the conventional loader — a tokio multi-thread runtime, hyper's pooled
//!   client, each body collected into a freshly allocated heap buffer.

pub mod baseline;
pub mod uring;
pub mod window;

use std::fmt;

use serde::Serialize;

use crate::plan::RangedGet;

/// Which engine moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// io_uring per pinned rank thread, bodies read into registered buffers.
    Uring,
    /// tokio + hyper, a fresh heap buffer per GET: the conventional design.
    Baseline,
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EngineKind::Uring => "uring",
            EngineKind::Baseline => "baseline",
        })
    }
}

/// Checks a `206 Partial Content` answer's `Content-Range` and `Content-Length` against the
/// range asked for; the error says what was wrong.
pub fn check_partial_content(
    content_range: Option<&str>,
    content_length: Option<&str>,
    get: &RangedGet,
) -> Result<(), String> {
    let expected = format!("bytes {}-{}/", get.offset, get.last_byte());
    match content_range {
        None => return Err("the 206 answer has no Content-Range".into()),
        Some(range) => {
            let total_ok = range
                .strip_prefix(&expected)
                .is_some_and(|total| total == "*" || total.parse::<u64>().is_ok());
            if !total_ok {
                return Err(format!(
                    "asked for {} and the answer's Content-Range is '{range}'",
                    get.range_header()
                ));
            }
        }
    }
    match content_length.map(|l| l.trim().parse::<u64>()) {
        Some(Ok(n)) if n == get.len_bytes => Ok(()),
        Some(Ok(n)) => Err(format!(
            "asked for {} bytes and the answer's Content-Length is {n}",
            get.len_bytes
        )),
        Some(Err(_)) => Err("the answer's Content-Length is not a number".into()),
        None => Err("the 206 answer has no Content-Length".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_content_checks() {
        let get = RangedGet {
            key: "k".into(),
            offset: 4,
            len_bytes: 10,
            check: None,
        };
        assert_eq!(get.range_header(), "bytes=4-13");
        let ok = |cr, cl| check_partial_content(cr, cl, &get);
        assert_eq!(ok(Some("bytes 4-13/100"), Some("10")), Ok(()));
        assert_eq!(ok(Some("bytes 4-13/*"), Some("10")), Ok(()));
        assert!(ok(Some("bytes 4-12/100"), Some("9")).is_err());
        assert!(ok(Some("bytes 0-13/100"), Some("10")).is_err());
        assert!(ok(Some("bytes 4-13/x"), Some("10")).is_err());
        assert!(ok(Some("bytes 4-13/100"), Some("11")).is_err());
        assert!(ok(Some("bytes 4-13/100"), None).is_err());
        assert!(ok(None, Some("10")).is_err());
        assert!(ok(Some("bytes 4-13/100"), Some("ten")).is_err());
    }
}
