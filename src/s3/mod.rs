//! The S3 client layer every engine shares.
//!
//! - [`target`]: where the storage is — endpoint, bucket, region, keys — from flags, the AWS
//!   environment and the workload;
//! - [`sign`]: SigV4 with the `aws-sigv4` crate and path-style addressing, used by every request
//!   ringload sends;
//! - [`error`]: S3 error documents decoded into one-line messages with a likely cause, and the
//!   retry and exit-code rules;
//! - [`client`]: the async control-plane client (ListObjectsV2 with paging, ranged GETs,
//!   PutObject, multipart uploads) on hyper's pooled HTTP/1.1 client, with retries;
//! - [`bucket`]: a blocking handle on one bucket for the synchronous parts of the program: the
//!   catalog reads footers through it ([`crate::catalog::ObjectSource`]) and `generate` writes
//!   through it ([`crate::datagen::ObjectSink`], multipart with several parts in flight).
//!
//! Plain HTTP only: this kernel has no kTLS, and a loopback or rack-local store is the target.

pub mod bucket;
pub mod client;
pub mod connect;
pub mod error;
pub mod framing;
pub mod profile;
pub mod sign;
pub mod sigv4;
pub mod target;
pub mod tls;
pub mod xml;

pub use bucket::Bucket;
pub use client::{ByteRange, Client, ObjectMeta, RetryPolicy};
pub use error::{RequestError, Wait};
pub use target::{Addressing, Credentials, Endpoint, Scheme, Target, TargetFlags};
