//! `status`: per window, what is published now and which run published it.
//!
//! Everything comes from the Delta table itself: the current snapshot gives each window's
//! rows and files (statistics only), and the commits' `commitInfo.idemlake` run records give
//! the last run that published each window (run id, rows, SQL hash, time, version). Commits are
//! read newest first and reading stops once every asked-for window is accounted for.

use std::collections::BTreeMap;

use delta_kernel::expressions::Scalar;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::project::Project;
use crate::publish;
use crate::record::{COMMIT_INFO_KEY, RunRecord};
use crate::task::Task;
use crate::window::Window;

/// One window's state.
#[derive(Debug, Clone, Serialize)]
pub struct WindowStatus {
    pub task: String,
    pub window: String,
    /// `published`, `missing` (no data and no run), or `empty` (a run published no rows).
    pub state: String,
    pub rows: u64,
    pub files: usize,
    pub version: Option<i64>,
    pub run_id: Option<String>,
    pub sql_hash: Option<String>,
    pub published_at: Option<String>,
    pub run_status: Option<String>,
}

/// The published windows of a task (all of them, or `range`).
pub async fn status(
    project: &Project,
    task: &Task,
    range: Option<(Window, Window)>,
) -> Result<(Option<i64>, Vec<WindowStatus>)> {
    let url = project.table_url(task)?;
    let table = publish::open(&url).await?;
    let Some(version) = table.version() else {
        let rows = match &range {
            Some((a, b)) => Window::range(a, b)?
                .iter()
                .map(|w| missing(task, w))
                .collect(),
            None => Vec::new(),
        };
        return Ok((None, rows));
    };

    // Rows and files per window label, from the snapshot.
    let mut data: BTreeMap<String, (u64, usize, jiff::Timestamp)> = BTreeMap::new();
    for view in table.snapshot()?.snapshot().log_data().iter() {
        let Some(values) = view.partition_values() else {
            continue;
        };
        for (f, v) in values.fields().iter().zip(values.values()) {
            if f.name() != &task.partition_by {
                continue;
            }
            let Some(ts) = partition_instant(v, task) else {
                continue;
            };
            let w = Window::containing(task.grain, &ts.to_zoned(task.timezone.clone()))?;
            let e = data.entry(w.label()).or_insert((0, 0, w.start_ts()));
            e.0 += view.num_records().unwrap_or(0) as u64;
            e.1 += 1;
        }
    }

    let windows: Vec<String> = match &range {
        Some((a, b)) => Window::range(a, b)?.iter().map(Window::label).collect(),
        None => data.keys().cloned().collect(),
    };

    // Newest run record per window, newest commit first.
    let mut runs: BTreeMap<String, (i64, RunRecord, Option<i64>)> = BTreeMap::new();
    let log_store = table.log_store();
    let mut v = version as i64;
    while v >= 0 && windows.iter().any(|w| !runs.contains_key(w)) {
        if let Some(bytes) = log_store.read_commit_entry(v as u64).await? {
            for line in bytes.split(|b| *b == b'\n') {
                let Ok(action) = serde_json::from_slice::<serde_json::Value>(line) else {
                    continue;
                };
                let Some(info) = action.get("commitInfo") else {
                    continue;
                };
                let Some(rec) = info.get(COMMIT_INFO_KEY) else {
                    continue;
                };
                if let Ok(rec) = serde_json::from_value::<RunRecord>(rec.clone()) {
                    let ts = info.get("timestamp").and_then(serde_json::Value::as_i64);
                    runs.entry(rec.window.label.clone()).or_insert((v, rec, ts));
                }
            }
        }
        v -= 1;
    }

    let mut out = Vec::new();
    for label in windows {
        let (rows, files) = data.get(&label).map(|d| (d.0, d.1)).unwrap_or((0, 0));
        let run = runs.get(&label);
        let state = match (files, run) {
            (0, None) => "missing",
            (0, Some(_)) => "empty",
            _ => "published",
        };
        out.push(WindowStatus {
            task: task.name.clone(),
            window: label,
            state: state.to_string(),
            rows,
            files,
            version: run.map(|r| r.0),
            run_id: run.map(|r| r.1.run_id.clone()),
            sql_hash: run.map(|r| r.1.sql_hash.clone()),
            published_at: run
                .and_then(|r| r.2)
                .and_then(|ms| jiff::Timestamp::from_second(ms / 1000).ok())
                .map(|t| t.to_string()),
            run_status: run.map(|r| {
                if r.1.reconciliation.iter().all(|c| c.ok) {
                    "ok".to_string()
                } else {
                    "mismatch".to_string()
                }
            }),
        });
    }
    Ok((Some(version as i64), out))
}

fn missing(task: &Task, w: &Window) -> WindowStatus {
    WindowStatus {
        task: task.name.clone(),
        window: w.label(),
        state: "missing".into(),
        rows: 0,
        files: 0,
        version: None,
        run_id: None,
        sql_hash: None,
        published_at: None,
        run_status: None,
    }
}

/// The instant a partition value stands for (a DATE is midnight in the task's zone).
fn partition_instant(v: &Scalar, task: &Task) -> Option<jiff::Timestamp> {
    match v {
        Scalar::Date(d) => {
            let date = jiff::civil::date(1970, 1, 1)
                .checked_add(jiff::Span::new().days(i64::from(*d)))
                .ok()?;
            date.to_zoned(task.timezone.clone())
                .ok()
                .map(|z| z.timestamp())
        }
        Scalar::Timestamp(us) | Scalar::TimestampNtz(us) => {
            jiff::Timestamp::from_microsecond(*us).ok()
        }
        _ => None,
    }
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
