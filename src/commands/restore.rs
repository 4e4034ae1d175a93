//! `restore`: put one window back as it was at an earlier table version — time travel scoped
//! to a window (Delta's own RESTORE only rolls back whole tables).
//!
//! One commit removes the window's current files and re-adds the files it held at version
//! `V` (files live in both are left alone); other windows are untouched. The files must still
//! be in storage: if a vacuum deleted any of them the restore is refused, naming them, and
//! nothing changes. The re-added files keep the tags of the run that first published them,
//! plus `idemlake.restored_from = V`, so `status` shows the window as restored. Files a merge
//! wrote carry no tags: the SQL hash (and the sources read, for the restore's record) are
//! then those of the newest run the run log records publishing the window at `V` or before. The restore's run-log entry records the version
//! it made, which is what makes the windows downstream that read the window stale. The commit is
//! a replaceWhere `WRITE` built on the latest snapshot: a run publishing the same window
//! meanwhile makes it a conflict (nothing changes; run the restore again). Read-back: the
//! window at the new version holds exactly version `V`'s files and their rows.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deltalake::DeltaTable;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, Remove};
use deltalake::protocol::{DeltaOperation, SaveMode};
use object_store::{ObjectStore, ObjectStoreExt};

use crate::delta::actions::{find_run_commit, run_record};
use crate::delta::overwrite::TAG_RESTORED_FROM;
use crate::delta::partition::{in_window, window_files, window_rows};
use crate::delta::table;
use crate::error::{Error, Result};
use crate::report::record::{Check, Report, RunRecord, SourceVersion, Status};
use crate::report::runlog;
use crate::task::Task;
use crate::task::project::Project;
use crate::task::range::WindowRange;
use crate::task::window::Window;

/// Which version to restore the window to.
#[derive(Debug, Clone)]
pub enum RestoreTo {
    /// Exactly this table version.
    Version(i64),
    /// The version right before the commit of this run.
    BeforeRun(String),
}

/// The window's live files in `table`: their `add` actions.
fn window_adds(table: &DeltaTable, range: &WindowRange) -> Result<Vec<Add>> {
    let mut out = Vec::new();
    for view in table.snapshot()?.snapshot().log_data().iter() {
        if in_window(&view, range) {
            #[allow(deprecated)]
            out.push(view.add_action());
        }
    }
    Ok(out)
}

/// The oldest version the table's log can still load: its oldest commit file, or a
/// checkpoint older than every commit file (a log cleaned up after a checkpoint).
async fn oldest_in_log(table: &DeltaTable) -> Result<i64> {
    let store = table.log_store().object_store(None);
    let log = object_store::path::Path::from("_delta_log");
    let listed = store.list_with_delimiter(Some(&log)).await?;
    let version = |name: &str, suffix: &str| {
        name.strip_suffix(suffix)
            .filter(|v| v.len() == 20)
            .and_then(|v| v.parse::<i64>().ok())
    };
    let names = listed.objects.iter().filter_map(|m| m.location.filename());
    let (mut commits, mut checkpoints) = (Vec::new(), Vec::<i64>::new());
    for n in names {
        commits.extend(version(n, ".json"));
        checkpoints.extend(version(n, ".checkpoint.parquet"));
    }
    Ok(oldest_loadable(&mut commits, &checkpoints))
}

/// The oldest version a log with these commit files and checkpoints loads: one whose commits
/// from the log's start, or from a checkpoint at or below it, are all there. Only the newest
/// unbroken run of commit files counts (a gap breaks time travel across it).
fn oldest_loadable(commits: &mut [i64], checkpoints: &[i64]) -> i64 {
    commits.sort_unstable();
    // The start of the newest unbroken run of commit files.
    let mut start = commits.last().copied().unwrap_or(0);
    for pair in commits.windows(2).rev() {
        if pair[1] != pair[0] + 1 {
            break;
        }
        start = pair[0];
    }
    if start == 0 {
        return 0;
    }
    // A checkpoint just before the run (or inside it) loads the versions from itself on.
    checkpoints
        .iter()
        .filter(|c| **c >= start - 1)
        .min()
        .copied()
        .unwrap_or(start)
}

/// The version to restore to, checked against the table.
async fn resolve(latest: &DeltaTable, to: &RestoreTo) -> Result<i64> {
    let newest = latest.version().unwrap_or(0) as i64;
    let oldest = oldest_in_log(latest).await.unwrap_or(0);
    match to {
        RestoreTo::Version(v) if (oldest..=newest).contains(v) => Ok(*v),
        RestoreTo::Version(v) if (0..oldest).contains(v) => Err(Error::input(format!(
            "--to-version {v}: the table's log no longer holds it (cleaned up after a checkpoint): the versions it can restore are {oldest} to {newest}"
        ))),
        RestoreTo::Version(v) => Err(Error::input(format!(
            "--to-version {v}: the table's versions are 0 to {newest}"
        ))),
        RestoreTo::BeforeRun(run) => match find_run_commit(latest, -1, run).await? {
            Some(0) => Err(Error::input(format!(
                "run {run} made version 0: there is no version before it"
            ))),
            Some(v) => Ok(v - 1),
            None if oldest > 0 => Err(Error::input(format!(
                "no commit in the table's log names run {run}: the log holds versions {oldest} to \
                 {newest} only (older commits were cleaned up after a checkpoint, so the run's \
                 may be among them); restore with --to-version {oldest} or later"
            ))),
            None => Err(Error::input(format!(
                "no commit in the table's log names run {run} (a failed run commits nothing; \
                 `idemlake status` shows the run that published each window)"
            ))),
        },
    }
}

/// Restore `window` of `task` to its state at the version `to` names.
pub async fn restore(
    project: &Project,
    task: &Task,
    window: &Window,
    to: &RestoreTo,
) -> Result<Report> {
    let started = std::time::Instant::now();
    let url = project.table_url(task)?;
    let latest = table::open(&url).await?;
    if latest.version().is_none() {
        return Err(Error::input(format!(
            "task {} has no table yet at {url}: nothing to restore",
            task.name
        )));
    }
    let v = resolve(&latest, to).await?;
    let range = &WindowRange::of(task, window);
    let then = table::open_at(&url, v as u64)
        .await
        .map_err(|e| e.context(format!("version {v} cannot be loaded")))?;
    let wanted = window_adds(&then, range)?;
    let current = window_adds(&latest, range)?;
    let store = latest.log_store().object_store(None);
    ensure_in_storage(&store, window, v, &wanted).await?;
    let run_id = uuid::Uuid::new_v4().to_string();
    let mut report = Report::new(task, window, &run_id);
    let want_paths: HashSet<&str> = wanted.iter().map(|a| a.path.as_str()).collect();
    let (removes, adds) = changes(&current, &wanted, &want_paths, v);
    let rows_then = window_rows(&window_files(&then, range)?)?;
    let (sql_hash, sources) = provenance(&latest, &store, window, v, &wanted).await;
    report.sql_hash = sql_hash;
    if removes.is_empty() && adds.is_empty() {
        report.status = Status::Ok;
        report.rows_written = rows_then;
        report.table_version = latest.version().map(|x| x as i64);
        report.error = None;
        report.duration_ms = started.elapsed().as_millis() as u64;
        return Ok(report);
    }
    let mut record = RunRecord::new(
        task,
        window,
        &run_id,
        report.sql_hash.as_deref().unwrap_or_default(),
    );
    record.rows_written = rows_then;
    record.sources = sources;
    let version = commit(&latest, (range, window), &record, v, removes, adds).await?;
    report.published = true;
    report.table_version = Some(version);
    report.rows_written = rows_then;
    // Read back: the window at the new version holds exactly version V's files.
    let check = read_back(&url, range, version, v, &want_paths).await?;
    settle(&mut report, check, rows_then, version, v);
    report.duration_ms = started.elapsed().as_millis() as u64;
    runlog::record(&store, &report, false).await;
    Ok(report)
}

/// The SQL hash of the run that published what the window held at version `v`, and the
/// sources it read (for the restore's record). From the files' tags when they say; files a
/// merge wrote carry none: then from the newest attempt in the run log that published the
/// window at `v` or before (its entry, and its commit's record for the sources it read).
async fn provenance(
    latest: &DeltaTable,
    store: &Arc<dyn ObjectStore>,
    window: &Window,
    v: i64,
    wanted: &[Add],
) -> (Option<String>, Vec<SourceVersion>) {
    let tagged = wanted.iter().find_map(|a| {
        a.tags
            .as_ref()?
            .get(crate::delta::overwrite::TAG_SQL_HASH)?
            .clone()
    });
    if tagged.is_some() {
        // The files keep their `idemlake.inputs` tag: `status` reads the sources there.
        return (tagged, Vec::new());
    }
    let Ok(attempts) = runlog::attempts(store).await else {
        return (None, Vec::new());
    };
    for a in attempts.get(&window.label()).into_iter().flatten().rev() {
        match runlog::published_version(store, a).await {
            Some(at) if at <= v => {
                let hash = runlog::read(store, a).await.ok().and_then(|r| r.sql_hash);
                let sources = run_record(latest, at, &a.run_id)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|r| serde_json::from_value(r.get("sources")?.clone()).ok())
                    .unwrap_or_default();
                return (hash, sources);
            }
            _ => {}
        }
    }
    (None, Vec::new())
}

/// Refuse the restore, naming them, if any of the files `wanted` at version `v` is no longer
/// in storage.
async fn ensure_in_storage(
    store: &Arc<dyn ObjectStore>,
    window: &Window,
    v: i64,
    wanted: &[Add],
) -> Result<()> {
    let mut gone = Vec::new();
    for a in wanted {
        let path = object_store::path::Path::parse(&a.path)
            .map_err(|e| Error::runtime(format!("{}: {e}", a.path)))?;
        if store.head(&path).await.is_err() {
            gone.push(a.path.clone());
        }
    }
    if !gone.is_empty() {
        return Err(Error::runtime(format!(
            "cannot restore window {} to version {v}: {} of its {} file(s) are no longer in storage (vacuumed?): {}; nothing was changed",
            window.label(),
            gone.len(),
            wanted.len(),
            gone.join(", ")
        )));
    }
    Ok(())
}

/// The actions turning the window's `current` files into the `wanted` ones of version `v`:
/// removes for the files only live now, adds (tagged restored from `v`) for those only live
/// then.
fn changes(
    current: &[Add],
    wanted: &[Add],
    want_paths: &HashSet<&str>,
    v: i64,
) -> (Vec<Remove>, Vec<Add>) {
    let have_paths: HashSet<&str> = current.iter().map(|a| a.path.as_str()).collect();
    let removes: Vec<Remove> = current
        .iter()
        .filter(|a| !want_paths.contains(a.path.as_str()))
        .map(remove_of)
        .collect();
    let adds: Vec<Add> = wanted
        .iter()
        .filter(|a| !have_paths.contains(a.path.as_str()))
        .cloned()
        .map(|mut a| {
            let mut tags = a.tags.take().unwrap_or_default();
            tags.insert(TAG_RESTORED_FROM.to_string(), Some(v.to_string()));
            a.tags = Some(tags);
            a.data_change = true;
            a
        })
        .collect();
    (removes, adds)
}

/// The one replaceWhere `WRITE` commit of `removes` and `adds` on the `latest` snapshot, its
/// commit info the run `record` and the version `v` it brings back; returns the new version.
async fn commit(
    latest: &DeltaTable,
    (range, window): (&WindowRange, &Window),
    record: &RunRecord,
    v: i64,
    removes: Vec<Remove>,
    adds: Vec<Add>,
) -> Result<i64> {
    let mut info = serde_json::to_value(record).expect("serialisable");
    info["restored_from"] = serde_json::json!(v);
    let mut actions: Vec<Action> = removes.into_iter().map(Action::Remove).collect();
    actions.extend(adds.iter().cloned().map(Action::Add));
    let op = DeltaOperation::Write {
        mode: SaveMode::Overwrite,
        partition_by: Some(vec![range.column().to_string()]),
        predicate: Some(range.replace_where()),
    };
    let snapshot = latest.snapshot()?.snapshot().clone();
    let done = CommitBuilder::from(CommitProperties::default().with_metadata(HashMap::from([(
        crate::report::record::COMMIT_INFO_KEY.to_string(),
        info,
    )])))
    .with_actions(actions)
    .build(Some(&snapshot), latest.log_store(), op)
    .await
    .map_err(|e| {
        if table::is_conflict(&e) {
            Error::runtime(format!(
                "another writer changed window {} while it was restored; nothing was changed, run the restore again: {e}",
                window.label()
            ))
        } else {
            Error::runtime(format!("the restore's commit failed, nothing was changed: {e}"))
        }
    })?;
    Ok(done.version as i64)
}

/// The window's rows at the new `version`, if it holds exactly the files `want_paths` of
/// version `v`; else what differs, or why it could not be read.
async fn read_back(
    url: &url::Url,
    range: &WindowRange,
    version: i64,
    v: i64,
    want_paths: &HashSet<&str>,
) -> Result<std::result::Result<u64, String>> {
    let after = table::open_at(url, version as u64).await;
    Ok(match after {
        Ok(after) => {
            let live = window_files(&after, range)?;
            let live_paths: HashSet<&str> = live.iter().map(|f| f.path.as_str()).collect();
            if live_paths != *want_paths {
                Err(format!(
                    "read-back: version {version} holds {} file(s) in the window, version {v} held {}",
                    live_paths.len(),
                    want_paths.len()
                ))
            } else {
                window_rows(&live).map_err(|e| e.message().to_string())
            }
        }
        Err(e) => Err(format!(
            "read-back: version {version} could not be loaded: {e}"
        )),
    })
}

/// The report's status after the read-back `check`: restored, or failed unverified.
fn settle(
    report: &mut Report,
    check: std::result::Result<u64, String>,
    rows_then: u64,
    version: i64,
    v: i64,
) {
    match check {
        Ok(rows) => {
            report
                .reconciliation
                .push(Check::counts("rows_committed", rows_then, rows));
            report.status = Status::Restored;
            report.error = None;
            if rows != rows_then {
                report.fail(&Error::unverified(format!(
                    "read-back: {rows} rows at version {version}, {rows_then} at version {v}"
                )));
            }
        }
        Err(e) => report.fail(&Error::unverified(e)),
    }
}

/// The `remove` action for a live file.
fn remove_of(a: &Add) -> Remove {
    Remove {
        path: a.path.clone(),
        deletion_timestamp: Some(jiff::Timestamp::now().as_millisecond()),
        data_change: true,
        extended_file_metadata: Some(true),
        partition_values: Some(a.partition_values.clone()),
        size: Some(a.size),
        tags: a.tags.clone(),
        deletion_vector: a.deletion_vector.clone(),
        base_row_id: a.base_row_id,
        default_row_commit_version: a.default_row_commit_version,
    }
}

#[cfg(test)]
mod tests {
    use super::oldest_loadable;

    #[test]
    fn the_oldest_restorable_version_needs_unbroken_commits_from_a_checkpoint() {
        // A whole log.
        assert_eq!(oldest_loadable(&mut [0, 1, 2, 3], &[]), 0);
        // Cleaned up to a checkpoint at 4, whose commit file is kept or not.
        assert_eq!(oldest_loadable(&mut [4, 5, 6], &[4]), 4);
        assert_eq!(oldest_loadable(&mut [5, 6], &[4]), 4);
        // Checkpoints at 10 and 20, commits from 15 on: 11-14 cannot load; 20 is the oldest.
        assert_eq!(
            oldest_loadable(&mut [15, 16, 17, 18, 19, 20, 21], &[10, 20]),
            20
        );
        // A gap in the commit files: only the run after it counts.
        assert_eq!(oldest_loadable(&mut [3, 4, 6, 7], &[5]), 5);
    }
}
