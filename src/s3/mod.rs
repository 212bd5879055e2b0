//! The S3 client layer every engine shares.
//!
//! - [`target`]: where the storage is — endpoints, bucket, region, keys, addressing, pins, TLS
//!   trust — from flags, the AWS environment, the AWS profile and the workload;
//! - [`sign`]: SigV4 with the `aws-sigv4` crate, used by every request ringload sends;
//! - [`body`]: a request body of a few frames (an aws-chunked body's header, data and tail);
//! - [`chunked`]: `aws-chunked` bodies (the checksum as a trailer, chunk signatures), one data
//!   chunk per body, framed for both engines;
//! - [`error`]: S3 error documents decoded into one-line messages with a likely cause, and the
//!   retry and exit-code rules;
//! - [`complete`]: when a multipart upload counts as complete (a parsed result, a `200` with an
//!   `<Error>` tried again, a lost answer settled by a HEAD), the same on both engines;
//! - [`client`]: the async control-plane client (ListObjectsV2 with paging, ranged GETs,
//!   PutObject, multipart uploads) on hyper's pooled HTTP/1.1 client, with retries;
//! - [`bucket`]: a blocking handle on one bucket for the synchronous parts of the program: the
//!   catalog reads footers through it ([`crate::catalog::ObjectSource`]) and `generate` writes
//!   through it ([`crate::datagen::ObjectSink`], multipart with several parts in flight);
//! - [`profile`]: the AWS CLI's shared configuration files;
//! - [`tls`]: the rustls client configuration (system roots, `--ca-bundle`, `--insecure`) and
//!   handshake failures worded with their fix;
//! - [`connect`]: hyper's connector: `--resolve` pins, TCP, TLS, each socket watched
//!   ([`framing`]) over one [`stream`].

pub mod body;
pub mod bucket;
pub mod chunked;
pub mod client;
pub mod complete;
pub mod connect;
pub mod error;
pub mod framing;
pub mod integrity;
pub mod profile;
pub mod sign;
pub mod sigv4;
pub mod stream;
pub mod target;
pub mod tls;
pub mod uploads;
pub mod xml;

pub use bucket::Bucket;
pub use client::{ByteRange, Client, ObjectMeta, RetryPolicy};
pub use error::{RequestError, Wait};
pub use target::{Addressing, Credentials, Endpoint, Scheme, Target, TargetFlags};
