//! Dispatch: each command's resolved arguments handed to the layer that does the work, and
//! its results printed and alerted on.

use crate::cli::{Cli, Command, Range};
use crate::error::{Error, Result};
use crate::report::record::Report;
use crate::report::render::{OutputFormat, diag, print_audits, print_report, print_status, redact};
use crate::report::states::WindowAudit;
use crate::task::project::Project;
use crate::task::window::Window;

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
    let project = Project::resolve(cli.project.as_deref(), cli.lake.as_deref())?;
    match &cli.command {
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
            let code = backfill(
                cli,
                &project,
                task,
                range,
                &parallel.parallel,
                (missing, stale),
                *shard,
            )
            .await?;
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
            let worst = backfill_downstream(cli, &project, task, range, &parallel.parallel).await?;
            Ok(code.max(worst))
        }
        Command::Verify {
            task,
            window,
            from,
            to,
            against_table,
        } => {
            verify(
                cli,
                &project,
                task,
                window.as_deref(),
                from.as_deref(),
                to.as_deref(),
                against_table,
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
        } => {
            let to = match (to_version, before_run) {
                (Some(v), _) => crate::commands::restore::RestoreTo::Version(*v),
                (None, Some(r)) => crate::commands::restore::RestoreTo::BeforeRun(r.clone()),
                (None, None) => unreachable!("clap requires one"),
            };
            restore(cli, &project, task, window, &to).await
        }
        Command::Vacuum {
            task,
            retain_hours,
            dry_run,
            full,
            force,
        } => {
            let opts = crate::commands::vacuum::VacuumOptions {
                retain_hours: *retain_hours,
                dry_run: *dry_run,
                full: *full,
                force: *force,
            };
            vacuum(cli, &project, task, opts).await
        }
        Command::GenTpch { scale, out, force } => gen_tpch(cli, &project, scale, out, force).await,
        Command::Completions { .. } | Command::Cluster(_) => {
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
        vec![crate::commands::status::blocked(
            &task,
            &window,
            &missing[0],
        )]
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

/// `backfill`: a range of windows through one runner.
async fn backfill(
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
    let format = cli.output;
    for r in &blocked {
        print_report(format, r);
    }
    let mut reports =
        crate::commands::backfill::run(runner, ready, opts, |r| print_report(format, r)).await;
    reports.append(&mut blocked);
    let (summary, code) = crate::commands::backfill::summarize(task, opts.shard, &reports);
    if cli.output == OutputFormat::Text {
        println!("{}", redact(&summary));
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
        let Some((first, last)) = crate::commands::status::overlapping(&down, lo, hi)? else {
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

/// `verify`: one window, or a range, run twice and diffed.
async fn verify(
    cli: &Cli,
    project: &Project,
    task: &str,
    window: Option<&str>,
    from: Option<&str>,
    to: Option<&str>,
    against_table: &bool,
) -> Result<u8> {
    let task = project.task(task)?;
    let print = |v: &crate::commands::verify::Verification| match cli.output {
        OutputFormat::Json => println!(
            "{}",
            redact(&serde_json::to_string(v).expect("serialisable"))
        ),
        OutputFormat::Text => println!("{}", redact(&crate::commands::verify::describe(v))),
    };
    let results = match (window, from, to) {
        (Some(w), _, _) => {
            let window = Window::parse(w, task.grain, &task.timezone)?;
            let v =
                crate::commands::verify::verify(project, &task, &window, *against_table).await?;
            print(&v);
            vec![v]
        }
        (None, Some(a), Some(b)) => {
            let (a, b) = crate::commands::backfill::range(&task, a, b)?;
            let started = std::time::Instant::now();
            let all = crate::commands::verify::verify_range(
                project,
                &task,
                &a,
                &b,
                *against_table,
                print,
            )
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
    let damaged = audits.iter().filter(|a| a.status != "ok").count();
    if cli.output == OutputFormat::Text {
        println!(
            "audit {}: {} windows, {damaged} damaged",
            task.name,
            audits.len()
        );
    }
    let code = if damaged > 0 {
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
            OutputFormat::Json => println!(
                "{}",
                redact(&serde_json::to_string(c).expect("serialisable"))
            ),
            OutputFormat::Text => println!("{}", redact(&c.describe())),
        }
    }
    let count = |s: &str| checked.iter().filter(|c| c.status == s).count();
    if cli.output == OutputFormat::Text {
        println!(
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
            println!(
                "before: {} of {} windows damaged",
                damaged(&before),
                before.len()
            );
            for a in before.iter().filter(|a| a.status != "ok") {
                println!("{}", a.describe());
            }
            for r in &reports {
                print_report(cli.output, r);
            }
            println!(
                "after: {} of {} windows damaged",
                damaged(&after),
                after.len()
            );
            for a in after.iter().filter(|a| a.status != "ok") {
                println!("{}", a.describe());
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
    println!("{}", redact(&text));
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
    for name in names {
        let task = project.task(&name)?;
        let range = crate::commands::status::parse_range(&task, from, to)?;
        let (version, windows) = crate::commands::status::status(project, &task, range).await?;
        if cli.output == OutputFormat::Json {
            print_status(cli.output, &task.name, version, &windows);
            continue;
        }
        print!(
            "{}",
            crate::report::picture::render(&task.name, task.grain, &windows, style)
        );
        if table {
            print_status(cli.output, &task.name, version, &windows);
        }
    }
    Ok(0)
}

/// `restore`: the window's report, like a run's.
async fn restore(
    cli: &Cli,
    project: &Project,
    task: &str,
    window: &str,
    to: &crate::commands::restore::RestoreTo,
) -> Result<u8> {
    let task = project.task(task)?;
    let window = Window::parse(window, task.grain, &task.timezone)?;
    let report = crate::commands::restore::restore(project, &task, &window, to).await?;
    print_report(cli.output, &report);
    Ok(report.exit_code.unwrap_or(0))
}

/// `optimize`: a line (or JSON object) per window; the worst window's exit code.
async fn optimize(
    cli: &Cli,
    project: &Project,
    task: &str,
    from: Option<&str>,
    to: Option<&str>,
    min_files: u32,
) -> Result<u8> {
    let task = project.task(task)?;
    let range = crate::commands::status::parse_range(&task, from, to)?;
    let windows =
        crate::commands::optimize::optimize(project, &task, range, min_files as usize).await?;
    let mut code = 0;
    let (mut compacted, mut before, mut after) = (0, 0, 0);
    for w in &windows {
        code = code.max(w.exit_code());
        if cli.output == OutputFormat::Json {
            let line = serde_json::to_string(w).map_err(|e| Error::runtime(e.to_string()))?;
            println!("{}", redact(&line));
            continue;
        }
        if w.status == "skipped" {
            continue;
        }
        if w.status == "compacted" {
            compacted += 1;
            before += w.files_before;
            after += w.files_after;
        }
        println!(
            "{:<10} {} {}  files {} -> {}  rows={}{}",
            w.status,
            w.task,
            w.window.label,
            w.files_before,
            w.files_after,
            w.rows,
            w.error
                .as_deref()
                .map(|e| format!("  {}", redact(e)))
                .unwrap_or_default()
        );
    }
    if cli.output != OutputFormat::Json {
        println!(
            "optimize {}: {compacted} window(s) compacted, {before} file(s) -> {after}; {} window(s) left as they were",
            task.name,
            windows.len() - compacted
        );
    }
    Ok(code)
}

/// `vacuum`: one JSON object, or a line per file and a summary.
async fn vacuum(
    cli: &Cli,
    project: &Project,
    task: &str,
    opts: crate::commands::vacuum::VacuumOptions,
) -> Result<u8> {
    let task = project.task(task)?;
    let report = crate::commands::vacuum::vacuum(project, &task, opts).await?;
    if cli.output == OutputFormat::Json {
        let line = serde_json::to_string(&report).map_err(|e| Error::runtime(e.to_string()))?;
        println!("{}", redact(&line));
        return Ok(0);
    }
    let verb = if report.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for f in &report.files {
        println!("{verb} {f}");
    }
    println!(
        "vacuum {} ({} mode, retention {} h; the table's minimum is {} h): {verb} {} file(s)",
        report.task,
        if report.full { "full" } else { "lite" },
        report.retention_hours,
        report.table_retention_hours,
        report.files.len()
    );
    Ok(0)
}

/// `gen-tpch`: TPC-H sample data.
async fn gen_tpch(
    _cli: &Cli,
    project: &Project,
    scale: &f64,
    out: &std::path::Path,
    force: &bool,
) -> Result<u8> {
    let dir = if out.is_absolute() {
        out.to_path_buf()
    } else {
        project.dir.join(out)
    };
    let started = std::time::Instant::now();
    let files = crate::commands::tpch::generate(&dir, *scale, *force)?;
    for f in files {
        println!("{}", f.display());
    }
    diag(
        "INFO",
        &format!(
            "TPC-H SF {scale} ready in {:.1}s",
            started.elapsed().as_secs_f64()
        ),
        None,
    );
    Ok(0)
}

async fn validate(cli: &Cli, project: &Project, tasks: &[String]) -> Result<u8> {
    let names = if tasks.is_empty() {
        project.task_names()?
    } else {
        tasks.to_vec()
    };
    if names.is_empty() {
        return Err(Error::input(format!(
            "no task files in {}",
            project.tables_dir().display()
        )));
    }
    let mut worst = 0u8;
    for name in names {
        let result = match project.task(&name) {
            Ok(task) => crate::commands::explain::validate(project, &task).await,
            Err(e) => Err(e),
        };
        let (status, error) = match &result {
            Ok(()) => ("ok", None),
            Err(e) => {
                worst = worst.max(e.kind().exit_code());
                ("invalid", Some(redact(e.message())))
            }
        };
        match cli.output {
            OutputFormat::Json => println!(
                "{}",
                serde_json::json!({"task": name, "status": status, "error": error})
            ),
            OutputFormat::Text => match error {
                None => println!("ok       {name}"),
                Some(e) => {
                    println!("invalid  {name}");
                    diag("ERROR", &e, None);
                }
            },
        }
    }
    Ok(worst)
}

fn table_of(project: &Project, task: &crate::task::Task) -> String {
    project
        .table_url(task)
        .map(|u| u.to_string())
        .unwrap_or_else(|_| task.name.clone())
}

/// Send the alerts a command's window reports raise, if the task has an `[alert]` section.
async fn alert_reports(
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
async fn alert_audit(
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
