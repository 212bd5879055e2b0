//! The client's uploads with S3's additional checksums (`--checksum`, `crate::checksum`):
//! CreateMultipartUpload naming the algorithm and the object's checksum type, and
//! CompleteMultipartUpload listing each part's checksum and sending the object's FULL_OBJECT
//! checksum as a header. Parts and single PUTs carry theirs in their own heads (the engines
//! add the header; a signed payload's SHA-256 goes in the signature, `s3::sign`). Restores ask
//! a HEAD for the object's checksum ([`CHECKSUM_MODE`]) and compare the CRC of the bytes they
//! read with it ([`RestoreCheck`]), the same on both engines.

use bytes::Bytes;
use http::Method;
use http::header::{CONTENT_TYPE, HeaderName};

use super::client::{Client, RequestSpec};
use super::{RequestError, complete, xml};
use crate::checksum::{Algorithm, Completion};

/// The header that asks a HEAD (or GET) for the object's checksum.
pub const CHECKSUM_MODE: (&str, &str) = ("x-amz-checksum-mode", "ENABLED");

/// A restore's check of one object: the checksum the store returned to a HEAD, and the CRCs
/// of the blocks read, each block's ranges folded in as they arrive. Both engines keep one.
#[derive(Debug)]
pub struct RestoreCheck {
    stored: crate::checksum::StoredChecksum,
    crcs: crate::checksum::BlockCrcs,
}

impl RestoreCheck {
    /// The check of an object read as `blocks` blocks; `None` when `stored` cannot be checked
    /// from blocks (none returned, or a COMPOSITE one).
    pub fn new(
        stored: Option<crate::checksum::StoredChecksum>,
        blocks: usize,
    ) -> Option<RestoreCheck> {
        let stored = stored.filter(|s| s.checkable())?;
        let crcs = crate::checksum::BlockCrcs::new(stored.algorithm, blocks)?;
        Some(RestoreCheck { stored, crcs })
    }

    pub fn algorithm(&self) -> Algorithm {
        self.stored.algorithm
    }

    /// The next bytes of block `block`.
    pub fn update(&mut self, block: usize, bytes: &[u8]) {
        self.crcs.update(block, bytes);
    }

    /// The CRC of the next `len` bytes of block `block`, computed elsewhere.
    pub fn push(&mut self, block: usize, crc: u64, len: u64) {
        self.crcs.push(block, crc, len);
    }

    /// Every block read: their CRCs combined against the store's. A difference is a corrupt
    /// read of `operation`, naming both.
    pub fn finish(self, operation: &str) -> Result<(), RequestError> {
        let read = self.crcs.value();
        if self.stored.value == read {
            return Ok(());
        }
        Err(RequestError::Corrupt {
            operation: operation.to_string(),
            reason: format!(
                "the {} of the bytes read ({read}) is not the object's ({}, from a HEAD): the \
                 store returned other bytes than it holds",
                self.stored.algorithm.name(),
                self.stored.value
            ),
        })
    }
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
