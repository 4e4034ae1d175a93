//! `backfill`: a range of windows of a task, each atomic, optionally in parallel or only one
//! worker's share; with `--downstream`, then every task reading it over the same range, in
//! dependency order. Reports and the summary printed, alerts sent.

use super::alerts::alert_reports;
use crate::cli::{Cli, Range};
use crate::error::Result;
use crate::report::render::{OutputFormat, diag, print_report, redact};
use crate::task::project::Project;
use crate::task::window::Window;

/// `backfill`: a range of windows, then with `--downstream` the tasks below it.
pub(super) async fn backfill(
    cli: &Cli,
    project: &Project,
    task: &str,
    range: &Range,
    parallel: &u16,
    (missing, stale, downstream): (&bool, &bool, &bool),
    shard: Option<crate::commands::backfill::Shard>,
) -> Result<u8> {
    let code = backfill_range(cli, project, task, range, parallel, (missing, stale), shard).await?;
    if !*downstream {
        return Ok(code);
    }
    if code != 0 {
        diag(
            "ERROR",
            "the downstream tasks were not run: windows of the upstream range failed",
            Some(code),
        );
        return Ok(code);
    }
    let worst = backfill_downstream(cli, project, task, range, parallel).await?;
    Ok(code.max(worst))
}

/// `backfill` without `--downstream`: a range of windows through one runner.
async fn backfill_range(
    cli: &Cli,
    project: &Project,
    task: &str,
    Range { from, to }: &Range,
    parallel: &u16,
    (missing, stale): (&bool, &bool),
    shard: Option<crate::commands::backfill::Shard>,
) -> Result<u8> {
    let task = project.task(task)?;
    let (a, b) = crate::commands::backfill::range(&task, from, to)?;
    let opts = crate::commands::backfill::Options {
        parallel: usize::from(*parallel),
        missing: *missing,
        stale: *stale,
        shard,
        progress: cli.output == OutputFormat::Text,
    };
    let runner = std::sync::Arc::new(crate::pipeline::runner::Runner::new(project, &task).await?);
    let windows = crate::commands::backfill::select(project, &runner, &a, &b, &opts).await?;
    if let Some(s) = shard {
        tracing::info!(
            shard = %s,
            windows = windows.len(),
            first = windows.first().map(Window::label),
            last = windows.last().map(Window::label),
            "this worker's share of the range"
        );
    }
    backfill_windows(cli, project, &task, runner, windows, &opts).await
}

/// Run `windows` of `task` through `runner`: those whose upstream windows are all published
/// (or not required), the others reported failed without running; prints every report and
/// the summary, sends the alerts; returns the worst exit code.
async fn backfill_windows(
    cli: &Cli,
    project: &Project,
    task: &crate::task::Task,
    runner: std::sync::Arc<crate::pipeline::runner::Runner>,
    windows: Vec<Window>,
    opts: &crate::commands::backfill::Options,
) -> Result<u8> {
    let missing = crate::commands::status::missing_inputs(project, task, &windows).await?;
    let (mut ready, mut blocked) = (Vec::new(), Vec::new());
    for (w, m) in windows.into_iter().zip(missing) {
        if m.is_empty() {
            ready.push(w);
        } else {
            blocked.push(crate::commands::status::blocked(task, &w, &m));
        }
    }
    crate::commands::status::record_blocked(project, task, &blocked).await;
    let format = cli.output;
    for r in &blocked {
        print_report(format, r);
    }
    // The backfill is an OpenLineage run of its own, its windows' runs under it.
    let _ = runner.lineage_invocation_started("backfill").await;
    let mut reports =
        crate::commands::backfill::run(runner.clone(), ready, opts, |r| print_report(format, r))
            .await;
    reports.append(&mut blocked);
    let (summary, code) = crate::commands::backfill::summarize(task, opts.shard, &reports);
    let _ = runner
        .lineage_invocation_ended((code != 0).then_some(summary.as_str()))
        .await;
    if cli.output == OutputFormat::Text {
        crate::outln!("{}", redact(&summary));
    } else {
        diag("INFO", &summary, None);
    }
    alert_reports(project, task, "backfill", &reports, code).await;
    Ok(code)
}

/// `backfill --downstream`: after the range, every downstream task's windows overlapping it,
/// in dependency order (each task's windows through one runner, each window atomic).
async fn backfill_downstream(
    cli: &Cli,
    project: &Project,
    task: &str,
    Range { from, to }: &Range,
    parallel: &u16,
) -> Result<u8> {
    let root = project.task(task)?;
    let (a, b) = crate::commands::backfill::range(&root, from, to)?;
    let (lo, hi) = (a.start_ts(), b.end_ts());
    let mut worst = 0;
    for down in crate::commands::backfill::downstream_of(project, &root)? {
        let Some((first, last)) = crate::task::overlap::overlapping(&down, lo, hi)? else {
            continue;
        };
        let opts = crate::commands::backfill::Options {
            parallel: usize::from(*parallel),
            missing: false,
            stale: false,
            shard: None,
            progress: cli.output == OutputFormat::Text,
        };
        let runner =
            std::sync::Arc::new(crate::pipeline::runner::Runner::new(project, &down).await?);
        let windows = Window::range(&first, &last)?;
        let code = backfill_windows(cli, project, &down, runner, windows, &opts).await?;
        worst = worst.max(code);
        if code != 0 {
            diag(
                "ERROR",
                &format!(
                    "stopping: task {} had failed windows; tasks below it were not run",
                    down.name
                ),
                Some(code),
            );
            break;
        }
    }
    Ok(worst)
}
