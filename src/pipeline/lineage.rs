//! A window's OpenLineage events (see `lineage`): START before its stages (with the sources as
//! the runner pinned them), COMPLETE or FAIL once its report is final; and what its commit
//! wrote, for them. Nothing here can fail or hold up a window beyond the lineage timeout.

use crate::pipeline::runner::Runner;
use crate::pipeline::stages::Ready;
use crate::report::record::{LineageOutcome, Report};

impl Runner {
    /// The window of `report` begins: its START event.
    pub(super) async fn lineage_start(&self, report: &mut Report) {
        let Some(l) = &self.lineage else { return };
        report.io.sources = self.source_versions().to_vec();
        l.window_started(report).await;
    }

    /// The window of `report` ended (its report is final but for the run log): its COMPLETE
    /// or FAIL event.
    pub(super) async fn lineage_end(&self, report: &mut Report) {
        if let Some(l) = &self.lineage {
            l.window_ended(report).await;
        }
    }

    /// What the window's commit adds to the table, for its lineage events.
    pub(super) fn note_written(ready: &Ready, report: &mut Report) {
        let adds = &ready.reconciled.window.staged.adds;
        report.io.files_written = adds.len() as u64;
        report.io.bytes_written = adds.iter().map(|a| a.size.max(0) as u64).sum();
    }

    /// An invocation running many of the task's windows (`what`: `backfill`) begins: its own
    /// OpenLineage run, which the windows run under from now on. `None` when lineage is off.
    pub async fn lineage_invocation_started(&self, what: &str) -> Option<LineageOutcome> {
        Some(self.lineage.as_ref()?.invocation_started(what).await)
    }

    /// The invocation ended; `error`: why it failed.
    pub async fn lineage_invocation_ended(&self, error: Option<&str>) -> Option<LineageOutcome> {
        Some(self.lineage.as_ref()?.invocation_ended(error).await)
    }
}
