//! Maintenance commands: `restore`, `optimize` and `vacuum` on a task's table, `validate`,
//! `init`, `new` and `gen-tpch` on the project; their results printed.

use crate::cli::Cli;
use crate::error::{Error, Result};
use crate::report::render::{OutputFormat, diag, print_report, redact};
use crate::task::project::Project;
use crate::task::window::Window;

/// `restore`: the window's report, like a run's.
pub(super) async fn restore(
    cli: &Cli,
    project: &Project,
    task: &str,
    window: &str,
    to_version: &Option<i64>,
    before_run: &Option<String>,
) -> Result<u8> {
    let to = match (to_version, before_run) {
        (Some(v), _) => crate::commands::restore::RestoreTo::Version(*v),
        (None, Some(r)) => crate::commands::restore::RestoreTo::BeforeRun(r.clone()),
        (None, None) => unreachable!("clap requires one"),
    };
    let task = project.task(task)?;
    let window = Window::parse(window, task.grain, &task.timezone)?;
    let report = crate::commands::restore::restore(project, &task, &window, &to).await?;
    print_report(cli.output, &report);
    Ok(report.exit_code.unwrap_or(0))
}

/// `optimize`: a line (or JSON object) per window; the worst window's exit code.
pub(super) async fn optimize(
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
            crate::outln!("{}", redact(&line));
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
        crate::outln!(
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
        // Only windows skipped, or refused before any commit, were left as they were.
        let count = |s: &str| windows.iter().filter(|w| w.status == s).count();
        let committed = count("unverified");
        let unverified = match committed {
            0 => String::new(),
            n => format!("; {n} window(s) committed but not verified (exit 5)"),
        };
        crate::outln!(
            "optimize {}: {compacted} window(s) compacted, {before} file(s) -> {after}{unverified}; {} window(s) left as they were",
            task.name,
            windows.len() - compacted - committed
        );
    }
    Ok(code)
}

/// `adopt`: one JSON object, or what was rewritten and the next step.
pub(super) async fn adopt(cli: &Cli, project: &Project, task: &str) -> Result<u8> {
    let task = project.task(task)?;
    let a = crate::commands::adopt::adopt(project, &task).await?;
    if cli.output == OutputFormat::Json {
        let line = serde_json::to_string(&a).map_err(|e| Error::runtime(e.to_string()))?;
        crate::outln!("{}", redact(&line));
        return Ok(0);
    }
    let list = |v: &[String]| match v {
        [] => "nothing".to_string(),
        v => v.join(", "),
    };
    match a.status {
        "already" => crate::outln!(
            "adopt {}: the table is already partitioned by {}; nothing written (version {})",
            a.task,
            list(&a.partitioned_by),
            a.table_version
        ),
        _ => crate::outln!(
            "adopt {}: version {} rewrote {} row(s) partitioned by {} (was: {}), {} file(s) -> {}, in one commit; the rows read back equal to version {}",
            a.task,
            a.table_version,
            a.rows,
            list(&a.partitioned_by),
            list(&a.partitioned_by_before),
            a.files_before,
            a.files_after,
            a.read_version
        ),
    }
    if a.rows_in_no_window > 0 {
        crate::outln!(
            "  {} row(s) have no `{}` (NULL): kept, in no window",
            a.rows_in_no_window,
            task.partition_by
        );
    }
    if let (Some(first), Some(last)) = (&a.first_window, &a.last_window) {
        crate::outln!(
            "  next: idemlake audit {} --from {first} --to {last}   (then repair the damaged windows)",
            a.task
        );
    }
    Ok(0)
}

/// `vacuum`: one JSON object, or a line per file and a summary.
pub(super) async fn vacuum(
    cli: &Cli,
    project: &Project,
    task: &str,
    retain_hours: &Option<u64>,
    (dry_run, full, force): (&bool, &bool, &bool),
) -> Result<u8> {
    let opts = crate::commands::vacuum::VacuumOptions {
        retain_hours: *retain_hours,
        dry_run: *dry_run,
        full: *full,
        force: *force,
    };
    let task = project.task(task)?;
    let report = crate::commands::vacuum::vacuum(project, &task, opts).await?;
    if cli.output == OutputFormat::Json {
        let line = serde_json::to_string(&report).map_err(|e| Error::runtime(e.to_string()))?;
        crate::outln!("{}", redact(&line));
        return Ok(0);
    }
    let verb = if report.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for f in &report.files {
        crate::outln!("{verb} {f}");
    }
    crate::outln!(
        "vacuum {} ({} mode, retention {} h; the table's minimum is {} h): {verb} {} file(s)",
        report.task,
        if report.full { "full" } else { "lite" },
        report.retention_hours,
        report.table_retention_hours,
        report.files.len(),
    );
    Ok(0)
}

/// `gen-tpch` in a build without the `tpch` feature: says so.
#[cfg(not(feature = "tpch"))]
pub(super) async fn gen_tpch(
    _cli: &Cli,
    _project: &Project,
    _scale: &f64,
    _out: &std::path::Path,
    _force: &bool,
) -> Result<u8> {
    Err(Error::input(
        "this idemlake was built without `gen-tpch` (the default feature `tpch`); build it with the default features",
    ))
}

/// `gen-tpch`: TPC-H sample data.
#[cfg(feature = "tpch")]
pub(super) async fn gen_tpch(
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
        crate::outln!("{}", f.display());
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

pub(super) async fn validate(cli: &Cli, project: &Project, tasks: &[String]) -> Result<u8> {
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
        let warnings = result.as_ref().cloned().unwrap_or_default();
        let (status, error) = match &result {
            Ok(_) => ("ok", None),
            Err(e) => {
                worst = worst.max(e.kind().exit_code());
                ("invalid", Some(redact(e.message())))
            }
        };
        match cli.output {
            OutputFormat::Json => crate::outln!(
                "{}",
                serde_json::json!({"task": name, "status": status, "error": error, "warnings": warnings})
            ),
            OutputFormat::Text => match error {
                None => {
                    crate::outln!("ok       {name}");
                    for w in &warnings {
                        diag("WARNING", w, None);
                    }
                }
                Some(e) => {
                    crate::outln!("invalid  {name}");
                    diag("ERROR", &e, None);
                }
            },
        }
    }
    Ok(worst)
}

/// `init [DIR]`: the project skeleton in DIR (else `--project`, else the current directory).
pub(super) fn init(cli: &Cli, dir: Option<&std::path::Path>) -> Result<u8> {
    let dir = dir
        .or(cli.project.as_deref())
        .unwrap_or(std::path::Path::new("."));
    let written = crate::commands::scaffold::init(dir)?;
    if cli.output == OutputFormat::Json {
        let files: Vec<String> = written.iter().map(|f| f.display().to_string()).collect();
        crate::outln!("{}", serde_json::json!({"status": "ok", "created": files}));
        return Ok(0);
    }
    for f in &written {
        crate::outln!("created {}", f.display());
    }
    let cd = if dir == std::path::Path::new(".") {
        String::new()
    } else {
        format!("cd {} && ", dir.display())
    };
    crate::outln!(
        "next: {cd}idemlake validate && idemlake run example --window 2026-01-01 && idemlake status example"
    );
    Ok(0)
}

/// `new TASK`: `tables/<TASK>.toml` from the template.
pub(super) fn new_task(
    cli: &Cli,
    project: &Project,
    task: &str,
    grain: &str,
    source: &str,
    column: Option<&str>,
) -> Result<u8> {
    let column = column.unwrap_or(if grain == "hour" { "ts" } else { "day" });
    let spec = crate::commands::scaffold::NewTask {
        name: task,
        grain,
        source,
        column,
    };
    let file = crate::commands::scaffold::new_task(&project.dir, &spec)?;
    if cli.output == OutputFormat::Json {
        let created = [file.display().to_string()];
        crate::outln!(
            "{}",
            serde_json::json!({"status": "ok", "created": created})
        );
        return Ok(0);
    }
    crate::outln!("created {}", file.display());
    crate::outln!("next: edit its SQL, then `idemlake validate {task}`");
    Ok(0)
}
