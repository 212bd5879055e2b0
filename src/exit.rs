//! Exit codes, as the README documents them, and the mapping from errors to codes.

use crate::catalog::CatalogError;
use crate::config::ConfigError;
use crate::datagen::GenerateError;
use crate::plan::PlanError;
use crate::s3::RequestError;
use crate::server::ServerError;
use crate::server::virtual_dataset::VirtualError;

/// A usage or environment error found by a command itself (clap catches the rest).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The command did what it was asked (for `run`: and met the AU target).
pub const OK: u8 = 0;
/// The run finished and missed its AU target.
pub const AU_MISSED: u8 = 1;
/// Usage, configuration or environment error: nothing ran, or nothing was written.
pub const USAGE: u8 = 2;
/// The run (or generation) started and failed.
pub const FAILED: u8 = 3;

/// The exit code for an error: the first cause in its chain that knows its code decides.
pub fn code_for(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.is::<crate::commands::RunFailed>() {
            return FAILED;
        }
        if let Some(e) = cause.downcast_ref::<CatalogError>() {
            return e.exit_code();
        }
        if let Some(e) = cause.downcast_ref::<RequestError>() {
            return e.exit_code();
        }
        if cause.is::<ConfigError>()
            || cause.is::<PlanError>()
            || cause.is::<UsageError>()
            || cause.is::<VirtualError>()
        {
            return USAGE;
        }
        if let Some(e) = cause.downcast_ref::<ServerError>() {
            return match e {
                ServerError::Bind { .. } => USAGE,
                ServerError::Runtime(_) => FAILED,
            };
        }
        if let Some(e) = cause.downcast_ref::<GenerateError>() {
            return e.exit_code();
        }
    }
    FAILED
}

/// The error and its causes on one line.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for (i, cause) in err.chain().enumerate() {
        let s = cause.to_string();
        // thiserror's `#[error(transparent)]` and `#[source]` chains repeat the inner text.
        if i > 0 && text.contains(&s) {
            continue;
        }
        if i > 0 {
            text.push_str(": ");
        }
        text.push_str(&s);
    }
    text.replace('\n', " ")
}
