//! A downstream window and its upstream tasks' windows: which it waits for (`require =
//! "complete"`) and which changed after it read them (staleness). Both relate windows by
//! overlap (`task::overlap`), as `backfill --downstream` does.
//!
//! An upstream window *changed* at the newest table version that changed its content,
//! whatever wrote it: an overwrite publish (its files' `idemlake.version` tag), or — where the
//! files' tags do not say — a merge, a restore or an emptying publish (the version in the
//! upstream's run log, which records every such attempt), or any commit after the oldest
//! version a downstream window in question read whose `add` or `remove` actions change data
//! (`dataChange`) in the window's partition: another writer's `DELETE`, `UPDATE` or append
//! too. Those commits are read from the upstream's Delta log, one file each (no data file).
//! Where the log no longer holds a commit after the version a window read (cleaned up after
//! a checkpoint), what it changed is unknown, and the window is stale: re-run once more than
//! needed, never once less. An
//! `optimize` changes no content: it keeps the files' tags, writes no run-log entry and marks
//! its actions `dataChange: false`, so it changes nothing here.

use std::collections::BTreeMap;

use deltalake::DeltaTable;
use futures::{StreamExt, TryStreamExt};

use super::{WindowStatus, published_files};
use crate::delta::actions::{self, Action};
use crate::delta::partition::raw_window;
use crate::delta::table;
use crate::error::{Error, Result};
use crate::report::runlog;
use crate::task::Task;
use crate::task::overlap::{overlapping, overlaps};
use crate::task::project::Project;
use crate::task::window::Window;

/// Per window of `windows` (ascending): the upstream windows overlapping it that nothing has
/// published yet (`task:window`), for task sources with `require = "complete"`; a window with
/// none may run.
pub async fn missing_inputs(
    project: &Project,
    task: &Task,
    windows: &[Window],
) -> Result<Vec<Vec<String>>> {
    let mut out = vec![Vec::new(); windows.len()];
    let (Some(first), Some(last)) = (windows.first(), windows.last()) else {
        return Ok(out);
    };
    for s in &task.sources {
        let (Some(name), crate::task::Require::Complete) = (&s.upstream, s.require) else {
            continue;
        };
        let up = project.task(name)?;
        let Some(range) = overlapping(&up, first.start_ts(), last.end_ts())? else {
            continue;
        };
        // What the upstream holds, not whether it is stale (no log of its upstreams read).
        let (_, states) = super::status_with(project, &up, Some(range), false).await?;
        // A window whose attempts all failed holds nothing either.
        for st in states
            .iter()
            .filter(|st| st.state == "missing" || st.state == "failed")
        {
            let (Ok(a), Ok(b)) = (
                st.window.start.parse::<jiff::Timestamp>(),
                st.window.end.parse::<jiff::Timestamp>(),
            ) else {
                continue;
            };
            for (i, w) in windows.iter().enumerate() {
                if overlaps(a, b, w.start_ts(), w.end_ts()) {
                    out[i].push(format!("{}:{}", up.name, st.window.label));
                }
            }
        }
    }
    Ok(out)
}

/// The failure of a window whose upstream windows are missing (see [`missing_inputs`]).
pub fn blocked(task: &Task, window: &Window, missing: &[String]) -> crate::report::record::Report {
    let mut r = crate::report::record::Report::new(task, window, &uuid::Uuid::new_v4().to_string());
    let shown: Vec<&str> = missing.iter().take(5).map(String::as_str).collect();
    r.fail(&Error::runtime(format!(
        "{} upstream window(s) overlapping {} are not published yet ({}{}): run them first, or set [sources.<alias>] require = \"any\"; nothing was published",
        missing.len(),
        window.label(),
        shown.join(", "),
        if missing.len() > shown.len() { ", …" } else { "" }
    )));
    r
}

/// Write the reports of windows failed by [`blocked`] to `task`'s run log (best effort), as
/// every failed attempt's is: `status` then shows them `failed`, with the error.
pub async fn record_blocked(
    project: &Project,
    task: &Task,
    reports: &[crate::report::record::Report],
) {
    if reports.is_empty() {
        return;
    }
    let opened = async { table::open(&project.table_url(task)?).await }.await;
    let store = match opened {
        Ok(t) => t.log_store().object_store(None),
        Err(e) => {
            tracing::warn!(
                "could not open the run log of {}: {}",
                task.name,
                e.message()
            );
            return;
        }
    };
    let overwrite = task.mode == crate::task::Mode::Overwrite;
    for r in reports {
        runlog::record(&store, r, overwrite).await;
    }
}

/// Per upstream task source (alias): the task's name, each of its windows' bounds and the
/// version that last changed its content, and the newest commit read for in its log that the
/// log no longer holds (cleaned up after a checkpoint: what it changed is unknown).
pub(super) type Upstream = Vec<(
    String,
    String,
    Vec<(jiff::Timestamp, jiff::Timestamp, String, i64)>,
    Option<i64>,
)>;

/// What the task's upstream tasks (`task = "…"` sources) have published, window by window:
/// the newest version that changed each window (see the module documentation). `read`: per
/// source alias, the oldest version of it a downstream window in question read (see
/// [`oldest_reads`]); the upstream's commits after it are read.
pub(super) async fn upstream_publishes(
    project: &Project,
    task: &Task,
    read: &BTreeMap<String, i64>,
) -> Result<Upstream> {
    let mut out = Vec::new();
    for s in &task.sources {
        let Some(name) = &s.upstream else {
            continue;
        };
        let up = project.task(name)?;
        let table = table::open(&project.table_url(&up)?).await?;
        if table.version().is_none() {
            continue;
        }
        let mut changed = changed_at(&table, &up).await?;
        let mut cleaned = None;
        if let Some(&since) = read.get(&s.alias) {
            let (in_log, gone) = changed_in_log(&table, &up, since).await?;
            for (label, v) in in_log {
                let at = changed.entry(label).or_insert(v);
                *at = (*at).max(v);
            }
            cleaned = gone;
        }
        let mut windows = Vec::new();
        for (label, v) in changed {
            let Ok(w) = Window::parse(&label, up.grain, &up.timezone) else {
                continue;
            };
            windows.push((w.start_ts(), w.end_ts(), label, v));
        }
        out.push((s.alias.clone(), up.name.clone(), windows, cleaned));
    }
    Ok(out)
}

/// Per window label of `task`'s table: the newest version that changed its content — its
/// files' newest `idemlake.version` tag, or the newest version its run log records a publish
/// at (a merge, a restore, an emptying publish), whichever is later.
async fn changed_at(table: &DeltaTable, task: &Task) -> Result<BTreeMap<String, i64>> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for (label, acc) in published_files(table, task)? {
        if let Some(v) = acc.runs.keys().next_back() {
            out.insert(label, *v);
        }
    }
    let store = table.log_store().object_store(None);
    for (label, log) in runlog::attempts(&store).await? {
        // The newest publishing attempt (attempts are oldest first).
        let Some(a) = log.iter().rev().find(|a| a.published()) else {
            continue;
        };
        if let Some(v) = runlog::published_version(&store, a).await {
            let at = out.entry(label).or_insert(v);
            *at = (*at).max(v);
        }
    }
    Ok(out)
}

/// Per window label of `task`'s table: the newest commit after `since` whose `add` or
/// `remove` actions change data (`dataChange`) in the window, whoever wrote it; and the newest
/// commit after `since` whose file the log no longer holds, if any.
async fn changed_in_log(
    table: &DeltaTable,
    task: &Task,
    since: i64,
) -> Result<(BTreeMap<String, i64>, Option<i64>)> {
    let latest = table.version().map_or(-1, |v| v as i64);
    let mut commits = futures::stream::iter(since.max(-1) + 1..=latest)
        .map(|v| async move { Ok::<_, Error>((v, actions::read(table, v).await?)) })
        .buffered(8);
    let mut out = BTreeMap::new();
    let mut cleaned = None;
    while let Some((v, lines)) = commits.try_next().await? {
        let Some(lines) = lines else {
            cleaned = Some(v);
            continue;
        };
        for a in lines {
            let raw = match a {
                Action::Add(a) if a.data_change => {
                    a.partition_values.get(&task.partition_by).cloned()
                }
                Action::Remove(r) if r.data_change => r
                    .partition_values
                    .and_then(|p| p.get(&task.partition_by).cloned()),
                _ => None,
            };
            // Versions ascend: the last commit seen for a window is its newest.
            if let Some(w) = raw.flatten().and_then(|raw| raw_window(task, &raw)) {
                out.insert(w.label(), v);
            }
        }
    }
    Ok((out, cleaned))
}

/// Per source alias: the oldest version of it that one of the windows' recorded inputs (in
/// the form of the `idemlake.inputs` file tag) read.
pub(super) fn oldest_reads<'a>(inputs: impl Iterator<Item = &'a str>) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for i in inputs {
        let Ok(read) = serde_json::from_str::<BTreeMap<String, i64>>(i) else {
            continue;
        };
        for (alias, v) in read {
            let at = out.entry(alias).or_insert(v);
            *at = (*at).min(v);
        }
    }
    out
}

/// The Delta source versions the run that published `st` read, from its commit's record, in
/// the form of the `idemlake.inputs` file tag.
pub(super) async fn recorded_inputs(table: &DeltaTable, st: &WindowStatus) -> Option<String> {
    let (Some(v), Some(run)) = (st.table_version, st.run_id.as_deref()) else {
        return None;
    };
    let record = crate::delta::actions::run_record(table, v, run)
        .await
        .ok()??;
    let pinned: BTreeMap<String, i64> = record
        .get("sources")?
        .as_array()?
        .iter()
        .filter_map(|s| {
            Some((
                s.get("alias")?.as_str()?.to_string(),
                s.get("version")?.as_i64()?,
            ))
        })
        .collect();
    (!pinned.is_empty()).then(|| serde_json::to_string(&pinned).expect("serialisable"))
}

/// The upstream windows overlapping `st`'s window that changed after the versions it read
/// (`stale_inputs`), and per upstream task named there the version it read (`stale_read`).
pub(super) fn stale_inputs(st: &mut WindowStatus, inputs: &str, upstream: &Upstream) {
    let Ok(read) = serde_json::from_str::<BTreeMap<String, i64>>(inputs) else {
        return;
    };
    let (Ok(lo), Ok(hi)) = (
        st.window.start.parse::<jiff::Timestamp>(),
        st.window.end.parse::<jiff::Timestamp>(),
    ) else {
        return;
    };
    let mut out = Vec::new();
    for (alias, name, windows, cleaned) in upstream {
        let Some(&seen) = read.get(alias) else {
            continue;
        };
        // What the commits after `seen` changed is no longer in the log: maybe this window.
        if let Some(c) = cleaned.filter(|c| *c > seen) {
            out.push(format!(
                "{name} (its log no longer holds the commits after version {seen}, up to {c})"
            ));
            st.stale_read.insert(name.clone(), seen);
            continue;
        }
        for (start, end, label, v) in windows {
            if overlaps(*start, *end, lo, hi) && *v > seen {
                out.push(format!("{name}:{label}@{v}"));
                st.stale_read.insert(name.clone(), seen);
            }
        }
    }
    st.stale_inputs = out;
}
