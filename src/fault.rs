//! Fault injection for tests (`IDEMLAKE_TEST_FAULT`), documented in CONTRIBUTING.md as a testing aid.
//! Compiled only with the cargo feature `faults` (`make test` and `.ci/run` turn it on): without
//! it every hook below is an empty inline function the optimiser removes, and a set
//! `IDEMLAKE_TEST_FAULT` is refused (exit 2, see `config`) rather than silently ignored.
//!
//! - `batch:N` fails after N streamed batches;
//! - `before-commit` fails after every file is written, just before the commit;
//! - `abort-before-commit` kills the process there, as `kill -9` would;
//! - `lose-commit-response` lets the first Delta commit reach storage but reports an error, as
//!   if the response to the PUT had been lost (tests exactly-once publication);
//! - `after-commit` fails right after the commit landed (the report must say published);
//! - `merge-error-after-commit` makes a merge whose commit landed return an error, as
//!   delta-rs does when its post-commit steps fail (the run must find its commit).
//!
//! - `pause-before-inputs-check:MS` sleeps MS ms right before a window's inputs are checked
//!   (after its checks, before its commit), printing `idemlake: paused at before-inputs-check`;
//!   `pause-before-pins:MS` before a window lists the files it reaches, and
//!   `pause-before-source-checks:MS` before the checks compute a window's source side
//!   (after its files were pinned), alike.
//!
//! Mutations of the accelerations, to prove the independent checks catch their bugs:
//! - `slice-drop-row`: every shared-scan slice loses its last row;
//! - `slice-move-row`: every slice starts one row late and ends one row late (a row of each
//!   window moves to the previous window's slice);
//! - `derived-keep-literal`: physical plans derived from the template keep the template's
//!   literals (after the first derived plan was checked);
//! - `skip-remove`: the file map forgets one file of each window it replaces.
//! - `partition-shift`: the published path's window→partition mapping (`delta::partition`)
//!   is one day off (one hour for timestamps): a window's range and each partition value a
//!   commit serialises are keyed one day later, a loaded snapshot's typed values are not —
//!   so the file map replaces the next day's files instead of the window's own.
//!
//! Mutations of a window's staged output, whatever the task's shape (the default
//! independent check must catch them):
//! - `output-drop-row`: the first batch a window stages loses its last row;
//! - `output-repeat-row`: the first batch a window stages has its last row replaced by a
//!   copy of its first (as many rows, other content).
//! - `staged-file-shrunk`: right before the commit, after every check, the window's first
//!   staged file is rewritten holding only its first row (same path, same statistics in its
//!   add): only a read-back that reads the committed files catches it.
//!
//! A source that keeps receiving rows:
//! - `pg-insert-before-scan`: right before each PostgreSQL scan sends its query, the SQL in
//!   `IDEMLAKE_TEST_PG_INSERT` is run on a connection of its own and committed (a row landing
//!   between the run's reads of the window).
//!
//! Without the variable every hook is a no-op.

#[cfg(feature = "faults")]
mod on;
#[cfg(feature = "faults")]
pub use on::*;

#[cfg(not(feature = "faults"))]
pub use off::*;

/// The hooks of a build without the `faults` feature: nothing happens.
#[cfg(not(feature = "faults"))]
mod off {
    use std::sync::Arc;

    use object_store::ObjectStore;

    use crate::error::Result;

    /// Never fails.
    #[inline(always)]
    pub fn hit(_point: &str, _batches: Option<u64>) -> Result<()> {
        Ok(())
    }

    /// Never pauses.
    #[inline(always)]
    pub async fn pause(_point: &str) {}

    /// No mutation is ever configured.
    #[inline(always)]
    pub const fn mutation(_name: &str) -> bool {
        false
    }

    /// `batch`, untouched.
    #[inline(always)]
    pub fn corrupt_output(
        batch: arrow::array::RecordBatch,
        _first: bool,
    ) -> Result<arrow::array::RecordBatch> {
        Ok(batch)
    }

    /// Leaves the staged files alone.
    #[inline(always)]
    pub async fn shrink_staged(_store: &Arc<dyn ObjectStore>, _paths: &[String]) -> Result<()> {
        Ok(())
    }

    /// `store`, unwrapped.
    #[inline(always)]
    pub fn wrap_store(store: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        store
    }

    /// Never.
    #[inline(always)]
    pub const fn wants_store_wrapper() -> bool {
        false
    }
}
