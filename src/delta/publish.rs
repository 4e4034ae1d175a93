//! Publish stage: make a staged window visible with exactly one Delta commit, then read it back.
//!
//! Overwrite mode commits `remove` actions for every file whose *partition value* lies in the
//! window (found from the log alone; no data file is opened) together with the new `add`
//! actions, as one `WRITE` commit with `mode=Overwrite` and the replaceWhere predicate. Readers
//! see the old window or the new one, never a mix. The files to remove come from a
//! [`FileMap`] advanced by each commit (no snapshot refresh per commit); a commit is written
//! put-if-absent as exactly the next version, and when another writer took it, it is rebuilt
//! on top of the re-read table (each window replaced whole; the last writer of a window wins). Merge mode delegates to delta-rs MERGE with a predicate that
//! carries the window bounds, so only the window's files are read or rewritten.
//! After every commit the log is re-read from storage and the window's row count taken from
//! the file statistics must match what was written.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::common::{Column, ScalarValue};
use datafusion::prelude::{DataFrame, col, lit};
use delta_kernel::engine::arrow_conversion::TryIntoKernel;
use delta_kernel::expressions::Scalar;
use deltalake::datafile::writer::WriterConfig;
use deltalake::kernel::transaction::{
    CommitBuilder, CommitData, CommitProperties, PROTOCOL, TransactionError,
};
use deltalake::kernel::{Action, Add, StructType};
use deltalake::logstore::CommitOrBytes;
use deltalake::operations::write::WriterStatsConfig;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::{DeltaTable, DeltaTableBuilder, DeltaTableError};
use url::Url;

use crate::delta::filemap::FileMap;
use crate::error::{Error, Result};

/// Commit attempts delta-rs makes when other writers commit first (disjoint windows rebase).
pub const COMMIT_RETRIES: usize = 25;

/// Open the Delta table at `url`; an empty location gives an unloaded table (`version() == None`).
pub async fn open(url: &Url) -> Result<DeltaTable> {
    let url = if url.scheme() == "file" {
        deltalake::ensure_table_uri(url.as_str())?
    } else {
        url.clone()
    };
    let mut table = builder(&url)?.build()?;
    match table.load().await {
        Ok(()) => Ok(table),
        Err(DeltaTableError::NotATable(_)) => Ok(table),
        Err(e) => Err(Error::runtime(format!("cannot open the target table: {e}"))),
    }
}

/// A table builder using the shared object store for `url`'s bucket (S3) or the local disk.
pub fn builder(url: &Url) -> Result<DeltaTableBuilder> {
    let b = DeltaTableBuilder::from_url(url.clone())?;
    Ok(match crate::storage::store_for(url)? {
        Some((_, store)) => b.with_storage_backend(crate::fault::wrap_store(store), url.clone()),
        None if crate::fault::wants_store_wrapper() => b.with_storage_backend(
            crate::fault::wrap_store(Arc::new(object_store::local::LocalFileSystem::new())),
            url.clone(),
        ),
        None => b,
    })
}

/// Load the table at `url` as of `version`, reading the log from storage.
pub async fn open_at(url: &Url, version: u64) -> Result<DeltaTable> {
    let mut table = builder(url)?.build()?;
    table
        .load_version(version)
        .await
        .map_err(|e| Error::runtime(format!("cannot read back version {version}: {e}")))?;
    Ok(table)
}

/// Create the table (version 0, no data) partitioned by the window column, unless it exists.
pub async fn ensure_exists(
    table: DeltaTable,
    schema: &Schema,
    partition_by: &str,
    name: &str,
) -> Result<DeltaTable> {
    if table.version().is_some() {
        return Ok(table);
    }
    let kernel: StructType = schema
        .try_into_kernel()
        .map_err(|e| Error::input(format!("the output schema cannot be stored in Delta: {e}")))?;
    let created = table
        .create()
        .with_columns(kernel.fields().cloned())
        .with_partition_columns(vec![partition_by.to_string()])
        .with_table_name(name)
        .with_save_mode(SaveMode::ErrorIfExists)
        .await;
    match created {
        Ok(t) => Ok(t),
        // Another process may have created it first: use theirs (the schema check follows).
        // If there is still no table, the creation failed for its own reason: say which.
        Err(e) => {
            let again = open(table.table_url()).await?;
            if again.version().is_none() {
                return Err(Error::runtime(format!(
                    "cannot create the target table: {e}"
                )));
            }
            Ok(again)
        }
    }
}

/// Check the output schema against the table's; returns the column order to write in.
pub fn check_schema(table: &DeltaTable, schema: &Schema, partition_by: &str) -> Result<()> {
    let state = table.snapshot()?;
    let table_schema = state.schema();
    let parts = state.metadata().partition_columns();
    if parts.len() != 1 || parts[0] != partition_by {
        return Err(Error::input(format!(
            "the target table is partitioned by [{}], but the task's window column is `{partition_by}`; a window overwrite needs the table partitioned by exactly that column",
            parts.join(", ")
        )));
    }
    let ours: StructType = schema
        .try_into_kernel()
        .map_err(|e| Error::input(format!("the output schema cannot be stored in Delta: {e}")))?;
    let theirs: Vec<(String, String)> = table_schema
        .fields()
        .map(|f| (f.name().clone(), f.data_type().to_string()))
        .collect();
    let mine: Vec<(String, String)> = ours
        .fields()
        .map(|f| (f.name().clone(), f.data_type().to_string()))
        .collect();
    if theirs != mine {
        let show = |v: &[(String, String)]| {
            v.iter()
                .map(|(n, t)| format!("{n} {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(Error::input(format!(
            "the query's columns do not match the target table's (name, type and order must match; schema evolution is not automatic)\n  table: {}\n  query: {}",
            show(&theirs),
            show(&mine)
        )));
    }
    Ok(())
}

/// Writer settings for the table: its stats configuration (Delta's defaults — 32 indexed
/// columns — for a table not created yet), 128 MiB files.
pub fn writer_config(
    table: &DeltaTable,
    schema: Arc<Schema>,
    partition_by: &str,
) -> Result<WriterConfig> {
    let (num_indexed_cols, stats_columns) = if table.version().is_some() {
        let stats =
            WriterStatsConfig::from_config(table.snapshot()?.snapshot().table_configuration());
        (stats.num_indexed_cols, stats.stats_columns)
    } else {
        (
            delta_kernel::table_properties::DataSkippingNumIndexedCols::NumColumns(32),
            None,
        )
    };
    Ok(WriterConfig::new(
        schema,
        vec![partition_by.to_string()],
        None,
        std::num::NonZeroU64::new(128 * 1024 * 1024),
        None,
        num_indexed_cols,
        stats_columns,
    ))
}

/// The window as bounds on the partition value, in the log's typed representation.
#[derive(Debug, Clone, Copy)]
pub enum PartitionRange {
    /// Days since the epoch, `[lo, hi)`.
    Date(i32, i32),
    /// Microseconds since the epoch (UTC), `[lo, hi)`.
    Timestamp(i64, i64),
}

impl PartitionRange {
    fn contains(&self, v: &Scalar) -> bool {
        match (self, v) {
            (PartitionRange::Date(lo, hi), Scalar::Date(d)) => lo <= d && d < hi,
            (PartitionRange::Timestamp(lo, hi), Scalar::Timestamp(t) | Scalar::TimestampNtz(t)) => {
                lo <= t && t < hi
            }
            _ => false,
        }
    }
    pub fn lo_hi(&self) -> (ScalarValue, ScalarValue) {
        match *self {
            PartitionRange::Date(lo, hi) => {
                (ScalarValue::Date32(Some(lo)), ScalarValue::Date32(Some(hi)))
            }
            PartitionRange::Timestamp(lo, hi) => (
                ScalarValue::TimestampMicrosecond(Some(lo), Some("UTC".into())),
                ScalarValue::TimestampMicrosecond(Some(hi), Some("UTC".into())),
            ),
        }
    }
}

/// A file of the current snapshot whose partition lies in the window.
pub struct WindowFile {
    pub path: String,
    pub rows: Option<u64>,
}

/// The files of the window, from the log (partition values and statistics only).
pub fn window_files(
    table: &DeltaTable,
    partition_by: &str,
    range: PartitionRange,
) -> Result<Vec<WindowFile>> {
    let Ok(state) = table.snapshot() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for view in state.snapshot().log_data().iter() {
        let value = crate::delta::filemap::partition_value(&view, partition_by);
        if value.is_some_and(|v| range.contains(&v)) {
            out.push(WindowFile {
                path: view.path().to_string(),
                rows: view.num_records().map(|n| n as u64),
            });
        }
    }
    Ok(out)
}

/// Rows the log says the window holds (sum of `numRecords`); errors if a file has no stats.
pub fn window_rows(files: &[WindowFile]) -> Result<u64> {
    files.iter().try_fold(0u64, |acc, f| {
        f.rows.map(|r| acc + r).ok_or_else(|| {
            Error::runtime(format!(
                "file {} has no row-count statistics, so the window cannot be verified from the log",
                f.path
            ))
        })
    })
}

/// What one commit did.
#[derive(Debug, Clone)]
pub struct Committed {
    pub version: i64,
    pub files_added: usize,
    pub files_removed: usize,
}

/// How often a commit whose window was concurrently rewritten is re-applied on top.
pub const CONFLICT_RETRIES: usize = 5;

/// Is `e` a Delta commit conflict (another writer touched what this commit read)?
pub fn is_conflict(e: &DeltaTableError) -> bool {
    matches!(
        e,
        DeltaTableError::Transaction {
            source: TransactionError::CommitConflict(_)
        } | DeltaTableError::VersionAlreadyExists(_)
    )
}

/// Whether committing `version` should also delete expired log files: only when that commit
/// also writes a checkpoint (and the table allows cleanup). delta-rs otherwise lists the whole
/// `_delta_log` after *every* commit to look for expired files, a cost that grows with the
/// table's history; Spark likewise cleans up only at checkpoints.
fn cleanup_due(table: &DeltaTable, version: i64) -> Result<bool> {
    use deltalake::table::config::TablePropertiesExt;
    let snapshot = table.snapshot()?;
    let config = snapshot.table_config();
    let interval = config.checkpoint_interval().get() as i64;
    Ok(config.enable_expired_log_cleanup() && (version + 1) % interval == 0)
}

/// Who published a file: stored as tags on every `add` idemlake commits, so the snapshot alone
/// (loaded from checkpoints) says which run published each window, at which version.
#[derive(Debug, Clone)]
pub struct RunTags {
    pub run_id: String,
    pub window: String,
    pub sql_hash: String,
}

/// Tag keys on `add` actions.
pub const TAG_RUN_ID: &str = "idemlake.run_id";
pub const TAG_WINDOW: &str = "idemlake.window";
pub const TAG_SQL_HASH: &str = "idemlake.sql_hash";
pub const TAG_VERSION: &str = "idemlake.version";
pub const TAG_PUBLISHED_AT: &str = "idemlake.published_at";

/// How many times a commit is rebuilt on top of commits that other writers made first.
pub const REBASE_ATTEMPTS: usize = 200;

/// One window of a commit: its bounds, replaceWhere text, staged files, tags and run record.
pub struct WindowCommit {
    pub range: PartitionRange,
    pub predicate: String,
    pub adds: Vec<Add>,
    pub tags: RunTags,
    /// The window's run record (`record::RunRecord` as JSON).
    pub record: serde_json::Value,
}

/// The commitInfo entry for `windows`: one window's run record as is, or for several windows
/// published together `{"task", "windows", "runs": [record, …]}`.
fn commit_info(windows: &[WindowCommit]) -> HashMap<String, serde_json::Value> {
    let value = match windows {
        [one] => one.record.clone(),
        many => serde_json::json!({
            "task": many[0].record.get("task").cloned().unwrap_or_default(),
            "windows": many.len(),
            "runs": many.iter().map(|w| w.record.clone()).collect::<Vec<_>>(),
        }),
    };
    HashMap::from([(crate::report::record::COMMIT_INFO_KEY.to_string(), value)])
}

/// Does a commitInfo entry name `run_id` (alone or among the runs of a group commit)?
fn names_run(info: &serde_json::Value, run_id: &str) -> bool {
    let Some(entry) = info.get(crate::report::record::COMMIT_INFO_KEY) else {
        return false;
    };
    let is =
        |r: &serde_json::Value| r.get("run_id").and_then(serde_json::Value::as_str) == Some(run_id);
    is(entry)
        || entry
            .get("runs")
            .and_then(serde_json::Value::as_array)
            .is_some_and(|runs| runs.iter().any(is))
}

/// Commit the staged files of `windows` (distinct windows of one task), each replacing its
/// window's files, in one commit with the run records in commitInfo.
///
/// The commit is built from `files` (the live files of the latest version this process knows,
/// see [`FileMap`]; built from the table's snapshot when `None`) and written as exactly the
/// next version (put-if-absent); `files` then advances by this commit, so a run of commits
/// never re-reads or re-materialises the table state. If another writer took that version,
/// the map is dropped, the table state re-read and the commit rebuilt on top — removing whatever each window holds *in the version right before
/// ours*, so every window ends up holding exactly its run's rows whatever others committed
/// meanwhile (other windows are never touched; the last writer of a window wins, never a
/// union). Because the version is known when the commit is built, it is recorded in the
/// files' tags. Several windows in one commit are published together: each is still
/// replaced whole, in exactly one commit.
///
/// Exactly once: after *any* failed attempt the table is re-read, and if these files are
/// already in it (the PUT of the commit succeeded but its response was lost), the commit is
/// not applied again.
pub async fn commit_windows(
    table: &mut DeltaTable,
    files: &mut Option<FileMap>,
    partition_by: &str,
    windows: &[WindowCommit],
) -> Result<Committed> {
    let schema = table.snapshot()?.schema();
    let files_added = windows.iter().map(|w| w.adds.len()).sum();
    let app_metadata = commit_info(windows);
    let predicate = match windows {
        [one] => one.predicate.clone(),
        many => many
            .iter()
            .map(|w| format!("({})", w.predicate))
            .collect::<Vec<_>>()
            .join(" OR "),
    };
    let ranges: Vec<PartitionRange> = windows.iter().map(|w| w.range).collect();
    // Log stores that take the commit's bytes (put-if-absent) get them directly; others
    // (rename-based) go through delta-rs's commit, which stages a temporary file first.
    let direct = ["DefaultLogStore", "LakeFSLogStore"].contains(&table.log_store().name().as_str());
    let mut first_base = None;
    let mut attempt = 0;
    loop {
        if !crate::accel::session::accelerated() {
            // The plain twin: the window's files come from a snapshot loaded for this commit.
            table.update_state().await?;
            *files = None;
        }
        if files.is_none() {
            *files = Some(FileMap::from_table(table, partition_by)?);
        }
        let map = files.as_mut().expect("just built");
        let attempt_base = map.version;
        let base = *first_base.get_or_insert(attempt_base);
        let target = attempt_base + 1;
        let mut actions: Vec<Action> = Vec::new();
        let mut files_removed = 0;
        for w in windows {
            let removed = map.removes(w.range);
            files_removed += removed.len();
            actions.extend(removed.into_iter().map(Action::Remove));
        }
        let published_at = jiff::Timestamp::now().to_string();
        for w in windows {
            actions.extend(w.adds.iter().cloned().map(|mut a| {
                a.tags = Some(HashMap::from([
                    (TAG_RUN_ID.to_string(), Some(w.tags.run_id.clone())),
                    (TAG_WINDOW.to_string(), Some(w.tags.window.clone())),
                    (TAG_SQL_HASH.to_string(), Some(w.tags.sql_hash.clone())),
                    (TAG_VERSION.to_string(), Some(target.to_string())),
                    (TAG_PUBLISHED_AT.to_string(), Some(published_at.clone())),
                ]));
                Action::Add(a)
            }));
        }
        let op = DeltaOperation::Write {
            mode: SaveMode::Overwrite,
            partition_by: Some(vec![partition_by.to_string()]),
            predicate: Some(predicate.clone()),
        };
        let result = if direct {
            write_next(table, target, actions, op, &app_metadata).await
        } else {
            let snapshot = table.snapshot()?.snapshot();
            CommitBuilder::from(
                CommitProperties::default()
                    .with_metadata(app_metadata.clone())
                    .with_max_retries(0)
                    .with_cleanup_expired_logs(Some(cleanup_due(table, target)?)),
            )
            .with_actions(actions)
            .build(Some(snapshot), table.log_store(), op)
            .await
            .map(|done| {
                table.state = Some(done.snapshot);
            })
        };
        let e = match result {
            Ok(()) => {
                if direct {
                    let adds: Vec<&Add> = windows.iter().flat_map(|w| &w.adds).collect();
                    if !map.apply(target, &ranges, &adds) {
                        *files = None;
                    }
                    checkpoint_if_due(table, target).await;
                } else {
                    *files = None;
                }
                return Ok(Committed {
                    version: target,
                    files_added,
                    files_removed,
                });
            }
            Err(e) => e,
        };
        // Someone else may have committed (or this commit landed and its response was lost):
        // the map is no longer known to be current; re-read the table.
        *files = None;
        let fail = |e: &DeltaTableError| {
            Error::runtime(format!("commit failed, nothing was published: {e}"))
        };
        // Whether the commit landed cannot be told without reading the log: if that fails
        // too, say so — never "nothing was published" (re-running the window is safe).
        let unknown = |e: &DeltaTableError, why: &dyn std::fmt::Display| {
            Error::runtime(format!(
                "commit failed ({e}) and the log could not be read back ({why}): the window may or may not have been published; re-running it is safe"
            ))
        };
        if let Err(why) = table.update_state().await {
            return Err(unknown(&e, &why));
        }
        let found = match landed(table, windows, base).await {
            Ok(found) => found,
            Err(why) => return Err(unknown(&e, &why)),
        };
        if let Some(version) = found {
            tracing::warn!(
                "the commit reported an error ({e}) but it is in the log at version {version}; not applying it twice"
            );
            return Ok(Committed {
                version,
                files_added,
                files_removed: 0,
            });
        }
        let moved = table.version().unwrap_or(0) as i64 > attempt_base;
        if !moved || attempt >= REBASE_ATTEMPTS {
            return Err(fail(&e));
        }
        if table.snapshot()?.schema() != schema {
            return Err(Error::runtime(
                "the table's schema changed while this run was committing; nothing was published",
            ));
        }
        attempt += 1;
        tracing::debug!(
            "version {target} was taken by another writer; rebuilding on top (attempt {attempt})"
        );
        tokio::time::sleep(std::time::Duration::from_millis((attempt as u64 % 8) * 3)).await;
    }
}

/// Write `actions` as exactly version `target` (put-if-absent), after delta-rs's protocol
/// check (writer features, append-only tables). No snapshot is read or refreshed: the caller
/// knows the live files of `target - 1` and advances its map by this commit.
async fn write_next(
    table: &DeltaTable,
    target: i64,
    actions: Vec<Action>,
    op: DeltaOperation,
    app_metadata: &HashMap<String, serde_json::Value>,
) -> std::result::Result<(), DeltaTableError> {
    let snapshot = table.snapshot()?.snapshot();
    PROTOCOL.can_commit(snapshot, &actions, &op)?;
    let data = CommitData::new(actions, op, app_metadata.clone(), Vec::new());
    let bytes = data.get_bytes()?;
    table
        .log_store()
        .write_commit_entry(
            target as u64,
            CommitOrBytes::LogBytes(bytes),
            uuid::Uuid::new_v4(),
        )
        .await?;
    Ok(())
}

/// After a direct commit: write a checkpoint when the table's interval says so (and clean up
/// expired log files then, if the table allows it), as delta-rs's post-commit hook would. A
/// failure here does not undo the commit; it is logged and the next checkpoint covers it.
async fn checkpoint_if_due(table: &mut DeltaTable, version: i64) {
    use deltalake::table::config::TablePropertiesExt;
    let Ok(state) = table.snapshot() else {
        return;
    };
    let config = state.table_config();
    if (version + 1) % config.checkpoint_interval().get() as i64 != 0 {
        return;
    }
    let cleanup = config.enable_expired_log_cleanup();
    let done = async {
        table.update_incremental(Some(version as u64)).await?;
        deltalake::checkpoints::create_checkpoint(table, None).await?;
        if cleanup {
            deltalake::checkpoints::cleanup_metadata(table, None).await?;
        }
        Ok::<(), DeltaTableError>(())
    }
    .await;
    match done {
        Ok(()) => tracing::debug!(version, "checkpoint written"),
        Err(e) => tracing::warn!("version {version} is committed, but its checkpoint failed: {e}"),
    }
}

/// If these windows' staged files are in the table, the version of the commit that added them.
async fn landed(table: &DeltaTable, windows: &[WindowCommit], base: i64) -> Result<Option<i64>> {
    let run_id = &windows[0].tags.run_id;
    let Some(first) = windows.iter().find_map(|w| w.adds.first()) else {
        // Nothing added (emptied windows): look for the run id in the commits alone.
        return find_run_commit(table, base, run_id).await;
    };
    let present = table
        .snapshot()?
        .snapshot()
        .log_data()
        .iter()
        .any(|f| f.path() == first.path.as_str());
    if !present {
        return Ok(None);
    }
    Ok(Some(
        find_run_commit(table, base, run_id).await?.ok_or_else(|| {
            Error::runtime(format!(
                "run {run_id}'s files are in the table but no commit names the run"
            ))
        })?,
    ))
}

/// The version after `base` whose commitInfo names `run_id`.
pub async fn find_run_commit(table: &DeltaTable, base: i64, run_id: &str) -> Result<Option<i64>> {
    let latest = table.version().unwrap_or(0) as i64;
    let log_store = table.log_store();
    for v in (base + 1..=latest).rev() {
        let Some(bytes) = log_store.read_commit_entry(v as u64).await? else {
            continue;
        };
        for line in bytes.split(|b| *b == b'\n') {
            let Ok(action) = serde_json::from_slice::<serde_json::Value>(line) else {
                continue;
            };
            if action
                .get("commitInfo")
                .is_some_and(|c| names_run(c, run_id))
            {
                return Ok(Some(v));
            }
        }
    }
    Ok(None)
}

/// `table` brought to exactly `version` by replaying the log from storage (delta-rs's own
/// snapshot, not idemlake's file map): what readers of that version see. `table` itself is
/// advanced when it is behind; a table already past `version` is left as is and a copy is
/// loaded at `version`.
pub async fn snapshot_at(table: &mut DeltaTable, version: i64) -> Result<DeltaTable> {
    let at = version as u64;
    match table.version() {
        Some(v) if v == at => Ok(table.clone()),
        Some(v) if v < at => {
            table.update_incremental(Some(at)).await?;
            Ok(table.clone())
        }
        _ => open_at(table.table_url(), at).await,
    }
}

/// Read one window back from the committed snapshot `table`: every live file whose partition
/// value lies in the window must be a file this commit added for it (a file left over from
/// before — a remove the commit missed — or a staged file missing fails), and the rows are
/// the sum of their `numRecords` statistics.
pub fn read_back(table: &DeltaTable, partition_by: &str, w: &WindowCommit) -> Result<u64> {
    let version = table.version().map(|v| v as i64).unwrap_or(-1);
    let live = window_files(table, partition_by, w.range)?;
    let staged: std::collections::HashSet<&str> = w.adds.iter().map(|a| a.path.as_str()).collect();
    let foreign: Vec<&str> = live
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| !staged.contains(p))
        .collect();
    if let Some(first) = foreign.first() {
        return Err(Error::runtime(format!(
            "read-back: version {version} holds {} live file(s) in window {} that this run did not add (e.g. {first}): the window was not replaced whole",
            foreign.len(),
            w.tags.window
        )));
    }
    let missing = staged.len() - (live.len() - foreign.len());
    if missing > 0 {
        return Err(Error::runtime(format!(
            "read-back: version {version} lacks {missing} of the {} file(s) this run staged for window {}",
            staged.len(),
            w.tags.window
        )));
    }
    window_rows(&live)
}

/// Outcome of a MERGE.
pub struct Merged {
    pub table: DeltaTable,
    pub inserted: u64,
    pub updated: u64,
    /// Rows the window held in the snapshot the merge was applied to.
    pub rows_before: u64,
}

/// What to upsert where: the output's columns, the key, and the window on the partition column.
pub struct MergeSpec<'a> {
    pub columns: &'a [String],
    pub key: &'a [String],
    pub partition_by: &'a str,
    pub range: PartitionRange,
}

/// Upsert `source` into the window on `spec.key`; on a conflict with a concurrent run of
/// the same window, the merge is re-applied on top of the new snapshot (it is idempotent).
pub async fn merge(
    mut table: DeltaTable,
    session: Arc<dyn datafusion::catalog::Session>,
    source: DataFrame,
    spec: MergeSpec<'_>,
    app_metadata: HashMap<String, serde_json::Value>,
) -> Result<Merged> {
    let MergeSpec {
        columns,
        key,
        partition_by,
        range,
    } = spec;
    let t = |c: &str| col(Column::new(Some("target"), c));
    let s = |c: &str| col(Column::new(Some("source"), c));
    let (lo, hi) = range.lo_hi();
    let mut predicate = t(partition_by)
        .gt_eq(lit(lo))
        .and(t(partition_by).lt(lit(hi)));
    for k in key {
        predicate = predicate.and(t(k).eq(s(k)));
    }
    let url = table.table_url().clone();
    let mut attempt = 0;
    loop {
        let rows_before = window_rows(&window_files(&table, partition_by, range)?)?;
        let cleanup = cleanup_due(&table, table.version().unwrap_or(0) as i64 + 1)?;
        let result = table
            .merge(source.clone(), predicate.clone())
            .with_source_alias("source")
            .with_target_alias("target")
            .with_session_state(session.clone())
            .with_commit_properties(
                CommitProperties::default()
                    .with_metadata(app_metadata.clone())
                    .with_max_retries(COMMIT_RETRIES)
                    .with_cleanup_expired_logs(Some(cleanup)),
            )
            .when_matched_update(|u| columns.iter().fold(u, |u, c| u.update(c.as_str(), s(c))))?
            .when_not_matched_insert(|i| columns.iter().fold(i, |i, c| i.set(c.as_str(), s(c))))?
            .await;
        match result {
            Ok(_) if crate::fault::mutation("merge-error-after-commit") => {
                return Err(Error::runtime(
                    "merge failed, nothing was published: injected error after the merge's commit",
                ));
            }
            Ok((table, metrics)) => {
                return Ok(Merged {
                    table,
                    inserted: metrics.num_target_rows_inserted as u64,
                    updated: metrics.num_target_rows_updated as u64,
                    rows_before,
                });
            }
            Err(e) if is_conflict(&e) && attempt < CONFLICT_RETRIES => {
                attempt += 1;
                tracing::info!(
                    "window merged concurrently ({e}); re-applying on top, attempt {attempt}"
                );
                table = open(&url).await?;
            }
            Err(e) => {
                return Err(Error::runtime(format!(
                    "merge failed, nothing was published: {e}"
                )));
            }
        }
    }
}
