//! Exit codes, as the README documents them. A leaf: it imports nothing from the crate. Each
//! layer's error type says which class it belongs to through [`ExitClass`]; the mapping from an
//! error chain to a code happens at the top ([`crate::commands::exit_code`]).

/// The command did what it was asked (for `run`: and met the AU target).
pub const OK: u8 = 0;
/// The run finished and missed its AU target.
pub const AU_MISSED: u8 = 1;
/// Usage, configuration or environment error: nothing ran, or nothing was written.
pub const USAGE: u8 = 2;
/// The run (or generation) started and failed.
pub const FAILED: u8 = 3;

/// An error that knows its exit code: [`USAGE`] when the input or the environment is wrong,
/// [`FAILED`] when work started and failed.
pub trait ExitClass {
    fn exit_code(&self) -> u8;
}

/// A usage or environment error found by a command itself (clap catches the rest).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl ExitClass for UsageError {
    fn exit_code(&self) -> u8 {
        USAGE
    }
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
