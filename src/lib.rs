//! ringload: a load generator for AI-training storage.
//!
//! The data path, one owner per stage: workload YAML + overrides ([`config`]) → validated
//! settings and a resolved, printable [`plan::Plan`] (files and row-group ranges from
//! [`catalog`], memory limits from [`budget`]) → rank threads → engine → buffer pool → metrics →
//! [`report`]. [`datagen`] writes the Flux-schema Parquet datasets the runs read.

pub mod affinity;
pub mod budget;
pub mod catalog;
pub mod cli;
pub mod commands;
pub mod config;
pub mod datagen;
pub mod engine;
pub mod exit;
pub mod metrics;
pub mod plan;
pub mod rank;
pub mod report;
pub mod run;
pub mod s3;
pub mod schema;
pub mod server;
pub mod settings;
pub mod summary;
pub mod units;
