//! What a task *is*: its spec file, its execution windows, the project it belongs to, the
//! determinism lint and its logical plan. Imports only `error`, `config` and external crates.

pub mod alert;
pub mod arrival;
pub mod checks;
pub mod engine;
pub mod lint;
pub mod names;
pub mod overlap;
pub mod plan;
pub mod project;
pub mod project_file;
pub mod range;
pub mod spec;
pub mod tzdb;
pub mod window;

pub use spec::*;
