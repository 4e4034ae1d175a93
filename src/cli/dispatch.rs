//! Dispatch: each command's resolved arguments handed to the layer that does the work, and
//! its results printed and alerted on. The commands over a task's windows are here (run,
//! verify, audit, check, repair, explain, status); `backfill` is in [`super::backfill`], the
//! maintenance commands in [`super::maintenance`], the alerts in [`super::alerts`].

use super::alerts::{alert_audit, alert_reports};
use super::maintenance::{adopt, gen_tpch, optimize, restore, vacuum, validate};
use crate::cli::{Cli, Command, Range};
use crate::error::{Error, Result};
use crate::report::render::{OutputFormat, diag, print_audits, print_report, print_status, redact};
use crate::report::states::WindowAudit;
use crate::task::project::Project;
use crate::task::window::Window;

// Long: one match arm per command, each a call to the function below or in a sibling module.
pub(crate) async fn dispatch(cli: &Cli) -> Result<u8> {
    if let Command::Completions { shell } = &cli.command {
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        clap_complete::generate(*shell, &mut cmd, "idemlake", &mut std::io::stdout());
        return Ok(0);
    }
    if let Command::Cluster(c) = &cli.command {
        use crate::cli::ClusterCommand;
        use crate::commands::cluster::{Process, run};
        return run(match c {
            ClusterCommand::Scheduler { bind } => Process::Scheduler { bind: *bind },
            ClusterCommand::Executor(o) => Process::Executor(o.clone()),
        })
        .await;
    }
    if let Command::Init { dir } = &cli.command {
        return super::maintenance::init(cli, dir.as_deref());
    }
    let project = Project::resolve(cli.project.as_deref(), cli.lake.as_deref())?;
    match &cli.command {
        Command::New {
            task,
            grain,
            source,
            column,
        } => super::maintenance::new_task(cli, &project, task, grain, source, column.as_deref()),
        Command::Run { task, window } => run(cli, &project, task, window).await,
        Command::Backfill {
            task,
            range,
            parallel,
            missing,
            stale,
            downstream,
            shard,
        } => {
            super::backfill::backfill(
                cli,
                &project,
                task,
                range,
                &parallel.parallel,
                (missing, stale, downstream),
                *shard,
            )
            .await
        }
        Command::Verify {
            task,
            window,
            from,
            to,
            against_table,
            twice,
        } => {
            let options = crate::commands::verify::Options {
                against_table: *against_table,
                twice: *twice,
            };
            verify(
                cli,
                &project,
                task,
                window.as_deref(),
                from.as_deref(),
                to.as_deref(),
                options,
            )
            .await
        }
        Command::Audit {
            task,
            range,
            reconcile,
        } => audit(cli, &project, task, range, reconcile).await,
        Command::Repair {
            task,
            range,
            parallel,
            reconcile,
        } => repair(cli, &project, task, range, &parallel.parallel, reconcile).await,
        Command::Check { task, range } => check(cli, &project, task, range).await,
        Command::Validate { tasks } => validate(cli, &project, tasks).await,
        Command::Explain { task, window } => explain(cli, &project, task, window).await,
        Command::Status {
            task,
            from,
            to,
            picture,
        } => {
            status(
                cli,
                &project,
                task.as_deref(),
                from.as_deref(),
                to.as_deref(),
                picture,
            )
            .await
        }
        Command::Adopt { task } => adopt(cli, &project, task).await,
        Command::Optimize {
            task,
            from,
            to,
            min_files,
        } => {
            optimize(
                cli,
                &project,
                task,
                from.as_deref(),
                to.as_deref(),
                *min_files,
            )
            .await
        }
        Command::Restore {
            task,
            window,
            to_version,
            before_run,
        } => restore(cli, &project, task, window, to_version, before_run).await,
        Command::Vacuum {
            task,
            retain_hours,
            dry_run,
            full,
            force,
        } => vacuum(cli, &project, task, retain_hours, (dry_run, full, force)).await,
        Command::GenTpch { scale, out, force } => gen_tpch(cli, &project, scale, out, force).await,
        Command::Completions { .. } | Command::Cluster(_) | Command::Init { .. } => {
            unreachable!("handled before the project is resolved")
        }
    }
}

/// `run`: one window, published atomically.
async fn run(cli: &Cli, project: &Project, task: &str, window: &str) -> Result<u8> {
    let task = project.task(task)?;
    let window = Window::parse(window, task.grain, &task.timezone)?;
    let missing =
        crate::commands::status::missing_inputs(project, &task, std::slice::from_ref(&window))
            .await?;
    let reports = if missing[0].is_empty() {
        crate::pipeline::runner::run_window(project, &task, &window).await
    } else {
        let blocked = vec![crate::commands::status::blocked(
            &task,
            &window,
            &missing[0],
        )];
        crate::commands::status::record_blocked(project, &task, &blocked).await;
        blocked
    };
    for report in &reports {
        print_report(cli.output, report);
    }
    let code = reports
        .iter()
        .filter_map(|r| r.exit_code)
        .max()
        .unwrap_or(0);
    alert_reports(project, &task, "run", &reports, code).await;
    Ok(code)
}

/// `verify`: one window, or a range, run by the published path and its plain twin, diffed.
async fn verify(
    cli: &Cli,
    project: &Project,
    task: &str,
    window: Option<&str>,
    from: Option<&str>,
    to: Option<&str>,
    options: crate::commands::verify::Options,
) -> Result<u8> {
    let task = project.task(task)?;
    let print = |v: &crate::commands::verify::Verification| match cli.output {
        OutputFormat::Json => crate::outln!(
            "{}",
            redact(&serde_json::to_string(v).expect("serialisable"))
        ),
        OutputFormat::Text => crate::outln!("{}", redact(&crate::commands::verify::describe(v))),
    };
    let results = match (window, from, to) {
        (Some(w), _, _) => {
            let window = Window::parse(w, task.grain, &task.timezone)?;
            let v = crate::commands::verify::verify(project, &task, &window, options).await?;
            print(&v);
            vec![v]
        }
        (None, Some(a), Some(b)) => {
            let (a, b) = crate::commands::backfill::range(&task, a, b)?;
            let started = std::time::Instant::now();
            let all = crate::commands::verify::verify_range(project, &task, &a, &b, options, print)
                .await?;
            let differ = all.iter().filter(|v| v.status != "identical").count();
            diag(
                "INFO",
                &format!(
                    "verify {}: {} windows, {differ} differ, {:.1}s",
                    task.name,
                    all.len(),
                    started.elapsed().as_secs_f64()
                ),
                None,
            );
            all
        }
        _ => return Err(Error::input("give --window, or both --from and --to")),
    };
    Ok(
        if results
            .iter()
            .all(|v| v.diffs.iter().all(crate::commands::verify::Diff::identical))
        {
            0
        } else {
            crate::error::ErrorKind::Divergence.exit_code()
        },
    )
}

/// `audit`: damaged windows of a range.
async fn audit(
    cli: &Cli,
    project: &Project,
    task: &str,
    Range { from, to }: &Range,
    reconcile: &bool,
) -> Result<u8> {
    let task = project.task(task)?;
    let (a, b) = crate::commands::backfill::range(&task, from, to)?;
    let runner = crate::pipeline::runner::Runner::new_local(project, &task).await?;
    let audits = crate::commands::audit::audit(&runner, &a, &b, *reconcile).await?;
    print_audits(cli.output, &audits);
    let damaged = audits.iter().filter(|a| a.status == "damaged").count();
    let failed = audits.iter().filter(|a| a.status == "failed").count();
    if cli.output == OutputFormat::Text {
        if let Some(note) = crate::commands::audit::reconcile_note(&task).filter(|_| *reconcile) {
            crate::outln!("{note}");
        }
        if let Some(note) = crate::report::states::keys_across_windows(&audits) {
            crate::outln!("{note}");
        }
        let failed = match failed {
            0 => String::new(),
            n => format!(", {n} could not be audited (exit 2)"),
        };
        crate::outln!(
            "audit {}: {} windows, {damaged} damaged{failed}",
            task.name,
            audits.len()
        );
    }
    // A window that could not be audited (its source side is invalid input) outranks damage.
    let code = if failed > 0 {
        crate::error::ErrorKind::Input.exit_code()
    } else if damaged > 0 {
        crate::error::ErrorKind::Divergence.exit_code()
    } else {
        0
    };
    alert_audit(project, &task, "audit", &audits, code).await;
    Ok(code)
}

/// `check`: the task's data checks over what a range of windows holds.
async fn check(cli: &Cli, project: &Project, task: &str, Range { from, to }: &Range) -> Result<u8> {
    let task = project.task(task)?;
    let (a, b) = crate::commands::backfill::range(&task, from, to)?;
    let runner = crate::pipeline::runner::Runner::new_local(project, &task).await?;
    let checked = crate::commands::check::check(project, &runner, &a, &b).await?;
    for c in &checked {
        match cli.output {
            OutputFormat::Json => crate::outln!(
                "{}",
                redact(&serde_json::to_string(c).expect("serialisable"))
            ),
            OutputFormat::Text => crate::outln!("{}", redact(&c.describe())),
        }
    }
    let count = |s: &str| checked.iter().filter(|c| c.status == s).count();
    if cli.output == OutputFormat::Text {
        crate::outln!(
            "check {}: {} windows, {} failed, {} warned, {} unpublished",
            task.name,
            checked.len(),
            count("failed"),
            count("warned"),
            count("unpublished")
        );
    }
    Ok(if count("failed") > 0 {
        crate::error::ErrorKind::Rejected.exit_code()
    } else {
        0
    })
}

/// `repair`: audit, re-run the damaged windows, audit again.
async fn repair(
    cli: &Cli,
    project: &Project,
    task: &str,
    Range { from, to }: &Range,
    parallel: &u16,
    reconcile: &bool,
) -> Result<u8> {
    let task = project.task(task)?;
    let (a, b) = crate::commands::backfill::range(&task, from, to)?;
    let (before, reports, after) =
        crate::commands::audit::repair(project, &task, &a, &b, usize::from(*parallel), *reconcile)
            .await?;
    let damaged = |v: &[WindowAudit]| v.iter().filter(|a| a.status != "ok").count();
    match cli.output {
        OutputFormat::Json => {
            for r in &reports {
                print_report(cli.output, r);
            }
            print_audits(cli.output, &after);
        }
        OutputFormat::Text => {
            crate::outln!(
                "before: {} of {} windows damaged",
                damaged(&before),
                before.len()
            );
            for a in before.iter().filter(|a| a.status != "ok") {
                crate::outln!("{}", a.describe());
            }
            for r in &reports {
                print_report(cli.output, r);
            }
            crate::outln!(
                "after: {} of {} windows damaged",
                damaged(&after),
                after.len()
            );
            for a in after.iter().filter(|a| a.status != "ok") {
                crate::outln!("{}", a.describe());
            }
            if let Some(note) = crate::commands::audit::reconcile_note(&task).filter(|_| *reconcile)
            {
                crate::outln!("{note}");
            }
        }
    }
    let failed = reports.iter().filter_map(|r| r.exit_code).max();
    let code = if damaged(&after) > 0 {
        failed.unwrap_or(crate::error::ErrorKind::Divergence.exit_code())
    } else {
        0
    };
    alert_reports(project, &task, "repair", &reports, code).await;
    alert_audit(project, &task, "repair", &after, code).await;
    Ok(code)
}

/// `explain`: the plans and checks of one window.
async fn explain(_cli: &Cli, project: &Project, task: &str, window: &str) -> Result<u8> {
    let task = project.task(task)?;
    let window = Window::parse(window, task.grain, &task.timezone)?;
    let text = crate::commands::explain::explain(project, &task, &window).await?;
    crate::outln!("{}", redact(&text));
    Ok(0)
}

/// `status`: per task, its windows' state (picture and/or table).
async fn status(
    cli: &Cli,
    project: &Project,
    task: Option<&str>,
    from: Option<&str>,
    to: Option<&str>,
    picture: &bool,
) -> Result<u8> {
    let names = match task {
        Some(t) => vec![t.to_string()],
        None => project.task_names()?,
    };
    let style = crate::report::picture::Style::for_stdout();
    let table = task.is_some() && !picture;
    let all = task.is_none();
    let mut code = 0;
    for name in names {
        let task = project.task(&name)?;
        let range = crate::commands::status::parse_range(&task, from, to)?;
        let (version, windows) = match crate::commands::status::status(project, &task, range).await
        {
            Ok(s) => s,
            // Every task of the project: one whose table cannot be read by window (not yet
            // adopted, say) is named with why, and the others are shown.
            Err(e) if all => {
                code = code.max(e.exit_code());
                match cli.output {
                    OutputFormat::Json => crate::outln!(
                        "{}",
                        serde_json::json!({"task": task.name, "error": e.message(), "exit_code": e.exit_code()})
                    ),
                    OutputFormat::Text => crate::outln!("{}: {}", task.name, e.message()),
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        if cli.output == OutputFormat::Json {
            print_status(cli.output, &task.name, version, &windows);
            continue;
        }
        crate::out!(
            "{}",
            crate::report::picture::render(&task.name, task.grain, &windows, style)
        );
        if table {
            print_status(cli.output, &task.name, version, &windows);
        }
    }
    Ok(code)
}
