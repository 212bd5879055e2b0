//! The parsers of flag values that clap's own types do not cover: counts of at least one,
//! rates, seconds, sizes with units, `NP,RT` pairs. Each error names the text and what to
//! write instead.

/// Parses a thread count: 1 or more.
pub fn parse_threads(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{text}' is not a thread count; write 1 or more")),
    }
}

/// Parses the time series' sample interval in seconds: 0.05 to 3600.
pub fn parse_sample_interval(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if (0.05..=3600.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "'{text}' is not a sample interval; write seconds from 0.05 to 3600, e.g. 1 or 0.5"
        )),
    }
}

/// Parses a connection count: 1 or more.
pub fn parse_connections(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "'{text}' is not a number of connections; write 1 or more"
        )),
    }
}

/// Parses a positive rate in MiB/s.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "'{text}' is not a rate in MiB/s; write a positive number, e.g. 300"
        )),
    }
}

/// Parses a positive number of seconds.
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "'{text}' is not a time in seconds; write a number from 0.001 to 86400"
        )),
    }
}

/// `NP,RT`: two whole numbers.
pub fn parse_pair(text: &str) -> Result<(u32, u64), String> {
    let bad = || format!("'{text}' is not NP,RT (two whole numbers, e.g. 4,2)");
    let (a, b) = text.split_once(',').ok_or_else(bad)?;
    Ok((
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    ))
}

/// Parses a size: bytes, or a number with a unit. Binary units (KiB, MiB, GiB, TiB, and the
/// short K, M, G, T) are powers of 1024; decimal ones (KB, MB, GB, TB) powers of 1000.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size; write e.g. 16GiB, 512MiB or 1000000"))?;
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "K" | "KiB" => 1024.0,
        "M" | "MiB" => 1024f64.powi(2),
        "G" | "GiB" => 1024f64.powi(3),
        "T" | "TiB" => 1024f64.powi(4),
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => {
            return Err(format!(
                "unknown unit '{other}' in '{text}'; use B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB)"
            ));
        }
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("'{text}' is out of range"));
    }
    Ok(bytes as u64)
}

/// Parses a machine's or an accelerator's memory: a size with its unit (a bare number is
/// refused: `512` meant 512 GB, never 512 bytes; mlpstorage's `--client-host-memory-in-gb`
/// takes GB, ringload's flags take the unit written out).
pub fn parse_memory(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "'{text}' has no unit; write {t}GiB or {t}GB (units: B, KiB, MiB, GiB, TiB, or KB, \
             MB, GB, TB; mlpstorage's --client-host-memory-in-gb {t} is {t}GB here)"
        ));
    }
    parse_size(text)
}

pub use crate::redact::{REDACTED, redacted_command_line};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_needs_its_unit() {
        assert_eq!(parse_memory("512GiB"), Ok(512 << 30));
        assert_eq!(parse_memory("512GB"), Ok(512_000_000_000));
        assert_eq!(parse_memory("1024B"), Ok(1024));
        for bare in ["512", "1.5", " 24 "] {
            let err = parse_memory(bare).unwrap_err();
            assert!(
                err.contains("has no unit") && err.contains("GB here"),
                "{err}"
            );
        }
        assert!(parse_memory("lots").unwrap_err().contains("not a size"));
    }

    #[test]
    fn sizes() {
        let table = [
            ("16GiB", 16u64 << 30),
            ("16G", 16 << 30),
            ("1.5GiB", 3 << 29),
            ("512MiB", 512 << 20),
            ("500MB", 500_000_000),
            ("1000000", 1_000_000),
            ("4 KiB", 4096),
        ];
        for (text, n) in table {
            assert_eq!(parse_size(text), Ok(n), "{text}");
        }
        for bad in ["", "GiB", "12 parsecs", "0", "-1G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn command_lines_shown_hold_no_secret() {
        let line = |args: &[&str]| redacted_command_line(args.iter().map(|a| a.to_string()));
        assert_eq!(
            line(&[
                "ringload",
                "sweep",
                "--access-key",
                "AK",
                "--secret-key",
                "SK",
                "--np",
                "1"
            ]),
            "ringload sweep --access-key AK --secret-key <redacted> --np 1"
        );
        assert_eq!(
            line(&[
                "run",
                "--secret-key=SK",
                "++storage.storage_options.secret_access_key=SK"
            ]),
            "run --secret-key=<redacted> ++storage.storage_options.secret_access_key=<redacted>"
        );
        assert_eq!(
            line(&["run", "x.session_token=T", "--secret-key-file", "/k"]),
            "run x.session_token=<redacted> --secret-key-file /k"
        );
    }
}
