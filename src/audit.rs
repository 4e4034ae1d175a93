//! `audit` and `repair`: find windows that older (append-style) jobs damaged, and fix them.
//!
//! Audit works on the table as it is, also tables written by other tools, with one query per
//! range on each side rather than a scan per window:
//! - the table: rows and duplicate keys (by `[write].key`, or whole rows when there is no key)
//!   per partition value, folded into windows;
//! - the source: the task's own SQL bound to the whole range, counted per partition value —
//!   what each window should hold.
//!
//! A window is damaged when it has duplicate keys, or its row count differs from the source's
//! (a window with no data where the source has data is damaged too). With `--reconcile`, the
//! task's `[reconcile]` queries also run for every window (the source side once per window).
//! Repair re-runs exactly the damaged windows (each one atomic), then audits again.

use std::collections::BTreeMap;

use datafusion::common::ScalarValue;
use datafusion::prelude::SessionContext;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::plan;
use crate::project::Project;
use crate::reconcile::{self, Check};
use crate::run::{Runner, partition_range};
use crate::task::Task;
use crate::window::{Grain, Window};

/// One window's audit.
#[derive(Debug, Clone, Serialize)]
pub struct WindowAudit {
    pub task: String,
    pub window: String,
    pub status: &'static str,
    pub rows: u64,
    pub expected_rows: u64,
    pub duplicate_keys: u64,
    pub duplicate_rows: u64,
    pub problems: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reconciliation: Vec<Check>,
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Partition value → window label.
fn label_of(task: &Task, v: &ScalarValue) -> Result<Option<String>> {
    let at = match v {
        ScalarValue::Date32(Some(d)) => jiff::civil::date(1970, 1, 1)
            .checked_add(jiff::Span::new().days(i64::from(*d)))
            .and_then(|d| d.to_zoned(task.timezone.clone()))
            .map_err(|e| Error::runtime(e.to_string()))?,
        ScalarValue::TimestampMicrosecond(Some(us), _) => jiff::Timestamp::from_microsecond(*us)
            .map_err(|e| Error::runtime(e.to_string()))?
            .to_zoned(task.timezone.clone()),
        _ => return Ok(None),
    };
    Ok(Some(Window::containing(task.grain, &at)?.label()))
}

/// Run `sql` and fold `(partition value, n1, n2, n3)` rows into per-window sums.
async fn per_window(
    ctx: &SessionContext,
    task: &Task,
    sql: &str,
) -> Result<BTreeMap<String, [u64; 3]>> {
    let batches = ctx.sql(sql).await?.collect().await?;
    let mut out: BTreeMap<String, [u64; 3]> = BTreeMap::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            let part = ScalarValue::try_from_array(b.column(0), r)?;
            let Some(label) = label_of(task, &part)? else {
                continue;
            };
            let e = out.entry(label).or_default();
            for (i, slot) in e.iter_mut().enumerate() {
                if let ScalarValue::Int64(Some(n)) =
                    ScalarValue::try_from_array(b.column(i + 1), r)?
                        .cast_to(&arrow::datatypes::DataType::Int64)?
                {
                    *slot += n as u64;
                }
            }
        }
    }
    Ok(out)
}

/// Audit `[from, to]`.
pub async fn audit(
    runner: &Runner,
    from: &Window,
    to: &Window,
    with_reconcile: bool,
) -> Result<Vec<WindowAudit>> {
    let task = runner.task();
    let windows = Window::range(from, to)?;
    let ctx = runner.session();
    let part = quote(&task.partition_by);
    let lo = partition_range(task, from).lo_hi().0;
    let hi = partition_range(task, to).lo_hi().1;

    // The source side: the task's SQL over the whole range, counted per partition value.
    let range_window = RangeWindow { from, to };
    let planned = plan::plan(ctx, task, Some(&range_window.as_window()?)).await?;
    ctx.register_table("__idemlake_expected", planned.df.clone().into_view())?;
    let expected = per_window(
        ctx,
        task,
        &format!(
            "SELECT {part}, count(*) AS n, 0 AS k, 0 AS d FROM __idemlake_expected GROUP BY {part}"
        ),
    )
    .await;
    ctx.deregister_table("__idemlake_expected")?;
    let expected = expected?;

    // The table side: rows and duplicate keys per partition value.
    let table = runner.table().await?;
    let mut actual: BTreeMap<String, [u64; 3]> = BTreeMap::new();
    if table.version().is_some() {
        table.update_datafusion_session(&ctx.state())?;
        ctx.register_table("__idemlake_target", table.table_provider().await?)?;
        let key: Vec<String> = if task.key.is_empty() {
            planned
                .schema
                .fields()
                .iter()
                .map(|f| quote(f.name()))
                .filter(|c| c != &part)
                .collect()
        } else {
            task.key
                .iter()
                .map(|k| quote(k))
                .filter(|c| c != &part)
                .collect()
        };
        let keys = key.join(", ");
        // Duplicates are counted per window, not per partition value: a week or month window
        // holds many daily partitions, and a key repeated on two of its days is a duplicate.
        let bucket = match task.grain {
            Grain::Week => format!("CAST(date_trunc('week', {part}) AS DATE)"),
            Grain::Month => format!("CAST(date_trunc('month', {part}) AS DATE)"),
            Grain::Day | Grain::Hour => part.clone(),
        };
        let sql = format!(
            "SELECT b, sum(n) AS n, sum(CASE WHEN n > 1 THEN 1 ELSE 0 END) AS k, sum(CASE WHEN n > 1 THEN n - 1 ELSE 0 END) AS d FROM \
             (SELECT {bucket} AS b, {keys}, count(*) AS n FROM __idemlake_target WHERE {part} >= {lo} AND {part} < {hi} GROUP BY {bucket}, {keys}) \
             GROUP BY b",
            lo = sql_literal(&lo),
            hi = sql_literal(&hi),
        );
        let got = per_window(ctx, task, &sql).await;
        ctx.deregister_table("__idemlake_target")?;
        actual = got?;
    }

    let mut out = Vec::with_capacity(windows.len());
    for w in &windows {
        let label = w.label();
        let [rows, dup_keys, dup_rows] = actual.get(&label).copied().unwrap_or_default();
        let expected_rows = expected.get(&label).map(|e| e[0]).unwrap_or(0);
        let mut problems = Vec::new();
        if dup_keys > 0 {
            problems.push(format!(
                "{dup_keys} duplicate key(s), {dup_rows} extra row(s)"
            ));
        }
        if rows == 0 && expected_rows > 0 {
            problems.push(format!("no data, the source has {expected_rows} row(s)"));
        } else if rows != expected_rows {
            problems.push(format!("{rows} row(s), the source gives {expected_rows}"));
        }
        let mut reconciliation = Vec::new();
        if with_reconcile && task.reconcile.is_some() && rows > 0 {
            reconciliation = reconcile_window(runner, w).await?;
            if reconciliation.iter().any(|c| !c.ok) {
                problems.push(format!(
                    "reconciliation: {}",
                    reconcile::describe_failures(&reconciliation)
                ));
            }
        }
        out.push(WindowAudit {
            task: task.name.clone(),
            window: label,
            status: if problems.is_empty() { "ok" } else { "damaged" },
            rows,
            expected_rows,
            duplicate_keys: dup_keys,
            duplicate_rows: dup_rows,
            problems,
            reconciliation,
        });
    }
    Ok(out)
}

/// `[reconcile].source` for the window vs `[reconcile].output` over the published window.
async fn reconcile_window(runner: &Runner, w: &Window) -> Result<Vec<Check>> {
    let task = runner.task();
    let r = task.reconcile.as_ref().expect("checked");
    let planned = runner.plan(w).await?;
    let src = planned
        .reconcile_source
        .clone()
        .expect("planned with [reconcile]")
        .collect()
        .await?;
    let table = runner.table().await?;
    let ctx = runner.session();
    table.update_datafusion_session(&ctx.state())?;
    let (lo, hi) = partition_range(task, w).lo_hi();
    let pcol = datafusion::prelude::col(datafusion::common::Column::from_name(&task.partition_by));
    let published = ctx.read_table(table.table_provider().await?)?.filter(
        pcol.clone()
            .gt_eq(datafusion::prelude::lit(lo))
            .and(pcol.lt(datafusion::prelude::lit(hi))),
    )?;
    let out =
        plan::plan_output_query(ctx, task, published.into_view(), Some(&planned.params)).await?;
    reconcile::compare(&src, &out.collect().await?, &r.tolerance)
}

fn sql_literal(v: &ScalarValue) -> String {
    match v {
        ScalarValue::Date32(Some(_)) => format!("DATE '{v}'"),
        ScalarValue::TimestampMicrosecond(Some(us), _) => {
            let t = jiff::Timestamp::from_microsecond(*us).expect("in range");
            format!("TIMESTAMP '{}'", t)
        }
        other => other.to_string(),
    }
}

/// A window spanning a whole range, to bind the task's parameters to the range at once.
struct RangeWindow<'a> {
    from: &'a Window,
    to: &'a Window,
}

impl RangeWindow<'_> {
    fn as_window(&self) -> Result<Window> {
        Window::spanning(self.from, self.to)
    }
}

/// One line of text per window.
pub fn describe(a: &WindowAudit) -> String {
    let mut s = format!(
        "{:<8} {} {}  rows={} expected={} duplicate_keys={}",
        a.status, a.task, a.window, a.rows, a.expected_rows, a.duplicate_keys
    );
    for p in &a.problems {
        s.push_str(&format!("\n         {p}"));
    }
    s
}

/// Audit, re-run the damaged windows, audit again. Returns (before, reports, after).
pub async fn repair(
    project: &Project,
    task: &Task,
    from: &Window,
    to: &Window,
    parallel: usize,
    with_reconcile: bool,
) -> Result<(
    Vec<WindowAudit>,
    Vec<crate::record::Report>,
    Vec<WindowAudit>,
)> {
    let runner = std::sync::Arc::new(Runner::new(project, task).await?);
    let before = audit(&runner, from, to, with_reconcile).await?;
    let damaged: Vec<Window> = Window::range(from, to)?
        .into_iter()
        .zip(&before)
        .filter(|(_, a)| a.status != "ok")
        .map(|(w, _)| w)
        .collect();
    let opts = crate::backfill::Options {
        parallel,
        missing: false,
        stale: false,
        progress: false,
    };
    let reports = crate::backfill::run(runner.clone(), damaged, &opts, |_| {}).await;
    runner.refresh().await?;
    let after = audit(&runner, from, to, with_reconcile).await?;
    Ok((before, reports, after))
}
