//! The `Range` header of a GET or HEAD, as S3 reads it: one byte range (RFC 9110 §14.1.2), in
//! one of three forms, resolved against the object's size (§14.1.1: a last position past the
//! end is clamped; a first position at or past the end cannot be satisfied).

/// A parsed `Range: bytes=…` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `bytes=a-b`: bytes a through b inclusive.
    FromTo { first: u64, last: u64 },
    /// `bytes=a-`: from byte a to the end.
    From(u64),
    /// `bytes=-n`: the last n bytes.
    Suffix(u64),
}

/// Why a Range header was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// Not `bytes=a-b`, `bytes=a-` or `bytes=-n` (or `a > b`).
    Syntax,
    /// More than one range (`bytes=0-1,5-9`): S3 serves one range per request.
    Multiple,
}

fn digits(text: &str) -> Result<u64, RangeError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RangeError::Syntax);
    }
    text.parse().map_err(|_| RangeError::Syntax)
}

impl RangeSpec {
    /// Parses a Range header value. The unit is case-insensitive; no whitespace inside a range.
    pub fn parse(header: &str) -> Result<RangeSpec, RangeError> {
        let header = header.trim();
        let set = match header.split_once('=') {
            Some((unit, set)) if unit.trim().eq_ignore_ascii_case("bytes") => set.trim(),
            _ => return Err(RangeError::Syntax),
        };
        if set.contains(',') {
            return Err(RangeError::Multiple);
        }
        let (first, last) = set.split_once('-').ok_or(RangeError::Syntax)?;
        match (first.is_empty(), last.is_empty()) {
            (true, true) => Err(RangeError::Syntax),
            (true, false) => Ok(RangeSpec::Suffix(digits(last)?)),
            (false, true) => Ok(RangeSpec::From(digits(first)?)),
            (false, false) => {
                let (first, last) = (digits(first)?, digits(last)?);
                if first > last {
                    return Err(RangeError::Syntax);
                }
                Ok(RangeSpec::FromTo { first, last })
            }
        }
    }

    /// The first and last byte served from an object of `size` bytes, or `None` when the range
    /// cannot be satisfied (416).
    pub fn resolve(self, size: u64) -> Option<(u64, u64)> {
        match self {
            RangeSpec::FromTo { first, last } if first < size => Some((first, last.min(size - 1))),
            RangeSpec::From(first) if first < size => Some((first, size - 1)),
            RangeSpec::Suffix(n) if n > 0 && size > 0 => Some((size - n.min(size), size - 1)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms_and_rejects_the_rest() {
        use RangeSpec::*;
        let table: &[(&str, Result<RangeSpec, RangeError>)] = &[
            ("bytes=0-99", Ok(FromTo { first: 0, last: 99 })),
            ("bytes=5-5", Ok(FromTo { first: 5, last: 5 })),
            ("BYTES=7-", Ok(From(7))),
            ("bytes=-8", Ok(Suffix(8))),
            (" bytes=1-2 ", Ok(FromTo { first: 1, last: 2 })),
            ("bytes=0-1,4-5", Err(RangeError::Multiple)),
            ("bytes=-", Err(RangeError::Syntax)),
            ("bytes=9-3", Err(RangeError::Syntax)),
            ("bytes=a-3", Err(RangeError::Syntax)),
            ("bytes=+1-3", Err(RangeError::Syntax)),
            ("bytes=1 - 3", Err(RangeError::Syntax)),
            ("items=0-1", Err(RangeError::Syntax)),
            ("0-1", Err(RangeError::Syntax)),
            ("bytes=99999999999999999999-", Err(RangeError::Syntax)),
        ];
        for (text, want) in table {
            assert_eq!(RangeSpec::parse(text), *want, "{text}");
        }
    }

    #[test]
    fn resolves_against_the_size_as_rfc_9110_says() {
        use RangeSpec::*;
        let table = [
            (FromTo { first: 0, last: 9 }, 100, Some((0, 9))),
            (
                FromTo {
                    first: 90,
                    last: 200,
                },
                100,
                Some((90, 99)),
            ),
            (
                FromTo {
                    first: 100,
                    last: 200,
                },
                100,
                None,
            ),
            (From(99), 100, Some((99, 99))),
            (From(100), 100, None),
            (Suffix(8), 100, Some((92, 99))),
            (Suffix(500), 100, Some((0, 99))),
            (Suffix(0), 100, None),
            (Suffix(1), 0, None),
            (From(0), 0, None),
        ];
        for (spec, size, want) in table {
            assert_eq!(spec.resolve(size), want, "{spec:?} of {size}");
        }
    }
}
