//! `idemlake check TASK --from W --to W`: the task's `[checks]` against what each window of
//! the range holds now, without re-running the task's SQL (e.g. after a task gained a check).
//!
//! The windows are read from the table at one version (the latest when the command starts), on
//! the same independent path as the checks of a run; windows never published are reported as
//! `unpublished` and not checked.

use serde::Serialize;

use crate::commands::status;
use crate::error::{Error, Result};
use crate::pipeline::checks::data;
use crate::pipeline::runner::Runner;
use crate::report::record::{DataCheckResult, WindowRecord};
use crate::task::checks::Severity;
use crate::task::project::Project;
use crate::task::window::Window;

/// One window's checks.
#[derive(Debug, Clone, Serialize)]
pub struct WindowCheck {
    pub task: String,
    pub window: WindowRecord,
    /// `ok`, `failed` (a check with severity error), `warned` (only warn checks failed) or
    /// `unpublished`.
    pub status: &'static str,
    /// The table version checked.
    pub table_version: Option<i64>,
    /// Re-running `check` unchanged gives the same answer: never worth retrying.
    pub retryable: bool,
    pub data_checks: Vec<DataCheckResult>,
}

/// Check every window of `from..=to`.
pub async fn check(
    project: &Project,
    runner: &Runner,
    from: &Window,
    to: &Window,
) -> Result<Vec<WindowCheck>> {
    let task = runner.task();
    if task.checks.is_empty() {
        return Err(Error::input(format!(
            "{}: the task has no [checks] section: nothing to check",
            task.file.display()
        )));
    }
    let windows = Window::range(from, to)?;
    // A check naming a missing column or with SQL that does not plan: exit 2, nothing read.
    let schema = crate::task::plan::plan(runner.checker().session(), task, None)
        .await?
        .schema;
    data::validate(
        runner.checker().session(),
        task,
        &schema,
        runner.references(),
    )
    .await?;
    let (version, states) = status::status(project, task, Some((from.clone(), to.clone()))).await?;
    // The windows are read at the version the states were computed from.
    let mut table = runner.table().await?;
    if let Some(v) = version
        && table.version() != Some(v as u64)
    {
        table.load_version(v as u64).await?;
    }
    let mut out = Vec::with_capacity(windows.len());
    for w in &windows {
        // Published with rows, or published empty: either way readers see the window.
        let published = states.iter().any(|s| {
            s.window.start == WindowRecord::from(w).start
                && (s.state.starts_with("published") || s.state == "empty")
        });
        let mut row = WindowCheck {
            task: task.name.clone(),
            window: w.into(),
            status: "unpublished",
            table_version: version,
            retryable: false,
            data_checks: Vec::new(),
        };
        if published {
            let own = data::session(runner.checker().session(), task).await?;
            let window = data::published_window(&own, &table, task, w).await?;
            let results =
                data::evaluate(&own, task, w, window.into_view(), runner.references()).await?;
            row.status = if data::describe(&results, Severity::Error).is_some() {
                "failed"
            } else if results.iter().any(|r| !r.ok) {
                "warned"
            } else {
                "ok"
            };
            row.data_checks = results;
        }
        out.push(row);
    }
    Ok(out)
}

impl WindowCheck {
    /// One line for the text output.
    pub fn describe(&self) -> String {
        let failed: Vec<String> = self
            .data_checks
            .iter()
            .filter(|r| !r.ok)
            .map(|r| {
                format!(
                    "{} ({} rows, {})",
                    r.check,
                    r.failing_rows,
                    match r.severity {
                        Severity::Error => "error",
                        Severity::Warn => "warn",
                    }
                )
            })
            .collect();
        format!(
            "{:<8} {} {}{}",
            self.status,
            self.task,
            self.window.label,
            if failed.is_empty() {
                String::new()
            } else {
                format!("  failed: {}", failed.join(", "))
            }
        )
    }
}
