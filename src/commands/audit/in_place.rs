//! `repair` of a table that is not partitioned by the task's window column (a table another
//! job appended to, not yet adopted): each damaged window is replaced in place, in one
//! delta-rs commit of its own, an overwrite with `replaceWhere` on the window column's data.
//!
//! delta-rs rewrites every file holding a row of the window (writing that file's other rows
//! again) and adds the window's rows, in one commit: readers see the old table or the new one,
//! and a conflicting commit by another writer makes delta-rs refuse it (nothing changes). The
//! cost: every file with a row of the window is read and written again whole. On a table a
//! daily job appended to, each file holds one day, so that is the window's files; on a table
//! compacted across days, each compacted file the window touches.
//!
//! Checked, each window: the task's query computed in the runner's session, its rows counted
//! by the checks' own session (`source_rows`); after the commit the window read back at the
//! new version (`rows_committed`) and the rows outside the window counted before and after
//! (`rows_outside_kept`). A failed check after the commit is exit 5 (published, not
//! verified). `adopt` (one rewrite of the whole table, partitioned by the window column) makes
//! every later window a partition overwrite instead.

use datafusion::common::Column;
use datafusion::prelude::{DataFrame, Expr, SessionContext, col};
use deltalake::DeltaTable;
use deltalake::protocol::SaveMode;

use crate::error::{Error, Result};
use crate::pipeline::runner::Runner;
use crate::report::record::{Check, Report, Status};
use crate::task::range::WindowRange;
use crate::task::window::Window;

/// Whether `table` is partitioned by exactly the task's window column (a new table counts as
/// such: the runner creates it so).
pub fn partitioned_by_window(table: &DeltaTable, partition_by: &str) -> Result<bool> {
    if table.version().is_none() {
        return Ok(true);
    }
    let state = table.snapshot()?;
    let parts = state.metadata().partition_columns();
    Ok(parts.len() == 1 && parts[0] == partition_by)
}

/// Replace `windows` one after the other; a window's failure is its report, and the next
/// window still runs.
pub async fn replace(runner: &Runner, windows: &[Window]) -> Vec<Report> {
    let mut out = Vec::with_capacity(windows.len());
    for w in windows {
        let started = std::time::Instant::now();
        let mut report = Report::new(runner.task(), w, &uuid::Uuid::new_v4().to_string());
        if let Err(e) = replace_one(runner, w, &mut report).await {
            report.fail(&e);
        }
        report.duration_ms = started.elapsed().as_millis() as u64;
        out.push(report);
    }
    out
}

async fn replace_one(runner: &Runner, w: &Window, report: &mut Report) -> Result<()> {
    let task = runner.task();
    let range = WindowRange::of(task, w);
    let column = col(Column::from_name(&task.partition_by));
    let inside = range.filter(column.clone());
    let planned = runner.plan(w).await?;
    let batches = planned.df.collect().await?;
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    // The checks' own count of the task's query for the window, before anything is written.
    let checks = runner.checker().session();
    let source = crate::task::plan::plan_query_window(checks, task, w)
        .await?
        .df
        .count()
        .await? as u64;
    let source_rows = Check::counts("source_rows", source, rows);
    if !source_rows.ok {
        report.reconciliation.push(source_rows);
        return Err(Error::mismatch(format!(
            "source_rows: the checks count {source} rows for the window, the task's query gave {rows}; nothing was written"
        )));
    }
    report.reconciliation.push(source_rows);
    let table = runner.table().await?;
    let outside_before = outside(checks, &table, (&inside, &column)).await?;
    let read_version = table.version().unwrap_or_default();
    let written = table
        .write(batches)
        .with_save_mode(SaveMode::Overwrite)
        .with_replace_where(range.replace_where())
        // Built on the version whose rows outside the window were counted: never retried on
        // a newer one.
        .with_commit_properties(
            deltalake::kernel::transaction::CommitProperties::default().with_max_retries(0),
        )
        .await
        .map_err(|e| {
            Error::from(e).context(format!(
                "nothing was committed (another writer may have committed after version {read_version}: repair again)"
            ))
        })?;
    let version = written
        .version()
        .ok_or_else(|| Error::runtime("the replacing commit returned no version"))?;
    report.published = true;
    report.table_version = Some(version as i64);
    report.rows_written = rows;
    // Read back at the new version, in the checks' session.
    let committed = read(checks, &written)
        .await?
        .filter(inside.clone())?
        .count()
        .await? as u64;
    let outside_after = outside(checks, &written, (&inside, &column)).await?;
    let checks = [
        Check::counts("rows_committed", rows, committed),
        Check::counts("rows_outside_kept", outside_before, outside_after),
    ];
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: {} vs {}", c.check, c.source, c.output))
        .collect();
    report.reconciliation.extend(checks);
    if !failed.is_empty() {
        return Err(Error::unverified(failed.join("; ")));
    }
    report.status = Status::Ok;
    Ok(())
}

/// The rows of `table` outside the window (`inside` negated; a NULL window `column` is
/// outside).
async fn outside(
    ctx: &SessionContext,
    table: &DeltaTable,
    (inside, column): (&Expr, &Expr),
) -> Result<u64> {
    let keep = datafusion::prelude::not(inside.clone()).or(column.clone().is_null());
    Ok(read(ctx, table).await?.filter(keep)?.count().await? as u64)
}

/// `table` at its version, read by delta-rs's table provider in `ctx`.
async fn read(ctx: &SessionContext, table: &DeltaTable) -> Result<DataFrame> {
    table.update_datafusion_session(&ctx.state())?;
    Ok(ctx.read_table(table.table_provider().await?)?)
}
