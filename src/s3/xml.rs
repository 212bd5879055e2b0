//! A small writer for the XML documents S3 sends, and the one reader the server needs (the
//! body of CompleteMultipartUpload).

use std::fmt::Write;

/// The namespace of every S3 response document.
pub const S3_NAMESPACE: &str = "http://s3.amazonaws.com/doc/2006-03-01/";

/// Writes an XML document element by element, escaping text.
#[derive(Debug, Default)]
pub struct XmlWriter {
    out: String,
}

impl XmlWriter {
    pub fn document() -> XmlWriter {
        XmlWriter {
            out: String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"),
        }
    }

    /// Opens the root element with S3's namespace.
    pub fn root(&mut self, name: &str) {
        let _ = write!(self.out, "<{name} xmlns=\"{S3_NAMESPACE}\">");
    }

    pub fn open(&mut self, name: &str) {
        let _ = write!(self.out, "<{name}>");
    }

    pub fn close(&mut self, name: &str) {
        let _ = write!(self.out, "</{name}>");
    }

    pub fn element(&mut self, name: &str, text: impl std::fmt::Display) {
        let _ = write!(self.out, "<{name}>");
        escape_into(&mut self.out, &text.to_string());
        let _ = write!(self.out, "</{name}>");
    }

    pub fn text(&mut self, text: &str) {
        escape_into(&mut self.out, text);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// One `<Part>` of a CompleteMultipartUpload request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedPart {
    pub part_number: u32,
    /// The ETag as the client sent it, quotes removed.
    pub etag: String,
    /// The part's additional checksum as listed: its element's name (`ChecksumCRC32C`) and
    /// value (base64), when the client listed one.
    pub checksum: Option<(String, String)>,
}

/// Walks an XML request body, calling `at_end(path, text)` at every end tag with the names of
/// the open elements (innermost last) and the element's unescaped, trimmed text.
pub(crate) fn walk(
    body: &[u8],
    mut at_end: impl FnMut(&[String], String) -> Result<(), String>,
) -> Result<(), String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_reader(body);
    let mut path: Vec<String> = Vec::new();
    // The raw text of the innermost element: text pieces and `&…;` references, unescaped at
    // its end tag.
    let mut raw = String::new();
    let cut_short = |path: &[String]| {
        let inside = if path.is_empty() {
            "in its first tag".to_string()
        } else {
            format!("inside <{}>", path.join("><"))
        };
        format!(
            "the XML ends {inside} after {} bytes: the body was cut short",
            body.len()
        )
    };
    loop {
        match reader.read_event() {
            // Every syntax error of quick-xml is "the input ended before …": cut short; so
            // are a reference and a start tag left open at the end.
            Err(
                quick_xml::Error::Syntax(_)
                | quick_xml::Error::IllFormed(
                    quick_xml::errors::IllFormedError::UnclosedReference
                    | quick_xml::errors::IllFormedError::MissingEndTag(_),
                ),
            ) => return Err(cut_short(&path)),
            Err(e) => return Err(format!("the body is not XML ({e})")),
            Ok(Event::Eof) if path.is_empty() => return Ok(()),
            Ok(Event::Eof) => return Err(cut_short(&path)),
            Ok(Event::Start(e)) => {
                path.push(e.local_name().as_ref().to_string());
                raw.clear();
            }
            Ok(Event::Text(t)) => raw.push_str(&t.xml10_content()),
            Ok(Event::GeneralRef(r)) => {
                raw.push('&');
                raw.push_str(&r.xml10_content());
                raw.push(';');
            }
            Ok(Event::End(_)) => {
                let text = quick_xml::escape::unescape(raw.trim())
                    .map_err(|e| format!("bad text in the body ({e})"))?
                    .into_owned();
                raw.clear();
                at_end(&path, text)?;
                path.pop();
            }
            Ok(_) => {}
        }
    }
}

/// CompleteMultipartUpload's body: the parts' ETags in part order (`etags[i]` is part i + 1's),
/// as both engines send it and [`completed_parts`] reads it back.
pub fn complete_multipart_body(etags: &[String]) -> Vec<u8> {
    complete_multipart_body_with(etags, None)
}

/// [`complete_multipart_body`] with each part's checksum: `checksums` is the element's name
/// (`ChecksumCRC32C`) and the parts' values (base64) in part order.
pub fn complete_multipart_body_with(
    etags: &[String],
    checksums: Option<(&str, &[String])>,
) -> Vec<u8> {
    let mut xml = XmlWriter::document();
    xml.open("CompleteMultipartUpload");
    for (i, etag) in etags.iter().enumerate() {
        xml.open("Part");
        xml.element("PartNumber", i + 1);
        xml.element("ETag", etag);
        if let Some((element, value)) = checksums.and_then(|(e, v)| Some((e, v.get(i)?))) {
            xml.element(element, value);
        }
        xml.close("Part");
    }
    xml.close("CompleteMultipartUpload");
    xml.finish().into_bytes()
}

/// The `UploadId` of a CreateMultipartUpload answer (`InitiateMultipartUploadResult`); `None`
/// when it has none, or an empty one.
pub fn upload_id(document: &[u8]) -> Option<String> {
    let mut id = None;
    let _ = walk(document, |path, text| {
        if path.last().map(String::as_str) == Some("UploadId") {
            id = Some(text);
        }
        Ok(())
    });
    id.filter(|id| !id.is_empty())
}

/// Reads the parts of a CompleteMultipartUpload body, in the order given.
pub fn completed_parts(body: &[u8]) -> Result<Vec<CompletedPart>, String> {
    let mut parts = Vec::new();
    let (mut number, mut etag): (Option<u32>, Option<String>) = (None, None);
    let mut checksum = None;
    walk(body, |path, text| {
        match path.last().map(String::as_str) {
            Some(name) if name.starts_with("Checksum") && name != "ChecksumType" => {
                checksum = Some((name.to_string(), text))
            }
            Some("PartNumber") => {
                number = Some(
                    text.parse()
                        .map_err(|_| format!("<PartNumber>{text}</PartNumber> is not a number"))?,
                )
            }
            Some("ETag") => etag = Some(text.trim_matches('"').to_string()),
            Some("Part") => match (number.take(), etag.take()) {
                (Some(part_number), Some(etag)) => parts.push(CompletedPart {
                    part_number,
                    etag,
                    checksum: checksum.take(),
                }),
                _ => return Err("a <Part> lacks its <PartNumber> or <ETag>".into()),
            },
            _ => {}
        }
        Ok(())
    })?;
    if parts.is_empty() {
        return Err("it names no parts".into());
    }
    Ok(parts)
}

/// The keys of a DeleteObjects body, and whether it asks for a quiet reply.
pub fn delete_request(body: &[u8]) -> Result<(Vec<String>, bool), String> {
    let (mut keys, mut quiet) = (Vec::new(), false);
    walk(body, |path, text| {
        match path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            [.., "Object", "Key"] => keys.push(text),
            [.., "Quiet"] => quiet = text.eq_ignore_ascii_case("true"),
            _ => {}
        }
        Ok(())
    })?;
    if keys.is_empty() {
        return Err("it names no objects".into());
    }
    Ok((keys, quiet))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_text() {
        let mut x = XmlWriter::default();
        x.element("Key", "a<b>&\"c'");
        assert_eq!(x.finish(), "<Key>a&lt;b&gt;&amp;&quot;c'</Key>");
    }

    #[test]
    fn reads_complete_multipart_upload_bodies() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Part><ETag>"abc"</ETag><PartNumber>1</PartNumber></Part>
  <Part><PartNumber>2</PartNumber><ETag>&quot;def&quot;</ETag><ChecksumCRC32C>4waSgw==</ChecksumCRC32C></Part>
</CompleteMultipartUpload>"#;
        let parts = completed_parts(body).unwrap();
        assert_eq!(
            parts,
            vec![
                CompletedPart {
                    part_number: 1,
                    etag: "abc".into(),
                    checksum: None,
                },
                CompletedPart {
                    part_number: 2,
                    etag: "def".into(),
                    checksum: Some(("ChecksumCRC32C".into(), "4waSgw==".into())),
                },
            ]
        );
        let written = complete_multipart_body_with(
            &["\"abc\"".into(), "\"def\"".into()],
            Some(("ChecksumCRC32C", &["AAAAAA==".into(), "4waSgw==".into()])),
        );
        let read = completed_parts(&written).unwrap();
        assert_eq!(read[1].checksum, parts[1].checksum);
        assert_eq!(
            read[0].checksum,
            Some(("ChecksumCRC32C".into(), "AAAAAA==".into()))
        );
        assert!(completed_parts(b"<CompleteMultipartUpload><Part><PartNumber>x</PartNumber></Part></CompleteMultipartUpload>").is_err());
        assert!(completed_parts(b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part></CompleteMultipartUpload>").is_err());
        assert!(completed_parts(b"").is_err());
    }

    #[test]
    fn reads_delete_objects_bodies() {
        let body = b"<Delete><Object><Key>a&amp;b</Key></Object><Object><Key>c/d</Key>\
            <VersionId>null</VersionId></Object><Quiet>true</Quiet></Delete>";
        assert_eq!(
            delete_request(body).unwrap(),
            (vec!["a&b".to_string(), "c/d".to_string()], true)
        );
        assert!(delete_request(b"<Delete></Delete>").is_err());
        assert!(delete_request(b"<Delete><Object><Key>x</Delete>").is_err());
    }
}

/// A time as S3 writes it in XML: `2026-12-02T16:24:52.000Z`.
pub fn iso8601(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod time_tests {
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn iso8601_matches_known_dates() {
        let at = |s| super::iso8601(UNIX_EPOCH + Duration::from_millis(s));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(1_369_353_600_000), "2013-05-24T00:00:00.000Z");
        assert_eq!(at(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(at(1_796_228_692_000), "2026-12-02T16:24:52.000Z");
    }
}
