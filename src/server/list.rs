//! ListObjectsV2 (and V1) paging over a sorted key list: prefix, delimiter (common prefixes
//! count toward max-keys and appear once across pages), max-keys, continuation tokens.

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

/// One entry of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry<'a> {
    Object(&'a ObjectInfo),
    CommonPrefix(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<'a> {
    pub entries: Vec<Entry<'a>>,
    pub truncated: bool,
    /// Where the next page starts, when truncated.
    pub next: Option<After>,
}

/// One page of `objects` (sorted by key, all starting with the prefix).
pub fn page<'a>(objects: &'a [ObjectInfo], params: &ListParams) -> Page<'a> {
    let mut entries: Vec<Entry<'a>> = Vec::new();
    let mut truncated = false;
    if params.max_keys == 0 {
        return Page {
            entries,
            truncated,
            next: None,
        };
    }
    let start = match &params.after {
        Some(After::Key(k) | After::Prefix(k)) => {
            objects.partition_point(|o| o.key.as_str() <= k.as_str())
        }
        None => 0,
    };
    for object in &objects[start..] {
        if let Some(After::Prefix(p)) = &params.after
            && object.key.starts_with(p.as_str())
        {
            continue;
        }
        let entry = match &params.delimiter {
            Some(d) if !d.is_empty() => match object.key[params.prefix.len()..].find(d.as_str()) {
                Some(i) => {
                    Entry::CommonPrefix(object.key[..params.prefix.len() + i + d.len()].to_string())
                }
                None => Entry::Object(object),
            },
            _ => Entry::Object(object),
        };
        if let (Entry::CommonPrefix(p), Some(Entry::CommonPrefix(last))) = (&entry, entries.last())
            && p == last
        {
            continue;
        }
        if entries.len() == params.max_keys {
            truncated = true;
            break;
        }
        entries.push(entry);
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
            &objs,
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
