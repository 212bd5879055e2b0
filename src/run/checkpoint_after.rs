//! The split form's read run (`--after WRITE_RUN_OUTPUT`): the seconds since the write run
//! ended, from its summary's `end` (the rules allow 30), and the RFC 3339 times a checkpoint
//! summary states.

use std::time::{Duration, SystemTime};

use crate::exit::UsageError;
use crate::run::request::RunRequest;

/// `--after`'s seconds since the write run's end, measured by process 0 (`lead`) only.
pub fn after_write_run_s(
    request: &RunRequest,
    lead: bool,
    now: SystemTime,
) -> anyhow::Result<Option<f64>> {
    match request.checkpoint.after.as_ref().filter(|_| lead) {
        Some(dir) => Ok(Some(seconds_since_end_of(dir, now)?)),
        None => Ok(None),
    }
}

/// Seconds from the end of the write run whose `--output` is `dir` (its summary.json's `end`)
/// to `now`.
fn seconds_since_end_of(dir: &std::path::Path, now: SystemTime) -> anyhow::Result<f64> {
    let path = dir.join("summary.json");
    let fix = "pass --after the --output folder of the write run";
    let text = std::fs::read_to_string(&path).map_err(|e| {
        UsageError(format!(
            "--after {}: cannot read {}: {e}; {fix}",
            dir.display(),
            path.display()
        ))
    })?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        UsageError(format!(
            "--after {}: {} is not JSON ({e}); {fix}",
            dir.display(),
            path.display()
        ))
    })?;
    let end = json
        .get("end")
        .and_then(|v| v.as_str())
        .and_then(parse_rfc3339)
        .ok_or_else(|| {
            UsageError(format!(
                "--after {}: {} has no `end` time of a ringload checkpoint run; {fix}",
                dir.display(),
                path.display()
            ))
        })?;
    Ok(now
        .duration_since(end)
        .map(|d| d.as_secs_f64())
        .unwrap_or_else(|e| -e.duration().as_secs_f64()))
}

/// `t` as RFC 3339 UTC with milliseconds, e.g. `2026-12-06T01:02:03.456Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, day) = crate::units::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The inverse of [`rfc3339`] (the `Z` form it writes).
fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, min, s) = (t.next()??, t.next()??, t.next()??);
    let millis: u64 = format!("{frac:0<3}").get(..3)?.parse().ok()?;
    let (m, day) = (u32::try_from(m).ok()?, u32::try_from(day).ok()?);
    let secs = crate::units::days_from_civil(y, m, day) * 86_400 + h * 3600 + min * 60 + s;
    Some(
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(secs).ok()?)
            + Duration::from_millis(millis),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        for secs in [0u64, 951_782_400, 1_796_000_123, 4_102_444_800] {
            let t = SystemTime::UNIX_EPOCH + Duration::from_millis(secs * 1000 + 789);
            let text = rfc3339(t);
            assert_eq!(parse_rfc3339(&text), Some(t), "{text}");
        }
        assert_eq!(
            rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }
}
