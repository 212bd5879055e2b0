//! A multipart upload's completion on the ring: CompleteMultipartUpload with the parts' ETags
//! and, under `--checksum`, their checksums and the object's FULL_OBJECT checksum
//! (`checksum::Completion`); it counts only as `s3::complete` says (a parsed result, or a HEAD
//! that finds the object).

use super::{Kind, ObjectSpec, Outcome, RankError, Request, RequestError, RingCheckpoint};

impl RingCheckpoint {
    /// The upload's parts and its completion, after its creation.
    pub(super) fn multipart(
        &mut self,
        object: &ObjectSpec,
        upload_id: &str,
    ) -> Result<(), RankError> {
        let (etags, digests) = self.upload_parts(object, upload_id)?;
        let path = self.path(&object.key);
        let mut request = Request::new(
            Kind::Complete,
            &object.key,
            &path,
            &[("uploadId", upload_id)],
        );
        let checksums = self.shape.checksum.algorithm().map(|algorithm| {
            let parts: Vec<_> = digests
                .iter()
                .zip(self.shape.parts(object.bytes))
                .filter_map(|(d, (_, range))| Some(((*d)?, range.end - range.start)))
                .collect();
            crate::checksum::Completion::of(algorithm, &parts)
        });
        request.inline_body = crate::s3::xml::complete_multipart_body_with(
            &etags,
            checksums.as_ref().map(|c| (c.element, c.parts.as_slice())),
        );
        request
            .headers
            .extend(checksums.into_iter().flat_map(|c| c.headers));
        let what = request.operation(&self.engine.client, self.parts);
        let head = Request::new(Kind::Head, &object.key, &path, &[]);
        let policy = self.policy;
        // The rank's own failure (a stop, a bug) ends the completion where it happens.
        let mut rank_error = None;
        let this = std::cell::RefCell::new(&mut *self);
        let (result, causes) = crate::s3::complete::complete(
            policy.retries,
            &what,
            object.bytes,
            &etags,
            || match this.borrow_mut().one(0, request.clone()) {
                Ok((_, Outcome::Answered { document, .. })) => Ok(document),
                Ok((_, Outcome::Failed(error))) => Err(error),
                Ok((_, Outcome::Arrived)) => Err(RequestError::BadResponse {
                    operation: what.clone(),
                    reason: "a body (a bug)".into(),
                }),
                Err(e) => {
                    let error = RequestError::Transport {
                        operation: what.clone(),
                        reason: e.to_string(),
                    };
                    rank_error = Some(e);
                    Err(error)
                }
            },
            || match this.borrow_mut().one(0, head.clone()) {
                Ok((_, Outcome::Answered { etag, length, .. })) => {
                    Ok(Some(crate::s3::complete::HeadAnswer {
                        size: length.unwrap_or(0),
                        etag,
                    }))
                }
                Ok((_, Outcome::Failed(RequestError::Status { status: 404, .. }))) => Ok(None),
                Ok((_, Outcome::Failed(error))) => Err(error),
                Ok((_, Outcome::Arrived)) | Err(_) => Ok(None),
            },
            |n, e| std::thread::sleep(policy.delay(n, e.retry_after())),
        );
        let write = &mut self.stats.write;
        write.retries += causes.len() as u64;
        for cause in causes {
            *write.retries_by_cause.entry(cause).or_default() += 1;
        }
        if let Some(error) = rank_error {
            return Err(error);
        }
        match result {
            Ok(crate::s3::complete::Completed::Answered { checksum }) => {
                self.stats.write.sent.complete += 1;
                if !checksum && self.shape.checksum.algorithm().is_some() {
                    self.stats.write.checksum_unconfirmed += 1;
                }
                Ok(())
            }
            Ok(crate::s3::complete::Completed::SettledByHead) => {
                // The completion reached the store, its answer lost; the HEAD is counted.
                write.sent.complete += 1;
                write.settled_by_head += 1;
                Ok(())
            }
            Err(error) => Err(RankError::Io(error.into())),
        }
    }
}
