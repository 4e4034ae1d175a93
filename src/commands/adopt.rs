//! `adopt`: take over a Delta table another job wrote — appended to, unpartitioned or
//! partitioned by another column — by rewriting it partitioned by the task's window column,
//! every row kept, in one commit.
//!
//! idemlake replaces a window by replacing its partition, so it needs the table partitioned by
//! exactly the window column. A table that a nightly job appended to usually is not. `adopt`:
//! 1. reads the table at its current version (delta-rs's table provider) and writes every row
//!    again, partitioned by the window column, in one overwrite commit (delta-rs's writer,
//!    `schemaMode = overwrite` with the same columns: the only change is the partitioning);
//!    if another writer committed meanwhile, delta-rs's conflict check refuses the commit and
//!    nothing changes;
//! 2. reads it back: the new version is partitioned by the window column and holds the same
//!    rows as the version it was read from, as multisets (`verify`'s diff, over delta-rs's
//!    reader at both versions); a difference is exit 5 (committed, not verified).
//!
//! It removes nothing: duplicates a failed job left stay until `audit` finds them and `repair`
//! replaces their windows from the source (only those windows: a window whose source is gone,
//! say by a retention policy, is for the user to decide on, and `adopt` cannot know which).
//! The cost: the whole table read four times (a census of its rows and windows, the rewrite,
//! both versions in the read-back) and written once. Readers see the old table or the new one
//! (time travel to the old versions keeps working until `vacuum`). The commit's files are
//! `dataChange = true`, as any overwrite's: a streaming or change-data-feed reader of the table
//! sees every row removed and added again.

use std::sync::Arc;

use datafusion::prelude::SessionContext;
use deltalake::DeltaTable;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::operations::write::SchemaMode;
use deltalake::protocol::SaveMode;
use serde::Serialize;

use crate::commands::verify::diff;
use crate::delta::partition::PartitionValue;
use crate::delta::table;
use crate::error::{Error, Result};
use crate::task::Task;
use crate::task::project::Project;
use crate::task::window::Window;

/// The commitInfo key of an `adopt` commit: what it did, as JSON.
pub const ADOPT_INFO_KEY: &str = "idemlake.adopt";

/// What `adopt` did.
#[derive(Debug, Clone, Serialize)]
pub struct Adopted {
    pub task: String,
    /// `adopted` (rewritten), or `already` (the table was partitioned by the window column:
    /// nothing written).
    pub status: &'static str,
    /// The table's partition columns before.
    pub partitioned_by_before: Vec<String>,
    pub partitioned_by: Vec<String>,
    /// The version read, and the version the rewrite committed (equal when nothing was written).
    pub read_version: u64,
    pub table_version: u64,
    pub files_before: usize,
    pub files_after: usize,
    pub rows: u64,
    /// Rows whose window column is NULL: kept, in no window.
    pub rows_in_no_window: u64,
    /// The first and last windows the table holds rows of.
    pub first_window: Option<String>,
    pub last_window: Option<String>,
}

/// A plain session that reads `table`'s storage.
fn session_for(table: &DeltaTable) -> Result<SessionContext> {
    let ctx = crate::session::build(crate::session::Profile::Runner)?;
    table.update_datafusion_session(&ctx.state())?;
    Ok(ctx)
}

/// Rows, rows with a NULL window column, and the first and last windows of `table`.
async fn census(
    table: &DeltaTable,
    task: &Task,
) -> Result<(u64, u64, Option<Window>, Option<Window>)> {
    let ctx = session_for(table)?;
    ctx.register_table("t", table.table_provider().await?)?;
    let c = crate::task::checks::quote(&task.partition_by);
    let batches = ctx
        .sql(&format!(
            "SELECT count(*), count(*) - count({c}), min({c}), max({c}) FROM t"
        ))
        .await?
        .collect()
        .await?;
    let b = &batches[0];
    let at = |i: usize| datafusion::common::ScalarValue::try_from_array(b.column(i), 0);
    let count = |i: usize| -> Result<u64> {
        match at(i)? {
            datafusion::common::ScalarValue::Int64(Some(n)) => Ok(n as u64),
            other => Err(Error::runtime(format!("a count of {other:?}"))),
        }
    };
    let window = |i: usize| -> Result<Option<Window>> {
        let v = at(i)?;
        if v.is_null() {
            return Ok(None);
        }
        let p = PartitionValue::from_scalar_value(&v).ok_or_else(|| {
            Error::input(format!(
                "the table's column `{}` is {}, not a date or a timestamp: it cannot be the window column of task {}",
                task.partition_by,
                v.data_type(),
                task.name
            ))
        })?;
        Ok(Some(p.window(task.grain, &task.timezone)?))
    };
    Ok((count(0)?, count(1)?, window(2)?, window(3)?))
}

/// The table holds the task's window column, of the window's type: one partition per window
/// value, a DATE for day, week and month tasks, a TIMESTAMP for hour tasks (a day task over a
/// raw timestamp would make a partition per row).
fn window_column(schema: &arrow::datatypes::Schema, task: &Task, url: &url::Url) -> Result<()> {
    if let Ok(field) = schema.field_with_name(&task.partition_by) {
        let fits = match task.grain.uses_dates() {
            true => matches!(field.data_type(), arrow::datatypes::DataType::Date32),
            false => matches!(field.data_type(), arrow::datatypes::DataType::Timestamp(..)),
        };
        if !fits {
            return Err(Error::input(format!(
                "the table's column `{}` is {}, but task {}'s window column must be a {} for {} windows: add a column holding each row's window (its {}) and name it in [target] partition_by",
                task.partition_by,
                field.data_type(),
                task.name,
                if task.grain.uses_dates() {
                    "DATE"
                } else {
                    "TIMESTAMP"
                },
                task.grain,
                if task.grain.uses_dates() {
                    "date"
                } else {
                    "hour, as a timestamp"
                },
            )));
        }
    } else {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        return Err(Error::input(format!(
            "the table at {url} has no column `{}` (task {}'s window column; its columns are {}): add it to the table (the job's window, as a {}) before adopting it",
            task.partition_by,
            task.name,
            names.join(", "),
            match task.grain {
                crate::task::window::Grain::Hour => "timestamp",
                _ => "date",
            }
        )));
    }
    Ok(())
}

/// Rewrite `task`'s table partitioned by its window column (see the module documentation).
pub async fn adopt(project: &Project, task: &Task) -> Result<Adopted> {
    let url = project.table_url(task)?;
    let table = table::open(&url).await?;
    let Some(read_version) = table.version() else {
        return Err(Error::input(format!(
            "there is no table at {url} to adopt: `idemlake run` or `backfill` creates it"
        )));
    };
    let state = table.snapshot()?;
    crate::delta::features::check_writable(state)?;
    let before: Vec<String> = state.metadata().partition_columns().to_vec();
    let schema = state.snapshot().arrow_schema();
    window_column(&schema, task, &url)?;
    let files_before = state.log_data().num_files();
    let (rows, rows_in_no_window, first, last) = census(&table, task).await?;
    let mut out = Adopted {
        task: task.name.clone(),
        status: "already",
        partitioned_by_before: before.clone(),
        partitioned_by: before.clone(),
        read_version,
        table_version: read_version,
        files_before,
        files_after: files_before,
        rows,
        rows_in_no_window,
        first_window: first.as_ref().map(Window::label),
        last_window: last.as_ref().map(Window::label),
    };
    if before == [task.partition_by.clone()] {
        return Ok(out);
    }
    let ctx = session_for(&table)?;
    let input = ctx.read_table(table.table_provider().await?)?;
    let info = serde_json::json!({
        "task": task.name,
        "partitioned_by_before": before,
        "read_version": read_version,
        "rows": rows,
    });
    let adopted = table
        .clone()
        .write(Vec::new())
        .with_input_plan(input.logical_plan().clone())
        .with_session_state(Arc::new(ctx.state()))
        .with_save_mode(SaveMode::Overwrite)
        .with_schema_mode(SchemaMode::Overwrite)
        .with_partition_columns([task.partition_by.clone()])
        .with_commit_properties(
            // Built on the version read, never retried on a newer one: an append by another
            // writer meanwhile would land in no partition (its file was written before the
            // partitioning), so the commit fails instead and nothing changes.
            CommitProperties::default()
                .with_max_retries(0)
                .with_metadata([(ADOPT_INFO_KEY.to_string(), info)]),
        )
        .await
        .map_err(|e| {
            Error::from(e).context(format!(
                "nothing was committed (another writer may have committed after version {read_version}: run adopt again)"
            ))
        })?;
    let version = adopted
        .version()
        .ok_or_else(|| Error::runtime("the adopting commit returned no version".to_string()))?;
    out.status = "adopted";
    out.table_version = version;
    out.partitioned_by = adopted.snapshot()?.metadata().partition_columns().to_vec();
    out.files_after = adopted.snapshot()?.log_data().num_files();
    read_back(&url, task, read_version, version).await.map_err(|e| {
        Error::unverified(format!(
            "version {version} was committed, but its read-back failed: {} (Delta's time travel still reads version {read_version})",
            e.message()
        ))
    })?;
    Ok(out)
}

/// Version `after` is partitioned by the window column and holds the rows version `before`
/// held, as multisets.
async fn read_back(url: &url::Url, task: &Task, before: u64, after: u64) -> Result<()> {
    let old = table::open_at(url, before).await?;
    let new = table::open_at(url, after).await?;
    let parts = new.snapshot()?.metadata().partition_columns().to_vec();
    if parts != [task.partition_by.clone()] {
        return Err(Error::runtime(format!(
            "version {after} is partitioned by [{}], not by `{}`",
            parts.join(", "),
            task.partition_by
        )));
    }
    let ctx = session_for(&new)?;
    ctx.register_table("before", old.table_provider().await?)?;
    ctx.register_table("after", new.table_provider().await?)?;
    let schema = Arc::new(ctx.table("before").await?.schema().as_arrow().clone());
    let d = diff(&ctx, &schema, "before", "after").await?;
    if !d.identical() {
        return Err(Error::runtime(format!(
            "the rows changed: {} before, {} after, {} only before, {} only after",
            d.left_rows, d.right_rows, d.only_left, d.only_right
        )));
    }
    Ok(())
}
