//! idemlake: idempotent, window-at-a-time batch pipelines on Delta Lake.
//!
//! The source tree is layered; a module imports only from layers below it (a test in
//! `tests/it/layers.rs` holds the tree to that):
//!
//! | layer | job |
//! |---|---|
//! | [`cli`] | parse flags, resolve them into a [`config::Config`], dispatch, print |
//! | [`commands`] | run, backfill, verify, audit/repair, status, explain/validate, gen-tpch |
//! | [`pipeline`] | one window's stages: plan → stage → reconcile → commit → record |
//! | [`engine`] | where queries execute: this process, or a Ballista cluster (`--features ballista`) |
//! | [`accel`] | what only makes windows cheaper: shared scans, prepared/derived plans, memory maps |
//! | [`delta`] | the target table: open/create, overwrite commit, merge, read-back, upkeep, file map |
//! | [`lineage`] | OpenLineage run events per window: building them, and their transports |
//! | [`report`] | run records, the run log, alerts, the status picture, output rendering |
//! | [`storage`] | object stores per location |
//! | [`task`] | what a task *is*: spec, window and grain, project, lint, logical plan |
//! | [`session`] | the one DataFusion session builder, with each route's differences |
//! | [`config`], [`error`], [`fault`] | the resolved configuration, error kinds, test fault injection |

pub mod accel;
pub mod cli;
pub mod commands;
pub mod config;
pub mod delta;
pub mod engine;
pub mod error;
pub mod fault;
pub mod lineage;
pub mod pipeline;
pub mod report;
pub mod session;
pub mod storage;
pub mod task;

pub use error::{Error, ErrorKind, Result};
