//! What every session sets up before anything runs, one module below them all (`run`'s and
//! `sweep`'s sessions import it; it imports neither):
//!
//! - [`store`]: the target the flags, the environment or the workload name, else the embedded
//!   server with the workload's virtual dataset (or a checkpoint's sink); the bucket checked
//!   and its catalog read; `--output` checked writable.
//! - [`engine`]: the one engine choice — `--engine`, else io_uring where this kernel, its
//!   memory-lock limit and the run's requests allow it, else the baseline with a note.

pub mod engine;
pub mod store;
