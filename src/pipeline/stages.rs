//! The typed values one window passes through (see `window` for the chain):
//! [`WindowPlan`] → [`StagedWindow`] → [`Reconciled`] → [`Committed`].

use std::sync::Arc;

use datafusion::prelude::SessionContext;
use deltalake::DeltaTable;
use object_store::ObjectStore;

use crate::accel::prepared::WindowPlans;
use crate::error::Error;
use crate::pipeline::checks::SourceSide;
use crate::pipeline::execute::Staged;
use crate::report::record::Check;
use crate::report::record::RunRecord;
use crate::task::plan::Planned;
use crate::task::range::WindowRange;

/// Stage 1: the window planned, in the session it executes in, against the table as known.
pub struct WindowPlan {
    pub planned: Planned,
    /// The window's range, built once when it was planned (`Planned::range`): its bounds,
    /// partition range and replaceWhere predicate for the stages after this one.
    pub range: WindowRange,
    /// The prepared plans bound to this window (`None`: planned on its own).
    pub plans: Option<WindowPlans>,
    pub session: SessionContext,
    /// The target table as last loaded (for the schema check and writer settings).
    pub table: DeltaTable,
    /// How the output goes into the table's columns (`[target] on_schema_change`).
    pub columns: crate::delta::table::SchemaPlan,
}

/// Stage 2: the window's rows written as uncommitted files, and the independent source side
/// of its checks.
pub struct StagedWindow {
    pub staged: Staged,
    pub source_side: SourceSide,
    /// Where the files were written: the table's store (overwrite) or a temp dir (merge).
    pub store: Arc<dyn ObjectStore>,
    pub temp: Option<tempfile::TempDir>,
}

/// Stage 3: every check before the commit passed (or only warned).
pub struct Reconciled {
    pub window: StagedWindow,
    pub checks: Vec<Check>,
    /// A check failed with `on_mismatch = "warn"`: published, reported as a mismatch.
    pub warn: bool,
}

/// A window through stages 1–3, ready to commit: its plan, its reconciled files and the run
/// record its commit carries.
pub struct Ready {
    pub plan: WindowPlan,
    pub reconciled: Reconciled,
    pub record: RunRecord,
}

/// Stage 4: the commit landed, and what reading it back found.
pub struct Committed {
    pub version: i64,
    /// Checks made after the commit, before the read-back (a merge's counts).
    pub checks: Vec<Check>,
    /// Rows the window should hold after the commit, and rows the snapshot says it holds.
    pub expected_rows: u64,
    pub committed_rows: u64,
}

/// A commit that landed before something failed: its version, and the checks made after it.
pub struct Landed {
    pub version: i64,
    pub checks: Vec<Check>,
}

/// A failure of the commit stage, with the commit if it landed.
pub type CommitError = (Error, Option<Landed>);
