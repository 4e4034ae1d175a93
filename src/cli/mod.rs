//! Command line: raw flag values first (clap), then resolution and dispatch.
//!
//! Each command returns a process exit code following SPEC: 0 ok, 1 runtime failure, 2 invalid
//! input, 3 reconciliation mismatch, 4 divergence (verify) or damage (audit, repair), 5 published
//! but a check after the commit failed, 6 a data check failed (see `EXAMPLES` below, the
//! `--help` text). Reports go to stdout (text, or one JSON
//! object per window with `--output json`); diagnostics go to stderr. Every printed string
//! passes through `report::render::redact`, so credentials from the environment never reach the terminal.
//!
//! The doc comments of the flags below are clap's `--help` text, written for a terminal, not
//! for rustdoc: `[reconcile]` names a task file's section and `<TASK>` a placeholder.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::error::Error;
use crate::report::render::{LOG_FORMAT, diag};
pub use crate::report::render::{LogFormat, OutputFormat, redact};

mod alerts;
mod backfill;
mod dispatch;
mod maintenance;
pub mod reference;

const EXAMPLES: &str = "\
Examples:
  idemlake init my-pipelines                          # a project: tables/, an example task, .gitignore
  idemlake new orders_daily --grain day --source data/orders.parquet
  idemlake validate                                   # lint and plan every task in tables/
  idemlake run daily_revenue --window 1995-06-01      # run one day and publish it atomically
  idemlake run daily_revenue --window 1995-06-01T00:00:00Z/1995-06-02T00:00:00Z
  idemlake explain lineitem_by_ship_day --window 1995-06-01
  idemlake --output json run daily_revenue --window 1995-06-01   # JSON line for orchestrators
  idemlake gen-tpch --scale 0.01 --out data           # TPC-H sample data for tables/

Exit codes: 0 ok, 1 runtime failure, 2 invalid input (nothing read or written),
3 reconciliation mismatch (nothing published), 4 verify/audit found differences,
5 published but a check after the commit failed (the report says published: true),
6 a [checks] data check failed (nothing published; for `check`: a published window violates one).";

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
    /// Lake root: a local directory or s3://bucket/prefix [default: idemlake.toml's [lake] uri, else <project>/lake] [env: IDEMLAKE_LAKE]
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
    /// Where tasks' queries execute, instead of each task's [engine]: `local`, or a Ballista
    /// scheduler as df://host:port (a build with --features ballista) [env: IDEMLAKE_ENGINE]
    #[arg(long, global = true, env = "IDEMLAKE_ENGINE", hide_env = true)]
    pub engine: Option<String>,
    /// The orchestrator's OpenLineage run this command's windows run under, as Airflow's
    /// `lineage_parent_id` macro writes it (overrides OPENLINEAGE_PARENT_ID)
    #[arg(long, global = true, value_name = "NAMESPACE/JOB/RUN_ID")]
    pub lineage_parent: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// An inclusive range of windows.
#[derive(Debug, clap::Args)]
pub struct Range {
    /// First window (inclusive)
    #[arg(long)]
    pub from: String,
    /// Last window (inclusive)
    #[arg(long)]
    pub to: String,
}

/// How many windows run at once.
#[derive(Debug, clap::Args)]
pub struct Parallel {
    /// Windows run concurrently in this process
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: u16,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one window and publish it atomically (one Delta commit)
    #[command(
        after_help = "Example:\n  idemlake run lineitem_by_ship_day --window 1995-06-01\n  idemlake run daily_revenue --window 1995-06-01T00:00:00Z/1995-06-02T00:00:00Z   # an orchestrator's data interval\n\nWindow formats, at the task's grain: 2026-11-28T05 (hour), 2026-11-28 (day), 2026-W48 (week), 2026-11 (month)"
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
        after_help = "Examples:\n  idemlake backfill lineitem_by_ship_day --from 1995-01-01 --to 1995-12-31 --parallel 4\n  idemlake backfill lineitem_by_ship_day --from 1995-01-01 --to 1995-12-31 --missing   # resume after a crash\n  idemlake backfill lineitem_by_ship_day --from 1992-01-01 --to 1998-12-31 --shard 2/8 --missing   # worker 2 of 8"
    )]
    Backfill {
        task: String,
        #[command(flatten)]
        range: Range,
        #[command(flatten)]
        parallel: Parallel,
        /// Only windows no idemlake run completed for (status `missing`, or `failed` holding no data); an `empty` window, its last run having found no rows, is not re-run
        #[arg(long)]
        missing: bool,
        /// Also windows published with a different SQL hash than the task's current SQL
        #[arg(long)]
        stale: bool,
        /// Then re-run every window of the tasks reading this one (`task = "…"` sources),
        /// directly or further down, that overlaps the range, in dependency order
        #[arg(long)]
        downstream: bool,
        /// Run only worker I's share of the range, I counted from 0, of N workers publishing
        /// into the same table (contiguous blocks of windows, sizes differing by at most one;
        /// composes with --missing/--stale). Not with --downstream: run that once, after the
        /// shards
        #[arg(long, value_name = "I/N", conflicts_with = "downstream")]
        shard: Option<crate::commands::backfill::Shard>,
    },
    /// Run a window by the published path and by its plain twin without publishing, and diff the outputs (exit 4 if they differ)
    #[command(
        after_help = "Examples:\n  idemlake verify daily_revenue --window 1995-06-01\n  idemlake verify daily_revenue --window 1995-06-01 --twice\n  idemlake verify daily_revenue --window 1995-06-01 --against-table\n  idemlake verify daily_revenue --from 1995-06-01 --to 1995-06-30   # every window of a range"
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
        /// Also run the published path a second time and compare it with the first
        #[arg(long)]
        twice: bool,
    },
    /// Per window: duplicate keys and row count vs the source; exit 4 if any window is damaged
    #[command(
        after_help = "Example:\n  idemlake audit lineitem_by_ship_day --from 1995-06-01 --to 1995-06-30"
    )]
    Audit {
        task: String,
        #[command(flatten)]
        range: Range,
        /// Also run the task's own check for every window: its [reconcile] queries, or the row fingerprint of [reconcile] default = "content" (one source query per window); the default source_rows is the row comparison audit always makes
        #[arg(long)]
        reconcile: bool,
    },
    /// Audit, re-run the damaged windows (each atomic), audit again; exit 0 only if clean after
    #[command(
        after_help = "Example:\n  idemlake repair lineitem_by_ship_day --from 1995-06-01 --to 1995-06-30 --parallel 4"
    )]
    Repair {
        task: String,
        /// Also run the task's own check for every window ([reconcile] queries, or default = "content"), before and after
        #[arg(long)]
        reconcile: bool,
        #[command(flatten)]
        range: Range,
        #[command(flatten)]
        parallel: Parallel,
    },
    /// Run the task's [checks] against what each window of the range holds now; exit 6 if a check with severity error fails
    #[command(
        after_help = "Example:\n  idemlake check lineitem_by_ship_day --from 1995-06-01 --to 1995-06-30"
    )]
    Check {
        task: String,
        #[command(flatten)]
        range: Range,
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
        after_help = "Examples:\n  idemlake status                                      # a calendar strip for every task\n  idemlake status daily_revenue --from 1995-06-01 --to 1995-06-30\n  idemlake status daily_revenue --picture              # only the strip\n  idemlake --output json status daily_revenue          # one JSON line per window\n\nStrip (plain text off a terminal): # published  ~ stale (other SQL or inputs)  x failed  o empty  ? not by idemlake  . missing"
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
    /// Put one window back as it was at an earlier table version (one commit; other windows untouched)
    #[command(
        after_help = "Examples:\n  idemlake restore lineitem_by_ship_day --window 1995-06-17 --to-version 42\n  idemlake restore lineitem_by_ship_day --window 1995-06-17 --before-run 6ba51395-e6c3-401a-8c2b-e43c96052c8d"
    )]
    Restore {
        task: String,
        /// The window to restore
        #[arg(long)]
        window: String,
        /// The table version whose content of the window to bring back
        #[arg(
            long,
            required_unless_present = "before_run",
            conflicts_with = "before_run"
        )]
        to_version: Option<i64>,
        /// Bring back the window as it was right before this run's commit
        #[arg(long)]
        before_run: Option<String>,
    },
    /// Take over a table another job wrote: rewrite it partitioned by the task's window column, every row kept, in one commit (then audit and repair it)
    #[command(
        after_help = "Example:\n  idemlake adopt orders_daily            # one commit; then: idemlake audit orders_daily --from … --to …"
    )]
    Adopt { task: String },
    /// Compact each window's files (one commit per window, rows unchanged, proven by a read-back)
    #[command(
        after_help = "Examples:\n  idemlake optimize orders_by_day                          # every window with 2 or more files in one partition\n  idemlake optimize orders_by_day --from 1995-06-01 --to 1995-06-30 --min-files 8"
    )]
    Optimize {
        task: String,
        /// First window of the range (inclusive); every window of the table if omitted
        #[arg(long, requires = "to")]
        from: Option<String>,
        /// Last window of the range (inclusive)
        #[arg(long, requires = "from")]
        to: Option<String>,
        /// Compact only windows where one partition value holds at least this many files
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..))]
        min_files: u32,
    },
    /// Delete data files the table no longer references (delta-rs vacuum); never the run log
    #[command(
        after_help = "Examples:\n  idemlake vacuum lineitem_by_ship_day --dry-run          # list what would be deleted\n  idemlake vacuum lineitem_by_ship_day                    # files removed more than 7 days ago\n  idemlake vacuum lineitem_by_ship_day --full             # also files no commit mentions (runs killed before their commit)"
    )]
    Vacuum {
        task: String,
        /// Keep files removed less than this many hours ago [default: the table's delta.deletedFileRetentionDuration, 168]
        #[arg(long)]
        retain_hours: Option<u64>,
        /// List the files that would be deleted; delete nothing
        #[arg(long)]
        dry_run: bool,
        /// Also delete files that no version of the log mentions (older than the retention)
        #[arg(long)]
        full: bool,
        /// Allow --retain-hours below the table's retention
        #[arg(long)]
        force: bool,
    },
    /// Create a project: tables/ with a commented example task, sample data, .gitignore, an S3 settings template
    #[command(
        after_help = "Examples:\n  idemlake init my-pipelines && cd my-pipelines && idemlake validate\n  idemlake init          # the current directory (or --project)"
    )]
    Init {
        /// The project directory (created if missing) [default: --project, or the current directory]
        dir: Option<PathBuf>,
    },
    /// Write tables/<TASK>.toml from a template
    #[command(
        after_help = "Examples:\n  idemlake new orders_daily --source data/orders.parquet --column order_date\n  idemlake new clicks_hourly --grain hour --source 's3://raw/clicks/*/part-*.parquet' --column ts"
    )]
    New {
        /// Task (table) name: a plain identifier
        task: String,
        /// Window size
        #[arg(long, default_value = "day", value_parser = ["hour", "day", "week", "month"])]
        grain: String,
        /// What the task reads: a file, directory or glob (relative to the project), an s3:// URI
        #[arg(long, default_value = "data/example.csv")]
        source: String,
        /// The source column holding each row's time: a DATE (day, week, month), a TIMESTAMP
        /// (hour) [default: day, or ts with --grain hour]
        #[arg(long)]
        column: Option<String>,
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
        /// Regenerate even if files of this scale exist (files of another scale are always
        /// regenerated)
        #[arg(long)]
        force: bool,
    },
    /// Run a process of a Ballista cluster for `[engine] kind = "ballista"` (a build with --features ballista)
    #[command(
        subcommand,
        after_help = "Example (one machine):\n  idemlake cluster scheduler --bind 127.0.0.1:50050 &\n  idemlake cluster executor --scheduler 127.0.0.1:50050 --flight-port 50051 --grpc-port 50052 &\n  idemlake --engine df://127.0.0.1:50050 run daily_revenue --window 2026-11-28"
    )]
    Cluster(ClusterCommand),
}

/// The processes of a Ballista cluster.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// The scheduler: plans jobs into stages and hands tasks to executors (runs until stopped)
    Scheduler {
        /// Address to listen on
        #[arg(long, default_value = "127.0.0.1:50050")]
        bind: std::net::SocketAddr,
    },
    /// An executor: registers with the scheduler and runs its tasks (runs until stopped)
    Executor(crate::engine::ExecutorOptions),
}

pub(crate) fn print_err(e: &Error) {
    diag("ERROR", e.message(), Some(e.kind().exit_code()));
}

/// Run the parsed command line; returns the exit code.
pub async fn execute(cli: Cli) -> u8 {
    let _ = LOG_FORMAT.set(cli.log_format);
    match dispatch::dispatch(&cli).await {
        Ok(code) => code,
        Err(e) => {
            if cli.output == OutputFormat::Json {
                let retryable = e.retryable();
                let line = serde_json::json!({"status": "failed", "error": redact(e.message()), "exit_code": e.kind().exit_code(), "retryable": retryable});
                crate::outln!("{line}");
            }
            print_err(&e);
            let code = e.kind().exit_code();
            alerts::alert_command_failure(&cli, &e, code).await;
            code
        }
    }
}

impl Command {
    /// The command name and task of commands that publish or audit a task.
    pub(crate) fn task_command(&self) -> Option<(&'static str, &str)> {
        match self {
            Command::Run { task, .. } => Some(("run", task)),
            Command::Backfill { task, .. } => Some(("backfill", task)),
            Command::Audit { task, .. } => Some(("audit", task)),
            Command::Repair { task, .. } => Some(("repair", task)),
            _ => None,
        }
    }
}
