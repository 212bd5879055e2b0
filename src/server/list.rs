//! ListObjectsV2 (and V1) paging over objects sorted by key: prefix, delimiter (common
//! prefixes count toward max-keys and appear once across pages), max-keys, continuation tokens.
//!
//! A page is cut from any [`Sorted`] source by bisection on its keys, so a source that computes
//! its keys from a position (the whole-object virtual store, [`super::virtual_objects`]) is
//! paged without holding its keys: a page costs O(max-keys + log n) keys made, whatever n is.

use std::borrow::Cow;

use super::error::S3Error;
use super::object::ObjectInfo;
use crate::s3::sigv4::hex;

/// S3's cap on max-keys.
pub const MAX_KEYS: usize = 1000;

/// Where a page starts, exclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    /// After this key (start-after, V1 marker, or a token ending on a key).
    Key(String),
    /// After every key under this common prefix.
    Prefix(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListParams {
    pub prefix: String,
    pub delimiter: Option<String>,
    pub max_keys: usize,
    pub after: Option<After>,
}

/// One entry of a page: an object (borrowed from a listed slice, or made for the page), or a
/// common prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry<'a> {
    Object(Cow<'a, ObjectInfo>),
    CommonPrefix(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<'a> {
    pub entries: Vec<Entry<'a>>,
    pub truncated: bool,
    /// Where the next page starts, when truncated.
    pub next: Option<After>,
}

/// Objects in byte-wise key order, addressed by position `0..total()`.
pub trait Sorted {
    /// How many objects there are.
    fn total(&self) -> u64;
    /// The key at `position` (< `total()`).
    fn key(&self, position: u64) -> Cow<'_, str>;
    /// The object at `position` (< `total()`).
    fn object(&self, position: u64) -> Cow<'_, ObjectInfo>;
}

impl Sorted for [ObjectInfo] {
    fn total(&self) -> u64 {
        self.len() as u64
    }

    fn key(&self, position: u64) -> Cow<'_, str> {
        Cow::Borrowed(&self[position as usize].key)
    }

    fn object(&self, position: u64) -> Cow<'_, ObjectInfo> {
        Cow::Borrowed(&self[position as usize])
    }
}

/// The first position from `from` on whose key fails `below` (which holds for a leading run of
/// keys and then never again), by bisection.
fn partition<S: Sorted + ?Sized>(objects: &S, from: u64, below: impl Fn(&str) -> bool) -> u64 {
    let (mut lo, mut hi) = (from, objects.total());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(&objects.key(mid)) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The first position from `from` on whose key sorts after every key under `prefix`.
fn past_prefix<S: Sorted + ?Sized>(objects: &S, from: u64, prefix: &str) -> u64 {
    // Keys under a prefix are contiguous and sort at or after it.
    partition(objects, from, |k| k <= prefix || k.starts_with(prefix))
}

/// One page of `objects` (sorted by key): those under `params.prefix`, after `params.after`.
/// Memory: the page's entries (at most `max_keys`); the keys skipped are never all made.
pub fn page<'a, S: Sorted + ?Sized>(objects: &'a S, params: &ListParams) -> Page<'a> {
    let mut entries: Vec<Entry<'a>> = Vec::new();
    let mut truncated = false;
    if params.max_keys == 0 {
        return Page {
            entries,
            truncated,
            next: None,
        };
    }
    let prefix = params.prefix.as_str();
    let mut position = partition(objects, 0, |k| k < prefix);
    position = match &params.after {
        Some(After::Key(k)) => partition(objects, position, |key| key <= k.as_str()),
        Some(After::Prefix(p)) => past_prefix(objects, position, p),
        None => position,
    };
    let delimiter = params.delimiter.as_deref().filter(|d| !d.is_empty());
    while position < objects.total() {
        let key = objects.key(position);
        if !key.starts_with(prefix) {
            break;
        }
        let common = delimiter.and_then(|d| {
            key[prefix.len()..]
                .find(d)
                .map(|i| key[..prefix.len() + i + d.len()].to_string())
        });
        if entries.len() == params.max_keys {
            truncated = true;
            break;
        }
        match common {
            Some(p) => {
                // Every key under it rolls up into this one entry.
                position = past_prefix(objects, position, &p);
                entries.push(Entry::CommonPrefix(p));
            }
            None => {
                entries.push(Entry::Object(objects.object(position)));
                position += 1;
            }
        }
    }
    let next = match (truncated, entries.last()) {
        (true, Some(Entry::Object(o))) => Some(After::Key(o.key.clone())),
        (true, Some(Entry::CommonPrefix(p))) => Some(After::Prefix(p.clone())),
        _ => None,
    };
    Page {
        entries,
        truncated,
        next,
    }
}

/// An opaque continuation token for `after`.
pub fn encode_token(after: &After) -> String {
    match after {
        After::Key(k) => format!("k{}", hex(k.as_bytes())),
        After::Prefix(p) => format!("p{}", hex(p.as_bytes())),
    }
}

pub fn decode_token(token: &str) -> Result<After, S3Error> {
    let bad = || S3Error::invalid_argument("The continuation token provided is incorrect");
    let (kind, digits) = token.split_at_checked(1).ok_or_else(bad)?;
    if digits.len() % 2 != 0 || !digits.is_ascii() {
        return Err(bad());
    }
    let bytes = (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    match kind {
        "k" => Ok(After::Key(text)),
        "p" => Ok(After::Prefix(text)),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn objects(keys: &[&str]) -> Vec<ObjectInfo> {
        keys.iter()
            .map(|k| ObjectInfo {
                key: k.to_string(),
                size_bytes: 1,
                etag: String::new(),
                last_modified: UNIX_EPOCH,
            })
            .collect()
    }

    fn names(page: &Page<'_>) -> Vec<String> {
        page.entries
            .iter()
            .map(|e| match e {
                Entry::Object(o) => o.key.clone(),
                Entry::CommonPrefix(p) => format!("{p}*"),
            })
            .collect()
    }

    /// Walks every page with `max_keys` per page, through encoded tokens.
    fn walk(objs: &[ObjectInfo], delimiter: Option<&str>, max_keys: usize) -> Vec<Vec<String>> {
        let mut params = ListParams {
            prefix: String::new(),
            delimiter: delimiter.map(String::from),
            max_keys,
            after: None,
        };
        let mut pages = Vec::new();
        for _ in 0..100 {
            let p = page(objs, &params);
            pages.push(names(&p));
            match p.next {
                Some(next) => params.after = Some(decode_token(&encode_token(&next)).unwrap()),
                None => return pages,
            }
        }
        panic!("paging did not end")
    }

    #[test]
    fn pages_keys_and_common_prefixes_once_each() {
        let objs = objects(&["a/1", "a/2", "a/3", "b", "c/1", "d"]);
        assert_eq!(
            walk(&objs, None, 4),
            vec![vec!["a/1", "a/2", "a/3", "b"], vec!["c/1", "d"]]
        );
        assert_eq!(
            walk(&objs, Some("/"), 2),
            vec![vec!["a/*", "b"], vec!["c/*", "d"]]
        );
        assert_eq!(
            walk(&objs, Some("/"), 1),
            vec![vec!["a/*"], vec!["b"], vec!["c/*"], vec!["d"]]
        );
        assert_eq!(
            walk(&objs, Some("/"), 1000),
            vec![vec!["a/*", "b", "c/*", "d"]]
        );
        assert_eq!(walk(&objs, None, 0), vec![Vec::<String>::new()]);
    }

    #[test]
    fn start_after_is_exclusive_and_tokens_reject_garbage() {
        let objs = objects(&["a", "b", "c"]);
        let p = page(
            objs.as_slice(),
            &ListParams {
                prefix: String::new(),
                delimiter: None,
                max_keys: 10,
                after: Some(After::Key("a".into())),
            },
        );
        assert_eq!(names(&p), ["b", "c"]);
        for bad in ["", "x00", "k0", "kzz", "kff"] {
            assert!(decode_token(bad).is_err(), "{bad}");
        }
    }
}
