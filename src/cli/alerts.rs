//! Alerts: what a command's window reports, its audits, or its failure as a whole raise,
//! sent if the task has an `[alert]` section.

use crate::cli::Cli;
use crate::error::Error;
use crate::report::record::Report;
use crate::report::render::redact;
use crate::report::states::WindowAudit;
use crate::task::project::Project;

fn table_of(project: &Project, task: &crate::task::Task) -> String {
    project
        .table_url(task)
        .map(|u| u.to_string())
        .unwrap_or_else(|_| task.name.clone())
}

/// Send the alerts a command's window reports raise, if the task has an `[alert]` section.
pub(super) async fn alert_reports(
    project: &Project,
    task: &crate::task::Task,
    command: &str,
    reports: &[Report],
    code: u8,
) {
    let Some(spec) = &task.alert else { return };
    let table = table_of(project, task);
    for p in crate::report::alert::from_reports(&task.name, command, &table, reports, code) {
        crate::report::alert::send(spec, &p).await;
    }
}

/// Send the damage alert of an audit, if any window is damaged.
pub(super) async fn alert_audit(
    project: &Project,
    task: &crate::task::Task,
    command: &str,
    audits: &[WindowAudit],
    code: u8,
) {
    let Some(spec) = &task.alert else { return };
    let table = table_of(project, task);
    if let Some(p) = crate::report::alert::from_audits(task, command, &table, audits, code) {
        crate::report::alert::send(spec, &p).await;
    }
}

/// A command that failed as a whole (storage unreachable, a window that does not parse…):
/// alert if its task file can be read and asks for failure alerts.
pub(crate) async fn alert_command_failure(cli: &Cli, e: &Error, code: u8) {
    let Some((command, name)) = cli.command.task_command() else {
        return;
    };
    let Ok(project) = Project::resolve(cli.project.as_deref(), cli.lake.as_deref()) else {
        return;
    };
    let Ok(task) = project.task(name) else { return };
    let Some(spec) = &task.alert else { return };
    let table = table_of(&project, &task);
    let mut p = crate::report::alert::payload(
        crate::report::alert::Event::Failure,
        &task.name,
        command,
        &table,
        Vec::new(),
        code,
    );
    p.error = Some(redact(e.message()));
    crate::report::alert::send(spec, &p).await;
}
