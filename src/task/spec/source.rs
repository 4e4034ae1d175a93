//! The `[sources.<alias>]` sections (what the task's SQL reads) and the `[reconcile]` section
//! (the query over those sources the run's output is compared with): their raw form and their
//! validation.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::{
    Fail, Format, OnMismatch, Reconcile, Require, Source, is_identifier, resolve_location,
};
use crate::error::Result;

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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconcile {
    source: String,
    output: String,
    #[serde(default)]
    tolerance: BTreeMap<String, f64>,
    #[serde(default)]
    on_mismatch: OnMismatch,
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
    Ok(Source {
        uri: resolve_location(project_dir, &uri),
        upstream: None,
        require: Require::Any,
        alias,
        format,
        csv_header: s.header.unwrap_or(true),
        csv_delimiter,
    })
}

/// Refuses an alias that is not a plain SQL identifier, or the reserved `output`.
fn check_alias(alias: &str, field: &str, fail: &Fail<'_>) -> Result<()> {
    if !is_identifier(alias) {
        return Err(fail(
            field,
            "the alias must be a plain SQL identifier".into(),
        ));
    }
    if alias == "output" {
        return Err(fail(
            field,
            "`output` is reserved for the run's result in [reconcile]".into(),
        ));
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
    if s.format.is_some_and(|f| f != Format::Delta) || s.header.is_some() || s.delimiter.is_some() {
        return Err(fail(
            field,
            "a task source is that task's Delta table: no format, header or delimiter".into(),
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

/// The `[reconcile]` section, validated.
pub(super) fn parse_reconcile(r: RawReconcile, fail: &Fail<'_>) -> Result<Reconcile> {
    for (field, sql) in [("source", &r.source), ("output", &r.output)] {
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
    Ok(Reconcile {
        source_sql: r.source,
        output_sql: r.output,
        tolerance: r.tolerance,
        on_mismatch: r.on_mismatch,
    })
}

/// The format a source's name implies (its extension, or a local `_delta_log` folder), if any.
fn infer_format(uri: &str) -> Option<Format> {
    let lower = uri.trim_end_matches('/').to_ascii_lowercase();
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
