//! Numbers for people: byte sizes in binary units, counts with separators, seconds. A leaf, so
//! that error messages in any layer can state sizes the way reports do.

/// Bytes in a GiB and a MiB, for rates.
pub const GIB: f64 = (1u64 << 30) as f64;
pub const MIB: f64 = (1u64 << 20) as f64;

/// Bytes in binary units with two decimals: `99.10 MiB`, `12.39 GiB`; below 1 KiB, `512 B`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

/// An integer with thousands separators: `623,498,435`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count and its noun, plural when it is not one: `1 point`, `3 points`, `2 retries`,
/// `0 processes` (English's regular plurals: `-s`, `-es` after s, x, ch, sh, `-ies` after a
/// consonant and y).
pub fn counted(n: u64, noun: &str) -> String {
    if n == 1 {
        return format!("1 {noun}");
    }
    let plural = if ["s", "x", "ch", "sh"].iter().any(|e| noun.ends_with(e)) {
        format!("{noun}es")
    } else if let Some(stem) = noun.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{noun}s")
    };
    format!("{} {plural}", count(n))
}

/// Seconds, with as many decimals as make sense: `0.05 s`, `1.35 s`, `2.025 s`; under a
/// millisecond, to the microsecond (DLRM's `0.000375 s`), never shown as `0 s`.
pub fn seconds(s: f64) -> String {
    let text = if s > 0.0 && s < 0.001 {
        format!("{s:.6}")
    } else {
        format!("{s:.3}")
    };
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} s")
}

/// A long duration for people: `5 h 22 min`, `41 min`, `12 s`.
pub fn duration(s: f64) -> String {
    let whole = s.max(0.0).round() as u64;
    match (whole / 3600, whole % 3600 / 60) {
        (0, 0) => format!("{whole} s"),
        (0, m) => format!("{m} min"),
        (h, m) => format!("{h} h {m} min"),
    }
}

/// Howard Hinnant's `civil_from_days`: (year, month, day) of a day count since 1970-01-01
/// (proleptic Gregorian, UTC).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Its inverse (`days_from_civil`): the day count since 1970-01-01 of (year, month, day).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (m, d) = (i64::from(month), i64::from(day));
    let y = if m <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {

    #[test]
    fn calendar_days_round_trip() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_793), (2026, 12, 6));
        assert_eq!(days_from_civil(2000, 2, 29), 11_016);
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }
    use super::*;

    #[test]
    fn bytes_in_binary_units() {
        let table = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1024, "1.00 KiB"),
            (103_915_069, "99.10 MiB"),
            (128 * 103_915_520, "12.39 GiB"),
            (8 << 20, "8.00 MiB"),
        ];
        for (n, text) in table {
            assert_eq!(bytes(n), text);
        }
    }

    #[test]
    fn counts_and_seconds() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(623_498_435), "623,498,435");
        assert_eq!(seconds(0.05), "0.05 s");
        assert_eq!(seconds(2.025), "2.025 s");
        assert_eq!(seconds(1.0), "1 s");
        assert_eq!(seconds(0.000375), "0.000375 s");
        assert_eq!(seconds(0.0), "0 s");
        assert_eq!(counted(1, "point"), "1 point");
        assert_eq!(counted(0, "point"), "0 points");
        assert_eq!(counted(1200, "file"), "1,200 files");
        assert_eq!(counted(2, "retry"), "2 retries");
        assert_eq!(counted(1, "retry"), "1 retry");
        assert_eq!(counted(3, "process"), "3 processes");
        assert_eq!(counted(2, "GET"), "2 GETs");
        assert_eq!(counted(2, "day"), "2 days");
    }
}
