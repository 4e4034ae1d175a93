//! idemlake: idempotent, window-at-a-time batch pipelines on Delta Lake.
//!
//! The modules follow the data flow of one run:
//! [`task`] spec → [`window`] → [`plan`] (+ [`lint`], [`sources`]) → [`execute`] →
//! [`reconcile`] → [`publish`] → [`record`]; [`run`] drives them, [`cli`] is the command line.

pub mod alert;
pub mod audit;
pub mod backfill;
pub mod checks;
pub mod cli;
pub mod error;
pub mod execute;
pub mod explain;
pub mod fault;
pub mod filemap;
pub mod lint;
pub mod mapped;
pub mod picture;
pub mod plan;
pub mod prepared;
pub mod project;
pub mod publish;
pub mod reconcile;
pub mod record;
pub mod reuse;
pub mod run;
pub mod runlog;
pub mod scan;
pub mod session;
pub mod sources;
pub mod stage;
pub mod status;
pub mod storage;
pub mod task;
pub mod tpch;
pub mod verify;
pub mod window;

pub use error::{Error, ErrorKind, Result};
