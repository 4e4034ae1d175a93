//! Everything that only makes windows cheaper: the DataFusion session (memory-mapped or
//! plain), shared scans sliced per window, prepared plans bound per window and physical
//! plans derived by literal substitution. Each has a plain twin: with
//! `IDEMLAKE_ACCELERATE=0` ([`crate::config::Config::accelerate`]) none of them is used, and
//! the independent checks (`pipeline::checks`) never use them.
//!
//! May import `task`, `storage`, `config`, `error`, `fault`; never `pipeline`, `delta` or above.

pub mod mapped;
pub mod planner;
pub mod prepared;
pub mod reuse;
pub mod scan;
pub mod session;
