//! What a checkpoint run asks of a bucket beside its parts: the multipart uploads left open
//! under a prefix (ListMultipartUploads, every page), the folders under a prefix
//! (ListObjectsV2's common prefixes, every page), and the HEAD that settles an unclear
//! completion ([`complete`]; the completion itself is `integrity.rs`'s).

use http::Method;
use http::header::{CONTENT_LENGTH, ETAG};

use super::client::{Client, RequestSpec};
use super::{RequestError, complete, xml};

/// The most pages a listing follows before it gives up (a server paging in a loop).
const MAX_PAGES: usize = 100_000;

/// A multipart upload that was started and neither completed nor aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenUpload {
    pub key: String,
    pub upload_id: String,
}

#[derive(Debug, Default)]
struct UploadsPage {
    uploads: Vec<OpenUpload>,
    truncated: bool,
    next_key: Option<String>,
    next_upload_id: Option<String>,
}

fn parse_uploads_page(body: &[u8]) -> Result<UploadsPage, String> {
    let mut page = UploadsPage::default();
    let (mut key, mut id): (Option<String>, Option<String>) = (None, None);
    let mut saw_root = false;
    xml::walk(body, |path, text| {
        match path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["ListMultipartUploadsResult"] => saw_root = true,
            ["ListMultipartUploadsResult", "IsTruncated"] => page.truncated = text == "true",
            ["ListMultipartUploadsResult", "NextKeyMarker"] => page.next_key = Some(text),
            ["ListMultipartUploadsResult", "NextUploadIdMarker"] => {
                page.next_upload_id = Some(text)
            }
            ["ListMultipartUploadsResult", "Upload", "Key"] => key = Some(text),
            ["ListMultipartUploadsResult", "Upload", "UploadId"] => id = Some(text),
            ["ListMultipartUploadsResult", "Upload"] => match (key.take(), id.take()) {
                (Some(key), Some(upload_id)) => page.uploads.push(OpenUpload { key, upload_id }),
                _ => return Err("an <Upload> lacks its <Key> or <UploadId>".into()),
            },
            _ => {}
        }
        Ok(())
    })?;
    if !saw_root {
        return Err("the answer is not a ListMultipartUploadsResult".into());
    }
    Ok(page)
}

fn parse_prefixes_page(body: &[u8]) -> Result<(Vec<String>, bool, Option<String>), String> {
    let (mut prefixes, mut truncated, mut next) = (Vec::new(), false, None);
    let mut saw_root = false;
    xml::walk(body, |path, text| {
        match path.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["ListBucketResult"] => saw_root = true,
            ["ListBucketResult", "IsTruncated"] => truncated = text == "true",
            ["ListBucketResult", "NextContinuationToken"] => next = Some(text),
            ["ListBucketResult", "CommonPrefixes", "Prefix"] => prefixes.push(text),
            _ => {}
        }
        Ok(())
    })?;
    if !saw_root {
        return Err("the answer is not a ListBucketResult".into());
    }
    Ok((prefixes, truncated, next))
}

impl Client {
    /// The multipart uploads open under `prefix`, every page.
    pub async fn list_uploads(&self, prefix: &str) -> Result<Vec<OpenUpload>, RequestError> {
        let operation = || {
            format!(
                "ListMultipartUploads s3://{}/{prefix}",
                self.target().bucket
            )
        };
        let mut uploads = Vec::new();
        let (mut key_marker, mut id_marker): (Option<String>, Option<String>) = (None, None);
        for _ in 0..MAX_PAGES {
            let mut query = vec![("uploads", ""), ("prefix", prefix)];
            if let Some(k) = &key_marker {
                query.push(("key-marker", k.as_str()));
            }
            if let Some(u) = &id_marker {
                query.push(("upload-id-marker", u.as_str()));
            }
            let spec = RequestSpec {
                query: &query,
                ..RequestSpec::new(Method::GET, None)
            };
            let (_, body) = self.send(&spec).await?;
            let page = parse_uploads_page(&body).map_err(|reason| RequestError::BadResponse {
                operation: operation(),
                reason,
            })?;
            uploads.extend(page.uploads);
            if !page.truncated {
                return Ok(uploads);
            }
            let next = (page.next_key, page.next_upload_id);
            if next.0.is_none() || (next.0 == key_marker && next.1 == id_marker) {
                return Err(RequestError::BadResponse {
                    operation: operation(),
                    reason: "a truncated page names no new NextKeyMarker (the listing would \
                             never end)"
                        .into(),
                });
            }
            (key_marker, id_marker) = next;
        }
        Err(RequestError::BadResponse {
            operation: operation(),
            reason: format!("more than {MAX_PAGES} pages of open uploads"),
        })
    }

    /// The folders (common prefixes, each ending in `/`) directly under `prefix`, every page.
    pub async fn list_folders(&self, prefix: &str) -> Result<Vec<String>, RequestError> {
        let operation = || format!("LIST s3://{}/{prefix}", self.target().bucket);
        let mut folders = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut query = vec![("list-type", "2"), ("prefix", prefix), ("delimiter", "/")];
            if let Some(t) = &token {
                query.push(("continuation-token", t.as_str()));
            }
            let spec = RequestSpec {
                query: &query,
                ..RequestSpec::new(Method::GET, None)
            };
            let (_, body) = self.send(&spec).await?;
            let (prefixes, truncated, next) =
                parse_prefixes_page(&body).map_err(|reason| RequestError::BadResponse {
                    operation: operation(),
                    reason,
                })?;
            folders.extend(prefixes);
            match next {
                Some(next) if truncated && token.as_deref() != Some(next.as_str()) => {
                    token = Some(next)
                }
                _ if truncated => {
                    return Err(RequestError::BadResponse {
                        operation: operation(),
                        reason: "a truncated page names no new NextContinuationToken".into(),
                    });
                }
                _ => return Ok(folders),
            }
        }
        Err(RequestError::BadResponse {
            operation: operation(),
            reason: format!("more than {MAX_PAGES} pages of folders"),
        })
    }
}

impl Client {
    /// A HEAD of `key`: its size and ETag, or `None` when there is no such object.
    pub async fn head_object(
        &self,
        key: &str,
    ) -> Result<Option<complete::HeadAnswer>, RequestError> {
        let spec = RequestSpec::new(Method::HEAD, Some(key));
        match self.send(&spec).await {
            Ok((parts, _)) => {
                let header = |name| parts.headers.get(name).and_then(|v| v.to_str().ok());
                Ok(Some(complete::HeadAnswer {
                    size: header(CONTENT_LENGTH)
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0),
                    etag: header(ETAG).map(str::to_string),
                }))
            }
            Err(RequestError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_page() {
        let body = br#"<?xml version="1.0"?><ListMultipartUploadsResult><Bucket>b</Bucket>
            <IsTruncated>true</IsTruncated><NextKeyMarker>c/k2</NextKeyMarker>
            <NextUploadIdMarker>u2</NextUploadIdMarker>
            <Upload><Key>c/k1</Key><UploadId>u1</UploadId></Upload>
            <Upload><Key>c/k2</Key><UploadId>u2</UploadId></Upload>
            </ListMultipartUploadsResult>"#;
        let page = parse_uploads_page(body).unwrap();
        assert!(page.truncated);
        assert_eq!(page.next_key.as_deref(), Some("c/k2"));
        assert_eq!(page.uploads.len(), 2);
        assert_eq!(page.uploads[1].upload_id, "u2");
        assert!(parse_uploads_page(b"<ListBucketResult/>").is_err());
        assert!(
            parse_uploads_page(b"<ListMultipartUploadsResult><Upload><Key>k</Key></Upload></ListMultipartUploadsResult>")
                .is_err()
        );
    }

    #[test]
    fn folders_page() {
        let body = br#"<ListBucketResult><IsTruncated>false</IsTruncated>
            <CommonPrefixes><Prefix>c/global_epoch1_step1/</Prefix></CommonPrefixes>
            <CommonPrefixes><Prefix>c/global_epoch1_step2/</Prefix></CommonPrefixes>
            </ListBucketResult>"#;
        let (p, truncated, next) = parse_prefixes_page(body).unwrap();
        assert_eq!(p, ["c/global_epoch1_step1/", "c/global_epoch1_step2/"]);
        assert!(!truncated && next.is_none());
    }
}
