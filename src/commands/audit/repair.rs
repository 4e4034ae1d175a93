//! `repair`: audit a range, re-run exactly its damaged windows (each atomic), audit again. A
//! merge-mode window holding a key more than once is not re-run: a MERGE updates every copy
//! of a key and removes none.

use super::{WindowAudit, audit, in_place};
use crate::error::{Error, Result};
use crate::pipeline::runner::Runner;
use crate::report::record::Report;
use crate::task::Task;
use crate::task::project::Project;
use crate::task::window::Window;

/// Whether `task` is merge mode and its window holds `dup_keys` keys more than once: a
/// re-run (a MERGE, which updates every copy of a key) cannot repair that.
pub(super) fn unmergeable(task: &Task, dup_keys: u64) -> bool {
    task.mode == crate::task::Mode::Merge && dup_keys > 0
}

/// The report of a merge window `repair` does not re-run: its duplicate keys would stay.
fn not_repaired(task: &Task, w: &Window, a: &WindowAudit) -> Report {
    let mut r = Report::new(task, w, &uuid::Uuid::new_v4().to_string());
    r.fail(&Error::divergence(format!(
        "the window holds {} key(s) more than once ({} extra row(s)), which a merge cannot repair: it updates every copy of a key and removes none; nothing was run — delete the extra copies (another tool's DELETE of the rows another writer added), or restore the window to a version before they appeared, then repair again",
        a.duplicate_keys, a.duplicate_rows
    )));
    r
}

/// Audit, re-run the damaged windows, audit again. Returns (before, reports, after).
pub async fn repair(
    project: &Project,
    task: &Task,
    from: &Window,
    to: &Window,
    parallel: usize,
    with_reconcile: bool,
) -> Result<(Vec<WindowAudit>, Vec<Report>, Vec<WindowAudit>)> {
    let runner = std::sync::Arc::new(Runner::new_local(project, task).await?);
    let before = audit(&runner, from, to, with_reconcile).await?;
    let (mut damaged, mut refused) = (Vec::new(), Vec::new());
    for (w, a) in Window::range(from, to)?.into_iter().zip(&before) {
        match (a.status, unmergeable(task, a.duplicate_keys)) {
            ("ok", _) => {}
            // Not audited (its source side is invalid input): a re-run would fail alike.
            ("failed", _) => {
                let mut r = Report::new(task, &w, &uuid::Uuid::new_v4().to_string());
                r.fail(&Error::input(a.problems.join("; ")));
                refused.push(r);
            }
            (_, true) => refused.push(not_repaired(task, &w, a)),
            _ => damaged.push(w),
        }
    }
    let opts = crate::commands::backfill::Options {
        parallel,
        missing: false,
        stale: false,
        shard: None,
        progress: false,
    };
    let in_place = !in_place::partitioned_by_window(&runner.table().await?, &task.partition_by)?;
    let mut reports = if damaged.is_empty() {
        Vec::new()
    } else if in_place {
        // Not partitioned by the window column: each window replaced by its data (see
        // `in_place`).
        in_place::replace(&runner, &damaged).await
    } else {
        let _ = runner.lineage_invocation_started("repair").await;
        let reports = crate::commands::backfill::run(runner.clone(), damaged, &opts, |_| {}).await;
        let failed = reports.iter().filter(|r| r.exit_code.is_some()).count();
        let why = format!("{failed} of {} repaired windows failed", reports.len());
        let _ = runner
            .lineage_invocation_ended((failed > 0).then_some(why.as_str()))
            .await;
        reports
    };
    reports.append(&mut refused);
    runner.refresh().await?;
    let after = audit(&runner, from, to, with_reconcile).await?;
    Ok((before, reports, after))
}
