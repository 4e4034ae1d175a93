//! Overwrite mode: make staged windows visible with exactly one Delta commit.
//!
//! The commit holds `remove` actions for every file whose *partition value* lies in a window
//! (found from the log alone; no data file is opened) and the new `add` actions, as one
//! `WRITE` commit with `mode=Overwrite` and the replaceWhere predicate. Readers see the old
//! window or the new one, never a mix. The files to remove come from a [`FileMap`] advanced
//! by each commit (no snapshot refresh per commit); a commit is written put-if-absent as
//! exactly the next version, and when another writer took it, it is rebuilt on top of the
//! other writers' commits, replayed from the log (or the re-read table): each window replaced
//! whole; the last writer of a window wins. Reading the
//! commit back is `readback`.

use std::collections::HashMap;

use deltalake::kernel::transaction::{CommitBuilder, CommitData, CommitProperties, PROTOCOL};
use deltalake::kernel::{Action, Add};
use deltalake::logstore::CommitOrBytes;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::{DeltaTable, DeltaTableError};

use crate::delta::filemap::{FileMap, Replayed};
use crate::delta::partition::PartitionRange;
use crate::delta::readback::find_run_commit;
use crate::delta::table::{checkpoint_due, cleanup_due};
use crate::error::{Error, Result};

/// What one commit did.
#[derive(Debug, Clone)]
pub struct Committed {
    pub version: i64,
    pub files_added: usize,
    pub files_removed: usize,
}

/// Who published a file: stored as tags on every `add` idemlake commits, so the snapshot alone
/// (loaded from checkpoints) says which run published each window, at which version.
#[derive(Debug, Clone)]
pub struct RunTags {
    pub run_id: String,
    pub window: String,
    pub sql_hash: String,
    /// The Delta sources' pinned versions, as JSON `{alias: version}` (`None`: no Delta
    /// source): what `status` compares upstream tasks' publishes with.
    pub inputs: Option<String>,
}

/// Tag keys on `add` actions.
pub const TAG_RUN_ID: &str = "idemlake.run_id";
pub const TAG_WINDOW: &str = "idemlake.window";
pub const TAG_SQL_HASH: &str = "idemlake.sql_hash";
pub const TAG_VERSION: &str = "idemlake.version";
pub const TAG_PUBLISHED_AT: &str = "idemlake.published_at";
/// The versions of the Delta sources the run read (`RunTags::inputs`).
pub const TAG_INPUTS: &str = "idemlake.inputs";
/// On files `restore` re-added: the table version they were restored from.
pub const TAG_RESTORED_FROM: &str = "idemlake.restored_from";

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
    /// The table's new metadata when this window adds columns (see `table::schema_plan`):
    /// committed with the window's files.
    pub metadata: Option<deltalake::kernel::Metadata>,
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

/// This process's overwrite commits: `(commits, windows, rebuilds)` — commits written, the
/// windows they published, and attempts rebuilt on top of a version another writer took first.
static COMMITS: [std::sync::atomic::AtomicU64; 3] = [
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
];

/// The commits counted so far: `(commits, windows, rebuilds)`.
pub fn commit_counts() -> (u64, u64, u64) {
    let get = |i: usize| COMMITS[i].load(std::sync::atomic::Ordering::Relaxed);
    (get(0), get(1), get(2))
}

fn count_commit(windows: usize) {
    COMMITS[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    COMMITS[1].fetch_add(windows as u64, std::sync::atomic::Ordering::Relaxed);
}

/// Commit the staged files of `windows` (distinct windows of one task), each replacing its
/// window's files, in one commit with the run records in commitInfo.
///
/// The commit is built from `files` (the live files of the latest version this process knows,
/// see [`FileMap`]; built from the table's snapshot when `None`) and written as exactly the
/// next version (put-if-absent); `files` then advances by this commit, so a run of commits
/// never re-reads or re-materialises the table state. If another writer took that version,
/// the commits written since are replayed onto the map from the log (see [`catch_up`]; or,
/// for what the replay cannot follow and with `IDEMLAKE_ACCELERATE=0`, the map is dropped and
/// the table state re-read) and the commit is rebuilt on top — removing whatever each window
/// holds *in the version right before ours*, so every window ends up holding exactly its
/// run's rows whatever others committed meanwhile (other windows are never touched; the last
/// writer of a window wins, never a union). Because the version is known when the commit is built, it is recorded in the
/// files' tags. Several windows in one commit are published together: each is still
/// replaced whole, in exactly one commit.
///
/// Exactly once: after *any* failed attempt the log is read again (the commits since the
/// map's version, or the whole re-read table), and if this commit is already in it (the PUT
/// succeeded but its response was lost), it is not applied again.
pub async fn commit_windows(
    table: &mut DeltaTable,
    files: &mut Option<FileMap>,
    partition_by: &str,
    windows: &[WindowCommit],
) -> Result<Committed> {
    let schema = table.snapshot()?.schema();
    let own_schema = windows
        .iter()
        .find_map(|w| w.metadata.as_ref())
        .and_then(|m| m.parse_schema().ok());
    let files_added = windows.iter().map(|w| w.adds.len()).sum();
    let commit = Commit::new(table, partition_by, windows);
    let ranges: Vec<PartitionRange> = windows.iter().map(|w| w.range).collect();
    let mut first_base = None;
    let mut attempt = 0;
    loop {
        if !crate::config::get().accelerate {
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
        let (actions, files_removed) = actions(map, windows, target);
        // delta-rs's own commit path also cleans up expired logs when this commit writes a
        // checkpoint; decided before the attempt, like its snapshot.
        let cleanup = !commit.direct && cleanup_due(table, target)?;
        let e = match commit.write(table, target, actions, cleanup).await {
            Ok(()) => {
                if commit.direct {
                    let adds: Vec<&Add> = windows.iter().flat_map(|w| &w.adds).collect();
                    if !map.apply(target, &ranges, &adds) {
                        *files = None;
                    }
                    checkpoint_if_due(table, target).await;
                } else {
                    *files = None;
                }
                count_commit(windows.len());
                return Ok(Committed {
                    version: target,
                    files_added,
                    files_removed,
                });
            }
            Err(e) => e,
        };
        // Another writer took the version (or this commit landed and its response was lost).
        // Accelerated: replay the commits written since the map's version onto the map, as
        // read from the log, and rebuild on top; re-reading the whole table state for every
        // lost race made concurrent workers starve each other (bench/SCALE.md). Anything the
        // replay cannot follow falls back to the full re-read below (the plain twin).
        if commit.direct && crate::config::get().accelerate {
            match catch_up(table, files, ranges[0], &windows[0].tags.run_id).await {
                CatchUp::Moved if attempt < REBASE_ATTEMPTS => {
                    attempt += 1;
                    COMMITS[2].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(
                        "version {target} was taken by another writer; replayed the log to version {} and rebuilding on top (attempt {attempt})",
                        files.as_ref().map_or(-1, |m| m.version)
                    );
                    let pause = (attempt as u64 % 8) * 3;
                    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                    continue;
                }
                CatchUp::Ours(version) => {
                    tracing::warn!(
                        "the commit reported an error ({e}) but it is in the log at version {version}; not applying it twice"
                    );
                    *files = None;
                    let _ = table.update_state().await;
                    count_commit(windows.len());
                    return Ok(Committed {
                        version,
                        files_added,
                        files_removed: 0,
                    });
                }
                _ => {}
            }
        }
        // Re-read the table: the map is no longer known to be current.
        *files = None;
        if let Some(version) = after_failure(table, windows, base, &e).await? {
            count_commit(windows.len());
            return Ok(Committed {
                version,
                files_added,
                files_removed: 0,
            });
        }
        let moved = table.version().unwrap_or(0) as i64 > attempt_base;
        if !moved || attempt >= REBASE_ATTEMPTS {
            return Err(Error::runtime(format!(
                "commit failed, nothing was published: {e}"
            )));
        }
        // A change under this commit fails it; the schema this commit itself writes, already
        // written by another writer (shards of a task that just gained a column), does not.
        let now = table.snapshot()?.schema();
        if now != schema && own_schema.as_ref().is_none_or(|own| *own != *now) {
            return Err(Error::runtime(
                "the table's schema changed while this run was committing; nothing was published",
            ));
        }
        attempt += 1;
        COMMITS[2].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(
            "version {target} was taken by another writer; rebuilding on top (attempt {attempt})"
        );
        tokio::time::sleep(std::time::Duration::from_millis((attempt as u64 % 8) * 3)).await;
    }
}

/// What every attempt of one commit writes the same way.
struct Commit {
    app_metadata: HashMap<String, serde_json::Value>,
    op: DeltaOperation,
    /// Written put-if-absent by idemlake ([`write_next`]), or through delta-rs's commit.
    direct: bool,
}

impl Commit {
    fn new(table: &DeltaTable, partition_by: &str, windows: &[WindowCommit]) -> Commit {
        Commit {
            app_metadata: commit_info(windows),
            op: DeltaOperation::Write {
                mode: SaveMode::Overwrite,
                partition_by: Some(vec![partition_by.to_string()]),
                predicate: Some(match windows {
                    [one] => one.predicate.clone(),
                    many => many
                        .iter()
                        .map(|w| format!("({})", w.predicate))
                        .collect::<Vec<_>>()
                        .join(" OR "),
                }),
            },
            // Log stores that take the commit's bytes (put-if-absent) get them directly; others
            // (rename-based) go through delta-rs's commit, which stages a temporary file first.
            direct: ["DefaultLogStore", "LakeFSLogStore"]
                .contains(&table.log_store().name().as_str()),
        }
    }

    /// Write `actions` as version `target`.
    async fn write(
        &self,
        table: &mut DeltaTable,
        target: i64,
        actions: Vec<Action>,
        cleanup: bool,
    ) -> std::result::Result<(), DeltaTableError> {
        if self.direct {
            return write_next(table, target, actions, self.op.clone(), &self.app_metadata).await;
        }
        let snapshot = table.snapshot()?.snapshot();
        let done = CommitBuilder::from(
            CommitProperties::default()
                .with_metadata(self.app_metadata.clone())
                .with_max_retries(0)
                .with_cleanup_expired_logs(Some(cleanup)),
        )
        .with_actions(actions)
        .build(Some(snapshot), table.log_store(), self.op.clone())
        .await?;
        table.state = Some(done.snapshot);
        Ok(())
    }
}

/// The commit's actions: a `remove` for every live file of each window (from `map`), then
/// the staged `add`s tagged with the run and `target`. Returns them and the removes' count.
fn actions(map: &FileMap, windows: &[WindowCommit], target: i64) -> (Vec<Action>, usize) {
    let mut actions: Vec<Action> = Vec::new();
    // A schema change travels in the same commit as the data written with it.
    if let Some(m) = windows.iter().find_map(|w| w.metadata.clone()) {
        actions.push(Action::Metadata(m));
    }
    for w in windows {
        actions.extend(map.removes(w.range).into_iter().map(Action::Remove));
    }
    let files_removed = actions
        .iter()
        .filter(|a| matches!(a, Action::Remove(_)))
        .count();
    let published_at = jiff::Timestamp::now().to_string();
    for w in windows {
        actions.extend(w.adds.iter().cloned().map(|mut a| {
            let mut tags = HashMap::from([
                (TAG_RUN_ID.to_string(), Some(w.tags.run_id.clone())),
                (TAG_WINDOW.to_string(), Some(w.tags.window.clone())),
                (TAG_SQL_HASH.to_string(), Some(w.tags.sql_hash.clone())),
                (TAG_VERSION.to_string(), Some(target.to_string())),
                (TAG_PUBLISHED_AT.to_string(), Some(published_at.clone())),
            ]);
            if let Some(inputs) = &w.tags.inputs {
                tags.insert(TAG_INPUTS.to_string(), Some(inputs.clone()));
            }
            a.tags = Some(tags);
            Action::Add(a)
        }));
    }
    (actions, files_removed)
}

/// What [`catch_up`] found in the log after a failed attempt.
enum CatchUp {
    /// Other writers' commits, replayed onto the map: it is at the latest version.
    Moved,
    /// The attempt itself is in the log at this version.
    Ours(i64),
    /// Nothing new in the log, or something the map cannot follow (the map is dropped): the
    /// caller re-reads the table.
    Rebuild,
}

/// Replay onto `files` every commit in the log after its version (read from storage, one GET
/// each, until the first version not there), stopping at a commit that names `run_id`.
async fn catch_up(
    table: &DeltaTable,
    files: &mut Option<FileMap>,
    kind: PartitionRange,
    run_id: &str,
) -> CatchUp {
    let Some(map) = files.as_mut() else {
        return CatchUp::Rebuild;
    };
    let start = map.version;
    let store = table.log_store();
    // Far behind (a long-idle worker): one snapshot load costs less than this many GETs.
    const MAX_REPLAYED: i64 = 500;
    while map.version - start < MAX_REPLAYED {
        let v = map.version + 1;
        let bytes = match store.read_commit_entry(v as u64).await {
            Ok(Some(b)) => b,
            Ok(None) if map.version > start => return CatchUp::Moved,
            _ => break,
        };
        match map.replay(v, kind, &bytes, run_id) {
            Replayed::Applied => {}
            Replayed::Ours => return CatchUp::Ours(v),
            Replayed::Unknown => break,
        }
    }
    *files = None;
    CatchUp::Rebuild
}

/// After a failed attempt: re-read the table and tell whether the commit landed anyway (its
/// version) or not (`None`: rebuild on top). Whether it landed cannot be told without
/// reading the log: if that fails too, the error says so — never "nothing was published"
/// (re-running the window is safe).
async fn after_failure(
    table: &mut DeltaTable,
    windows: &[WindowCommit],
    base: i64,
    e: &DeltaTableError,
) -> Result<Option<i64>> {
    let unknown = |why: &dyn std::fmt::Display| {
        Error::runtime(format!(
            "commit failed ({e}) and the log could not be read back ({why}): the window may or may not have been published; re-running it is safe"
        ))
    };
    if let Err(why) = table.update_state().await {
        return Err(unknown(&why));
    }
    let found = landed(table, windows, base)
        .await
        .map_err(|why| unknown(&why))?;
    if let Some(version) = found {
        tracing::warn!(
            "the commit reported an error ({e}) but it is in the log at version {version}; not applying it twice"
        );
    }
    Ok(found)
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
    let Ok(Some(cleanup)) = checkpoint_due(table, version) else {
        return;
    };
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

/// If this commit is in the table's log after `base`, its version: the commit that names the
/// run. The log, not the latest snapshot: a commit that landed and whose windows another
/// writer has replaced since has landed all the same (committing it again would put the run's
/// rows over the newer ones and report a second version).
async fn landed(table: &DeltaTable, windows: &[WindowCommit], base: i64) -> Result<Option<i64>> {
    let run_id = &windows[0].tags.run_id;
    if let Some(version) = find_run_commit(table, base, run_id).await? {
        return Ok(Some(version));
    }
    // No commit since `base` names the run: its files had better not be in the table.
    let Some(first) = windows.iter().find_map(|w| w.adds.first()) else {
        return Ok(None);
    };
    let present = table
        .snapshot()?
        .snapshot()
        .log_data()
        .iter()
        .any(|f| f.path() == first.path.as_str());
    if present {
        return Err(Error::runtime(format!(
            "run {run_id}'s files are in the table but no commit names the run"
        )));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};

    /// A day window of the date column `d`, day `n` since the epoch, staging `path` for `run`.
    fn window(n: i32, path: &str, run: &str) -> WindowCommit {
        let day = (jiff::civil::date(1970, 1, 1) + jiff::Span::new().days(n)).to_string();
        WindowCommit {
            range: PartitionRange::Date(n, n + 1),
            predicate: format!("d = '{day}'"),
            adds: vec![Add {
                path: format!("d={day}/{path}"),
                partition_values: HashMap::from([("d".to_string(), Some(day.clone()))]),
                size: 10,
                data_change: true,
                ..Default::default()
            }],
            tags: RunTags {
                run_id: run.into(),
                window: day,
                sql_hash: "h".into(),
                inputs: None,
            },
            record: serde_json::json!({"task": "t", "run_id": run}),
            metadata: None,
        }
    }

    async fn new_table(dir: &std::path::Path) -> DeltaTable {
        let url = url::Url::from_directory_path(dir).unwrap();
        let schema = Schema::new(vec![
            Field::new("x", DataType::Int64, true),
            Field::new("d", DataType::Date32, true),
        ]);
        let table = crate::delta::table::open(&url).await.unwrap();
        crate::delta::table::ensure_exists(table, &schema, "d", "t")
            .await
            .unwrap()
    }

    /// `t`'s metadata with `extra` columns after its own.
    fn widened(t: &DeltaTable, extra: &[Field]) -> deltalake::kernel::Metadata {
        use delta_kernel::engine::arrow_conversion::TryIntoKernel;
        use deltalake::kernel::MetadataExt;
        let snapshot = t.snapshot().unwrap();
        let mut fields: Vec<Field> = snapshot
            .snapshot()
            .arrow_schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(extra.iter().cloned());
        let kernel: deltalake::kernel::StructType =
            (&Schema::new(fields)).try_into_kernel().unwrap();
        snapshot.metadata().clone().with_schema(&kernel).unwrap()
    }

    /// Bug: after a failed attempt, `landed` looked for the run's first file in the latest
    /// snapshot before reading the log. A commit that landed (its response lost) and whose
    /// window another writer had replaced since was taken for "not landed": the run would
    /// commit its window again, over the other writer's newer one, and report the second
    /// version. The log says which commit names the run, whatever came after it.
    #[tokio::test]
    async fn a_landed_commit_replaced_since_is_still_found_in_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = new_table(dir.path()).await;
        let base = table.version().unwrap() as i64;
        let ours = window(1, "ours.parquet", "run-ours");
        let c = commit_windows(&mut table, &mut None, "d", std::slice::from_ref(&ours))
            .await
            .unwrap();
        assert_eq!(c.version, base + 1);
        // Another writer replaces the same window.
        let mut other = crate::delta::table::open(table.table_url()).await.unwrap();
        let theirs = window(1, "theirs.parquet", "run-theirs");
        let c2 = commit_windows(&mut other, &mut None, "d", &[theirs])
            .await
            .unwrap();
        assert_eq!((c2.version, c2.files_removed), (base + 2, 1));
        table.update_state().await.unwrap();
        assert_eq!(
            landed(&table, std::slice::from_ref(&ours), base)
                .await
                .unwrap(),
            Some(base + 1)
        );
        // A run that never committed has not landed.
        let never = window(1, "never.parquet", "run-never");
        assert_eq!(landed(&table, &[never], base).await.unwrap(), None);
    }

    /// Bug: a commit that adds a column and loses its version to another writer that added
    /// the same column (backfill shards of a task whose query just gained it) compared the
    /// re-read table's schema with the one from before its own change, and failed with "the
    /// table's schema changed while this run was committing": every shard but the first
    /// failed its first window. The schema this commit writes is not a change under it.
    #[tokio::test]
    async fn a_lost_race_to_the_same_new_column_rebuilds_instead_of_failing() {
        let dir = tempfile::tempdir().unwrap();
        let mut table = new_table(dir.path()).await;
        let base = table.version().unwrap() as i64;
        let y = Field::new("y", DataType::Utf8, true);
        let wider = |t: &DeltaTable| widened(t, std::slice::from_ref(&y));
        // Both writers start from the same version, each adding column y.
        let mut first = crate::delta::table::open(table.table_url()).await.unwrap();
        let mut theirs = window(2, "theirs.parquet", "run-theirs");
        theirs.metadata = Some(wider(&first));
        let mut ours = window(1, "ours.parquet", "run-ours");
        ours.metadata = Some(wider(&table));
        let mut files = Some(FileMap::from_table(&table, "d").unwrap());
        commit_windows(&mut first, &mut None, "d", &[theirs])
            .await
            .unwrap();
        let c = commit_windows(&mut table, &mut files, "d", &[ours])
            .await
            .unwrap();
        assert_eq!(c.version, base + 2);
        let reread = crate::delta::table::open(table.table_url()).await.unwrap();
        let names: Vec<String> = reread
            .snapshot()
            .unwrap()
            .schema()
            .fields()
            .map(|f| f.name().to_string())
            .collect();
        assert_eq!(names, ["x", "d", "y"]);
        // A different change under it still fails, and publishes nothing.
        let mut other = crate::delta::table::open(table.table_url()).await.unwrap();
        let mut z = window(3, "z.parquet", "run-z");
        z.metadata = Some(widened(&other, &[Field::new("z", DataType::Int32, true)]));
        let mut stale = crate::delta::table::open(table.table_url()).await.unwrap();
        let mut stale_files = Some(FileMap::from_table(&stale, "d").unwrap());
        commit_windows(&mut other, &mut None, "d", &[z])
            .await
            .unwrap();
        let mut late = window(4, "late.parquet", "run-late");
        late.metadata = Some(widened(&stale, &[Field::new("w", DataType::Int32, true)]));
        let e = commit_windows(&mut stale, &mut stale_files, "d", &[late])
            .await
            .unwrap_err();
        assert!(e.message().contains("schema changed"), "{}", e.message());
        assert_eq!(
            crate::delta::table::open(table.table_url())
                .await
                .unwrap()
                .version(),
            Some((base + 3) as u64)
        );
    }
}
