//! `optimize`: compact each window's files into as few as the target size allows, one commit
//! per window, never changing a row.
//!
//! Windows published by merges (or re-published with many small staged files) accumulate
//! files. For every window of the range where some partition value holds at least
//! `max(min_files, 2)` live files (a week over day partitions always spans several values,
//! each holding one file once compacted: counting the window's files would compact it again
//! on every call):
//! 1. its rows are read from the current snapshot (delta-rs's table provider, filtered to the
//!    window's partitions) and written as new files (delta-rs's writer, 128 MiB target);
//! 2. one commit removes the old files and adds the new ones, both with `dataChange=false`,
//!    as an `OPTIMIZE` operation built on the snapshot the rows were read from: if another
//!    writer replaced the window meanwhile, delta-rs's conflict check refuses the commit
//!    (the window is reported `conflict`, the new files deleted, nothing lost);
//! 3. the read-back: the window at the new version must hold exactly the new files, and its
//!    rows must equal the old version's as multisets (`verify`'s diff, over delta-rs's reader
//!    at both versions). A difference is reported as `unverified` with the version (exit 5).
//!
//! The new files carry the tags of the newest run that published into the window, so `status`
//! still names the run that published it.

use std::collections::{BTreeMap, HashMap};

use datafusion::common::Column;
use datafusion::prelude::{SessionContext, col};
use deltalake::DeltaTable;
use deltalake::datafile::writer::DeltaWriter;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, Remove};
use deltalake::protocol::DeltaOperation;
use futures::StreamExt;
use serde::Serialize;

use crate::commands::vacuum::UPKEEP_INFO_KEY;
use crate::commands::verify::diff;
use crate::delta::overwrite::TAG_VERSION;
use crate::delta::partition::{
    PartitionValue, file_window, partition_value, window_files, window_rows,
};
use crate::delta::table;
use crate::error::{Error, Result};
use crate::report::record::WindowRecord;
use crate::task::Task;
use crate::task::project::Project;
use crate::task::range::WindowRange;
use crate::task::window::Window;

/// What `optimize` did to one window.
#[derive(Debug, Clone, Serialize)]
pub struct WindowOptimize {
    pub task: String,
    pub window: WindowRecord,
    /// `compacted`, `skipped` (no partition value with `min_files` files), `conflict` (replaced by another
    /// writer meanwhile: nothing changed), `failed`, or `unverified` (committed, read-back
    /// failed).
    pub status: &'static str,
    pub files_before: usize,
    pub files_after: usize,
    pub rows: u64,
    pub table_version: Option<i64>,
    pub error: Option<String>,
}

impl WindowOptimize {
    /// The exit code this window's outcome calls for.
    pub fn exit_code(&self) -> u8 {
        match self.status {
            "compacted" | "skipped" => 0,
            "unverified" => 5,
            _ => 1,
        }
    }
}

/// A window's live files: the `remove` that would delete each, its rows and its tags.
struct Live {
    window: Window,
    removes: Vec<Remove>,
    /// Live files per partition value.
    per_value: HashMap<PartitionValue, usize>,
    rows: u64,
    /// Every file has a row count in its statistics (so `rows` is exact).
    counted: bool,
    tags: Option<HashMap<String, Option<String>>>,
}

/// Compact the windows of `range` (all windows of the table if `None`).
pub async fn optimize(
    project: &Project,
    task: &Task,
    range: Option<(Window, Window)>,
    min_files: usize,
) -> Result<Vec<WindowOptimize>> {
    let url = project.table_url(task)?;
    let mut table = table::open(&url).await?;
    if table.version().is_none() {
        return Err(Error::input(format!(
            "task {} has no table yet at {url}: nothing to optimize",
            task.name
        )));
    }
    let mut live = live_windows(&table, task, range.as_ref())?;
    crate::fault::pause("optimize-listed").await;
    // The version `live` was listed at (or is still true of: only our own commits since).
    let mut listed = table.version();
    let keys: Vec<(i64, i64)> = live.keys().copied().collect();
    let mut out = Vec::new();
    for key in keys {
        // A window's files must be those of the snapshot its rows are read from and its
        // commit is built on: after other writers' commits, list them again (a window
        // replaced meanwhile, compacted from its new rows while removing its old files,
        // would hold its rows twice, and the conflict check would not see it).
        if table.version() != listed {
            live = live_windows(&table, task, range.as_ref())?;
            listed = table.version();
        }
        let Some(w) = live.remove(&key) else {
            continue;
        };
        let mut report = WindowOptimize {
            task: task.name.clone(),
            window: (&w.window).into(),
            status: "skipped",
            files_before: w.removes.len(),
            files_after: w.removes.len(),
            rows: w.rows,
            table_version: table.version().map(|v| v as i64),
            error: None,
        };
        if w.per_value.values().any(|&n| n >= min_files.max(2)) {
            compact(&mut table, task, &w, &mut report).await;
            // Our commit right on top of the listed version changed only this window.
            if report.status != "conflict"
                && report.status != "failed"
                && listed.map(|v| v as i64 + 1) == report.table_version
            {
                listed = table.version();
            }
        }
        out.push(report);
    }
    Ok(out)
}

/// The live files of every window (of `range`), from the snapshot's log data.
fn live_windows(
    table: &DeltaTable,
    task: &Task,
    range: Option<&(Window, Window)>,
) -> Result<BTreeMap<(i64, i64), Live>> {
    let mut out: BTreeMap<(i64, i64), Live> = BTreeMap::new();
    let (lo, hi) = match range {
        Some((a, b)) => (a.start_ts(), b.end_ts()),
        None => (jiff::Timestamp::MIN, jiff::Timestamp::MAX),
    };
    for view in table.snapshot()?.snapshot().log_data().iter() {
        let (Some(window), Some(value)) = (
            file_window(&view, task),
            partition_value(&view, &task.partition_by)
                .as_ref()
                .and_then(PartitionValue::from_scalar),
        ) else {
            continue;
        };
        if window.start_ts() < lo || window.end_ts() > hi {
            continue;
        }
        #[allow(deprecated)]
        let tags = view.add_action().tags;
        let version = |t: &Option<HashMap<String, Option<String>>>| {
            t.as_ref()
                .and_then(|t| t.get(TAG_VERSION).cloned().flatten())
                .and_then(|v| v.parse::<i64>().ok())
        };
        let entry = out.entry(window.key()).or_insert_with(|| Live {
            window,
            removes: Vec::new(),
            per_value: HashMap::new(),
            rows: 0,
            counted: true,
            tags: tags.clone(),
        });
        entry.rows += view.num_records().unwrap_or(0) as u64;
        entry.counted &= view.num_records().is_some();
        entry.removes.push(view.remove_action(false));
        *entry.per_value.entry(value).or_default() += 1;
        // The newest run's tags; none at all if any file is untagged (not idemlake's).
        entry.tags = match (&entry.tags, version(&entry.tags), version(&tags)) {
            (Some(_), Some(a), Some(b)) if b > a => tags,
            (Some(_), Some(_), Some(_)) => entry.tags.take(),
            _ => None,
        };
    }
    Ok(out)
}

/// Compact one window (see the module documentation); the outcome goes into `report`.
async fn compact(table: &mut DeltaTable, task: &Task, w: &Live, report: &mut WindowOptimize) {
    let range = &WindowRange::of(task, &w.window);
    let adds = match rewrite(table, range).await {
        Ok(a) => a,
        Err(e) => {
            report.status = "failed";
            report.error = Some(e.to_string());
            return;
        }
    };
    let base = table.version().unwrap_or(0) as i64;
    match commit(table, task, w, &adds).await {
        Ok(version) => {
            report.table_version = Some(version);
            report.files_after = adds.len();
            let counted = w.counted.then_some(w.rows);
            match read_back(table, range, base, version, &adds, counted).await {
                Ok(()) => report.status = "compacted",
                Err(e) => {
                    report.status = "unverified";
                    report.error = Some(format!(
                        "version {version} was committed, but its read-back failed: {e}"
                    ));
                }
            }
        }
        Err(e) => {
            let store = table.log_store().object_store(None);
            crate::pipeline::execute::discard(&store, &adds).await;
            let conflict = matches!(&e, CommitFailure::Conflict(_));
            report.status = if conflict { "conflict" } else { "failed" };
            report.error = Some(match e {
                CommitFailure::Conflict(m) => format!(
                    "another writer changed the window while it was compacted; nothing changed: {m}"
                ),
                CommitFailure::Other(m) => m,
            });
            let _ = table.update_state().await;
        }
    }
}

/// A plain session that reads `table`'s storage.
fn session_for(table: &DeltaTable) -> Result<SessionContext> {
    let ctx = crate::session::build(crate::session::Profile::Runner)?;
    table.update_datafusion_session(&ctx.state())?;
    Ok(ctx)
}

/// Write the window's rows (read from `table`'s snapshot) as new, uncommitted files.
async fn rewrite(table: &DeltaTable, range: &WindowRange) -> Result<Vec<Add>> {
    let ctx = session_for(table)?;
    let df = ctx
        .read_table(table.table_provider().await?)?
        .filter(range.filter(col(Column::from_name(range.column()))))?;
    let schema = std::sync::Arc::new(df.schema().as_arrow().clone());
    let config = table::writer_config(table, schema, range.column())?;
    let mut writer = DeltaWriter::new(table.log_store().object_store(None), config);
    let mut stream = df.execute_stream().await?;
    while let Some(batch) = stream.next().await {
        writer.write(&batch?).await?;
    }
    Ok(writer.close().await?)
}

enum CommitFailure {
    Conflict(String),
    Other(String),
}

/// One `OPTIMIZE` commit replacing `w`'s files by `adds` (no data change).
async fn commit(
    table: &mut DeltaTable,
    task: &Task,
    w: &Live,
    adds: &[Add],
) -> std::result::Result<i64, CommitFailure> {
    let other = |e: &dyn std::fmt::Display| CommitFailure::Other(e.to_string());
    let now = jiff::Timestamp::now().as_millisecond();
    let mut actions: Vec<Action> = w
        .removes
        .iter()
        .cloned()
        .map(|mut r| {
            r.deletion_timestamp = Some(now);
            r.data_change = false;
            Action::Remove(r)
        })
        .collect();
    actions.extend(adds.iter().cloned().map(|mut a| {
        a.data_change = false;
        a.tags = w.tags.clone();
        Action::Add(a)
    }));
    let info = serde_json::json!({
        "task": task.name,
        "command": "optimize",
        "window": w.window.label(),
        "files_before": w.removes.len(),
        "files_after": adds.len(),
    });
    let snapshot = table.snapshot().map_err(|e| other(&e))?.snapshot().clone();
    let op = DeltaOperation::Optimize {
        predicate: None,
        target_size: 128 * 1024 * 1024,
    };
    let done = CommitBuilder::from(
        CommitProperties::default().with_metadata([(UPKEEP_INFO_KEY.to_string(), info)]),
    )
    .with_actions(actions)
    .build(Some(&snapshot), table.log_store(), op)
    .await;
    match done {
        Ok(done) => {
            let version = done.version as i64;
            table.state = Some(done.snapshot);
            Ok(version)
        }
        Err(e) if table::is_conflict(&e) => Err(CommitFailure::Conflict(e.to_string())),
        Err(e) => Err(other(&e)),
    }
}

/// The window at `version` holds exactly `adds`, with the same rows as at `base`: as many
/// as the old files' statistics in the log said (`rows_before`, when every old file had one:
/// it does not depend on the reader the rewrite used), and the same multiset as reading
/// version `base` again.
async fn read_back(
    table: &DeltaTable,
    range: &WindowRange,
    base: i64,
    version: i64,
    adds: &[Add],
    rows_before: Option<u64>,
) -> Result<()> {
    let url = table.table_url().clone();
    let before = table::open_at(&url, base as u64).await?;
    let after = table::open_at(&url, version as u64).await?;
    let files = window_files(&after, range)?;
    if let Some(rows_before) = rows_before {
        let rows_after = window_rows(&files)?;
        if rows_after != rows_before {
            return Err(Error::runtime(format!(
                "the window's files held {rows_before} rows by the log's statistics, the new ones {rows_after}"
            )));
        }
    }
    let mut live: Vec<String> = files.into_iter().map(|f| f.path).collect();
    let mut added: Vec<String> = adds.iter().map(|a| a.path.clone()).collect();
    live.sort();
    added.sort();
    if live != added {
        return Err(Error::runtime(format!(
            "the window holds {} file(s) at version {version}, not the {} this commit added",
            live.len(),
            added.len()
        )));
    }
    let ctx = session_for(&after)?;
    let filter = range.filter(col(Column::from_name(range.column())));
    for (name, t) in [("before", &before), ("after", &after)] {
        let df = ctx
            .read_table(t.table_provider().await?)?
            .filter(filter.clone())?;
        ctx.register_table(name, df.into_view())?;
    }
    let schema = std::sync::Arc::new(ctx.table("before").await?.schema().as_arrow().clone());
    let d = diff(&ctx, &schema, "before", "after").await?;
    if !d.identical() {
        return Err(Error::runtime(format!(
            "the window's rows changed: {} rows before, {} after, {} only before, {} only after",
            d.left_rows, d.right_rows, d.only_left, d.only_right
        )));
    }
    Ok(())
}
