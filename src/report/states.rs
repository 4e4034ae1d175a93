//! What `status` and `audit` report per window.

use serde::Serialize;

use crate::report::record::{Check, WindowRecord};

/// One window's state.
#[derive(Debug, Clone, Serialize)]
pub struct WindowStatus {
    pub task: String,
    /// The window, shaped as in every command's JSON: `{label, start, end}`.
    pub window: WindowRecord,
    /// `published`, `published-untracked` (data not written by idemlake, or mixed),
    /// `empty` (a run published no rows), `failed` (no data, and every attempt since the last
    /// success failed), `missing` (nothing published, no failed attempt).
    pub state: String,
    pub rows: u64,
    pub files: usize,
    /// The table version that published the window.
    pub table_version: Option<i64>,
    pub run_id: Option<String>,
    pub sql_hash: Option<String>,
    pub published_at: Option<String>,
    /// Attempts that failed after the last successful publish.
    pub failed_since: usize,
    pub last_error: Option<String>,
    /// `ok` or `mismatch` (published with `on_mismatch = "warn"`) for the last publish.
    pub run_status: Option<String>,
    /// Published by a run whose SQL hash differs from the task's current one, or that read an
    /// upstream task's window which was published again since (`stale_inputs`).
    pub stale: bool,
    /// Upstream windows re-published after this window read them: `task:window@version`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stale_inputs: Vec<String>,
    /// Per upstream task named in `stale_inputs`: the version of it this window read (for the
    /// text rendering; not in the JSON, whose entries carry the version of the change).
    #[serde(skip)]
    pub stale_read: std::collections::BTreeMap<String, i64>,
    /// The checks the publishing run passed before its commit (`rows_staged`, `source_rows`,
    /// …): every published window passed an independent one unless its task opted out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    /// `restore` brought the window back to its state at this table version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<i64>,
    /// Re-running the window (`run`, `backfill --missing`/`--stale`) is what it needs and is
    /// safe: nothing published yet, the last attempts failed, or published by other SQL.
    pub retryable: bool,
}

impl WindowStatus {
    /// A window of `task` with nothing published and no attempt on record.
    pub fn missing(task: &str, window: WindowRecord) -> WindowStatus {
        WindowStatus {
            task: task.to_string(),
            window,
            state: "missing".into(),
            rows: 0,
            files: 0,
            table_version: None,
            run_id: None,
            sql_hash: None,
            published_at: None,
            failed_since: 0,
            last_error: None,
            run_status: None,
            stale: false,
            stale_inputs: Vec::new(),
            stale_read: Default::default(),
            checks: Vec::new(),
            restored_from: None,
            retryable: true,
        }
    }
}

/// One window's audit.
#[derive(Debug, Clone, Serialize)]
pub struct WindowAudit {
    pub task: String,
    /// The window, shaped as in every command's JSON: `{label, start, end}`.
    pub window: WindowRecord,
    pub status: &'static str,
    /// The table version audited.
    pub table_version: Option<i64>,
    /// `repair` (re-running the window) fixes it: the window is damaged.
    pub retryable: bool,
    pub rows: u64,
    pub expected_rows: u64,
    pub duplicate_keys: u64,
    pub duplicate_rows: u64,
    /// Merge tables: keys the source produces for the window that the table lacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_keys: Option<u64>,
    /// Without a key: copies of rows the source gives for the window that the table lacks
    /// (`duplicate_keys`/`duplicate_rows` then count the distinct rows and copies beyond the
    /// source's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_rows: Option<u64>,
    /// With a key: how many of the window's keys other windows of the audited range hold too
    /// (the key is unique within a window by construction, not across windows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_in_other_windows: Option<u64>,
    /// One such key and the windows holding it: `id=1 in 2024-01-01, 2024-01-02`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_in_other_windows: Option<String>,
    pub problems: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reconciliation: Vec<Check>,
}

/// A line on the keys audited windows share with other windows of the range (`None`: none).
pub fn keys_across_windows(audits: &[WindowAudit]) -> Option<String> {
    let windows = audits
        .iter()
        .filter(|a| a.keys_in_other_windows.unwrap_or_default() > 0)
        .count();
    let example = audits
        .iter()
        .find_map(|a| a.key_in_other_windows.as_ref())?;
    Some(format!(
        "{windows} window(s) hold keys other windows of the range hold too (e.g. {example}): not damage (a key is unique within a window, not across windows), but a row whose window changed is in both"
    ))
}

impl WindowAudit {
    /// A window that could not be audited: its source side is the user's mistake (`why`, an
    /// input error such as a landing-zone file off the zone's layout). Its status is
    /// `failed`; the other windows of the range are audited still.
    pub fn failed(task: &str, window: WindowRecord, table_version: Option<i64>, why: &str) -> Self {
        WindowAudit {
            task: task.to_string(),
            window,
            status: "failed",
            table_version,
            retryable: false,
            rows: 0,
            expected_rows: 0,
            duplicate_keys: 0,
            duplicate_rows: 0,
            missing_keys: None,
            missing_rows: None,
            keys_in_other_windows: None,
            key_in_other_windows: None,
            problems: vec![format!("cannot be audited: {why}")],
            reconciliation: Vec::new(),
        }
    }

    /// One line of text per window (and one per problem).
    pub fn describe(&self) -> String {
        let a = self;
        let mut s = format!(
            "{:<8} {} {}  rows={} expected={}",
            a.status, a.task, a.window.label, a.rows, a.expected_rows
        );
        match a.missing_rows {
            // Without a key the rows are compared as multisets with the source's: a changed
            // row is one beyond the source's and one missing, not a duplicate key.
            Some(missing) => s.push_str(&format!(
                " rows_beyond_source={} rows_missing={missing}",
                a.duplicate_rows
            )),
            None => s.push_str(&format!(" duplicate_keys={}", a.duplicate_keys)),
        }
        if let Some(n @ 1..) = a.keys_in_other_windows {
            s.push_str(&format!(" keys_in_other_windows={n}"));
        }
        for p in &a.problems {
            s.push_str(&format!("\n         {p}"));
        }
        s
    }
}
