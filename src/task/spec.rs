//! Task specs: one `tables/<table>.toml` per target table, SQL inline or in `<table>.sql`.
//!
//! This stage checks what needs no query engine: required and unknown fields, enum values,
//! time zones, source formats, merge keys. Every error names the file, the field and what is
//! wrong (exit 2). Column-level checks (does the key exist?) happen in the plan stage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::tz::TimeZone;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::task::window::{Grain, time_zone};

mod source;

pub use source::{OnMissing, PartitionColumn, PartitionKind, Partitioning, SchemaFrom};
use source::{RawReconcile, RawSource, parse_reconcile, parse_source};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    description: Option<String>,
    sql: Option<String>,
    target: RawTarget,
    window: RawWindow,
    #[serde(default)]
    sources: BTreeMap<String, RawSource>,
    #[serde(default)]
    write: RawWrite,
    reconcile: Option<RawReconcile>,
    checks: Option<crate::task::checks::RawChecks>,
    #[serde(default)]
    lint: RawLint,
    alert: Option<crate::task::alert::RawAlert>,
    engine: Option<crate::task::engine::RawEngine>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    partition_by: String,
    uri: Option<String>,
    #[serde(default)]
    on_schema_change: OnSchemaChange,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    grain: Grain,
    timezone: Option<String>,
    lookback: Option<i64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawWrite {
    #[serde(default)]
    mode: Mode,
    #[serde(default)]
    key: Vec<String>,
    #[serde(default)]
    on_empty: OnEmpty,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLint {
    #[serde(default)]
    allow: Vec<String>,
}

/// Source file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Parquet,
    Csv,
    Json,
    Delta,
    /// A PostgreSQL table (`table`), read through a connection (`uri`).
    Postgres,
}

impl Format {
    /// Whether the source is files (a file, a directory, a glob): not a table.
    pub fn reads_files(self) -> bool {
        matches!(self, Format::Parquet | Format::Csv | Format::Json)
    }
}

/// How a window is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Replace the window's partitions in one commit (replaceWhere).
    #[default]
    Overwrite,
    /// Upsert on `key`, restricted to the window.
    Merge,
}

/// What a window needs of an upstream task (`[sources.x] require`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Require {
    /// Every upstream window inside the window is published (an empty publish counts).
    #[default]
    Complete,
    /// Whatever the upstream table holds.
    Any,
}

/// What a run does when its output's columns differ from the target table's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnSchemaChange {
    /// Refuse (exit 2, nothing written), showing the difference column by column.
    #[default]
    Fail,
    /// Add the output's new columns to the table (nullable; older windows read NULL).
    AddColumns,
    /// Also write a column whose type is narrower than the table's, cast up to it.
    Evolve,
}

impl OnSchemaChange {
    pub fn as_str(self) -> &'static str {
        match self {
            OnSchemaChange::Fail => "fail",
            OnSchemaChange::AddColumns => "add_columns",
            OnSchemaChange::Evolve => "evolve",
        }
    }
}

/// What an empty window result does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnEmpty {
    /// Publish the empty window (removes what the window held).
    #[default]
    Clear,
    /// Fail the run; nothing published.
    Fail,
    /// Publish nothing, report `skipped`.
    Skip,
}

/// What a reconciliation mismatch does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnMismatch {
    /// Publish nothing, exit 3.
    #[default]
    Fail,
    /// Publish, record the mismatch in commitInfo, exit 0.
    Warn,
}

/// A source table the SQL reads, by alias.
#[derive(Debug, Clone)]
pub struct Source {
    pub alias: String,
    /// Absolute local path or URL (`s3://…`); for an upstream task's table, filled in by
    /// `Project::task` from that task's target.
    pub uri: String,
    /// `task = "…"`: the source is that task's target table (a Delta source).
    pub upstream: Option<String>,
    /// With `upstream`: whether every upstream window inside a window must be published first.
    pub require: Require,
    pub format: Format,
    pub csv_header: bool,
    pub csv_delimiter: u8,
    /// How `key=value` path segments are read (`partitioning`, `partition_columns`).
    pub partitioning: Partitioning,
    /// Which file of a landing zone its columns come from (`schema_from`).
    pub schema_from: SchemaFrom,
    pub on_missing: OnMissing,
    /// A landing zone's arrival days and lateness (see `task::arrival`).
    pub arrival: Option<crate::task::arrival::Arrival>,
    /// A database source's table (`schema.table`).
    pub table: Option<String>,
}

/// The `[reconcile]` section.
#[derive(Debug, Clone)]
pub struct Reconcile {
    pub source_sql: String,
    pub output_sql: String,
    pub tolerance: BTreeMap<String, f64>,
    pub on_mismatch: OnMismatch,
}

/// The default independent check (`[reconcile] default`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DefaultCheck {
    /// The rows the task's query gives for the window on the independent path
    /// (`source_rows`) against the rows staged.
    Rows,
    /// Also an order-independent fingerprint of every row (`source_content`): the count and
    /// the sum of a hash of each row, on both sides.
    Content,
}

/// How a task's windows are checked independently of the path that produces them.
#[derive(Debug, Clone)]
pub struct Checking {
    /// The default check that runs (`None`: the task's own `[reconcile]` queries replace it,
    /// or the task opted out).
    pub default: Option<DefaultCheck>,
    /// `[reconcile] independent = false`: the reason given, recorded in every commit.
    pub unchecked: Option<String>,
    /// What a failed default check does (`[reconcile] on_mismatch`).
    pub on_mismatch: OnMismatch,
}

impl Default for Checking {
    fn default() -> Self {
        Checking {
            default: Some(DefaultCheck::Rows),
            unchecked: None,
            on_mismatch: OnMismatch::Fail,
        }
    }
}

/// A validated task.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    pub file: PathBuf,
    pub description: Option<String>,
    pub sql: String,
    /// Where the SQL text came from (the .toml or the .sql file), for messages.
    pub sql_file: PathBuf,
    pub partition_by: String,
    /// `[target] on_schema_change`.
    pub on_schema_change: OnSchemaChange,
    /// Explicit target URI, if the task sets one; otherwise `<lake>/<table>`.
    pub target_uri: Option<String>,
    pub grain: Grain,
    /// Windows before the one asked for that `run` re-publishes with it, for late rows
    /// (`[window] lookback`, default 0).
    pub lookback: u32,
    pub timezone: TimeZone,
    pub timezone_name: String,
    pub sources: Vec<Source>,
    pub mode: Mode,
    pub key: Vec<String>,
    pub on_empty: OnEmpty,
    pub reconcile: Option<Reconcile>,
    /// The independent check of every window (`[reconcile] default`, `independent`).
    pub checking: Checking,
    /// The `[checks]` section: assertions on each window's rows before its commit.
    pub checks: Vec<crate::task::checks::DataCheck>,
    pub lint_allow: Vec<String>,
    /// The `[alert]` section, if any.
    pub alert: Option<crate::task::alert::AlertSpec>,
    /// `[engine]`: where the task's queries execute (this process unless it says otherwise).
    pub engine: crate::task::engine::Engine,
}

pub use crate::task::names::is_identifier;

/// Resolve a source/target location: URLs stay as they are, relative paths are taken relative
/// to `base`.
pub fn resolve_location(base: &Path, uri: &str) -> String {
    if uri.contains("://") {
        uri.to_string()
    } else {
        let p = Path::new(uri);
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        };
        p.to_string_lossy().into_owned()
    }
}

impl Task {
    /// Load and validate `file`; `project_dir` anchors relative source paths.
    pub fn load(file: &Path, project_dir: &Path) -> Result<Task> {
        let shown = file.display().to_string();
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::input(format!("{shown}: cannot read task file: {e}")))?;
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        Self::parse(&name, file, &text, project_dir)
    }

    /// Parse and validate the text of a task file named `name`.
    pub fn parse(name: &str, file: &Path, text: &str, project_dir: &Path) -> Result<Task> {
        let shown = file.display().to_string();
        let fail = |field: &str, msg: String| Error::input(format!("{shown}: {field}: {msg}"));
        if !is_identifier(name) {
            return Err(Error::input(format!(
                "{shown}: the table name `{name}` (the file name) must be letters, digits and underscores, not starting with a digit"
            )));
        }
        let raw: RawTask = parse_toml(text, &shown)?;

        let (sql, sql_file) = read_sql(raw.sql, file, &fail)?;

        let partition_by = parse_partition_by(&raw.target.partition_by, &fail)?;
        let lookback = parse_lookback(raw.window.lookback, &fail)?;
        let timezone_name = raw.window.timezone.unwrap_or_else(|| "UTC".to_string());
        let timezone = time_zone(&timezone_name)
            .map_err(|e| fail("[window].timezone", e.message().to_string()))?;

        let sources = raw
            .sources
            .into_iter()
            .map(|(alias, s)| parse_source(alias, s, project_dir, &fail))
            .collect::<Result<Vec<_>>>()?;
        if sources.is_empty() {
            return Err(fail("[sources]", "at least one source is required".into()));
        }
        source::check_distinct_aliases(&sources, &fail)?;

        let key = parse_key(&raw.write, &fail)?;

        let (reconcile, checking) = parse_reconcile(raw.reconcile, &fail)?;

        let checks = match raw.checks {
            None => Vec::new(),
            Some(c) => crate::task::checks::resolve(c, &fail)?,
        };

        let alert = match raw.alert {
            None => None,
            Some(a) => Some(a.validate(project_dir, fail)?),
        };

        let engine = parse_engine(raw.engine, raw.write.mode, &fail)?;

        Ok(Task {
            name: name.to_string(),
            file: file.to_path_buf(),
            description: raw.description,
            sql,
            sql_file,
            partition_by,
            on_schema_change: raw.target.on_schema_change,
            target_uri: raw.target.uri.map(|u| resolve_location(project_dir, &u)),
            grain: raw.window.grain,
            lookback,
            timezone,
            timezone_name,
            sources,
            mode: raw.write.mode,
            key,
            on_empty: raw.write.on_empty,
            reconcile,
            checking,
            checks,
            lint_allow: raw
                .lint
                .allow
                .iter()
                .map(|f| f.to_ascii_lowercase())
                .collect(),
            alert,
            engine,
        })
    }
}

/// The task file's TOML; a syntax error names its line.
fn parse_toml(text: &str, shown: &str) -> Result<RawTask> {
    toml::from_str(text).map_err(|e| {
        let msg = e.message().to_string();
        let at = e
            .span()
            .map(|s| {
                let line = text[..s.start.min(text.len())].lines().count().max(1);
                format!(" (line {line})")
            })
            .unwrap_or_default();
        Error::input(format!("{shown}{at}: {msg}"))
    })
}

/// Most windows a `run` re-publishes behind the one asked for: with it, they fit one commit.
pub const MAX_LOOKBACK: i64 = 100;

/// Builds the task file's error for a field.
type Fail<'a> = dyn Fn(&str, String) -> Error + 'a;

/// `[target].partition_by`, trimmed: it must name the window column.
fn parse_partition_by(raw: &str, fail: &Fail<'_>) -> Result<String> {
    let partition_by = raw.trim().to_string();
    if partition_by.is_empty() {
        return Err(fail(
            "[target].partition_by",
            "must name the window column".into(),
        ));
    }
    Ok(partition_by)
}

/// `[window].lookback` (default 0), between 0 and [`MAX_LOOKBACK`] windows.
fn parse_lookback(raw: Option<i64>, fail: &Fail<'_>) -> Result<u32> {
    Ok(match raw.unwrap_or(0) {
        n @ 0..=MAX_LOOKBACK => n as u32,
        n => {
            return Err(fail(
                "[window].lookback",
                format!("must be between 0 and {MAX_LOOKBACK} windows, got {n}"),
            ));
        }
    })
}

/// `[write].key`, each column name trimmed: none may be empty, and merge needs at least one.
fn parse_key(write: &RawWrite, fail: &Fail<'_>) -> Result<Vec<String>> {
    let key: Vec<String> = write.key.iter().map(|k| k.trim().to_string()).collect();
    if key.iter().any(String::is_empty) {
        return Err(fail("[write].key", "contains an empty column name".into()));
    }
    if write.mode == Mode::Merge && key.is_empty() {
        return Err(fail(
            "[write].key",
            "required when mode = \"merge\": the deterministic key to upsert on".into(),
        ));
    }
    Ok(key)
}

/// `[engine]` (this process without one); a Ballista engine refuses merge tasks.
fn parse_engine(
    raw: Option<crate::task::engine::RawEngine>,
    mode: Mode,
    fail: &Fail<'_>,
) -> Result<crate::task::engine::Engine> {
    let engine = match raw {
        None => crate::task::engine::Engine::Local,
        Some(e) => e.resolve(fail)?,
    };
    if !engine.is_local() && mode == Mode::Merge {
        return Err(fail(
            "[engine]",
            "the Ballista engine publishes overwrite windows only (mode = \"overwrite\"); run merge tasks locally".into(),
        ));
    }
    Ok(engine)
}

/// The task's SQL: inline (`sql = """…"""`) or in `<table>.sql` beside the task file, not both.
fn read_sql(inline: Option<String>, file: &Path, fail: &Fail<'_>) -> Result<(String, PathBuf)> {
    let sql_path = file.with_extension("sql");
    let (sql, sql_file) = match (inline, sql_path.exists()) {
        (Some(_), true) => {
            return Err(fail(
                "sql",
                format!(
                    "SQL is given both inline and in {}; keep one",
                    sql_path.display()
                ),
            ));
        }
        (Some(sql), false) => (sql, file.to_path_buf()),
        (None, true) => {
            let sql = std::fs::read_to_string(&sql_path)
                .map_err(|e| Error::input(format!("{}: cannot read: {e}", sql_path.display())))?;
            (sql, sql_path)
        }
        (None, false) => {
            return Err(fail(
                "sql",
                format!(
                    "missing: set `sql = \"\"\"…\"\"\"` or write {}",
                    sql_path.display()
                ),
            ));
        }
    };
    if sql.trim().is_empty() {
        return Err(fail("sql", "is empty".into()));
    }
    Ok((sql, sql_file))
}

#[cfg(test)]
mod tests;
