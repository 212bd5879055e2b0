//! The error of an input `compare` cannot read (exit 2), shared by its readers.

use std::path::PathBuf;

use crate::exit::{self, ExitClass};

/// An input `compare` cannot read.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct CompareError {
    pub path: PathBuf,
    pub reason: String,
}

impl ExitClass for CompareError {
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
}
