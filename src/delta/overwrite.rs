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

use crate::delta::filemap::FileMap;
use crate::delta::table::{checkpoint_due, cleanup_due};
use crate::error::{Error, Result};
use crate::task::range::WindowRange;

mod recover;
use recover::{CatchUp, after_failure, catch_up};

/// What one commit did.
#[derive(Debug, Clone)]
pub struct Committed {
    pub version: i64,
    pub files_added: usize,
    pub files_removed: usize,
    /// A checkpoint this commit made due, for the caller to write once it has let go of the
    /// table's turn ([`Checkpoint::write`]): the next commit need not wait for it.
    pub checkpoint: Option<Checkpoint>,
}

/// A checkpoint due at `version`, on a copy of the committer's table.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    table: DeltaTable,
    version: i64,
    cleanup: bool,
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
    /// The checks the window passed before its commit, comma-separated (`status` shows
    /// them).
    pub checks: Option<String>,
}

/// Tag keys on `add` actions.
pub const TAG_RUN_ID: &str = "idemlake.run_id";
pub const TAG_WINDOW: &str = "idemlake.window";
pub const TAG_SQL_HASH: &str = "idemlake.sql_hash";
pub const TAG_VERSION: &str = "idemlake.version";
pub const TAG_PUBLISHED_AT: &str = "idemlake.published_at";
/// The versions of the Delta sources the run read (`RunTags::inputs`).
pub const TAG_INPUTS: &str = "idemlake.inputs";
/// The checks the publishing run's window passed before its commit (`RunTags::checks`).
pub const TAG_CHECKS: &str = "idemlake.checks";
/// On files `restore` re-added: the table version they were restored from.
pub const TAG_RESTORED_FROM: &str = "idemlake.restored_from";

/// How many times a commit is rebuilt on top of commits that other writers made first.
pub const REBASE_ATTEMPTS: usize = 200;

/// One window of a commit: its range (the files it replaces, its replaceWhere predicate),
/// staged files, tags and run record.
pub struct WindowCommit {
    pub range: WindowRange,
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
/// the commits written since are replayed onto the map from the log (see `recover::catch_up`; or,
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
    let committed = commit_or_rejoin(table, files, partition_by, windows, &|| false).await?;
    Ok(committed.expect("never asked to rejoin"))
}

/// [`commit_windows`], except that after a race lost on the accelerated path (the map caught
/// up with the winners' commits, nothing of this commit in the log) it returns `None` when
/// `waiting()` says other windows were staged meanwhile: the caller then commits them with
/// `windows`, on the map as it now is, instead of leaving them for another turn.
pub async fn commit_or_rejoin(
    table: &mut DeltaTable,
    files: &mut Option<FileMap>,
    partition_by: &str,
    windows: &[WindowCommit],
    waiting: &(dyn Fn() -> bool + Sync),
) -> Result<Option<Committed>> {
    let pending = Pending::new(table, partition_by, windows)?;
    let mut first_base = None;
    let mut attempt = 0;
    loop {
        let map = current_map(table, files, partition_by).await?;
        let attempt_base = map.version;
        let base = *first_base.get_or_insert(attempt_base);
        let target = attempt_base + 1;
        let (actions, files_removed) = actions(map, windows, target);
        // delta-rs's own commit path also cleans up expired logs when this commit writes a
        // checkpoint; decided before the attempt, like its snapshot.
        let cleanup = !pending.commit.direct && cleanup_due(table, target)?;
        let e = match pending.commit.write(table, target, actions, cleanup).await {
            Ok(()) => {
                let checkpoint = pending.advance(table, files, target);
                return Ok(Some(Committed {
                    checkpoint,
                    ..pending.counted(target, files_removed)
                }));
            }
            Err(e) => e,
        };
        // Another writer took the version (or this commit landed and its response was lost).
        // Accelerated: replay the commits written since the map's version onto the map, as
        // read from the log, and rebuild on top; re-reading the whole table state for every
        // lost race made concurrent workers starve each other (bench/SCALE.md). Anything the
        // replay cannot follow falls back to the full re-read below (the plain twin).
        if pending.commit.direct && crate::config::get().accelerate {
            match catch_up(table, files, &windows[0].range, &windows[0].tags.run_id).await {
                CatchUp::Moved if attempt < REBASE_ATTEMPTS => {
                    attempt += 1;
                    COMMITS[2].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if waiting() {
                        return Ok(None);
                    }
                    tracing::debug!(
                        "version {target} was taken by another writer; replayed the log to version {} and rebuilding on top (attempt {attempt})",
                        files.as_ref().map_or(-1, |m| m.version)
                    );
                    // No pause: the map is at the latest version the log showed, and every
                    // millisecond spent here widens the window in which the next race is lost.
                    continue;
                }
                CatchUp::Ours(version) => {
                    tracing::warn!(
                        "the commit reported an error ({e}) but it is in the log at version {version}; not applying it twice"
                    );
                    *files = None;
                    let _ = table.update_state().await;
                    return Ok(Some(pending.counted(version, 0)));
                }
                _ => {}
            }
        }
        // Re-read the table: the map is no longer known to be current.
        *files = None;
        if let Some(version) = after_failure(table, windows, base, &e).await? {
            return Ok(Some(pending.counted(version, 0)));
        }
        pending.may_rebuild(table, attempt_base, attempt, &e)?;
        attempt += 1;
        COMMITS[2].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(
            "version {target} was taken by another writer; rebuilding on top (attempt {attempt})"
        );
        tokio::time::sleep(std::time::Duration::from_millis((attempt as u64 % 8) * 3)).await;
    }
}

/// The live files to build an attempt on: `files`, or (when `None`, and always in the plain
/// twin, after reloading the table's state) a map built from the table's snapshot.
async fn current_map<'a>(
    table: &mut DeltaTable,
    files: &'a mut Option<FileMap>,
    partition_by: &str,
) -> Result<&'a mut FileMap> {
    if !crate::config::get().accelerate {
        // The plain twin: the window's files come from a snapshot loaded for this commit.
        table.update_state().await?;
        *files = None;
    }
    if files.is_none() {
        *files = Some(FileMap::from_table(table, partition_by)?);
    }
    Ok(files.as_mut().expect("just built"))
}

/// What every attempt of one [`commit_windows`] call shares: its windows, the commit as
/// written, and the table's schema before the first attempt.
struct Pending<'a> {
    windows: &'a [WindowCommit],
    commit: Commit,
    files_added: usize,
    /// The table's schema when the commit began.
    schema: std::sync::Arc<deltalake::kernel::StructType>,
    /// The schema this commit itself writes, if it changes the table's.
    own_schema: Option<deltalake::kernel::StructType>,
}

impl<'a> Pending<'a> {
    /// Read the table's schema and prepare the commit of `windows`.
    fn new(
        table: &DeltaTable,
        partition_by: &str,
        windows: &'a [WindowCommit],
    ) -> Result<Pending<'a>> {
        let schema = table.snapshot()?.schema();
        let own_schema = windows
            .iter()
            .find_map(|w| w.metadata.as_ref())
            .and_then(|m| m.parse_schema().ok());
        let files_added = windows.iter().map(|w| w.adds.len()).sum();
        let commit = Commit::new(table, partition_by, windows);
        Ok(Pending {
            windows,
            commit,
            files_added,
            schema,
            own_schema,
        })
    }

    /// Count the commit, published as `version`, and say what it did.
    fn counted(&self, version: i64, files_removed: usize) -> Committed {
        count_commit(self.windows.len());
        Committed {
            version,
            files_added: self.files_added,
            files_removed,
            checkpoint: None,
        }
    }

    /// After the attempt written as `target`: advance `files` by it and say whether a
    /// checkpoint is due (direct commits), or drop the map (delta-rs's commit writes its own).
    fn advance(
        &self,
        table: &DeltaTable,
        files: &mut Option<FileMap>,
        target: i64,
    ) -> Option<Checkpoint> {
        if !self.commit.direct {
            *files = None;
            return None;
        }
        let adds: Vec<&Add> = self.windows.iter().flat_map(|w| &w.adds).collect();
        let ranges: Vec<&WindowRange> = self.windows.iter().map(|w| &w.range).collect();
        let map = files.as_mut().expect("built for this attempt");
        if !map.apply(target, &ranges, &adds) {
            *files = None;
        }
        let cleanup = checkpoint_due(table, target).ok().flatten()?;
        Some(Checkpoint {
            table: table.clone(),
            version: target,
            cleanup,
        })
    }

    /// After a failed attempt built on `attempt_base` that did not land (the table re-read):
    /// whether it may be rebuilt on top — the table moved, attempts are left, and its schema
    /// did not change under this commit — or the error that ends the commit.
    fn may_rebuild(
        &self,
        table: &DeltaTable,
        attempt_base: i64,
        attempt: usize,
        e: &DeltaTableError,
    ) -> Result<()> {
        let moved = table.version().unwrap_or(0) as i64 > attempt_base;
        if !moved || attempt >= REBASE_ATTEMPTS {
            return Err(Error::runtime(format!(
                "commit failed, nothing was published: {e}"
            )));
        }
        // A change under this commit fails it; the schema this commit itself writes, already
        // written by another writer (shards of a task that just gained a column), does not.
        let now = table.snapshot()?.schema();
        if now != self.schema && self.own_schema.as_ref().is_none_or(|own| *own != *now) {
            return Err(Error::runtime(
                "the table's schema changed while this run was committing; nothing was published",
            ));
        }
        Ok(())
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
                    [one] => one.range.replace_where(),
                    many => many
                        .iter()
                        .map(|w| format!("({})", w.range.replace_where()))
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
        actions.extend(map.removes(&w.range).into_iter().map(Action::Remove));
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
            if let Some(checks) = &w.tags.checks {
                tags.insert(TAG_CHECKS.to_string(), Some(checks.clone()));
            }
            a.tags = Some(tags);
            Action::Add(a)
        }));
    }
    (actions, files_removed)
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

impl Checkpoint {
    /// Write the checkpoint (and clean up expired log files, if the table allows it), as
    /// delta-rs's post-commit hook would. A failure here does not undo the commit; it is logged
    /// and the next checkpoint covers it.
    pub async fn write(mut self) {
        let version = self.version;
        let table = &mut self.table;
        let done = async {
            table.update_incremental(Some(version as u64)).await?;
            deltalake::checkpoints::create_checkpoint(table, None).await?;
            if self.cleanup {
                deltalake::checkpoints::cleanup_metadata(table, None).await?;
            }
            Ok::<(), DeltaTableError>(())
        }
        .await;
        match done {
            Ok(()) => tracing::debug!(version, "checkpoint written"),
            Err(e) => {
                tracing::warn!("version {version} is committed, but its checkpoint failed: {e}")
            }
        }
    }
}

#[cfg(test)]
mod tests;
