//! The client's uploads with S3's additional checksums (`--checksum`, `crate::checksum`):
//! CreateMultipartUpload naming the algorithm and the object's checksum type, and
//! CompleteMultipartUpload listing each part's checksum and sending the object's FULL_OBJECT
//! checksum as a header. Parts and single PUTs carry theirs in their own heads (the engines
//! add the header; a signed payload's SHA-256 goes in the signature, `s3::sign`). Restores ask
//! a HEAD for the object's checksum ([`CHECKSUM_MODE`]) and compare the CRC of the bytes they
//! read with it ([`check_restored`]), the same on both engines.

use bytes::Bytes;
use http::Method;
use http::header::{CONTENT_TYPE, HeaderName};

use super::client::{Client, RequestSpec};
use super::{RequestError, complete, xml};
use crate::checksum::{Algorithm, Completion};

/// The header that asks a HEAD (or GET) for the object's checksum.
pub const CHECKSUM_MODE: (&str, &str) = ("x-amz-checksum-mode", "ENABLED");

/// A restored object's checksum, `read` (the CRCs of the blocks read, combined), against the
/// one the store returned, `stored`: a difference is a corrupt read, naming both.
pub fn check_restored(
    operation: &str,
    stored: &crate::checksum::StoredChecksum,
    read: &str,
) -> Result<(), RequestError> {
    if stored.value == read {
        return Ok(());
    }
    Err(RequestError::Corrupt {
        operation: operation.to_string(),
        reason: format!(
            "the {} of the bytes read ({read}) is not the object's ({}, from a HEAD): the \
             store returned other bytes than it holds",
            stored.algorithm.name(),
            stored.value
        ),
    })
}

impl Client {
    /// The object's checksum, from one HEAD of `key` with [`CHECKSUM_MODE`] (`None`: the
    /// store returned none).
    pub async fn stored_checksum(
        &self,
        key: &str,
        endpoint: usize,
    ) -> Result<Option<crate::checksum::StoredChecksum>, RequestError> {
        let spec = RequestSpec {
            headers: vec![(
                HeaderName::from_static(CHECKSUM_MODE.0),
                CHECKSUM_MODE.1.to_string(),
            )],
            endpoint,
            ..RequestSpec::new(Method::HEAD, Some(key))
        };
        let (parts, _) = self.send(&spec).await?;
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        Ok(crate::checksum::StoredChecksum::from_headers(header))
    }

    /// Starts a multipart upload, naming `checksum`'s algorithm and type when there is one;
    /// returns its upload id.
    pub async fn create_multipart_checked(
        &self,
        key: &str,
        checksum: Option<Algorithm>,
    ) -> Result<String, RequestError> {
        let mut headers = vec![(CONTENT_TYPE, "application/octet-stream".to_string())];
        for (name, value) in checksum
            .map(Algorithm::create_headers)
            .into_iter()
            .flatten()
        {
            headers.push((HeaderName::from_static(name), value.to_string()));
        }
        let spec = RequestSpec {
            query: &[("uploads", "")],
            headers,
            ..RequestSpec::new(Method::POST, Some(key))
        };
        let (_, body) = self.send(&spec).await?;
        xml::upload_id(&body).ok_or_else(|| RequestError::BadResponse {
            operation: self.operation("CreateMultipartUpload", Some(key)),
            reason: "the answer carries no UploadId".into(),
        })
    }

    /// One CompleteMultipartUpload listing the parts' ETags and, with `checksums`, their
    /// checksums and the object's: the answer's document, for [`complete::complete`] to judge.
    pub async fn complete_once_checked(
        &self,
        key: &str,
        upload_id: &str,
        etags: &[String],
        checksums: Option<&Completion>,
    ) -> Result<Vec<u8>, RequestError> {
        let query = [("uploadId", upload_id)];
        let body = xml::complete_multipart_body_with(
            etags,
            checksums.map(|c| (c.element, c.parts.as_slice())),
        );
        let headers = checksums
            .iter()
            .flat_map(|c| c.headers.iter())
            .map(|(name, value)| (HeaderName::from_static(name), value.clone()))
            .collect();
        let spec = RequestSpec {
            query: &query,
            headers,
            body: Bytes::from(body),
            sign_body: true,
            ..RequestSpec::new(Method::POST, Some(key))
        };
        let (_, body) = self.send(&spec).await?;
        Ok(body.to_vec())
    }

    /// [`complete::complete`] on this client with the upload's checksums, from a thread
    /// outside `runtime` (it blocks): `size` is the object's, `etags` the parts' in order.
    pub fn complete_upload_checked(
        &self,
        runtime: &tokio::runtime::Handle,
        key: &str,
        upload_id: &str,
        etags: &[String],
        size: u64,
        checksums: Option<&Completion>,
    ) -> (Result<complete::Completed, RequestError>, Vec<&'static str>) {
        let operation = self.operation("CompleteMultipartUpload", Some(key));
        let policy = self.policy();
        complete::complete(
            policy.retries,
            &operation,
            size,
            etags,
            || runtime.block_on(self.complete_once_checked(key, upload_id, etags, checksums)),
            || runtime.block_on(self.head_object(key)),
            |n, e| std::thread::sleep(policy.delay(n, e.retry_after())),
        )
    }
}
