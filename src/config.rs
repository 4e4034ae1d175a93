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
    /// With the fault `pg-insert-before-scan`: the SQL it runs (`IDEMLAKE_TEST_PG_INSERT`).
    pub test_pg_insert: Option<String>,
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
    /// The OpenLineage client settings of the environment (see `lineage`).
    pub lineage: LineageEnv,
}

/// What the environment says about OpenLineage, read as OpenLineage's own clients read it
/// (the `[lineage]` section of the project file fills in what it leaves unset; see `lineage`).
/// Values are kept as written: a malformed one is reported, and ignored, by `lineage`, whose
/// events never fail a window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineageEnv {
    /// `OPENLINEAGE_URL`: send events over HTTP to this Marquez-compatible server.
    pub url: Option<String>,
    /// `OPENLINEAGE_ENDPOINT`: the path under `url` (OpenLineage's default `api/v1/lineage`).
    pub endpoint: Option<String>,
    /// `OPENLINEAGE_API_KEY`: sent as `Authorization: Bearer <key>` (redacted from output).
    pub api_key: Option<String>,
    /// `OPENLINEAGE_NAMESPACE`: the namespace of idemlake's jobs.
    pub namespace: Option<String>,
    /// `OPENLINEAGE_DISABLED=true`: no events, whatever else is configured.
    pub disabled: bool,
    /// The orchestrator's run this process runs under, `NAMESPACE/JOB/RUN_ID`: `--lineage-parent`,
    /// else `OPENLINEAGE_PARENT_ID` (what dbt-ol reads; Airflow's `lineage_parent_id` macro
    /// gives it), else `OPENLINEAGE_PARENT_JOB_NAMESPACE` / `_JOB_NAME` / `_RUN_ID` together.
    pub parent: Option<String>,
    /// `OPENLINEAGE_ROOT_PARENT_ID`: the root of the orchestrator's runs, `NAMESPACE/JOB/RUN_ID`
    /// (Airflow's `lineage_root_parent_id` macro); the parent is its own root when unset.
    pub root_parent: Option<String>,
}

impl LineageEnv {
    fn read() -> LineageEnv {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let parts = [
            "OPENLINEAGE_PARENT_JOB_NAMESPACE",
            "OPENLINEAGE_PARENT_JOB_NAME",
            "OPENLINEAGE_PARENT_RUN_ID",
        ]
        .map(set);
        let parent = set("OPENLINEAGE_PARENT_ID").or_else(|| match parts {
            [Some(ns), Some(job), Some(run)] => Some(format!("{ns}/{job}/{run}")),
            _ => None,
        });
        LineageEnv {
            url: set("OPENLINEAGE_URL"),
            endpoint: set("OPENLINEAGE_ENDPOINT"),
            api_key: set("OPENLINEAGE_API_KEY"),
            namespace: set("OPENLINEAGE_NAMESPACE"),
            disabled: set("OPENLINEAGE_DISABLED")
                .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1")),
            parent,
            root_parent: set("OPENLINEAGE_ROOT_PARENT_ID"),
        }
    }
}

/// Windows per grouped check query unless `IDEMLAKE_CHECK_BATCH` says otherwise.
pub const DEFAULT_CHECK_BATCH: u64 = 100_000;

/// A week: how long a conditional-PUT probe's record is trusted by default.
pub const DEFAULT_PROBE_MAX_AGE_SECS: u64 = 7 * 24 * 3600;

/// Environment variables holding credentials: their values are redacted from output.
const SECRET_VARS: [&str; 5] = [
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "OPENLINEAGE_API_KEY",
    "PGPASSWORD",
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
            Err(_) if !v.trim().is_empty() && v.trim().bytes().all(|b| b.is_ascii_digit()) => Err(
                Error::input(format!("{name} is too large: `{v}` (at most {})", u64::MAX)),
            ),
            Err(_) => Err(Error::input(format!(
                "{name} must be a whole number, got `{v}`"
            ))),
        },
    }
}

/// An on/off switch, on unless set: `0|off|false|no` (any case) turn it off, `1|on|true|yes`
/// or empty leave it on; anything else is an error when `strict`, else on.
fn switch(name: &str, strict: bool) -> Result<bool> {
    let Some(v) = var(name) else {
        return Ok(true);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "0" | "off" | "false" | "no" => Ok(false),
        "" | "1" | "on" | "true" | "yes" => Ok(true),
        _ if !strict => Ok(true),
        _ => Err(Error::input(format!(
            "{name} must be 0, off, false or no (to turn it off) or 1, on, true or yes, got `{v}`"
        ))),
    }
}

/// The largest `IDEMLAKE_SCAN_CACHE_KB`: 1 PiB (its bytes, and sums of them, fit a u64).
pub const MAX_SCAN_CACHE_KB: u64 = 1 << 40;

/// The largest `IDEMLAKE_S3_PROBE_MAX_AGE_SECS`: 100 years (ages are compared as i64).
pub const MAX_PROBE_MAX_AGE_SECS: u64 = 100 * 365 * 24 * 3600;

/// [`whole_number`] at most `max` (`what` describes the bound); beyond it an error when
/// `strict`, else `max`.
fn bounded(name: &str, strict: bool, max: u64, what: &str) -> Result<Option<u64>> {
    match whole_number(name, strict)? {
        Some(n) if n > max => {
            if strict {
                Err(Error::input(format!(
                    "{name} must be at most {max} ({what}), got `{n}`"
                )))
            } else {
                Ok(Some(max))
            }
        }
        n => Ok(n),
    }
}

/// `IDEMLAKE_SCAN_CACHE_KB`: a whole number of KiB up to [`MAX_SCAN_CACHE_KB`].
fn scan_cache_kb(strict: bool) -> Result<Option<u64>> {
    bounded(
        "IDEMLAKE_SCAN_CACHE_KB",
        strict,
        MAX_SCAN_CACHE_KB,
        "KiB, 1 PiB",
    )
}

/// `IDEMLAKE_LOG`: a tracing filter (`target=level,…`, see tracing-subscriber's
/// `EnvFilter`). A directive without `=` must be a level (`trace` … `error`, `off`, 0-5): a bare
/// word is almost always a misspelt level (`verbose`), and a target alone is written
/// `target=trace`. A filter that does not parse is an error when `strict`, else unset.
fn log_filter(strict: bool) -> Result<Option<String>> {
    const NAME: &str = "IDEMLAKE_LOG";
    let Some(v) = var(NAME).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    const LEVELS: [&str; 12] = [
        "trace", "debug", "info", "warn", "error", "off", "0", "1", "2", "3", "4", "5",
    ];
    let bare = v.split(',').map(str::trim).find(|d| {
        !d.contains('=') && !d.contains('[') && !LEVELS.contains(&d.to_ascii_lowercase().as_str())
    });
    let problem = match bare {
        Some(d) => Some(format!(
            "`{d}` is not a level (trace, debug, info, warn, error, off); a target alone is written `{d}=trace`"
        )),
        None => tracing_subscriber::EnvFilter::builder()
            .parse(&v)
            .err()
            .map(|e| e.to_string()),
    };
    match problem {
        None => Ok(Some(v)),
        Some(_) if !strict => Ok(None),
        Some(p) => Err(Error::input(format!(
            "{NAME} is not a valid log filter (`target=level,…`), got `{v}`: {p}"
        ))),
    }
}

/// Where `pause-<point>:MS` may pause a run (see `fault::pause`).
pub const PAUSE_POINTS: [&str; 4] = [
    "before-inputs-check",
    "before-source-checks",
    "before-pins",
    "optimize-listed",
];

/// The faults and mutations `IDEMLAKE_TEST_FAULT` may name (see `fault`), beside
/// `batch:N` and `pause-<point>:MS`.
pub const TEST_FAULTS: [&str; 16] = [
    "before-commit",
    "abort-before-commit",
    "after-commit",
    "abort-after-commit",
    "lose-commit-response",
    "merge-error-after-commit",
    "slice-drop-row",
    "slice-move-row",
    "zone-drop-file",
    "derived-keep-literal",
    "skip-remove",
    "partition-shift",
    "output-drop-row",
    "output-repeat-row",
    "staged-file-shrunk",
    "pg-insert-before-scan",
];

/// `IDEMLAKE_TEST_FAULT`: one of [`TEST_FAULTS`], `batch:N` or
/// `pause-<point>:MS` (a point of [`PAUSE_POINTS`]); anything else is an error when `strict` (a misspelt fault
/// would inject nothing and a test of it would pass vacuously), else unset. In a build without
/// the `faults` feature any value is such an error: the hooks are not there to inject it.
fn test_fault(strict: bool) -> Result<Option<String>> {
    test_fault_of(var(TEST_FAULT_VAR), strict, cfg!(feature = "faults"))
}

const TEST_FAULT_VAR: &str = "IDEMLAKE_TEST_FAULT";

/// [`test_fault`] of the value `v`, in a build with (`hooks`) or without the fault hooks.
fn test_fault_of(v: Option<String>, strict: bool, hooks: bool) -> Result<Option<String>> {
    const NAME: &str = TEST_FAULT_VAR;
    let Some(v) = v.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if !hooks {
        return match strict {
            false => Ok(None),
            true => Err(Error::input(format!(
                "{NAME} is set (`{v}`) but this idemlake was built without fault injection (the \
                 `faults` feature, a testing aid: `cargo build --features faults`); unset it"
            ))),
        };
    }
    let number = |n: Option<&str>| n.is_some_and(|n| n.parse::<u64>().is_ok());
    let known = TEST_FAULTS.contains(&v.as_str())
        || number(v.strip_prefix("batch:"))
        || PAUSE_POINTS.iter().any(|p| {
            number(
                v.strip_prefix("pause-")
                    .and_then(|r| r.strip_prefix(p))
                    .and_then(|r| r.strip_prefix(':')),
            )
        });
    match known {
        true => Ok(Some(v)),
        false if !strict => Ok(None),
        false => Err(Error::input(format!(
            "{NAME} must be one of {}, batch:N or pause-<point>:MS (point: {}), got `{v}`",
            TEST_FAULTS.join(", "),
            PAUSE_POINTS.join(", ")
        ))),
    }
}

impl Config {
    /// Defaults overridden by the environment. A malformed number is the user's mistake.
    pub fn from_env() -> Result<Config> {
        Config::read(true)
    }

    fn read(strict: bool) -> Result<Config> {
        let accelerate = switch("IDEMLAKE_ACCELERATE", strict)?;
        let host = var("HOSTNAME")
            .filter(|h| !h.trim().is_empty())
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        Ok(Config {
            accelerate,
            mmap: switch("IDEMLAKE_MMAP", strict)? && accelerate,
            scan_cache_kb: scan_cache_kb(strict)?,
            check_batch: whole_number("IDEMLAKE_CHECK_BATCH", strict)?
                .unwrap_or(DEFAULT_CHECK_BATCH),
            log_cache: switch("IDEMLAKE_LOG_CACHE", strict)? && accelerate,
            s3_probe_max_age_secs: bounded(
                "IDEMLAKE_S3_PROBE_MAX_AGE_SECS",
                strict,
                MAX_PROBE_MAX_AGE_SECS,
                "seconds, 100 years",
            )?
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
            test_fault: test_fault(strict)?,
            test_pg_insert: var("IDEMLAKE_TEST_PG_INSERT"),
            no_color: std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
                || var("TERM").is_some_and(|t| t == "dumb"),
            secrets: SECRET_VARS
                .iter()
                .filter_map(|v| var(v))
                .filter(|v| v.len() >= 4)
                .collect(),
            host,
            log_filter: log_filter(strict)?,
            engine: None,
            lineage: LineageEnv::read(),
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
        writeln!(
            f,
            "openlineage = {}",
            match (&self.lineage.url, self.lineage.disabled) {
                (_, true) => "disabled (OPENLINEAGE_DISABLED)",
                (Some(_), false) => "http (OPENLINEAGE_URL)",
                (None, false) => "per project file ([lineage], default off)",
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_is_refused_by_a_build_without_the_hooks() {
        let set = |v: &str| Some(v.to_string());
        // With the hooks: a known fault is taken, a misspelt one refused.
        assert_eq!(
            test_fault_of(set("before-commit"), true, true).unwrap(),
            set("before-commit")
        );
        assert!(test_fault_of(set("before-comit"), true, true).is_err());
        // Without: every fault is refused, saying why; unset and empty are fine.
        let e = test_fault_of(set("before-commit"), true, false).unwrap_err();
        assert!(e.to_string().contains("without fault injection"), "{e}");
        assert_eq!(
            test_fault_of(set("before-commit"), false, false).unwrap(),
            None
        );
        assert_eq!(test_fault_of(set(""), true, false).unwrap(), None);
        assert_eq!(test_fault_of(None, true, false).unwrap(), None);
    }
}
