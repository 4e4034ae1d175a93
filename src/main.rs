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
    /// mimalloc's runtime option setter (in the library `mimalloc` links; `mi_option_t` is a
    /// C enum).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (v2 and v3 alike).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// Keep freed memory for reuse instead of returning it to the kernel (mimalloc's default is
/// after 10 ms): a backfill frees and allocates chunk- and batch-sized buffers continuously,
/// and every page returned is faulted and zeroed again on the next allocation. An idemlake
/// process is one window or one run, its peak bounded by the scan budget, so memory is kept
/// until exit. SF1 initial load: ~70 k page faults with a 1 s delay, ~14 k with 10 s, ~5 k
/// never (the kernel zeroing faulted pages was 15 % of the CPU at 1 s).
/// `MIMALLOC_PURGE_DELAY` still wins.
///
/// Transparent huge pages are turned off for the process: mimalloc asks for them on its 1 GiB
/// arenas (`MADV_HUGEPAGE`), and then the first touch of any 4 KiB of a 2 MiB range makes the
/// kernel zero the whole 2 MiB. An initial load touches its arenas piecemeal across threads;
/// with THP the kernel's page zeroing was a third of the load's CPU samples and the system
/// time twice the no-THP run's (SF1 load, 3 alternating pairs: 4.2 s vs 2.0 s system,
/// 6.1 s vs 5.1 s wall). `prctl` rather than mimalloc's option because the first arena is
/// reserved before `main` runs. `MIMALLOC_ALLOW_THP` set by the user leaves THP alone.
fn tune_allocator(config: &idemlake::config::Config) {
    if !config.allocator_tuned_by_user {
        // SAFETY: sets a plain integer option; mimalloc allows it at any time.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
    if !config.thp_tuned_by_user {
        // SAFETY: a process-wide flag with integer arguments; no memory is passed. On a kernel
        // without it the call fails with EINVAL, which changes nothing, so its result is
        // deliberately ignored.
        #[cfg(target_os = "linux")]
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
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

fn main() -> ExitCode {
    let cli = idemlake::cli::Cli::parse();
    // The configuration is resolved once, before anything runs: a malformed setting is the
    // user's mistake, reported before anything is read or written.
    let config = match idemlake::config::Config::from_env() {
        Ok(c) => idemlake::config::init(c),
        Err(e) => {
            let _ = idemlake::report::render::LOG_FORMAT.set(cli.log_format);
            idemlake::report::render::diag("ERROR", e.message(), Some(e.exit_code()));
            return ExitCode::from(e.exit_code());
        }
    };
    tune_allocator(config);
    // delta-rs logs every lost commit race at ERROR ("exceeded maximum commit attempts");
    // idemlake rebuilds such commits itself and reports its own error if it gives up, so
    // those lines are hidden below -vv.
    let level = match cli.verbose {
        0 => {
            "warn,buoyant_kernel::snapshot::builder=off,deltalake_core::operations::merge=error,deltalake_core::kernel::transaction=off"
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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| RedactingStderr);
    match cli.log_format {
        idemlake::cli::LogFormat::Json => builder.json().with_current_span(false).init(),
        idemlake::cli::LogFormat::Text => {
            let color = std::io::stderr().is_terminal() && !config.no_color;
            builder.with_ansi(color).init()
        }
    }
    tracing::info!("configuration: {}", config.to_string().replace('\n', ", "));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async {
        let code = idemlake::cli::execute(cli).await;
        idemlake::pipeline::target::finish_background(std::time::Duration::from_secs(60)).await;
        code
    });
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
    ExitCode::from(code)
}
