//! Output rendering: window reports, status tables and audits on stdout (text or one JSON
//! object per line), diagnostics on stderr; every string printed passes through [`redact`],
//! so credentials from the environment never reach the terminal.

use clap::ValueEnum;

use crate::report::record::{Report, Status};
use crate::report::states::{WindowAudit, WindowStatus};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

/// Replace credentials found in the environment with `***`.
pub fn redact(text: &str) -> String {
    crate::config::get().redact(text)
}

/// Set once by the command line (`--log-format`).
pub static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// Print a diagnostic line on stderr — `level: message` as text, or one JSON object with
/// `--log-format json` (the shape of the tracing JSON logs) — with secrets redacted.
pub fn diag(level: &str, message: &str, exit_code: Option<u8>) {
    let message = redact(message);
    match LOG_FORMAT.get().copied().unwrap_or(LogFormat::Text) {
        LogFormat::Text if level == "INFO" => crate::errln!("{message}"),
        LogFormat::Text => crate::errln!("{}: {message}", level.to_ascii_lowercase()),
        LogFormat::Json => {
            let mut fields = serde_json::json!({ "message": message });
            if let Some(c) = exit_code {
                fields["exit_code"] = c.into();
            }
            crate::errln!(
                "{}",
                serde_json::json!({
                    "timestamp": jiff::Timestamp::now().to_string(),
                    "level": level,
                    "fields": fields,
                    "target": "idemlake",
                })
            );
        }
    }
}

/// Print the status of `task`'s windows: a JSON object per window, or a table.
pub fn print_status(
    format: OutputFormat,
    task: &str,
    version: Option<i64>,
    windows: &[WindowStatus],
) {
    if format == OutputFormat::Json {
        for w in windows {
            crate::outln!(
                "{}",
                redact(&serde_json::to_string(w).expect("serialisable"))
            );
        }
        return;
    }
    match version {
        None => crate::outln!("{task}: no table yet"),
        Some(v) => crate::outln!("{task}: table version {v}"),
    }
    if windows.is_empty() {
        return;
    }
    // Columns as wide as their longest value (`published-untracked`, an hour's label).
    let lw = windows
        .iter()
        .map(|w| w.window.label.len())
        .max()
        .unwrap_or(0)
        .max(14);
    let sw = windows
        .iter()
        .map(|w| w.state.len())
        .max()
        .unwrap_or(0)
        .max(10);
    crate::outln!(
        "  {:<lw$} {:<sw$} {:>8} {:>5} {:>7}  {:<8}  {:<20}  {:<24} {:<12} checks",
        "window",
        "state",
        "rows",
        "files",
        "version",
        "run",
        "published_at",
        "sql_hash",
        "failed_since"
    );
    for w in windows {
        print_status_row(w, lw, sw);
    }
}

/// One window's row of the text status (`lw`, `sw`: the window and state columns' widths),
/// and its stale and last-error lines.
fn print_status_row(w: &WindowStatus, lw: usize, sw: usize) {
    let checks = if w.checks.is_empty() {
        "-".to_string()
    } else {
        w.checks.join(",")
    };
    crate::outln!(
        "  {:<lw$} {:<sw$} {:>8} {:>5} {:>7}  {:<8}  {:<20}  {:<24} {:<12} {checks}",
        w.window.label,
        w.state,
        w.rows,
        w.files,
        w.table_version
            .map(|v| v.to_string())
            .unwrap_or_else(|| "-".into()),
        w.run_id
            .as_deref()
            .map(|r| &r[..8.min(r.len())])
            .unwrap_or("-"),
        w.published_at.as_deref().unwrap_or("-"),
        w.sql_hash.as_deref().unwrap_or("-"),
        w.failed_since,
    );
    if w.stale {
        match w.stale_inputs.is_empty() {
            true => crate::outln!("    stale: published by other SQL than the task's"),
            false => {
                for input in &w.stale_inputs {
                    crate::outln!("    stale: {}", describe_stale(input, &w.stale_read));
                }
            }
        }
    }
    if let Some(e) = &w.last_error {
        crate::outln!("    last error: {}", redact(e));
    }
}

/// Print audit results, one per window.
pub fn print_audits(format: OutputFormat, audits: &[WindowAudit]) {
    for a in audits {
        match format {
            OutputFormat::Json => {
                crate::outln!("{}", serde_json::to_string(a).expect("serialisable"))
            }
            OutputFormat::Text => crate::outln!("{}", a.describe()),
        }
    }
}

/// Print one window's report.
pub fn print_report(format: OutputFormat, r: &Report) {
    match format {
        OutputFormat::Json => crate::outln!(
            "{}",
            redact(&serde_json::to_string(r).expect("serialisable"))
        ),
        OutputFormat::Text => {
            let status = match r.status {
                Status::Ok => "ok",
                Status::Failed => "FAILED",
                Status::Skipped => "skipped",
                Status::Mismatch => "MISMATCH",
                Status::Unverified => "UNVERIFIED",
                Status::Restored => "restored",
                Status::Warned => "WARNED",
            };
            let version = r
                .table_version
                .map(|v| format!(" version={v}"))
                .unwrap_or_default();
            crate::outln!(
                "{status:<8} {} {}  rows={}{version}  {:.2}s",
                r.task,
                r.window.label,
                r.rows_written,
                r.duration_ms as f64 / 1000.0
            );
            let (good, bad): (Vec<_>, Vec<_>) = r.reconciliation.iter().partition(|c| c.ok);
            if !good.is_empty() {
                let names: Vec<&str> = good.iter().map(|c| c.check.as_str()).collect();
                // A failed run's passing checks did not make the window good.
                let passed = match r.status {
                    Status::Failed => "checks passed before the failure",
                    _ => "checks ok",
                };
                crate::outln!("         {passed}: {}", names.join(", "));
            }
            if let Some(reason) = &r.unchecked {
                crate::outln!("         not checked independently: {}", redact(reason));
            }
            for c in bad {
                crate::outln!(
                    "         check {} DIFFERS: source={} output={}",
                    c.check,
                    c.source,
                    c.output
                );
            }
            if let Some(l) = r.lineage.as_ref().filter(|l| l.failed > 0) {
                let why = l.error.as_deref().unwrap_or("unknown error");
                crate::outln!(
                    "         lineage: {} event(s) not sent: {}",
                    l.failed,
                    redact(why)
                );
            }
            if let Some(e) = &r.error {
                diag("ERROR", e, r.exit_code);
            }
        }
    }
}

/// One `stale_inputs` entry in words: `task:window@version` is the upstream window's change at
/// that version, after the version of `task` the window read (`read`); `task (its log no
/// longer holds …)` says what is unknown.
fn describe_stale(input: &str, read: &std::collections::BTreeMap<String, i64>) -> String {
    let after = |task: &str| match read.get(task) {
        Some(v) => format!("after the version this window read ({v})"),
        None => "after the version this window read".to_string(),
    };
    // A source's own change (`<alias>: …`, a landing zone's file or a database's rows) is
    // already in words.
    if input.contains(": ") {
        return input.to_string();
    }
    if let Some((task, why)) = input.split_once(" (")
        && let Some(why) = why.strip_suffix(')')
    {
        return format!(
            "{task}: {why}: what those commits changed is unknown, and this window read before them"
        );
    }
    match input
        .rsplit_once('@')
        .and_then(|(w, v)| Some((w.split_once(':')?, v)))
    {
        Some(((task, window), v)) => {
            format!("{task}:{window} changed at version {v}, {}", after(task))
        }
        None => input.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: the text said "read up:2024-01-01@2, published again since" of a window
    /// that read version 1 (2 is the upstream's change).
    #[test]
    fn stale_inputs_in_words_name_the_change_and_the_version_read() {
        let read = [("up".to_string(), 1)].into_iter().collect();
        assert_eq!(
            describe_stale("up:2024-01-01@2", &read),
            "up:2024-01-01 changed at version 2, after the version this window read (1)"
        );
        assert_eq!(
            describe_stale("up:2024-01-01T05@9", &Default::default()),
            "up:2024-01-01T05 changed at version 9, after the version this window read"
        );
        assert_eq!(
            describe_stale(
                "up (its log no longer holds the commits after version 3, up to 7)",
                &read
            ),
            "up: its log no longer holds the commits after version 3, up to 7: what those commits changed is unknown, and this window read before them"
        );
    }
}
