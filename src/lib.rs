//! ringload: a load generator for AI-training storage.
//!
//! The data path, one owner per stage: workload YAML + overrides ([`config`]) → validated
//! [`settings`] → a resolved, printable [`plan::Plan`] (files and row-group ranges from
//! [`catalog`], the memory budget from [`budget`]) → rank threads ([`run`]) → the step loop
//! ([`rank`]) → the reader window and an engine ([`engine`]) → [`metrics`] → [`summary`] →
//! [`report`]. [`sweep`] runs a grid of such runs as child processes and writes the study's
//! tables, plots and report; [`compare`] sets results (ringload's and DLIO's) side by side.
//! [`datagen`] writes the Flux-schema Parquet datasets the runs read; [`server`] is the
//! embedded S3 server. ARCHITECTURE.md has the map and the arrows that must never exist.
//!
//! `unsafe` code is in three files only: `engine/uring/ring.rs`, `engine/uring/pool.rs` and
//! `server/mmap.rs`; the crate denies it everywhere else.

pub mod affinity;
pub mod budget;
pub mod catalog;
pub mod checkpoint;
pub mod checksum;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod compare;
pub mod config;
pub mod content;
pub mod datagen;
pub mod dataset;
pub mod engine;
pub mod exit;
pub mod extents;
pub mod files;
#[cfg(test)]
mod fuzz;
pub mod loader;
pub mod metrics;
pub mod mlperf;
pub mod plan;
pub mod ranged;
pub mod rank;
pub mod redact;
pub mod report;
pub mod results;
pub mod run;
pub mod s3;
pub mod schema;
pub mod serve;
pub mod server;
pub mod settings;
pub mod setup;
pub mod signals;
pub mod sizing;
pub mod summary;
pub mod sweep;
pub mod timeseries;
pub mod units;
pub mod verify;
pub mod workload;
