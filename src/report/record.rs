//! Run records: what each commit says about itself, and what each run reports.
//!
//! The [`RunRecord`] is stored in the commit's `commitInfo` under the key `idemlake`, so the
//! Delta log alone answers "which run published this window, from which inputs, with which
//! SQL, and did it reconcile" (SPEC guarantee 5). The [`Report`] is the per-window line printed
//! for users and orchestrators (`--output json` prints it as one JSON object per line).
//! Invariant: neither ever contains credentials (source URIs are not recorded, only aliases).

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind};
use crate::task::window::Window;
use crate::task::{Mode, Task};

/// The commitInfo key the run record is stored under.
pub const COMMIT_INFO_KEY: &str = "idemlake";

/// A window as recorded and reported.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WindowRecord {
    /// Short form at the grain, e.g. `2026-11-28`.
    pub label: String,
    /// RFC 3339 with the task time zone's offset.
    pub start: String,
    pub end: String,
}

impl From<&Window> for WindowRecord {
    fn from(w: &Window) -> Self {
        WindowRecord {
            label: w.label(),
            start: w.start_rfc3339(),
            end: w.end_rfc3339(),
        }
    }
}

/// What a commit records about the run that made it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunRecord {
    pub task: String,
    pub window: WindowRecord,
    pub grain: String,
    pub timezone: String,
    pub run_id: String,
    pub sql_hash: String,
    pub mode: Mode,
    pub sources: Vec<SourceVersion>,
    pub rows_written: u64,
    pub reconciliation: Vec<Check>,
    /// The `[checks]` results (data checks on the window's rows, before the commit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_checks: Vec<DataCheckResult>,
    /// Functions the task's `[lint] allow` let through.
    #[serde(default)]
    pub lint_allow: Vec<String>,
    /// `[reconcile] independent = false`: why the window was published without an
    /// independent check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchecked: Option<String>,
    pub idemlake_version: String,
}

impl RunRecord {
    pub fn new(task: &Task, window: &Window, run_id: &str, sql_hash: &str) -> RunRecord {
        RunRecord {
            task: task.name.clone(),
            window: window.into(),
            grain: task.grain.to_string(),
            timezone: task.timezone_name.clone(),
            run_id: run_id.to_string(),
            sql_hash: sql_hash.to_string(),
            mode: task.mode,
            sources: Vec::new(),
            rows_written: 0,
            reconciliation: Vec::new(),
            data_checks: Vec::new(),
            lint_allow: task.lint_allow.clone(),
            unchecked: task.checking.unchecked.clone(),
            idemlake_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// The commitInfo entries for this record.
    pub fn app_metadata(&self) -> std::collections::HashMap<String, serde_json::Value> {
        std::collections::HashMap::from([(
            COMMIT_INFO_KEY.to_string(),
            serde_json::to_value(self).expect("serialisable"),
        )])
    }
}

/// Outcome of one window.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Failed,
    Skipped,
    Mismatch,
    /// Published (the commit landed), but a check after the commit failed.
    Unverified,
    /// `restore` put the window back as it was at an earlier version.
    Restored,
    /// Published, but a `[checks]` check with `severity = "warn"` failed.
    Warned,
}

/// The per-window report line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub task: String,
    pub window: WindowRecord,
    pub status: Status,
    /// Whether this run's commit landed: true whenever the window is published by this run,
    /// also if something failed after the commit.
    #[serde(default)]
    pub published: bool,
    pub rows_written: u64,
    pub table_version: Option<i64>,
    pub reconciliation: Vec<Check>,
    /// The `[checks]` results, when the task has checks and the run got as far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_checks: Vec<DataCheckResult>,
    /// `[reconcile] independent = false`: the reason the task gives for publishing without
    /// an independent check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchecked: Option<String>,
    pub duration_ms: u64,
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql_hash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<u8>,
    /// Running the same command again, unchanged, may succeed and is safe: a runtime failure
    /// (exit 1) or a window published whose check after the commit failed (exit 5). Not for
    /// invalid input (2) or a reconciliation mismatch (3), which need a change first.
    #[serde(default)]
    pub retryable: bool,
    /// What became of the window's OpenLineage events (absent when lineage is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<LineageOutcome>,
    /// What the run read and wrote, for its lineage events (not printed: the commit's run
    /// record holds the sources).
    #[serde(skip)]
    pub io: WindowIo,
}

/// A window's OpenLineage events: how many reached their transport, how many did not, and
/// the first error. Sending them never fails, nor long delays, the window.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LineageOutcome {
    pub sent: u32,
    pub failed: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a window read and wrote, as far as its run got.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowIo {
    /// The sources as read (Delta versions; a landing zone's files); empty before stage 1.
    pub sources: Vec<SourceVersion>,
    /// Data files the window's commit added, and their bytes.
    pub files_written: u64,
    pub bytes_written: u64,
}

impl Report {
    /// A report for a window that has not run (yet): failed until the run says otherwise.
    pub fn new(task: &Task, window: &Window, run_id: &str) -> Report {
        Report {
            task: task.name.clone(),
            window: window.into(),
            status: Status::Failed,
            published: false,
            rows_written: 0,
            table_version: None,
            reconciliation: Vec::new(),
            data_checks: Vec::new(),
            unchecked: task.checking.unchecked.clone(),
            duration_ms: 0,
            error: None,
            run_id: Some(run_id.to_string()),
            sql_hash: None,
            exit_code: None,
            retryable: false,
            lineage: None,
            io: WindowIo::default(),
        }
    }

    /// Mark the report as failed with `e`. A report whose commit landed keeps saying so (its
    /// version, rows and `published: true`): a failure after the commit is never reported as
    /// "nothing published".
    pub fn fail(&mut self, e: &Error) {
        let report = self;
        let kind = if report.published && e.kind() != ErrorKind::Unverified {
            ErrorKind::Unverified
        } else {
            e.kind()
        };
        report.status = match kind {
            ErrorKind::Mismatch => Status::Mismatch,
            ErrorKind::Unverified => Status::Unverified,
            _ => Status::Failed,
        };
        report.error = Some(if kind == ErrorKind::Unverified {
            let version = report
                .table_version
                .map(|v| format!(" at version {v}"))
                .unwrap_or_default();
            format!(
                "the window was published{version}, but a check after the commit failed: {}",
                e.message()
            )
        } else {
            e.message().to_string()
        });
        report.exit_code = Some(kind.exit_code());
        report.retryable = kind == ErrorKind::Unverified || (kind == e.kind() && e.retryable());
        if !report.published {
            report.rows_written = 0;
            report.table_version = None;
        }
    }

    /// The report of a window whose run panicked (a bug): failed, exit 1, nothing known to be
    /// published.
    pub fn panicked(task: &Task, window: &Window, what: &str) -> Report {
        let mut report = Report::new(task, window, &uuid::Uuid::new_v4().to_string());
        report.fail(&Error::runtime(format!(
            "the window's run panicked (a bug in idemlake): {what}"
        )));
        report
    }
}

/// One `[checks]` check on a window's rows, as recorded in commitInfo and reported.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DataCheckResult {
    /// `not_null(c)`, `unique(a,b)`, …, or the custom check's name.
    pub check: String,
    pub severity: crate::task::checks::Severity,
    pub ok: bool,
    /// Rows the check's query returned (offending rows; for `unique`, offending key groups).
    pub failing_rows: u64,
    /// Up to five offending rows, column → value as text (NULL as null), secrets redacted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// One reconciliation check, as recorded in commitInfo and reported.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Check {
    pub check: String,
    pub source: String,
    pub output: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
    /// How the source side was computed, in this run (records of earlier versions have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computed: Option<Computed>,
}

impl Check {
    pub fn counts(name: &str, expected: u64, actual: u64) -> Check {
        Check {
            check: name.to_string(),
            source: expected.to_string(),
            output: actual.to_string(),
            ok: expected == actual,
            tolerance: None,
            computed: None,
        }
    }
}

/// How a check's source side was computed: always in the run that reports it, never taken
/// from an earlier one.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Computed {
    /// `independent`: the checks' own session over the sources (DataFusion's listing tables,
    /// delta-rs), not the path the output was computed by; `database`: the query sent whole
    /// to the PostgreSQL database its tables are in, computed there (see `checks::in_database`).
    pub route: String,
    /// The windows one query computed together with this one (1: this window alone).
    pub windows: usize,
    /// What the query's scans read.
    pub scans: Vec<Scanned>,
}

/// One scan of a check's query: where it read, how many files, and the rows it produced.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Scanned {
    /// The files' common location (`file:///…/events/dt=2026-11-28/`, `s3://bucket/…`), or
    /// `memory` for a table held in memory.
    pub location: String,
    pub files: usize,
    pub rows: u64,
}

/// What one run read from one source.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct SourceVersion {
    pub alias: String,
    pub format: crate::task::Format,
    /// Delta sources: the pinned table version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// File sources: number of files and a hash of their paths, sizes and mtimes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Landing zones (Hive-partitioned directories): the files this window read, as they
    /// were listed (`files` and `fingerprint` then describe these, not the whole source).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<FileRead>,
    /// PostgreSQL sources: the snapshot every scan of the run read, as the server names it
    /// (`snapshot=xmin:xmax:xip lsn=…`: it saw every transaction committed before `xmin`, none
    /// from `xmax` on, and those between not listed in `xip`; the LSN is where the server's
    /// log stood then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

/// One file a window read from a landing zone.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct FileRead {
    pub path: String,
    pub size: u64,
    /// Its modification time as listed (RFC 3339).
    pub modified: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e_tag: Option<String>,
}
