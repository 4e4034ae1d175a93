//! Alerts: the task's `[alert]` section, invoked with one JSON payload when a command ends in
//! failure, a reconciliation mismatch, or audit damage.
//!
//! ```toml
//! [alert]
//! command = ["scripts/page-oncall", "--team", "data"]   # argv; the payload arrives on stdin
//! webhook = "https://hooks.example.com/idemlake"          # POST, Content-Type: application/json
//! on = ["failure", "mismatch", "damage"]                  # default: all three
//! timeout_secs = 10
//! ```
//!
//! Invariants: an alert never changes the command's outcome or exit code — a command that
//! cannot be started, exits non-zero, or a webhook that does not answer 2xx is reported on
//! stderr as a warning. One payload per command invocation (a backfill with 30 failed windows
//! sends one alert listing them), so a bad night pages once. Payloads pass through the same
//! credential redaction as everything printed.

use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::report::record::{Report, Status};
pub use crate::task::alert::{AlertSpec, Event};

/// One window named in an alert.
#[derive(Debug, Clone, Serialize)]
pub struct AlertWindow {
    pub window: String,
    pub start: String,
    pub end: String,
    /// `failed`, `mismatch`, or for damage the audit status (`damaged`).
    pub status: String,
    pub exit_code: Option<u8>,
    pub error: Option<String>,
    pub run_id: Option<String>,
    /// Reconciliation checks (for mismatches) or audit findings (for damage).
    pub details: serde_json::Value,
}

/// The payload sent to the command (stdin) and the webhook (body).
#[derive(Debug, Clone, Serialize)]
pub struct Payload {
    pub event: Event,
    pub task: String,
    /// The idemlake command that raised it: run, backfill, audit, repair.
    pub command: String,
    pub table: String,
    pub windows: Vec<AlertWindow>,
    /// The command's exit code.
    pub exit_code: u8,
    /// Set when the command failed as a whole, before any window ran (e.g. storage unreachable).
    pub error: Option<String>,
    pub host: String,
    pub at: String,
    pub idemlake_version: String,
}

impl AlertWindow {
    /// The alert line of a run report, if the report is alert-worthy.
    pub fn from_report(r: &Report) -> Option<(Event, AlertWindow)> {
        let event = match (r.status, r.exit_code) {
            (Status::Mismatch, _) | (_, Some(3)) => Event::Mismatch,
            (Status::Warned, _) | (_, Some(6)) => Event::Check,
            (_, Some(_)) | (Status::Failed, _) => Event::Failure,
            _ => return None,
        };
        let status = match (event, r.status) {
            (Event::Mismatch, _) => "mismatch",
            (Event::Check, Status::Warned) => "warned",
            _ => "failed",
        };
        Some((
            event,
            AlertWindow {
                window: r.window.label.clone(),
                start: r.window.start.clone(),
                end: r.window.end.clone(),
                status: status.into(),
                exit_code: r.exit_code,
                error: r.error.clone(),
                run_id: r.run_id.clone(),
                details: serde_json::to_value(&r.reconciliation).unwrap_or_default(),
            },
        ))
    }
}

/// Build the payloads a set of run reports raises (at most one per event kind).
pub fn from_reports(
    task: &str,
    command: &str,
    table: &str,
    reports: &[Report],
    exit_code: u8,
) -> Vec<Payload> {
    let mut failures = Vec::new();
    let mut mismatches = Vec::new();
    for r in reports {
        match AlertWindow::from_report(r) {
            Some((Event::Mismatch, w)) => mismatches.push(w),
            Some((_, w)) => failures.push(w),
            None => {}
        }
    }
    [(Event::Failure, failures), (Event::Mismatch, mismatches)]
        .into_iter()
        .filter(|(_, w)| !w.is_empty())
        .map(|(event, windows)| payload(event, task, command, table, windows, exit_code))
        .collect()
}

/// A payload with the common fields filled in.
pub fn payload(
    event: Event,
    task: &str,
    command: &str,
    table: &str,
    windows: Vec<AlertWindow>,
    exit_code: u8,
) -> Payload {
    Payload {
        event,
        task: task.to_string(),
        command: command.to_string(),
        table: table.to_string(),
        windows,
        exit_code,
        error: None,
        host: hostname(),
        at: jiff::Timestamp::now().to_string(),
        idemlake_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// The damage payload of an audit: one entry per damaged window.
pub fn from_audits(
    task: &crate::task::Task,
    command: &str,
    table: &str,
    audits: &[crate::report::states::WindowAudit],
    exit_code: u8,
) -> Option<Payload> {
    let windows: Vec<AlertWindow> = audits
        .iter()
        .filter(|a| a.status != "ok")
        .map(|a| {
            let w = crate::task::window::Window::parse(&a.window.label, task.grain, &task.timezone)
                .ok();
            AlertWindow {
                window: a.window.label.clone(),
                start: w.as_ref().map(|w| w.start_rfc3339()).unwrap_or_default(),
                end: w.as_ref().map(|w| w.end_rfc3339()).unwrap_or_default(),
                status: a.status.to_string(),
                exit_code: None,
                error: Some(a.problems.join("; ")),
                run_id: None,
                details: serde_json::json!({
                    "rows": a.rows,
                    "expected_rows": a.expected_rows,
                    "duplicate_keys": a.duplicate_keys,
                    "duplicate_rows": a.duplicate_rows,
                }),
            }
        })
        .collect();
    (!windows.is_empty()).then(|| {
        payload(
            Event::Damage,
            &task.name,
            command,
            table,
            windows,
            exit_code,
        )
    })
}

fn hostname() -> String {
    let host = &crate::config::get().host;
    if host.is_empty() {
        "unknown".into()
    } else {
        host.clone()
    }
}

/// Deliver `payload` to the spec's command and webhook if its event is selected. Failures to
/// deliver are warnings on stderr; they never change the command's result.
pub async fn send(spec: &AlertSpec, payload: &Payload) {
    if !spec.on.contains(&payload.event) {
        return;
    }
    let body =
        crate::report::render::redact(&serde_json::to_string(payload).expect("serialisable"));
    if let Some(argv) = &spec.command
        && let Err(e) = run_command(argv, &body, payload, spec.timeout).await
    {
        crate::report::render::diag(
            "WARN",
            &format!("alert command `{}` failed: {e}", argv[0]),
            None,
        );
    }
    if let Some(url) = &spec.webhook
        && let Err(e) = post(url, &body, spec.timeout).await
    {
        crate::report::render::diag(
            "WARN",
            &format!("alert webhook {} failed: {e}", redact_url(url)),
            None,
        );
    }
}

async fn run_command(
    argv: &[String],
    body: &str,
    payload: &Payload,
    timeout: Duration,
) -> std::result::Result<(), String> {
    let mut child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("IDEMLAKE_ALERT_EVENT", event_name(payload.event))
        .env("IDEMLAKE_ALERT_TASK", &payload.task)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    let write = async {
        // A command that does not read its stdin is fine: ignore a broken pipe.
        let _ = stdin.write_all(body.as_bytes()).await;
        let _ = stdin.write_all(b"\n").await;
        drop(stdin);
        child.wait().await
    };
    match tokio::time::timeout(timeout, write).await {
        Err(_) => Err(format!("no exit within {}s; killed", timeout.as_secs())),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => Err(format!("exited with {status}")),
    }
}

async fn post(url: &url::Url, body: &str, timeout: Duration) -> std::result::Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| e.to_string())?;
    let resp = client
        .post(url.clone())
        .header("content-type", "application/json")
        .header(
            "user-agent",
            concat!("idemlake/", env!("CARGO_PKG_VERSION")),
        )
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.without_url().to_string())?;
    if resp.status().is_success() {
        Ok(())
    } else {
        Err(format!("answered HTTP {}", resp.status()))
    }
}

/// A webhook URL without its query string or credentials (tokens often live there).
fn redact_url(url: &url::Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    let _ = u.set_password(None);
    let _ = u.set_username("");
    u.to_string()
}

fn event_name(e: Event) -> &'static str {
    match e {
        Event::Failure => "failure",
        Event::Mismatch => "mismatch",
        Event::Damage => "damage",
        Event::Check => "check",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls_lose_credentials_and_query_in_messages() {
        let u = url::Url::parse("https://user:pw@hooks.example.com/a?token=s3cret").unwrap();
        assert_eq!(redact_url(&u), "https://hooks.example.com/a");
    }
}
