//! `status`: per window, what is published now, which run published it, and what failed since.
//!
//! Everything comes from beside the data, with a bounded number of reads whatever the length
//! of the table's history: the current snapshot (loaded from the latest checkpoint plus the
//! commits after it) gives each window's rows and files from statistics and, from the tags
//! idemlake puts on every file it commits, the run id, SQL hash, table version and time of the
//! publish; one listing of the run log adds failed attempts and emptied windows. No commit
//! file is read for a task reading no upstream task; for staleness, one reading upstream
//! tasks also reads a merge-written window's publishing run record (its inputs) and the
//! upstream's commits after the oldest version a window read (see `upstream`).

use std::collections::BTreeMap;

mod database;
mod rewrites;
mod upstream;
mod zones;
pub use upstream::{blocked, missing_inputs, record_blocked};
use upstream::{oldest_reads, recorded_inputs, stale_inputs, upstream_publishes};

use crate::delta::overwrite::{
    TAG_CHECKS, TAG_INPUTS, TAG_PUBLISHED_AT, TAG_RESTORED_FROM, TAG_RUN_ID, TAG_SQL_HASH,
    TAG_VERSION,
};
use crate::delta::partition::file_window;
use crate::delta::table;
use crate::error::{Error, Result};
use crate::report::record::WindowRecord;
pub use crate::report::states::WindowStatus;
use crate::task::Task;
use crate::task::project::Project;
use crate::task::window::Window;
use deltalake::DeltaTable;
use object_store::ObjectStore;
use std::sync::Arc;

#[derive(Default)]
struct Acc {
    rows: u64,
    files: usize,
    /// (version, run id, sql hash, published at) of tagged files.
    runs: BTreeMap<i64, (String, String, String)>,
    untagged: usize,
    /// The version `restore` brought the window back to, if its files say so.
    restored_from: Option<i64>,
    /// The Delta source versions the newest publishing run read (`TAG_INPUTS`), and its
    /// version.
    inputs: Option<(i64, String)>,
    /// The checks the newest publishing run passed before its commit (`TAG_CHECKS`), and
    /// its version.
    checks: Option<(i64, String)>,
}

/// Windows are read from the partitions: a table partitioned otherwise (another job's,
/// appended to) would show every window missing, so it is refused, naming `adopt`.
fn partitioned_by_window(table: &DeltaTable, task: &Task, url: &url::Url) -> Result<()> {
    let parts = table.snapshot()?.metadata().partition_columns().to_vec();
    if parts == [task.partition_by.clone()] {
        return Ok(());
    }
    Err(Error::input(format!(
        "the table at {url} is partitioned by [{}], not by task {}'s window column `{}`, so its windows cannot be told apart: `idemlake adopt {}` rewrites it so, every row kept, in one commit (`audit` reads it as it is)",
        parts.join(", "),
        task.name,
        task.partition_by,
        task.name
    )))
}

/// The published windows of a task (all of them, or `range`).
pub async fn status(
    project: &Project,
    task: &Task,
    range: Option<(Window, Window)>,
) -> Result<(Option<i64>, Vec<WindowStatus>)> {
    status_with(project, task, range, true).await
}

/// [`status`]; without `staleness`, what the windows hold only (no upstream log is read:
/// `stale` is then false, `stale_inputs` empty).
pub async fn status_with(
    project: &Project,
    task: &Task,
    range: Option<(Window, Window)>,
    staleness: bool,
) -> Result<(Option<i64>, Vec<WindowStatus>)> {
    let url = project.table_url(task)?;
    let table = table::open(&url).await?;
    let version = table.version();
    if version.is_some() {
        partitioned_by_window(&table, task, &url)?;
    }
    // No table yet: no files, but the run log (beside where the table will be) may already
    // hold failed attempts.
    let mut data = match version {
        Some(_) => published_files(&table, task)?,
        None => BTreeMap::new(),
    };

    let store = table.log_store().object_store(None);
    let attempts = crate::report::runlog::attempts(&store).await?;

    let labels: Vec<String> = match &range {
        Some((a, b)) => Window::range(a, b)?.iter().map(Window::label).collect(),
        None => {
            let mut l: Vec<String> = data.keys().cloned().collect();
            l.extend(attempts.keys().filter(|k| !data.contains_key(*k)).cloned());
            l.sort();
            l
        }
    };

    if version.is_some() {
        through_rewrites(&table, task, &mut data, &labels).await?;
    }
    let current_hash = crate::task::plan::sql_hash(task);
    let has_upstream = task.sources.iter().any(|s| s.upstream.is_some());
    let mut windows = Vec::new();
    for label in labels {
        let acc = data.remove(&label).unwrap_or_default();
        let inputs = acc.inputs.clone();
        let log = attempts.get(&label).cloned().unwrap_or_default();
        let mut st = window_status(task, &label, acc, &log, &store).await;
        // Only a window holding data (or published empty) is stale, not one that failed.
        let holds = st.state.starts_with("published") || st.state == "empty";
        st.stale = staleness && holds && st.sql_hash.as_deref().is_some_and(|h| h != current_hash);
        // Files a merge wrote carry no tags: the inputs are in the publishing run's record.
        let inputs = match inputs {
            Some((_, i)) => Some(i),
            None if staleness && has_upstream && st.state.starts_with("published") => {
                recorded_inputs(&table, &st).await
            }
            None => None,
        };
        windows.push((st, inputs));
    }
    let read = oldest_reads(windows.iter().filter_map(|(_, i)| i.as_deref()));
    let upstream = match staleness {
        true => upstream_publishes(project, task, &read).await?,
        false => Default::default(),
    };
    let mut out = Vec::new();
    let mut listings = zones::Listings::default();
    let mut recheck = database::Recheck::default();
    for (mut st, inputs) in windows {
        if let Some(inputs) = &inputs {
            stale_inputs(&mut st, inputs, &upstream);
            st.stale |= !st.stale_inputs.is_empty();
        }
        if staleness && version.is_some() && st.state.starts_with("published") {
            let mut changed = zones::changed_files(&table, task, &st, &mut listings).await?;
            changed.extend(recheck.changed_rows(&table, task, &st).await?);
            st.stale |= !changed.is_empty();
            st.stale_inputs.extend(changed);
        }
        st.retryable = st.state == "missing" || st.failed_since > 0 || st.stale;
        out.push(st);
    }
    Ok((version.map(|v| v as i64), out))
}

/// What the table's snapshot says of each window: rows, files and the runs named by the
/// files' tags (statistics and tags only; no data file is read).
fn published_files(table: &DeltaTable, task: &Task) -> Result<BTreeMap<String, Acc>> {
    let mut data: BTreeMap<String, Acc> = BTreeMap::new();
    for view in table.snapshot()?.snapshot().log_data().iter() {
        // A value no window can hold (out of the calendar's range) is not one of the task's.
        let Some(w) = file_window(&view, task) else {
            continue;
        };
        let acc = data.entry(w.label()).or_default();
        acc.rows += view.num_records().unwrap_or(0) as u64;
        acc.files += 1;
        #[allow(deprecated)]
        let tags = view.add_action().tags.unwrap_or_default();
        if !note_tags(acc, &tags) {
            acc.untagged += 1;
        }
    }
    Ok(data)
}

/// Record in `acc` the run a file's `tags` name (and the version `restore` brought it back
/// to); false if they name no run.
fn note_tags(acc: &mut Acc, tags: &rewrites::Tags) -> bool {
    let tag = |k: &str| tags.get(k).cloned().flatten();
    if let Some(v) = tag(TAG_RESTORED_FROM).and_then(|v| v.parse::<i64>().ok()) {
        acc.restored_from = Some(v);
    }
    let (Some(v), Some(run)) = (
        tag(TAG_VERSION).and_then(|v| v.parse::<i64>().ok()),
        tag(TAG_RUN_ID),
    ) else {
        return false;
    };
    if let Some(i) = tag(TAG_INPUTS)
        && acc.inputs.as_ref().is_none_or(|(at, _)| *at < v)
    {
        acc.inputs = Some((v, i));
    }
    if let Some(c) = tag(TAG_CHECKS)
        && acc.checks.as_ref().is_none_or(|(at, _)| *at < v)
    {
        acc.checks = Some((v, c));
    }
    acc.runs.insert(
        v,
        (
            run,
            tag(TAG_SQL_HASH).unwrap_or_default(),
            tag(TAG_PUBLISHED_AT).unwrap_or_default(),
        ),
    );
    true
}

/// The windows among `labels` with untagged files get the run whose rows those hold if they
/// are another tool's rewrites of its files (`dataChange: false`), read back through the log
/// (see `rewrites`; the snapshot does not keep `dataChange`).
async fn through_rewrites(
    table: &DeltaTable,
    task: &Task,
    data: &mut BTreeMap<String, Acc>,
    labels: &[String],
) -> Result<()> {
    // A merge writes untagged files of its own, and its windows' publishers come from the
    // run log: reading the log back would find each window's merge commit, at up to
    // `MAX_COMMITS` requests a status.
    if task.mode == crate::task::Mode::Merge {
        return Ok(());
    }
    let wanted: std::collections::BTreeSet<String> = labels
        .iter()
        .filter(|l| data.get(*l).is_some_and(|a| a.untagged > 0))
        .cloned()
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    for (label, (_, tags)) in rewrites::publishers(table, task, &wanted).await? {
        let Some(acc) = data.get_mut(&label) else {
            continue;
        };
        if note_tags(acc, &tags) {
            acc.untagged = 0;
        }
    }
    Ok(())
}

/// The window a status label names, shaped as in every command's JSON (a label that is not
/// a window of the task keeps only its label).
fn record_of(task: &Task, label: &str) -> WindowRecord {
    match Window::parse(label, task.grain, &task.timezone) {
        Ok(w) => (&w).into(),
        Err(_) => WindowRecord {
            label: label.to_string(),
            start: String::new(),
            end: String::new(),
        },
    }
}

/// One window's state from its files (`acc`) and its attempts in the run log (`log`).
async fn window_status(
    task: &Task,
    label: &str,
    acc: Acc,
    log: &[crate::report::runlog::Attempt],
    store: &Arc<dyn ObjectStore>,
) -> WindowStatus {
    // The current files' publish, from their tags: a successful overwrite publish writes no
    // run-log entry (`runlog::recorded_by_table`), so failures logged before it are not
    // failures "since" either.
    let published_ms = acc
        .runs
        .values()
        .next_back()
        .and_then(|(_, _, at)| at.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_millisecond());
    let last_ok = log
        .iter()
        .rposition(|a| a.status != "failed" || published_ms.is_some_and(|p| a.at_ms <= p));
    // The last attempt that published (a skipped run, e.g. a merge with an empty result,
    // changed nothing and is never the window's publisher).
    let last_publish = log.iter().rposition(|a| a.published());
    let failed: Vec<_> = log[last_ok.map(|i| i + 1).unwrap_or(0)..].to_vec();
    let last_error = match failed.last() {
        Some(a) => crate::report::runlog::read(store, a)
            .await
            .ok()
            .and_then(|r| r.error),
        None => None,
    };
    let restored_from = acc.restored_from;
    let checks = acc.checks.clone();
    let mut st = WindowStatus {
        rows: acc.rows,
        files: acc.files,
        failed_since: failed.len(),
        last_error,
        ..WindowStatus::missing(&task.name, record_of(task, label))
    };
    if let Some(publish) = acc.runs.iter().next_back() {
        from_tags(&mut st, &acc, publish, log);
    } else if let (true, Some(i)) = (acc.files > 0, last_publish) {
        // Files without tags (MERGE writes its own): the run log names the publishing run.
        from_run_log(&mut st, "published", &log[i], store).await;
    } else if acc.files > 0 {
        st.state = "published-untracked".into();
    } else if let Some(i) = last_ok {
        // No files: the last run that did not fail emptied the window, or found no rows and
        // published nothing (a merge, or `on_empty = "skip"`: `run_status` "skipped"). Either
        // way an idemlake run completed and the window holds no rows: `empty`, not missing.
        from_run_log(&mut st, "empty", &log[i], store).await;
    }
    if let Some((v, c)) = checks
        && st.table_version == Some(v)
    {
        st.checks = c
            .split(',')
            .filter(|c| !c.is_empty())
            .map(String::from)
            .collect();
    }
    if restored_from.is_some() && st.state.starts_with("published") {
        st.run_status = Some("restored".into());
        st.restored_from = restored_from;
    }
    // No data, and the attempts since failed: the window failed (as the picture draws it).
    if st.state == "missing" && st.failed_since > 0 {
        st.state = "failed".into();
    }
    st
}

/// Fill in `st` from the tags of the window's files (`acc`): `publish` is the newest run they
/// name (its version, and run id, SQL hash and publish time).
fn from_tags(
    st: &mut WindowStatus,
    acc: &Acc,
    (v, (run, hash, at)): (&i64, &(String, String, String)),
    log: &[crate::report::runlog::Attempt],
) {
    st.state = if acc.untagged > 0 || acc.runs.len() > 1 {
        "published-untracked"
    } else {
        "published"
    }
    .into();
    st.table_version = Some(*v);
    st.run_id = Some(run.clone());
    st.sql_hash = Some(hash.clone());
    st.published_at = Some(
        at.split('.')
            .next()
            .unwrap_or(at)
            .trim_end_matches('Z')
            .to_string()
            + "Z",
    );
    st.run_status = log
        .iter()
        .rev()
        .find(|a| &a.run_id == run)
        .map(|a| a.status.clone())
        .or(Some("ok".into()));
}

/// Fill in `st` from the run log's record of attempt `a` (the window's publisher).
async fn from_run_log(
    st: &mut WindowStatus,
    state: &str,
    a: &crate::report::runlog::Attempt,
    store: &Arc<dyn ObjectStore>,
) {
    let published_at = jiff::Timestamp::from_second(a.at_ms / 1000)
        .ok()
        .map(|t| t.to_string());
    match crate::report::runlog::read(store, a).await {
        Ok(r) => {
            st.table_version = r.table_version;
            st.run_id = r.run_id;
            st.sql_hash = r.sql_hash;
            st.checks = r
                .reconciliation
                .iter()
                .filter(|c| c.ok)
                .map(|c| c.check.clone())
                .collect();
        }
        // An empty window is only known from its record.
        Err(_) if state != "published" => return,
        Err(_) => {}
    }
    st.state = state.into();
    st.run_status = Some(a.status.clone());
    st.published_at = published_at;
}

/// Parse `--from`/`--to` into windows of the task.
pub fn parse_range(
    task: &Task,
    from: Option<&str>,
    to: Option<&str>,
) -> Result<Option<(Window, Window)>> {
    match (from, to) {
        (None, None) => Ok(None),
        (Some(a), Some(b)) => Ok(Some((
            Window::parse(a, task.grain, &task.timezone)?,
            Window::parse(b, task.grain, &task.timezone)?,
        ))),
        _ => Err(Error::input("give both --from and --to, or neither")),
    }
}
