//! The `idemlake` binary: parse flags, set up logging, run, map the outcome to an exit code.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of the system allocator: DataFusion and the Parquet reader allocate and
/// free large buffers per batch; glibc returns them to the kernel and every new one is
/// page-faulted and zeroed again (~15 % of a day window's CPU in `perf`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

unsafe extern "C" {
    /// mimalloc's default setter for a runtime option (`mi_option_t` is a C enum): the value
    /// holds unless the option's `MIMALLOC_*` environment variable says otherwise.
    fn mi_option_set_default(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e`.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
/// `mi_option_allow_thp` in mimalloc v3's `mi_option_e`.
const MI_OPTION_ALLOW_THP: std::ffi::c_int = 43;

/// idemlake's defaults for mimalloc, set before mimalloc initialises (its constructor runs
/// at default priority and reads its options then; this one runs first, see below). A user's
/// `MIMALLOC_PURGE_DELAY` or `MIMALLOC_ALLOW_THP` still wins: mimalloc reads them over these
/// defaults.
///
/// Purge delay -1: keep freed memory for reuse instead of returning it to the kernel
/// (mimalloc's default is after 10 ms): a backfill frees and allocates chunk- and batch-sized
/// buffers continuously, and every page returned is faulted and zeroed again on the next
/// allocation. An idemlake process is one window or one run, its peak bounded by the scan
/// budget, so memory is kept until exit. SF1 initial load: ~70 k page faults with a 1 s
/// delay, ~14 k with 10 s, ~5 k never (the kernel zeroing faulted pages was 15 % of the CPU
/// at 1 s).
///
/// THP off (mimalloc then disables transparent huge pages for the process with `prctl`):
/// mimalloc asks for them on its 1 GiB arenas (`MADV_HUGEPAGE`), and then the first touch of
/// any 4 KiB of a 2 MiB range makes the kernel zero the whole 2 MiB. An initial load touches
/// its arenas piecemeal across threads; with THP the kernel's page zeroing was a third of the
/// load's CPU samples and the system time twice the no-THP run's (SF1 load, 3 alternating
/// pairs: 4.2 s vs 2.0 s system, 6.1 s vs 5.1 s wall). It has to be off before the first
/// allocation: mimalloc reserves its first arena then, before `main`. When `main` turned it
/// off, a day window's first ~10 ms went to zeroing the huge pages the runtime's start-up
/// allocations had faulted in, on the one thread running then.
extern "C" fn allocator_defaults() {
    // SAFETY: plain integer options; mimalloc allows setting defaults at any time, and this
    // runs before its initialisation reads them.
    unsafe {
        mi_option_set_default(MI_OPTION_PURGE_DELAY, -1);
        mi_option_set_default(MI_OPTION_ALLOW_THP, 0);
    }
}

/// `allocator_defaults` as an ELF constructor of priority 100: prioritised constructors run
/// before the unprioritised ones (mimalloc's, built by gcc), all before `main`.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array.00100")]
static ALLOCATOR_DEFAULTS: extern "C" fn() = allocator_defaults;

/// Whether the allocator defaults took effect from the start: THP off for the process, and
/// how much anonymous memory is in huge pages so far (0 unless THP was on for an allocation).
#[cfg(target_os = "linux")]
fn allocator_state() -> String {
    // SAFETY: a query with integer arguments; no memory is passed.
    let off = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) } == 1;
    let huge = std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("AnonHugePages:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        });
    format!(
        "allocator: mimalloc, transparent huge pages {}, anonymous huge pages so far: {} kB",
        if off { "off" } else { "on" },
        huge.map_or("unknown".to_string(), |k| k.to_string())
    )
}

/// Log output with credentials from the environment replaced by `***`.
struct RedactingStderr;

impl std::io::Write for RedactingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = idemlake::config::get().redact(&String::from_utf8_lossy(buf));
        std::io::stderr().write_all(text.as_bytes())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// A command line clap refuses (exit 2), or `--help`/`--version` (exit 0). With `--output
/// json` a refusal also prints the JSON line every other whole-command failure prints, so
/// an orchestrator reading standard output sees why (it saw nothing).
fn usage_error(e: clap::Error) -> ! {
    let args: Vec<String> = std::env::args().collect();
    let json = args
        .windows(2)
        .any(|w| w[0] == "--output" && w[1] == "json")
        || args.iter().any(|a| a == "--output=json");
    if json && e.use_stderr() {
        // clap's message up to its usage line, on one line.
        let text = e.to_string();
        let said: Vec<&str> = text
            .lines()
            .take_while(|l| !l.starts_with("Usage:"))
            .map(|l| l.trim().trim_start_matches("error: "))
            .filter(|l| !l.is_empty())
            .collect();
        let line = serde_json::json!({"status": "failed", "error": said.join(" "), "exit_code": 2, "retryable": false});
        idemlake::outln!("{line}");
    }
    e.exit()
}

fn main() -> ExitCode {
    // Elsewhere than Linux there is no constructor above: set the defaults as early as `main`.
    #[cfg(not(target_os = "linux"))]
    allocator_defaults();
    let cli = match idemlake::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => usage_error(e),
    };
    // The configuration is resolved once, before anything runs: a malformed setting is the
    // user's mistake, reported before anything is read or written.
    let config = match resolve_config(&cli) {
        Ok(c) => idemlake::config::init(c),
        Err(e) => {
            let _ = idemlake::report::render::LOG_FORMAT.set(cli.log_format);
            idemlake::report::render::diag("ERROR", e.message(), Some(e.exit_code()));
            return ExitCode::from(e.exit_code());
        }
    };
    init_logging(&cli, config);
    tracing::info!("configuration: {}", config.to_string().replace('\n', ", "));
    #[cfg(target_os = "linux")]
    if tracing::enabled!(tracing::Level::DEBUG) {
        tracing::debug!("{}", allocator_state());
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            idemlake::errln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async {
        let code = idemlake::cli::execute(cli).await;
        idemlake::pipeline::target::finish_background(std::time::Duration::from_secs(60)).await;
        code
    });
    log_costs();
    // What the command had to say on standard output was not all written (a full disk under
    // `> file`): not a success, whatever it did.
    if code == 0 && idemlake::report::out::failed() {
        return ExitCode::from(1);
    }
    ExitCode::from(code)
}

/// The configuration: the environment's settings, then the flags that override them (the
/// engine and the OpenLineage parent run, checked here).
fn resolve_config(cli: &idemlake::cli::Cli) -> idemlake::Result<idemlake::config::Config> {
    idemlake::config::Config::from_env().and_then(|mut c| {
        if let Some(e) = &cli.engine {
            idemlake::task::engine::Engine::parse(e)?;
            c.engine = Some(e.clone());
        }
        if let Some(p) = &cli.lineage_parent {
            idemlake::lineage::RunRef::parse(p)
                .map_err(|why| idemlake::Error::input(format!("--lineage-parent: {why}")))?;
            c.lineage.parent = Some(p.clone());
        }
        Ok(c)
    })
}

/// Log to stderr (redacted) at the level `-v` asks for, or `IDEMLAKE_LOG`'s filter, in the
/// `--log-format` asked for.
fn init_logging(cli: &idemlake::cli::Cli, config: &idemlake::config::Config) {
    // delta-rs logs every lost commit race at ERROR ("exceeded maximum commit attempts");
    // idemlake rebuilds such commits itself and reports its own error if it gives up, so
    // those lines are hidden below -vv. The kernel logs a `_last_checkpoint` it cannot read
    // at ERROR and carries on without it; whatever stopped it (e.g. credentials S3 refuses)
    // is reported by idemlake in one sentence, so that line is hidden below -v.
    let level = match cli.verbose {
        0 => {
            "warn,buoyant_kernel::snapshot::builder=off,buoyant_kernel::last_checkpoint_hint=off,deltalake_core::operations::merge=error,deltalake_core::kernel::transaction=off"
        }
        1 => {
            "warn,idemlake=info,buoyant_kernel::snapshot::builder=off,deltalake_core::kernel::transaction=off"
        }
        2 => "info,idemlake=debug,buoyant_kernel=warn",
        _ => "debug",
    };
    let filter = config
        .log_filter
        .as_deref()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(level));
    // A closed standard error (`2>&1 | head`) ends the log quietly: tracing-subscriber would
    // otherwise report the failed write with `eprintln!`, which panics on it.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .log_internal_errors(false)
        .with_writer(|| RedactingStderr);
    match cli.log_format {
        idemlake::cli::LogFormat::Json => builder.json().with_current_span(false).init(),
        idemlake::cli::LogFormat::Text => {
            let color = std::io::stderr().is_terminal() && !config.no_color;
            builder.with_ansi(color).init()
        }
    }
}

/// Log what the command cost (at `-v`): object-store requests, and commits.
fn log_costs() {
    // What the command cost in object-store requests (S3 lakes and sources), at -v.
    if let Some(line) = idemlake::storage::count::summary() {
        tracing::info!("{line}");
    }
    // And in commits: how many, and how many lost a race to another writer and were rebuilt.
    let (commits, windows, rebuilds) = idemlake::delta::overwrite::commit_counts();
    if commits > 0 {
        tracing::info!(
            commits,
            windows,
            rebuilds,
            "commits: {commits} ({windows} windows), {rebuilds} rebuilt after another writer took the version"
        );
    }
}
