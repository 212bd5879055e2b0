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

/// Seconds, with as many decimals as make sense: `0.05 s`, `1.35 s`, `2.025 s`.
pub fn seconds(s: f64) -> String {
    let text = format!("{s:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} s")
}

#[cfg(test)]
mod tests {
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
