//! The resolved configuration of a process: defaults, then the environment, then flags.
//!
//! Every environment knob idemlake reads is read here, once, into [`Config`]; nothing else
//! calls `std::env::var`. The binary resolves it before anything runs ([`init`], with the
//! flags applied) and `explain` and `-v` print it; library callers that never call [`init`]
//! get [`Config::from_env`] on first use.

use std::fmt;
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// How a process runs, resolved once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The accelerations (shared scans, prepared and derived plans, memory maps, the file
    /// map) or their plain twins: `IDEMLAKE_ACCELERATE=0|off|false|no` turns them all off.
    pub accelerate: bool,
    /// Local sources read through memory maps (`IDEMLAKE_MMAP=0` turns only this off; off
    /// whenever `accelerate` is).
    pub mmap: bool,
    /// Memory budget of one chunk of shared source rows in KiB (`IDEMLAKE_SCAN_CACHE_KB`;
    /// `None`: an eighth of the memory available; 0 turns shared scans off).
    pub scan_cache_kb: Option<u64>,
    /// Windows whose checks one grouped query computes (`IDEMLAKE_CHECK_BATCH`, default
    /// [`DEFAULT_CHECK_BATCH`]; 0 or 1: window by window, the plain twin; off whenever
    /// `accelerate` is).
    pub check_batch: u64,
    /// Delta log files read from object storage kept in memory for the process, each fetched
    /// whole once (`IDEMLAKE_LOG_CACHE=0` turns only this off; off whenever `accelerate` is).
    pub log_cache: bool,
    /// How long a recorded proof that an S3 endpoint honours conditional PUT is trusted, in
    /// seconds (`IDEMLAKE_S3_PROBE_MAX_AGE_SECS`, default [`DEFAULT_PROBE_MAX_AGE_SECS`]; 0:
    /// probe in every process).
    pub s3_probe_max_age_secs: u64,
    /// Storage request retries (`IDEMLAKE_S3_MAX_RETRIES`; `None`: object_store's default).
    pub s3_max_retries: Option<u64>,
    /// Time budget of a storage request's retries in seconds
    /// (`IDEMLAKE_S3_RETRY_TIMEOUT_SECS`; `None`: object_store's default).
    pub s3_retry_timeout_secs: Option<u64>,
    /// Every run attempt gets a run-log entry (`IDEMLAKE_RUN_LOG=all`), also the successful
    /// overwrite publishes the Delta log records whole (by default they get none; see
    /// `report::runlog`).
    pub run_log_all: bool,
    /// The fault or mutation to inject (`IDEMLAKE_TEST_FAULT`; a testing aid, see CONTRIBUTING.md).
    pub test_fault: Option<String>,
    /// Colours off (`NO_COLOR` set and not empty, or `TERM=dumb`).
    pub no_color: bool,
    /// Credentials from the environment, replaced by `***` in everything printed.
    pub secrets: Vec<String>,
    /// This machine's name for alerts (`HOSTNAME`, else `/etc/hostname`).
    pub host: String,
    /// A tracing filter replacing the one `-v` picks (`IDEMLAKE_LOG`).
    pub log_filter: Option<String>,
    /// `--engine` (or `IDEMLAKE_ENGINE`, read with the flags): where every task's queries
    /// execute, instead of each task's `[engine]`: `local`, or `df://host:port` (Ballista).
    pub engine: Option<String>,
}

/// Windows per grouped check query unless `IDEMLAKE_CHECK_BATCH` says otherwise.
pub const DEFAULT_CHECK_BATCH: u64 = 100_000;

/// A week: how long a conditional-PUT probe's record is trusted by default.
pub const DEFAULT_PROBE_MAX_AGE_SECS: u64 = 7 * 24 * 3600;

/// Environment variables holding credentials: their values are redacted from output.
const SECRET_VARS: [&str; 3] = [
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
];

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A whole number from `name`; a malformed value is an error when `strict`, else unset.
fn whole_number(name: &str, strict: bool) -> Result<Option<u64>> {
    match var(name) {
        None => Ok(None),
        Some(v) => match v.trim().parse() {
            Ok(n) => Ok(Some(n)),
            Err(_) if !strict => Ok(None),
            Err(_) => Err(Error::input(format!(
                "{name} must be a whole number, got `{v}`"
            ))),
        },
    }
}

fn switched_off(name: &str) -> bool {
    var(name).is_some_and(|v| matches!(v.trim(), "0" | "off" | "false" | "no"))
}

impl Config {
    /// Defaults overridden by the environment. A malformed number is the user's mistake.
    pub fn from_env() -> Result<Config> {
        Config::read(true)
    }

    fn read(strict: bool) -> Result<Config> {
        let accelerate = !switched_off("IDEMLAKE_ACCELERATE");
        let host = var("HOSTNAME")
            .filter(|h| !h.trim().is_empty())
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        Ok(Config {
            accelerate,
            mmap: accelerate && !switched_off("IDEMLAKE_MMAP"),
            scan_cache_kb: whole_number("IDEMLAKE_SCAN_CACHE_KB", strict)?,
            check_batch: whole_number("IDEMLAKE_CHECK_BATCH", strict)?
                .unwrap_or(DEFAULT_CHECK_BATCH),
            log_cache: accelerate && !switched_off("IDEMLAKE_LOG_CACHE"),
            s3_probe_max_age_secs: whole_number("IDEMLAKE_S3_PROBE_MAX_AGE_SECS", strict)?
                .unwrap_or(DEFAULT_PROBE_MAX_AGE_SECS),
            s3_max_retries: whole_number("IDEMLAKE_S3_MAX_RETRIES", strict)?,
            s3_retry_timeout_secs: whole_number("IDEMLAKE_S3_RETRY_TIMEOUT_SECS", strict)?,
            run_log_all: match var("IDEMLAKE_RUN_LOG").as_deref().map(str::trim) {
                None | Some("" | "default") => false,
                Some("all") => true,
                Some(v) if strict => {
                    return Err(Error::input(format!(
                        "IDEMLAKE_RUN_LOG must be `all` or `default`, got `{v}`"
                    )));
                }
                Some(_) => false,
            },
            test_fault: var("IDEMLAKE_TEST_FAULT").filter(|v| !v.is_empty()),
            no_color: std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
                || var("TERM").is_some_and(|t| t == "dumb"),
            secrets: SECRET_VARS
                .iter()
                .filter_map(|v| var(v))
                .filter(|v| v.len() >= 4)
                .collect(),
            host,
            log_filter: var("IDEMLAKE_LOG"),
            engine: None,
        })
    }

    /// The memory budget in bytes of one chunk of shared source rows, and of the source
    /// columns the independent checks hold for a run (`IDEMLAKE_SCAN_CACHE_KB`, or an eighth
    /// of the memory this process may use); 0 turns both off.
    pub fn memory_budget(&self) -> u64 {
        self.scan_cache_kb.unwrap_or_else(default_budget_kb) * 1024
    }

    /// `text` with every credential replaced by `***`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            out = out.replace(s.as_str(), "***");
        }
        out
    }
}

impl fmt::Display for Config {
    /// One `name = value` line per setting (credentials not shown).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |v: Option<u64>, default: &str| v.map_or(default.to_string(), |n| n.to_string());
        writeln!(f, "accelerate = {}", self.accelerate)?;
        writeln!(f, "mmap = {}", self.mmap)?;
        writeln!(
            f,
            "scan_cache_kb = {}",
            opt(self.scan_cache_kb, "auto (1/8 of memory)")
        )?;
        writeln!(f, "check_batch = {}", self.check_batch)?;
        writeln!(f, "log_cache = {}", self.log_cache)?;
        writeln!(f, "s3_probe_max_age_secs = {}", self.s3_probe_max_age_secs)?;
        writeln!(
            f,
            "s3_max_retries = {}",
            opt(self.s3_max_retries, "default")
        )?;
        writeln!(
            f,
            "s3_retry_timeout_secs = {}",
            opt(self.s3_retry_timeout_secs, "default")
        )?;
        writeln!(
            f,
            "run_log = {}",
            if self.run_log_all { "all" } else { "default" }
        )?;
        writeln!(
            f,
            "test_fault = {}",
            self.test_fault.as_deref().unwrap_or("none")
        )?;
        writeln!(
            f,
            "engine = {}",
            self.engine
                .as_deref()
                .unwrap_or("per task ([engine], default local)")
        )?;
        write!(f, "secrets_redacted = {}", self.secrets.len())
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Install the process's configuration (the binary does, before running anything). Returns
/// the configuration in force: a second call does not replace the first.
pub fn init(config: Config) -> &'static Config {
    CONFIG.get_or_init(|| config)
}

/// The process's configuration ([`Config::from_env`] if [`init`] was never called; a
/// malformed number is then left unset here: the binary reports it before this is reached).
pub fn get() -> &'static Config {
    CONFIG.get_or_init(|| Config::read(false).expect("lenient reading cannot fail"))
}

/// Bounds of the default memory budget for one chunk of shared source rows (KiB).
const MIN_BUDGET_KB: u64 = 64 * 1024;
const MAX_BUDGET_KB: u64 = 1024 * 1024;
/// The budget when the memory available cannot be read.
const FALLBACK_BUDGET_KB: u64 = 256 * 1024;

/// The default chunk budget: an eighth of the memory this process may use (the machine's, or
/// its cgroup's limit if lower), within [`MIN_BUDGET_KB`, `MAX_BUDGET_KB`]. Fewer, larger
/// chunks mean fewer passes over an unsorted source (each pass decodes all of it).
fn default_budget_kb() -> u64 {
    let total_kb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    });
    let cgroup_kb = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|b| b / 1024);
    match (total_kb, cgroup_kb) {
        (None, None) => FALLBACK_BUDGET_KB,
        (a, b) => (a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)) / 8)
            .clamp(MIN_BUDGET_KB, MAX_BUDGET_KB),
    }
}
