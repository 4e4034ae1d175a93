//! A window's reconciliation and `[checks]` results as the standard `dataQualityAssertions`
//! facet's assertions: a reconciliation check expects its source side and finds its output
//! side; a `[checks]` check expects no failing rows, with its kind, column and severity.

use serde_json::{Value, json};

use crate::report::record::{Check, DataCheckResult, Report};
use crate::task::Task;
use crate::task::checks::CheckKind;

/// The window's reconciliation and `[checks]` results as data-quality assertions.
pub fn of(task: &Task, report: &Report) -> Value {
    let mut out: Vec<Value> = report.reconciliation.iter().map(reconciliation).collect();
    out.extend(report.data_checks.iter().map(|c| data_check(task, c)));
    json!({"assertions": out})
}

fn reconciliation(c: &Check) -> Value {
    let mut a = json!({
        "assertion": c.check,
        "name": c.check,
        "success": c.ok,
        "expected": c.source,
        "actual": c.output,
        "description": "reconciliation: the check's source side (expected) against the window's output side (actual)",
    });
    if let Some(t) = c.tolerance {
        a["params"] = json!({"tolerance": t});
    }
    a
}

fn data_check(task: &Task, c: &DataCheckResult) -> Value {
    let kind = task
        .checks
        .iter()
        .find(|d| d.name == c.check)
        .map(|d| &d.kind);
    let (assertion, column, content) = match kind {
        Some(CheckKind::NotNull(col)) => ("not_null", Some(col.as_str()), None),
        Some(CheckKind::Unique(cols)) if cols.len() == 1 => {
            ("unique", Some(cols[0].as_str()), None)
        }
        Some(CheckKind::Unique(_)) => ("unique", None, None),
        Some(CheckKind::AcceptedValues(col, _)) => ("accepted_values", Some(col.as_str()), None),
        Some(CheckKind::Range { column, .. }) => ("range", Some(column.as_str()), None),
        Some(CheckKind::RowCount { .. }) => ("row_count", None, None),
        Some(CheckKind::Relationship { column, .. }) => {
            ("relationships", Some(column.as_str()), None)
        }
        Some(CheckKind::Sql(sql)) => ("custom_sql", None, Some(sql.as_str())),
        None => ("custom_sql", None, None),
    };
    let mut a = json!({
        "assertion": assertion,
        "name": c.check,
        "success": c.ok,
        "severity": c.severity,
        "expected": "0",
        "actual": c.failing_rows.to_string(),
        "description": "[checks]: the rows (for unique, the key groups) that fail the check",
    });
    if let Some(col) = column {
        a["column"] = json!(col);
    }
    if let Some(sql) = content {
        a["content"] = json!(sql);
        a["contentType"] = json!("sql");
    }
    a
}
