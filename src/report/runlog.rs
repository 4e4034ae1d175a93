//! The run log: one small object per run attempt the Delta log does not record, beside it.
//!
//! Successful overwrite publishes are recorded by the Delta log itself (commitInfo and file
//! tags), but a failed attempt publishes nothing, an emptied window leaves no file to tag, and
//! merge-mode files carry no tags. Each such attempt (every attempt with
//! `IDEMLAKE_RUN_LOG=all`) therefore writes
//! `<table>/_idemlake/runs/<window>@<unix ms>-<status>-<run id>[.v<version>].json` holding its
//! report (`.v<version>`: the table version its commit made, for attempts that published). The
//! name alone says when and how it ended and which version it published, so `status` needs
//! one listing and reads only the objects whose error it shows. All entries sit in one directory: a directory per window cost
//! a second file-system object per window of a load (entries written by older versions,
//! `runs/<window>/<unix ms>-…`, are still read). Objects under `_idemlake/` are
//! ignored by Delta readers and VACUUM (hidden paths). Writing is best-effort: a run's
//! outcome never depends on its log entry.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::Result;
use crate::report::record::{Report, Status};

const PREFIX: &str = "_idemlake/runs";

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Failed => "failed",
        Status::Skipped => "skipped",
        Status::Mismatch => "mismatch",
        Status::Unverified => "unverified",
        Status::Restored => "restored",
        Status::Warned => "warned",
    }
}

/// Whether the table's Delta log already records `report`, so that its run-log entry would
/// add nothing `status` needs: a successful overwrite publish that added files, each tagged
/// with the run id, SQL hash, table version and time (what `status` reads), next to the
/// commit's `commitInfo` holding the run's record (not the read-back after the commit, nor
/// the duration; and only as long as the log's retention keeps the commit file). Skipping
/// these entries saves a load one file-system object per window (a fifth of the objects a
/// 6-column load creates). A window whose OpenLineage events were not all sent gets its entry
/// (the report says what became of them).
pub fn recorded_by_table(report: &Report, overwrite: bool) -> bool {
    overwrite
        && report.status == Status::Ok
        && report.published
        && report.exit_code.is_none()
        && report.rows_written > 0
        && report.lineage.as_ref().is_none_or(|l| l.failed == 0)
}

/// Record one attempt (best effort), unless the table records it (`recorded_by_table`;
/// `IDEMLAKE_RUN_LOG=all` records every attempt). `overwrite`: the task's write mode is
/// overwrite (merge publishes carry no tags).
pub async fn record(store: &Arc<dyn ObjectStore>, report: &Report, overwrite: bool) {
    if !crate::config::get().run_log_all && recorded_by_table(report, overwrite) {
        return;
    }
    let status = if report.exit_code.is_some() && !report.published {
        "failed"
    } else {
        status_name(report.status)
    };
    let ms = jiff::Timestamp::now().as_millisecond();
    let label = report.window.label.replace(['/', ':'], "_");
    let version = match report.table_version {
        Some(v) if report.published => format!(".v{v}"),
        _ => String::new(),
    };
    let path = Path::from(format!(
        "{PREFIX}/{label}@{ms:013}-{status}-{}{version}.json",
        report.run_id.as_deref().unwrap_or("unknown")
    ));
    let body = serde_json::to_vec(report).unwrap_or_default();
    if let Err(e) = store.put(&path, PutPayload::from(body)).await {
        let e = crate::error::Error::from(e);
        // The run failed on the same storage problem (no credentials, say): its error says
        // it already; a warning would say it twice.
        let said = report
            .error
            .as_deref()
            .is_some_and(|r| r.contains(e.message()));
        match said {
            true => tracing::debug!("could not write the run log entry {path}: {}", e.message()),
            false => tracing::warn!("could not write the run log entry {path}: {}", e.message()),
        }
    }
}

/// One logged attempt.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub at_ms: i64,
    pub status: String,
    pub run_id: String,
    /// The table version the attempt's commit made (from the entry's name; `None`: it
    /// published nothing, or an older entry that does not say — see [`published_version`]).
    pub version: Option<i64>,
    pub path: Path,
}

/// The outcomes of attempts whose commit published the window (a skipped run, e.g. a merge
/// with an empty result, changed nothing).
pub const PUBLISHED: [&str; 5] = ["ok", "mismatch", "unverified", "restored", "warned"];

impl Attempt {
    /// Whether this attempt's commit published the window.
    pub fn published(&self) -> bool {
        PUBLISHED.contains(&self.status.as_str())
    }
}

/// The table version a publishing attempt's commit made: from its entry's name, or (entries
/// written before names carried it) from the entry itself; `None` if it published nothing.
pub async fn published_version(store: &Arc<dyn ObjectStore>, a: &Attempt) -> Option<i64> {
    if !a.published() {
        return None;
    }
    match a.version {
        Some(v) => Some(v),
        None => read(store, a).await.ok()?.table_version,
    }
}

/// All attempts per window label, oldest first (one listing).
pub async fn attempts(store: &Arc<dyn ObjectStore>) -> Result<BTreeMap<String, Vec<Attempt>>> {
    let metas: Vec<_> = store.list(Some(&Path::from(PREFIX))).try_collect().await?;
    let mut out: BTreeMap<String, Vec<Attempt>> = BTreeMap::new();
    for m in metas {
        let parts: Vec<&str> = m.location.as_ref().split('/').collect();
        let (Some(parent), Some(file)) = (parts.get(parts.len().wrapping_sub(2)), parts.last())
        else {
            continue;
        };
        // `runs/<label>@<name>`, or `runs/<label>/<name>` as older versions wrote.
        let (label, name) = match file.split_once('@') {
            Some((label, name)) if *parent == "runs" => (label, name),
            _ => (*parent, *file),
        };
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        let mut it = stem.splitn(3, '-');
        let (Some(ms), Some(status), Some(run_id)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let Ok(at_ms) = ms.parse() else { continue };
        // Run ids never hold a `.`: what follows `.v` is the version the attempt published.
        let (run_id, version) = match run_id.split_once(".v") {
            Some((run, v)) => (run, v.parse().ok()),
            None => (run_id, None),
        };
        // File names hold labels with `:` as `_` (repeated hours carry an offset); labels
        // never contain `_` otherwise.
        out.entry(label.replace('_', ":"))
            .or_default()
            .push(Attempt {
                at_ms,
                status: status.to_string(),
                run_id: run_id.to_string(),
                version,
                path: m.location.clone(),
            });
    }
    for v in out.values_mut() {
        v.sort_by_key(|a| a.at_ms);
    }
    Ok(out)
}

/// The report stored for an attempt.
pub async fn read(store: &Arc<dyn ObjectStore>, a: &Attempt) -> Result<Report> {
    let bytes = store.get(&a.path).await?.bytes().await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| crate::error::Error::runtime(format!("bad run log entry {}: {e}", a.path)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn attempts_are_read_from_flat_and_older_nested_names() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        for key in [
            "_idemlake/runs/1995-06-02@0000000000200-ok-run-b.json",
            "_idemlake/runs/1995-06-02@0000000000100-failed-run-a.json",
            "_idemlake/runs/1995-06-01/0000000000050-skipped-run-old.json",
            "_idemlake/runs/2024-01-01T05@0000000000300-mismatch-run-c.json",
            "_idemlake/runs/1995-06-03@0000000000400-restored-run-d.v17.json",
            "_idemlake/runs/notes.txt",
        ] {
            store
                .put(&Path::from(key), PutPayload::from_static(b"{}"))
                .await
                .unwrap();
        }
        let got = attempts(&store).await.unwrap();
        type Seen = (i64, String, String, Option<i64>);
        let summary: Vec<(String, Vec<Seen>)> = got
            .into_iter()
            .map(|(label, v)| {
                let v = v
                    .into_iter()
                    .map(|a| (a.at_ms, a.status, a.run_id, a.version))
                    .collect();
                (label, v)
            })
            .collect();
        let s = |x: &str| x.to_string();
        assert_eq!(
            summary,
            vec![
                (
                    s("1995-06-01"),
                    vec![(50, s("skipped"), s("run-old"), None)]
                ),
                (
                    s("1995-06-02"),
                    vec![
                        (100, s("failed"), s("run-a"), None),
                        (200, s("ok"), s("run-b"), None)
                    ]
                ),
                (
                    s("1995-06-03"),
                    vec![(400, s("restored"), s("run-d"), Some(17))]
                ),
                (
                    s("2024-01-01T05"),
                    vec![(300, s("mismatch"), s("run-c"), None)]
                ),
            ]
        );
    }
}
