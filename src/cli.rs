//! Command line: raw flag values first (clap), then resolution and dispatch.
//!
//! Each command returns a process exit code following SPEC: 0 ok, 1 runtime failure, 2 invalid
//! input, 3 reconciliation mismatch, 4 divergence. Reports go to stdout (text, or one JSON
//! object per window with `--output json`); diagnostics go to stderr. Every printed string
//! passes through [`redact`], so credentials from the environment never reach the terminal.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::error::{Error, Result};
use crate::project::Project;
use crate::record::{Report, Status};
use crate::window::Window;

const EXAMPLES: &str = "\
Examples:
  idemlake validate                                   # lint and plan every task in tables/
  idemlake run daily_revenue --window 1995-06-01      # run one day and publish it atomically
  idemlake run daily_revenue --window 1995-06-01T00:00:00Z/1995-06-02T00:00:00Z
  idemlake explain lineitem_by_ship_day --window 1995-06-01
  idemlake --output json run daily_revenue --window 1995-06-01   # JSON line for orchestrators
  idemlake gen-tpch --scale 0.01 --out data           # TPC-H sample data for tables/

Exit codes: 0 ok, 1 runtime failure, 2 invalid input (nothing read or written),
3 reconciliation mismatch (nothing published), 4 verify/audit found differences,
5 published but a check after the commit failed (the report says published: true).";

#[derive(Debug, Parser)]
#[command(
    name = "idemlake",
    version,
    about = "Idempotent, window-at-a-time batch pipelines: DataFusion SQL into Delta Lake with atomic replaceWhere overwrites and reconciliation",
    after_help = EXAMPLES
)]
pub struct Cli {
    /// Project directory holding tables/ [env: IDEMLAKE_PROJECT]
    #[arg(long, global = true, env = "IDEMLAKE_PROJECT", hide_env = true)]
    pub project: Option<PathBuf>,
    /// Lake root: a local directory or s3://bucket/prefix [default: <project>/lake] [env: IDEMLAKE_LAKE]
    #[arg(long, global = true, env = "IDEMLAKE_LAKE", hide_env = true)]
    pub lake: Option<String>,
    /// Report format on stdout
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// More logging on stderr (-v info, -vv debug)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Log line format on stderr: text, or json (one object per line, for log shippers)
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one window and publish it atomically (one Delta commit)
    #[command(
        after_help = "Example:\n  idemlake run lineitem_by_ship_day --window 1995-06-01\n  idemlake run hourly_events --window 2026-11-28T05\n  idemlake run weekly_kpis --window 2026-W48"
    )]
    Run {
        /// Task (table) name: tables/<TASK>.toml
        task: String,
        /// The window: 2026-11-28 (day), 2026-11-28T05 (hour), 2026-W48 (week), 2026-11 (month), or START/END in RFC 3339
        #[arg(long)]
        window: String,
    },
    /// Re-run an inclusive range of windows, each atomic, optionally in parallel
    #[command(
        after_help = "Examples:\n  idemlake backfill lineitem_by_ship_day --from 1995-01-01 --to 1995-12-31 --parallel 4\n  idemlake backfill lineitem_by_ship_day --from 1995-01-01 --to 1995-12-31 --missing   # resume after a crash"
    )]
    Backfill {
        task: String,
        /// First window (inclusive)
        #[arg(long)]
        from: String,
        /// Last window (inclusive)
        #[arg(long)]
        to: String,
        /// Windows run concurrently in this process
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
        parallel: u16,
        /// Only windows never published successfully by idemlake
        #[arg(long)]
        missing: bool,
        /// Also windows published with a different SQL hash than the task's current SQL
        #[arg(long)]
        stale: bool,
    },
    /// Run a window twice on the same inputs without publishing and diff the outputs (exit 4 if they differ)
    #[command(
        after_help = "Examples:\n  idemlake verify daily_revenue --window 1995-06-01\n  idemlake verify daily_revenue --window 1995-06-01 --against-table\n  idemlake verify daily_revenue --from 1995-06-01 --to 1995-06-30   # every window of a range"
    )]
    Verify {
        task: String,
        /// The window to verify
        #[arg(long, required_unless_present = "from", conflicts_with_all = ["from", "to"])]
        window: Option<String>,
        /// First window of a range to verify (inclusive), instead of --window
        #[arg(long, requires = "to")]
        from: Option<String>,
        /// Last window of the range (inclusive)
        #[arg(long, requires = "from")]
        to: Option<String>,
        /// Also compare with the window as currently published in the table
        #[arg(long)]
        against_table: bool,
    },
    /// Per window: duplicate keys and row count vs the source; exit 4 if any window is damaged
    #[command(
        after_help = "Example:\n  idemlake audit lineitem_by_ship_day --from 1995-06-01 --to 1995-06-30"
    )]
    Audit {
        task: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        /// Also run the task's [reconcile] queries for every window (one source query per window)
        #[arg(long)]
        reconcile: bool,
    },
    /// Audit, re-run the damaged windows (each atomic), audit again; exit 0 only if clean after
    #[command(
        after_help = "Example:\n  idemlake repair lineitem_by_ship_day --from 1995-06-01 --to 1995-06-30 --parallel 4"
    )]
    Repair {
        task: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
        parallel: u16,
        #[arg(long)]
        reconcile: bool,
    },
    /// Parse, lint and plan tasks without reading data (all tasks if none given)
    #[command(after_help = "Example:\n  idemlake validate\n  idemlake validate daily_revenue")]
    Validate { tasks: Vec<String> },
    /// Show the bound SQL parameters, the plans and the replaceWhere predicate for a window
    #[command(after_help = "Example:\n  idemlake explain daily_revenue --window 1995-06-01")]
    Explain {
        task: String,
        #[arg(long)]
        window: String,
    },
    /// Per window: state, rows, table version, the run that published it, failures since; a calendar strip per task
    #[command(
        after_help = "Examples:\n  idemlake status                                      # a calendar strip for every task\n  idemlake status daily_revenue --from 1995-06-01 --to 1995-06-30\n  idemlake status daily_revenue --picture              # only the strip\n  idemlake --output json status daily_revenue          # one JSON line per window\n\nStrip (plain text off a terminal): # published  ~ stale (other SQL)  x failed  o empty  ? not by idemlake  . missing"
    )]
    Status {
        /// Task; all tasks of the project if omitted
        task: Option<String>,
        /// First window of the range (inclusive); lists all published windows if omitted
        #[arg(long)]
        from: Option<String>,
        /// Last window of the range (inclusive)
        #[arg(long)]
        to: Option<String>,
        /// Only the calendar strip, not the per-window table
        #[arg(long)]
        picture: bool,
    },
    /// Print a shell completion script
    #[command(
        after_help = "Examples:\n  idemlake completions bash > ~/.local/share/bash-completion/completions/idemlake\n  idemlake completions zsh > \"${fpath[1]}/_idemlake\"\n  idemlake completions fish > ~/.config/fish/completions/idemlake.fish"
    )]
    Completions { shell: clap_complete::Shell },
    /// Generate TPC-H lineitem and orders Parquet files (sample data for tables/)
    #[command(
        name = "gen-tpch",
        after_help = "Example:\n  idemlake gen-tpch --scale 0.01 --out data"
    )]
    GenTpch {
        /// TPC-H scale factor (0.01 ≈ 60k lineitems, 1 ≈ 6M)
        #[arg(long, default_value_t = 0.01)]
        scale: f64,
        /// Output directory, relative to the project
        #[arg(long, default_value = "data")]
        out: PathBuf,
        /// Regenerate even if the files exist
        #[arg(long)]
        force: bool,
    },
}

/// Replace credentials found in the environment with `***`.
pub fn redact(text: &str) -> String {
    let mut out = text.to_string();
    for var in [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID",
    ] {
        if let Ok(v) = std::env::var(var)
            && v.len() >= 4
        {
            out = out.replace(&v, "***");
        }
    }
    out
}

static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// Print a diagnostic line on stderr — `level: message` as text, or one JSON object with
/// `--log-format json` (the shape of the tracing JSON logs) — with secrets redacted.
pub fn diag(level: &str, message: &str, exit_code: Option<u8>) {
    let message = redact(message);
    match LOG_FORMAT.get().copied().unwrap_or(LogFormat::Text) {
        LogFormat::Text if level == "INFO" => eprintln!("{message}"),
        LogFormat::Text => eprintln!("{}: {message}", level.to_ascii_lowercase()),
        LogFormat::Json => {
            let mut fields = serde_json::json!({ "message": message });
            if let Some(c) = exit_code {
                fields["exit_code"] = c.into();
            }
            eprintln!(
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

fn print_err(e: &Error) {
    diag("ERROR", e.message(), Some(e.kind().exit_code()));
}

/// Run the parsed command line; returns the exit code.
pub async fn execute(cli: Cli) -> u8 {
    let _ = LOG_FORMAT.set(cli.log_format);
    match dispatch(&cli).await {
        Ok(code) => code,
        Err(e) => {
            if cli.output == OutputFormat::Json {
                let line = serde_json::json!({"status": "failed", "error": redact(e.message()), "exit_code": e.kind().exit_code()});
                println!("{line}");
            }
            print_err(&e);
            let code = e.kind().exit_code();
            alert_command_failure(&cli, &e, code).await;
            code
        }
    }
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
    for p in crate::alert::from_reports(&task.name, command, &table, reports, code) {
        crate::alert::send(spec, &p).await;
    }
}

/// Send the damage alert of an audit, if any window is damaged.
async fn alert_audit(
    project: &Project,
    task: &crate::task::Task,
    command: &str,
    audits: &[crate::audit::WindowAudit],
    code: u8,
) {
    let Some(spec) = &task.alert else { return };
    let table = table_of(project, task);
    if let Some(p) = crate::alert::from_audits(task, command, &table, audits, code) {
        crate::alert::send(spec, &p).await;
    }
}

/// A command that failed as a whole (storage unreachable, a window that does not parse…):
/// alert if its task file can be read and asks for failure alerts.
async fn alert_command_failure(cli: &Cli, e: &Error, code: u8) {
    let Some((command, name)) = cli.command.task_command() else {
        return;
    };
    let Ok(project) = Project::resolve(cli.project.as_deref(), cli.lake.as_deref()) else {
        return;
    };
    let Ok(task) = project.task(name) else { return };
    let Some(spec) = &task.alert else { return };
    let table = table_of(&project, &task);
    let mut p = crate::alert::payload(
        crate::alert::Event::Failure,
        &task.name,
        command,
        &table,
        Vec::new(),
        code,
    );
    p.error = Some(redact(e.message()));
    crate::alert::send(spec, &p).await;
}

impl Command {
    /// The command name and task of commands that publish or audit a task.
    fn task_command(&self) -> Option<(&'static str, &str)> {
        match self {
            Command::Run { task, .. } => Some(("run", task)),
            Command::Backfill { task, .. } => Some(("backfill", task)),
            Command::Audit { task, .. } => Some(("audit", task)),
            Command::Repair { task, .. } => Some(("repair", task)),
            _ => None,
        }
    }
}

async fn dispatch(cli: &Cli) -> Result<u8> {
    if let Command::Completions { shell } = &cli.command {
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        clap_complete::generate(*shell, &mut cmd, "idemlake", &mut std::io::stdout());
        return Ok(0);
    }
    let project = Project::resolve(cli.project.as_deref(), cli.lake.as_deref())?;
    match &cli.command {
        Command::Run { task, window } => {
            let task = project.task(task)?;
            let window = Window::parse(window, task.grain, &task.timezone)?;
            let report = crate::run::run_window(&project, &task, &window).await;
            print_report(cli.output, &report);
            let code = report.exit_code.unwrap_or(0);
            alert_reports(&project, &task, "run", std::slice::from_ref(&report), code).await;
            Ok(code)
        }
        Command::Backfill {
            task,
            from,
            to,
            parallel,
            missing,
            stale,
        } => {
            let task = project.task(task)?;
            let (a, b) = crate::backfill::range(&task, from, to)?;
            let opts = crate::backfill::Options {
                parallel: usize::from(*parallel),
                missing: *missing,
                stale: *stale,
                progress: cli.output == OutputFormat::Text,
            };
            let runner = std::sync::Arc::new(crate::run::Runner::new(&project, &task).await?);
            let windows = crate::backfill::select(&project, &runner, &a, &b, &opts).await?;
            let format = cli.output;
            let reports =
                crate::backfill::run(runner, windows, &opts, |r| print_report(format, r)).await;
            let (summary, code) = crate::backfill::summarize(&task, &reports);
            if cli.output == OutputFormat::Text {
                println!("{}", redact(&summary));
            } else {
                diag("INFO", &summary, None);
            }
            alert_reports(&project, &task, "backfill", &reports, code).await;
            Ok(code)
        }
        Command::Verify {
            task,
            window,
            from,
            to,
            against_table,
        } => {
            let task = project.task(task)?;
            let print = |v: &crate::verify::Verification| match cli.output {
                OutputFormat::Json => println!(
                    "{}",
                    redact(&serde_json::to_string(v).expect("serialisable"))
                ),
                OutputFormat::Text => println!("{}", redact(&crate::verify::describe(v))),
            };
            let results = match (window, from, to) {
                (Some(w), _, _) => {
                    let window = Window::parse(w, task.grain, &task.timezone)?;
                    let v = crate::verify::verify(&project, &task, &window, *against_table).await?;
                    print(&v);
                    vec![v]
                }
                (None, Some(a), Some(b)) => {
                    let (a, b) = crate::backfill::range(&task, a, b)?;
                    let started = std::time::Instant::now();
                    let all =
                        crate::verify::verify_range(&project, &task, &a, &b, *against_table, print)
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
                    .all(|v| v.diffs.iter().all(crate::verify::Diff::identical))
                {
                    0
                } else {
                    crate::error::ErrorKind::Divergence.exit_code()
                },
            )
        }
        Command::Audit {
            task,
            from,
            to,
            reconcile,
        } => {
            let task = project.task(task)?;
            let (a, b) = crate::backfill::range(&task, from, to)?;
            let runner = crate::run::Runner::new(&project, &task).await?;
            let audits = crate::audit::audit(&runner, &a, &b, *reconcile).await?;
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
            alert_audit(&project, &task, "audit", &audits, code).await;
            Ok(code)
        }
        Command::Repair {
            task,
            from,
            to,
            parallel,
            reconcile,
        } => {
            let task = project.task(task)?;
            let (a, b) = crate::backfill::range(&task, from, to)?;
            let (before, reports, after) =
                crate::audit::repair(&project, &task, &a, &b, usize::from(*parallel), *reconcile)
                    .await?;
            let damaged =
                |v: &[crate::audit::WindowAudit]| v.iter().filter(|a| a.status != "ok").count();
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
                        println!("{}", crate::audit::describe(a));
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
                        println!("{}", crate::audit::describe(a));
                    }
                }
            }
            let failed = reports.iter().filter_map(|r| r.exit_code).max();
            let code = if damaged(&after) > 0 {
                failed.unwrap_or(crate::error::ErrorKind::Divergence.exit_code())
            } else {
                0
            };
            alert_reports(&project, &task, "repair", &reports, code).await;
            alert_audit(&project, &task, "repair", &after, code).await;
            Ok(code)
        }
        Command::Validate { tasks } => validate(cli, &project, tasks).await,
        Command::Explain { task, window } => {
            let task = project.task(task)?;
            let window = Window::parse(window, task.grain, &task.timezone)?;
            let text = crate::explain::explain(&project, &task, &window).await?;
            println!("{}", redact(&text));
            Ok(0)
        }
        Command::Status {
            task,
            from,
            to,
            picture,
        } => {
            let names = match task {
                Some(t) => vec![t.clone()],
                None => project.task_names()?,
            };
            let style = crate::picture::Style::for_stdout();
            let table = task.is_some() && !picture;
            for name in names {
                let task = project.task(&name)?;
                let range = crate::status::parse_range(&task, from.as_deref(), to.as_deref())?;
                let (version, windows) = crate::status::status(&project, &task, range).await?;
                if cli.output == OutputFormat::Json {
                    print_status(cli.output, &task.name, version, &windows);
                    continue;
                }
                print!(
                    "{}",
                    crate::picture::render(&task.name, task.grain, &windows, style)
                );
                if table {
                    print_status(cli.output, &task.name, version, &windows);
                }
            }
            Ok(0)
        }
        Command::Completions { .. } => unreachable!("handled before the project is resolved"),
        Command::GenTpch { scale, out, force } => {
            let dir = if out.is_absolute() {
                out.clone()
            } else {
                project.dir.join(out)
            };
            let started = std::time::Instant::now();
            let files = crate::tpch::generate(&dir, *scale, *force)?;
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
    }
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
            Ok(task) => crate::explain::validate(&task).await,
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

fn print_status(
    format: OutputFormat,
    task: &str,
    version: Option<i64>,
    windows: &[crate::status::WindowStatus],
) {
    if format == OutputFormat::Json {
        for w in windows {
            println!(
                "{}",
                redact(&serde_json::to_string(w).expect("serialisable"))
            );
        }
        return;
    }
    match version {
        None => println!("{task}: no table yet"),
        Some(v) => println!("{task}: table version {v}"),
    }
    if windows.is_empty() {
        return;
    }
    println!(
        "  {:<14} {:<10} {:>8} {:>5} {:>7}  {:<8}  {:<20}  {:<24} failed_since",
        "window", "state", "rows", "files", "version", "run", "published_at", "sql_hash"
    );
    for w in windows {
        println!(
            "  {:<14} {:<10} {:>8} {:>5} {:>7}  {:<8}  {:<20}  {:<24} {}",
            w.window,
            w.state,
            w.rows,
            w.files,
            w.version
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
        if let Some(e) = &w.last_error {
            println!("    last error: {}", redact(e));
        }
    }
}

fn print_audits(format: OutputFormat, audits: &[crate::audit::WindowAudit]) {
    for a in audits {
        match format {
            OutputFormat::Json => println!("{}", serde_json::to_string(a).expect("serialisable")),
            OutputFormat::Text => println!("{}", crate::audit::describe(a)),
        }
    }
}

/// Print one window's report.
pub fn print_report(format: OutputFormat, r: &Report) {
    match format {
        OutputFormat::Json => println!(
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
            };
            let version = r
                .table_version
                .map(|v| format!(" version={v}"))
                .unwrap_or_default();
            println!(
                "{status:<8} {} {}  rows={}{version}  {:.2}s",
                r.task,
                r.window.label,
                r.rows_written,
                r.duration_ms as f64 / 1000.0
            );
            let (good, bad): (Vec<_>, Vec<_>) = r.reconciliation.iter().partition(|c| c.ok);
            if !good.is_empty() {
                let names: Vec<&str> = good.iter().map(|c| c.check.as_str()).collect();
                println!("         checks ok: {}", names.join(", "));
            }
            for c in bad {
                println!(
                    "         check {} DIFFERS: source={} output={}",
                    c.check, c.source, c.output
                );
            }
            if let Some(e) = &r.error {
                diag("ERROR", e, r.exit_code);
            }
        }
    }
}
