//! S3 errors as the server answers them: a status, S3's error code, a message that names what
//! was wrong, and the `<Error>` XML document S3 sends (no body for HEAD).

use http::StatusCode;

use crate::s3::xml::XmlWriter;

/// One S3 error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Error {
    pub status: StatusCode,
    /// S3's code, e.g. `NoSuchKey`.
    pub code: &'static str,
    pub message: String,
    /// Extra elements S3 adds for this code, e.g. `Key`, `BucketName`, `CanonicalRequest`.
    pub details: Vec<(&'static str, String)>,
}

impl S3Error {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> S3Error {
        S3Error {
            status,
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    pub fn with(mut self, name: &'static str, value: impl Into<String>) -> S3Error {
        self.details.push((name, value.into()));
        self
    }

    pub fn no_such_bucket(bucket: &str) -> S3Error {
        S3Error::new(
            StatusCode::NOT_FOUND,
            "NoSuchBucket",
            "The specified bucket does not exist",
        )
        .with("BucketName", bucket)
    }

    pub fn no_such_key(key: &str) -> S3Error {
        S3Error::new(
            StatusCode::NOT_FOUND,
            "NoSuchKey",
            "The specified key does not exist.",
        )
        .with("Key", key)
    }

    pub fn no_such_upload(upload_id: &str) -> S3Error {
        S3Error::new(
            StatusCode::NOT_FOUND,
            "NoSuchUpload",
            "The specified multipart upload does not exist; it may have been completed or aborted.",
        )
        .with("UploadId", upload_id)
    }

    pub fn invalid_argument(message: impl Into<String>) -> S3Error {
        S3Error::new(StatusCode::BAD_REQUEST, "InvalidArgument", message)
    }

    pub fn invalid_request(message: impl Into<String>) -> S3Error {
        S3Error::new(StatusCode::BAD_REQUEST, "InvalidRequest", message)
    }

    pub fn not_implemented(message: impl Into<String>) -> S3Error {
        S3Error::new(StatusCode::NOT_IMPLEMENTED, "NotImplemented", message)
    }

    pub fn access_denied(message: impl Into<String>) -> S3Error {
        S3Error::new(StatusCode::FORBIDDEN, "AccessDenied", message)
    }

    /// A request body that is not the XML the operation expects; `reason` says what is wrong.
    pub fn malformed_xml(reason: &str) -> S3Error {
        S3Error::new(
            StatusCode::BAD_REQUEST,
            "MalformedXML",
            format!("The XML you provided was not well-formed or did not validate: {reason}"),
        )
    }

    pub fn internal(message: impl Into<String>) -> S3Error {
        S3Error::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message)
    }

    pub fn read_only() -> S3Error {
        S3Error::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "The virtual dataset is read-only; serve a directory (--dir) to write objects.",
        )
    }

    /// The `<Error>` document.
    pub fn to_xml(&self, resource: &str, request_id: &str) -> String {
        let mut x = XmlWriter::document();
        x.open("Error");
        x.element("Code", self.code);
        x.element("Message", &self.message);
        for (name, value) in &self.details {
            x.element(name, value);
        }
        x.element("Resource", resource);
        x.element("RequestId", request_id);
        x.close("Error");
        x.finish()
    }
}

impl std::fmt::Display for S3Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

/// Maps a filesystem error of the directory backend to an S3 error.
pub fn from_io(err: &std::io::Error, what: &str) -> S3Error {
    match err.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => S3Error::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "InsufficientStorage",
            format!("{what}: the server's disk is full ({err})"),
        ),
        std::io::ErrorKind::PermissionDenied => {
            S3Error::access_denied(format!("{what}: the server may not do this ({err})"))
        }
        _ => S3Error::internal(format!("{what}: {err}")),
    }
}
