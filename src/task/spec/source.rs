//! The `[sources.<alias>]` sections (what the task's SQL reads) and the `[reconcile]` section
//! (the query over those sources the run's output is compared with): their raw form and their
//! validation.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::{
    Checking, DefaultCheck, Fail, Format, OnMismatch, Reconcile, Require, Source, is_identifier,
    resolve_location,
};
use crate::error::Result;

mod zone;
use zone::{parse_arrival, parse_on_missing, parse_partitioning, parse_schema_from};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    uri: Option<String>,
    /// Another task's target table, as a Delta source (instead of `uri`).
    task: Option<String>,
    /// With `task`: `complete` (default: a window runs only when every upstream window inside
    /// it is published) or `any`.
    require: Option<Require>,
    format: Option<Format>,
    /// CSV only: whether the first line is a header (default true).
    header: Option<bool>,
    /// CSV only: one-character field delimiter (default `,`).
    delimiter: Option<String>,
    /// `auto` (default), `hive` or `none`: whether `key=value` directories are columns.
    partitioning: Option<String>,
    /// The Hive partition columns, one per directory level in order: `["dt DATE", …]`.
    partition_columns: Option<Vec<String>>,
    /// `first` (default) or `last`: the file, in path order, a landing zone's columns come from.
    schema_from: Option<String>,
    /// `retry` (default) or `empty`: a landing-zone window none of whose directories exist.
    on_missing: Option<String>,
    /// The partition column(s) giving a file's arrival day: `"dt"` or `["year", "month", "day"]`.
    arrival: Option<zone::Columns>,
    /// The time zone of the arrival days (default UTC).
    arrival_timezone: Option<String>,
    /// How late an event may arrive (`"2 days"`), with `arrival`.
    lateness: Option<String>,
    /// The event-time column, with `arrival`: rows no window reaches are counted.
    event_time: Option<String>,
    /// `warn` (default) or `fail`: what rows no window reaches do.
    on_late: Option<String>,
    /// A database source's table: `schema.table` or `table`.
    table: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconcile {
    source: Option<String>,
    output: Option<String>,
    #[serde(default)]
    tolerance: BTreeMap<String, f64>,
    #[serde(default)]
    on_mismatch: OnMismatch,
    /// The default independent check: `rows` or `content`.
    default: Option<DefaultCheck>,
    /// `false` (with `reason`): publish without an independent check.
    independent: Option<bool>,
    reason: Option<String>,
}

/// One `[sources.<alias>]` section, validated.
pub(super) fn parse_source(
    alias: String,
    mut s: RawSource,
    project_dir: &Path,
    fail: &Fail<'_>,
) -> Result<Source> {
    let field = format!("[sources.{alias}]");
    check_alias(&alias, &field, fail)?;
    let uri = match (s.uri.take(), s.task.take()) {
        (Some(_), Some(_)) => {
            return Err(fail(
                &field,
                "give either `uri` or `task` (another task's table), not both".into(),
            ));
        }
        (None, None) => {
            return Err(fail(
                &format!("{field}.uri"),
                "is required (or `task = \"<name>\"` to read another task's table)".into(),
            ));
        }
        (None, Some(t)) => return task_source(alias, &field, t, &s, fail),
        (Some(u), None) => u,
    };
    if uri.trim().is_empty() {
        return Err(fail(&format!("{field}.uri"), "is empty".into()));
    }
    if s.require.is_some() {
        return Err(fail(
            &format!("{field}.require"),
            "applies to task sources (`task = \"…\"`) only".into(),
        ));
    }
    let format = match s.format {
        Some(f) => f,
        None => infer_format(&uri).ok_or_else(|| {
            fail(
                &format!("{field}.format"),
                format!(
                    "cannot tell the format of `{uri}` from its name: set format = parquet | csv | json | delta"
                ),
            )
        })?,
    };
    if format != Format::Csv && (s.header.is_some() || s.delimiter.is_some()) {
        return Err(fail(
            &field,
            "`header` and `delimiter` apply to csv sources only".into(),
        ));
    }
    let csv_delimiter = csv_delimiter(s.delimiter.as_deref(), &field, fail)?;
    let partitioning = parse_partitioning(&s, format, &field, fail)?;
    let schema_from = parse_schema_from(&s, format, &field, fail)?;
    let on_missing = parse_on_missing(&s, format, &field, fail)?;
    let arrival = parse_arrival(&s, format, &field, fail)?;
    let table = parse_table(&s, &uri, format, &field, fail)?;
    Ok(Source {
        uri: resolve_location(project_dir, &uri),
        upstream: None,
        require: Require::Any,
        alias,
        format,
        csv_header: s.header.unwrap_or(true),
        csv_delimiter,
        partitioning,
        schema_from,
        on_missing,
        arrival,
        table,
    })
}

/// A database source's `table` (required for one, refused elsewhere), and its `uri`: a
/// `postgres://user@host:port/database` URL without a password (it would be recorded: it comes
/// from `PGPASSWORD` or a `.pgpass` file).
fn parse_table(
    s: &RawSource,
    uri: &str,
    format: Format,
    field: &str,
    fail: &Fail<'_>,
) -> Result<Option<String>> {
    if format != Format::Postgres {
        return match s.table {
            Some(_) => Err(fail(
                &format!("{field}.table"),
                "applies to database sources (format = \"postgres\")".into(),
            )),
            None => Ok(None),
        };
    }
    let url = url::Url::parse(uri)
        .ok()
        .filter(|u| matches!(u.scheme(), "postgres" | "postgresql"));
    let Some(url) = url else {
        return Err(fail(
            &format!("{field}.uri"),
            format!("`{uri}` is not a postgres://user@host:port/database URL"),
        ));
    };
    if url.password().is_some() {
        return Err(fail(
            &format!("{field}.uri"),
            "holds a password, which would be recorded with every run: remove it and set PGPASSWORD or use a .pgpass file (PGPASSFILE)".into(),
        ));
    }
    let table = s.table.as_deref().map(str::trim).unwrap_or_default();
    let parts: Vec<&str> = table.split('.').collect();
    if table.is_empty() || parts.len() > 2 || parts.iter().any(|p| !is_identifier(p)) {
        return Err(fail(
            &format!("{field}.table"),
            format!(
                "must name the table to read, `schema.table` or `table` (plain identifiers), not `{table}`"
            ),
        ));
    }
    Ok(Some(table.to_string()))
}

fn check_alias(alias: &str, field: &str, fail: &Fail<'_>) -> Result<()> {
    if !is_identifier(alias) {
        return Err(fail(
            field,
            "the alias must be a plain SQL identifier".into(),
        ));
    }
    if alias.eq_ignore_ascii_case("output") {
        return Err(fail(
            field,
            "`output` is reserved for the run's result in [reconcile]".into(),
        ));
    }
    Ok(())
}

/// Refuse two aliases that differ only in case: SQL folds unquoted identifiers to lower
/// case, so they would name one table.
pub(super) fn check_distinct_aliases(sources: &[Source], fail: &Fail<'_>) -> Result<()> {
    for (i, a) in sources.iter().enumerate() {
        if let Some(b) = sources[..i]
            .iter()
            .find(|b| b.alias.eq_ignore_ascii_case(&a.alias))
        {
            return Err(fail(
                &format!("[sources.{}]", a.alias),
                format!(
                    "`{}` and `{}` name the same table in SQL (unquoted identifiers are case-insensitive): rename one",
                    b.alias, a.alias
                ),
            ));
        }
    }
    Ok(())
}

/// A `task = "…"` source: upstream task `t`'s Delta table, its location filled in later by
/// `Project::task`; csv options and any format but delta are refused.
fn task_source(
    alias: String,
    field: &str,
    t: String,
    s: &RawSource,
    fail: &Fail<'_>,
) -> Result<Source> {
    let t = t.trim().to_string();
    if t.is_empty() {
        return Err(fail(&format!("{field}.task"), "is empty".into()));
    }
    if s.format.is_some_and(|f| f != Format::Delta)
        || s.header.is_some()
        || s.delimiter.is_some()
        || s.partitioning.is_some()
        || s.partition_columns.is_some()
        || s.schema_from.is_some()
        || s.on_missing.is_some()
        || s.arrival.is_some()
        || s.lateness.is_some()
        || s.arrival_timezone.is_some()
        || s.event_time.is_some()
        || s.on_late.is_some()
        || s.table.is_some()
    {
        return Err(fail(
            field,
            "a task source is that task's Delta table: no format, header, delimiter, partitioning, schema_from, on_missing, arrival or lateness".into(),
        ));
    }
    Ok(Source {
        alias,
        uri: String::new(),
        upstream: Some(t),
        require: s.require.unwrap_or_default(),
        format: Format::Delta,
        csv_header: true,
        csv_delimiter: b',',
        partitioning: Partitioning::None,
        schema_from: SchemaFrom::First,
        on_missing: OnMissing::Retry,
        arrival: None,
        table: None,
    })
}

/// The csv `delimiter` option as one byte (default `,`).
fn csv_delimiter(delimiter: Option<&str>, field: &str, fail: &Fail<'_>) -> Result<u8> {
    Ok(match delimiter {
        None => b',',
        Some(d) if d.len() == 1 => d.as_bytes()[0],
        Some(d) => {
            return Err(fail(
                &format!("{field}.delimiter"),
                format!("must be one character, got `{d}`"),
            ));
        }
    })
}

/// The `[reconcile]` section, validated: the user's own check (`source` and `output`, if
/// given) and how the task is checked independently.
pub(super) fn parse_reconcile(
    r: Option<RawReconcile>,
    fail: &Fail<'_>,
) -> Result<(Option<Reconcile>, Checking)> {
    let Some(r) = r else {
        return Ok((None, Checking::default()));
    };
    let queries = match (r.source, r.output) {
        (Some(source), Some(output)) => Some((source, output)),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err(fail(
                "[reconcile]",
                "`source` and `output` go together: set both (a one-row query each) or neither"
                    .into(),
            ));
        }
    };
    let checking = parse_checking(r.default, r.independent, r.reason, queries.is_some(), fail)?;
    let checking = Checking {
        on_mismatch: r.on_mismatch,
        ..checking
    };
    let Some((source, output)) = queries else {
        return Ok((None, checking));
    };
    for (field, sql) in [("source", &source), ("output", &output)] {
        if sql.trim().is_empty() {
            return Err(fail(&format!("[reconcile].{field}"), "is empty".into()));
        }
    }
    for (col, tol) in &r.tolerance {
        if !tol.is_finite() || *tol < 0.0 {
            return Err(fail(
                &format!("[reconcile].tolerance.{col}"),
                format!("must be a non-negative relative tolerance, got {tol}"),
            ));
        }
    }
    let reconcile = Reconcile {
        source_sql: source,
        output_sql: output,
        tolerance: r.tolerance,
        on_mismatch: r.on_mismatch,
    };
    Ok((Some(reconcile), checking))
}

/// `default`, `independent` and `reason` of `[reconcile]`: which default check runs (none
/// when the task's own `source`/`output` check replaces it and no `default` is asked for).
fn parse_checking(
    default: Option<DefaultCheck>,
    independent: Option<bool>,
    reason: Option<String>,
    own_queries: bool,
    fail: &Fail<'_>,
) -> Result<Checking> {
    let reason = reason.map(|r| r.trim().to_string());
    match independent {
        Some(false) => {
            if own_queries || default.is_some() {
                return Err(fail(
                    "[reconcile].independent",
                    "`independent = false` publishes without an independent check, so it cannot go with `source`/`output` or `default`".into(),
                ));
            }
            let Some(reason) = reason.filter(|r| !r.is_empty()) else {
                return Err(fail(
                    "[reconcile].reason",
                    "required with `independent = false`: say why this task may publish without an independent check (it is recorded in every commit)".into(),
                ));
            };
            Ok(Checking {
                default: None,
                unchecked: Some(reason),
                ..Checking::default()
            })
        }
        _ if reason.is_some() => Err(fail(
            "[reconcile].reason",
            "only goes with `independent = false`".into(),
        )),
        _ => Ok(Checking {
            default: match default {
                Some(d) => Some(d),
                None if own_queries => None,
                None => Some(DefaultCheck::Rows),
            },
            ..Checking::default()
        }),
    }
}

/// The format a source's name implies (its extension, or a local `_delta_log` folder), if any.
fn infer_format(uri: &str) -> Option<Format> {
    let lower = uri.trim_end_matches('/').to_ascii_lowercase();
    if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
        return Some(Format::Postgres);
    }
    let ext = lower.rsplit('.').next().unwrap_or_default();
    match ext {
        "parquet" => Some(Format::Parquet),
        "csv" => Some(Format::Csv),
        "json" | "ndjson" | "jsonl" => Some(Format::Json),
        _ if !uri.contains("://") && Path::new(uri).join("_delta_log").is_dir() => {
            Some(Format::Delta)
        }
        _ => None,
    }
}

/// `on_missing`: a window whose directories have not landed fails (exit 1, retryable) or has
/// no rows (`[write].on_empty` applies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnMissing {
    #[default]
    Retry,
    Empty,
}

/// Which file, in path order, a landing zone's columns (and partition levels) come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SchemaFrom {
    /// The first (the oldest day): columns added later are not read.
    #[default]
    First,
    /// The last (the newest day): older files lacking a column read it as NULL.
    Last,
}

/// `[sources.<alias>] partitioning`: whether `key=value` directories (Hive style) are columns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Partitioning {
    /// Hive-style when the source's first file lies under `key=value` directories (their
    /// types inferred from the first value: DATE, BIGINT or VARCHAR, as DuckDB does).
    #[default]
    Auto,
    /// Never: directories are only where files are.
    None,
    /// Hive style, with these columns (one per directory level, in order) and types.
    Hive(Vec<PartitionColumn>),
    /// Directory levels without names (`2026/11/28/07/`, as Firehose and many exporters write
    /// them): one column per level, in order, each directory's whole name its value.
    Directories(Vec<PartitionColumn>),
}

/// One Hive partition column: its name and the type its directory values are read as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionColumn {
    pub name: String,
    pub kind: PartitionKind,
}

/// The types a partition directory's value can be read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionKind {
    Date,
    Int,
    Text,
}

impl PartitionKind {
    /// The type named in `partition_columns` (`DATE`, `BIGINT`/`INT`/`INTEGER`,
    /// `VARCHAR`/`STRING`/`TEXT`), case-insensitive.
    pub fn parse(name: &str) -> Option<PartitionKind> {
        match name.trim().to_ascii_uppercase().as_str() {
            "DATE" => Some(PartitionKind::Date),
            "BIGINT" | "INT" | "INTEGER" | "INT64" => Some(PartitionKind::Int),
            "VARCHAR" | "STRING" | "TEXT" | "UTF8" => Some(PartitionKind::Text),
            _ => None,
        }
    }

    /// What a directory value reads as when no type is declared: a `YYYY-MM-DD` date, a
    /// whole number, or text. Date-shaped is enough: an impossible date (`2026-02-30`) in the
    /// zone's first directory makes the column a `DATE` whose reading names that directory
    /// (exit 2), as a declared `DATE` column does; as text, every window failed on casting
    /// it to the window's dates, exit 1, retryable, naming no directory.
    pub fn infer(value: &str) -> PartitionKind {
        let b = value.as_bytes();
        let date = b.len() == 10
            && b[4] == b'-'
            && b[7] == b'-'
            && b.iter()
                .enumerate()
                .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
        if date {
            PartitionKind::Date
        } else if !value.starts_with('+') && value.parse::<i64>().is_ok() {
            PartitionKind::Int
        } else {
            PartitionKind::Text
        }
    }
}
