//! The `[checks]` section: assertions on a window's rows that run on the staged output before
//! the commit (dbt tests, SQLMesh audits), scoped to the window.
//!
//! Every check is a query over the table `output` (the window's rows as readers will see them)
//! that returns the offending rows: none is a pass. Built-ins are generated here as SQL text with
//! quoted identifiers and typed literals; custom checks are the user's SQL, which may also read
//! the task's sources with the window parameters bound.
//!
//! ```toml
//! [checks]
//! not_null = ["l_orderkey", "ship_date"]
//! unique = [["l_orderkey", "l_linenumber"]]
//! accepted_values = { l_shipmode = ["AIR", "MAIL", "SHIP"] }
//! range = { l_quantity = { min = 1, max = 50 } }
//! row_count = { min = 1 }
//! relationships = { l_orderkey = "orders_by_day.o_orderkey" }
//! warn = ["range"]            # these only warn (by kind or by name); the rest fail the window
//!
//! [[checks.sql]]
//! name = "no_negative_price"
//! sql = "SELECT * FROM output WHERE l_extendedprice < 0"
//! severity = "warn"
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::task::names::is_identifier;

/// What a failed check does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Nothing is published; the run exits 6.
    #[default]
    Error,
    /// The window is published; the failure is recorded, reported and alerted.
    Warn,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawChecks {
    #[serde(default)]
    not_null: Vec<String>,
    #[serde(default)]
    unique: Vec<Vec<String>>,
    #[serde(default)]
    accepted_values: BTreeMap<String, Vec<toml::Value>>,
    #[serde(default)]
    range: BTreeMap<String, RawRange>,
    row_count: Option<RawCount>,
    #[serde(default)]
    relationships: BTreeMap<String, String>,
    /// Built-in checks that only warn: a kind (`"range"`) or a check's name
    /// (`"range(l_quantity)"`).
    #[serde(default)]
    warn: Vec<String>,
    #[serde(default)]
    sql: Vec<RawSqlCheck>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRange {
    min: Option<toml::Value>,
    max: Option<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCount {
    min: Option<u64>,
    max: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSqlCheck {
    name: String,
    sql: String,
    #[serde(default)]
    severity: Severity,
}

/// What a check asserts.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckKind {
    NotNull(String),
    Unique(Vec<String>),
    /// The column's non-NULL values are among these SQL literals.
    AcceptedValues(String, Vec<String>),
    /// Inclusive bounds, as SQL literals.
    Range {
        column: String,
        min: Option<String>,
        max: Option<String>,
    },
    RowCount {
        min: Option<u64>,
        max: Option<u64>,
    },
    /// Every non-NULL value of `column` is a value of `to_column` in task `to_task`'s table.
    Relationship {
        column: String,
        to_task: String,
        to_column: String,
        /// The other task's table (filled in by `Project::task`).
        to_uri: String,
    },
    /// The user's query: the offending rows.
    Sql(String),
}

/// One check of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct DataCheck {
    /// `not_null(c)`, `unique(a,b)`, `accepted_values(c)`, `range(c)`, `row_count`,
    /// `relationships(c)` or the custom check's name.
    pub name: String,
    pub kind: CheckKind,
    pub severity: Severity,
}

/// The table name the other side of the task's `index`-th check (a relationship) is
/// registered under in a check's session.
pub fn reference_table(index: usize) -> String {
    format!("__idemlake_ref_{index}")
}

impl DataCheck {
    /// The query returning this check's offending rows, over `output`; `index` is the
    /// check's position in the task (names its relationship table).
    pub fn sql(&self, index: usize) -> String {
        let q = quote;
        match &self.kind {
            CheckKind::NotNull(c) => format!("SELECT * FROM output WHERE {} IS NULL", q(c)),
            CheckKind::Unique(cols) => {
                // As dbt's `unique`: rows with a NULL in the key are not compared.
                let list = cols.iter().map(|c| q(c)).collect::<Vec<_>>().join(", ");
                let present = cols
                    .iter()
                    .map(|c| format!("{} IS NOT NULL", q(c)))
                    .collect::<Vec<_>>()
                    .join(" AND ");
                format!(
                    "SELECT {list}, count(*) AS idemlake_duplicates FROM output WHERE {present} GROUP BY {list} HAVING count(*) > 1"
                )
            }
            CheckKind::AcceptedValues(c, values) => format!(
                "SELECT * FROM output WHERE {c} IS NOT NULL AND {c} NOT IN ({})",
                values.join(", "),
                c = q(c)
            ),
            CheckKind::Range { column, min, max } => {
                let c = q(column);
                let mut out = Vec::new();
                if let Some(m) = min {
                    out.push(format!("{c} < {m}"));
                }
                if let Some(m) = max {
                    out.push(format!("{c} > {m}"));
                }
                format!("SELECT * FROM output WHERE {}", out.join(" OR "))
            }
            CheckKind::RowCount { min, max } => {
                let mut out = Vec::new();
                if let Some(m) = min {
                    out.push(format!("count(*) < {m}"));
                }
                if let Some(m) = max {
                    out.push(format!("count(*) > {m}"));
                }
                format!(
                    "SELECT count(*) AS row_count FROM output HAVING {}",
                    out.join(" OR ")
                )
            }
            CheckKind::Relationship {
                column, to_column, ..
            } => format!(
                "SELECT * FROM output o WHERE o.{c} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {t} r WHERE r.{tc} = o.{c})",
                c = q(column),
                t = reference_table(index),
                tc = q(to_column)
            ),
            CheckKind::Sql(sql) => sql.clone(),
        }
    }

    /// Columns of the output the check names (checked against the query's columns when the
    /// task is planned).
    pub fn columns(&self) -> Vec<&str> {
        match &self.kind {
            CheckKind::NotNull(c) | CheckKind::AcceptedValues(c, _) => vec![c],
            CheckKind::Range { column, .. } | CheckKind::Relationship { column, .. } => {
                vec![column]
            }
            CheckKind::Unique(cols) => cols.iter().map(String::as_str).collect(),
            CheckKind::RowCount { .. } | CheckKind::Sql(_) => Vec::new(),
        }
    }

    /// The SQL literals the check compares a column with, each as (role, column, literal):
    /// `range`'s `min` and `max`, `accepted_values`' values (role `value`).
    pub fn literals(&self) -> Vec<(&'static str, &str, &str)> {
        match &self.kind {
            CheckKind::Range { column, min, max } => [("min", min), ("max", max)]
                .into_iter()
                .filter_map(|(role, v)| Some((role, column.as_str(), v.as_deref()?)))
                .collect(),
            CheckKind::AcceptedValues(c, values) => values
                .iter()
                .map(|v| ("value", c.as_str(), v.as_str()))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// A double-quoted SQL identifier.
pub fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A TOML value as a SQL literal: strings quoted, numbers and booleans as they are, dates and
/// timestamps typed.
fn literal(v: &toml::Value) -> std::result::Result<String, String> {
    Ok(match v {
        toml::Value::String(s) => format!("'{}'", s.replace('\'', "''")),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) if f.is_finite() => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => match (d.date, d.time) {
            (Some(_), None) => format!("DATE '{d}'"),
            (Some(_), Some(_)) => format!("TIMESTAMP '{d}'"),
            _ => {
                return Err(format!(
                    "a time without a date ({d}) is not a value to compare"
                ));
            }
        },
        other => {
            return Err(format!(
                "{other} is not a single value (string, number, boolean or date)"
            ));
        }
    })
}

/// The task file's error for a field: `fail(field, message)`.
type Fail<'a> = &'a dyn Fn(&str, String) -> Error;

/// A built-in check before its severity is known: its name and what it asserts.
type Named = (String, CheckKind);

/// Resolve the raw section into checks; `fail` builds the task file's error for a field.
pub(crate) fn resolve(raw: RawChecks, fail: Fail) -> Result<Vec<DataCheck>> {
    let mut out = column_checks(&raw, fail)?;
    out.extend(bound_checks(&raw, fail)?);
    out.extend(relationship_checks(&raw, fail)?);
    let checks = with_severity(out, &raw.warn, fail)?;
    with_sql_checks(checks, raw.sql, fail)
}

/// A column name of `field`, trimmed; empty is an error.
fn column(field: &str, c: &str, fail: Fail) -> Result<String> {
    let c = c.trim();
    if c.is_empty() {
        return Err(fail(field, "contains an empty column name".into()));
    }
    Ok(c.to_string())
}

/// `not_null`, `unique` and `accepted_values`.
fn column_checks(raw: &RawChecks, fail: Fail) -> Result<Vec<Named>> {
    let mut out = Vec::new();
    for c in &raw.not_null {
        let c = column("[checks].not_null", c, fail)?;
        out.push((format!("not_null({c})"), CheckKind::NotNull(c)));
    }
    for set in &raw.unique {
        if set.is_empty() {
            return Err(fail("[checks].unique", "a column set is empty".into()));
        }
        let cols = set
            .iter()
            .map(|c| column("[checks].unique", c, fail))
            .collect::<Result<Vec<_>>>()?;
        out.push((
            format!("unique({})", cols.join(",")),
            CheckKind::Unique(cols),
        ));
    }
    for (c, values) in &raw.accepted_values {
        let field = format!("[checks].accepted_values.{c}");
        let c = column(&field, c, fail)?;
        if values.is_empty() {
            return Err(fail(&field, "lists no values".into()));
        }
        let values = values
            .iter()
            .map(|v| literal(v).map_err(|m| fail(&field, m)))
            .collect::<Result<Vec<_>>>()?;
        out.push((
            format!("accepted_values({c})"),
            CheckKind::AcceptedValues(c, values),
        ));
    }
    Ok(out)
}

/// `range` per column and `row_count`.
fn bound_checks(raw: &RawChecks, fail: Fail) -> Result<Vec<Named>> {
    let mut out = Vec::new();
    for (c, r) in &raw.range {
        let field = format!("[checks].range.{c}");
        let c = column(&field, c, fail)?;
        let lit = |v: &Option<toml::Value>| {
            v.as_ref()
                .map(|v| literal(v).map_err(|m| fail(&field, m)))
                .transpose()
        };
        let (min, max) = (lit(&r.min)?, lit(&r.max)?);
        if min.is_none() && max.is_none() {
            return Err(fail(&field, "needs min, max or both".into()));
        }
        let number = |v: &Option<toml::Value>| match v {
            Some(toml::Value::Integer(i)) => Some(*i as f64),
            Some(toml::Value::Float(f)) => Some(*f),
            _ => None,
        };
        if let (Some(a), Some(b)) = (number(&r.min), number(&r.max))
            && a > b
        {
            return Err(fail(&field, format!("min ({a}) is greater than max ({b})")));
        }
        out.push((
            format!("range({c})"),
            CheckKind::Range {
                column: c,
                min,
                max,
            },
        ));
    }
    if let Some(r) = &raw.row_count {
        match (r.min, r.max) {
            (None, None) => {
                return Err(fail("[checks].row_count", "needs min, max or both".into()));
            }
            (Some(a), Some(b)) if a > b => {
                return Err(fail(
                    "[checks].row_count",
                    format!("min ({a}) is greater than max ({b})"),
                ));
            }
            _ => {}
        }
        out.push((
            "row_count".to_string(),
            CheckKind::RowCount {
                min: r.min,
                max: r.max,
            },
        ));
    }
    Ok(out)
}

/// `relationships`: each column's values must exist in `other_task.column`.
fn relationship_checks(raw: &RawChecks, fail: Fail) -> Result<Vec<Named>> {
    let mut out = Vec::new();
    for (c, to) in &raw.relationships {
        let field = format!("[checks].relationships.{c}");
        let c = column(&field, c, fail)?;
        let Some((task, col)) = to
            .split_once('.')
            .filter(|(t, k)| is_identifier(t) && !k.is_empty())
        else {
            return Err(fail(
                &field,
                format!("`{to}` must be \"other_task.column\""),
            ));
        };
        out.push((
            format!("relationships({c})"),
            CheckKind::Relationship {
                column: c,
                to_task: task.to_string(),
                to_column: col.to_string(),
                to_uri: String::new(),
            },
        ));
    }
    Ok(out)
}

/// The built-in checks with their severity: `warn` names kinds or checks that only warn, and
/// each name must match one of them.
fn with_severity(out: Vec<Named>, warn: &[String], fail: Fail) -> Result<Vec<DataCheck>> {
    let kind_of = |name: &str| name.split('(').next().unwrap_or(name).to_string();
    for w in warn {
        if !out.iter().any(|(n, _)| n == w || kind_of(n) == *w) {
            return Err(fail(
                "[checks].warn",
                format!(
                    "`{w}` names no built-in check of this task (they are: {})",
                    out.iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    Ok(out
        .into_iter()
        .map(|(name, kind)| {
            let warn = warn.iter().any(|w| *w == name || *w == kind_of(&name));
            DataCheck {
                name,
                kind,
                severity: if warn {
                    Severity::Warn
                } else {
                    Severity::Error
                },
            }
        })
        .collect())
}

/// `checks` followed by the `[[checks.sql]]` checks, each with a name of its own.
fn with_sql_checks(
    mut checks: Vec<DataCheck>,
    sql: Vec<RawSqlCheck>,
    fail: Fail,
) -> Result<Vec<DataCheck>> {
    for s in sql {
        let field = format!("[[checks.sql]] {}", s.name);
        if !is_identifier(&s.name) {
            return Err(fail(
                "[[checks.sql]].name",
                format!("`{}` must be letters, digits and underscores", s.name),
            ));
        }
        if s.sql.trim().is_empty() {
            return Err(fail(&field, "sql is empty".into()));
        }
        if checks.iter().any(|c| c.name == s.name) {
            return Err(fail(&field, "two checks have this name".into()));
        }
        checks.push(DataCheck {
            name: s.name,
            kind: CheckKind::Sql(s.sql),
            severity: s.severity,
        });
    }
    Ok(checks)
}

#[cfg(test)]
mod tests;
