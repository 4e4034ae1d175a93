//! `audit` and `repair`: find windows that older (append-style) jobs damaged, and fix them.
//!
//! Audit works on the table as it is, also tables written by other tools:
//! - the table: one query over the range (built as DataFusion expressions) counts rows and
//!   duplicate keys (by `[write].key`) per window;
//! - the source: per window, the task's own SQL bound to that window and evaluated by the
//!   independent check path (`checks`: plain DataFusion over the source files, none of the
//!   run's accelerations) — what each window should hold. Binding the SQL once for the whole
//!   range would be wrong for window-stamped or aggregating tasks.
//!
//! What counts as damage depends on the write mode:
//! - overwrite: duplicate keys, or a row count different from the source's (a window with no
//!   data where the source has data included). Without a key, rows may legitimately repeat:
//!   the window's rows and the source's result for the window are compared as multisets.
//!   Copies of a row beyond the source's (every copy, for a row the source does not give) are
//!   extra rows, copies the source gives that the table lacks are missing rows; either is
//!   damage, also when the row count agrees (a row another writer changed);
//! - merge (upsert): duplicate keys, or keys the source produces for the window that the
//!   table lacks. Rows the latest output no longer produces are kept by design (upsert
//!   semantics) and are not damage, so the row counts are shown but not compared.
//!
//! Both modes, with a key: keys a window shares with other windows of the range are counted
//! (`across`) and reported, but are not damage: the key is unique within a window by
//! construction, not across windows (a merge keeps a row whose window column changed in its
//! old window; a daily snapshot repeats its keys every day), and re-running cannot change it.
//!
//! With `--reconcile`, the task's own independent check also runs for every window (see
//! `reconcile`): its `[reconcile]` queries, or the content fingerprint of
//! `[reconcile] default = "content"`; the default `source_rows` is the comparison above.
//! Repair re-runs exactly the damaged windows (each one atomic), then audits again.

use std::collections::BTreeMap;

use datafusion::common::{Column, JoinType, ScalarValue};
use datafusion::functions_aggregate::expr_fn::{count, sum};
use datafusion::prelude::{DataFrame, Expr, SessionContext, cast, col, lit, when};
use futures::StreamExt;

use crate::delta::partition::PartitionValue;
use crate::error::Result;
use crate::pipeline::reconcile as checks;
use crate::pipeline::runner::Runner;
pub use crate::report::states::WindowAudit;
use crate::task::plan;
use crate::task::range::WindowRange;
use crate::task::window::{Grain, Window};
use crate::task::{Mode, Task};

mod across;
mod in_place;
mod reconcile;
mod repair;

pub use reconcile::note as reconcile_note;
pub use repair::repair;
use repair::unmergeable;

/// Internal column names: never a user's.
const BUCKET: &str = "__idemlake_bucket";
const COUNT: &str = "__idemlake_n";

fn column(name: &str) -> Expr {
    col(Column::from_name(name))
}

/// The window of a row, as a value of the partition column's type. Duplicates are counted per
/// window, not per partition value: a week or month window holds many daily partitions, and a
/// key repeated on two of its days is a duplicate.
fn bucket(task: &Task) -> Expr {
    let part = column(&task.partition_by);
    match task.grain {
        Grain::Week | Grain::Month => cast(
            datafusion::functions::expr_fn::date_trunc(lit(task.grain.as_str()), part),
            arrow::datatypes::DataType::Date32,
        ),
        Grain::Day | Grain::Hour => part,
    }
}

/// The table side: `(rows, duplicate keys, extra rows)` per window of the range, from one
/// query over the published table.
async fn table_side(
    ctx: &SessionContext,
    runner: &Runner,
    from: &Window,
    to: &Window,
    columns: &[String],
) -> Result<BTreeMap<(i64, i64), [u64; 3]>> {
    let task = runner.task();
    let table = runner.table().await?;
    let mut out: BTreeMap<(i64, i64), [u64; 3]> = BTreeMap::new();
    if table.version().is_none() {
        return Ok(out);
    }
    table.update_datafusion_session(&ctx.state())?;
    let part = column(&task.partition_by);
    let range = WindowRange::of(task, from).through(&WindowRange::of(task, to));
    let key: Vec<Expr> = if task.key.is_empty() {
        columns.iter().map(|c| column(c)).collect()
    } else {
        task.key.iter().map(|k| column(k)).collect()
    };
    let n = column(COUNT);
    let mut group = vec![bucket(task).alias(BUCKET)];
    group.extend(key);
    let batches = ctx
        .read_table(table.table_provider().await?)?
        .filter(range.filter(part))?
        .aggregate(group, vec![count(lit(1)).alias(COUNT)])?
        .aggregate(
            vec![column(BUCKET)],
            vec![
                sum(n.clone()).alias("rows"),
                sum(when(n.clone().gt(lit(1i64)), lit(1i64)).otherwise(lit(0i64))?).alias("keys"),
                sum(when(n.clone().gt(lit(1i64)), n - lit(1i64)).otherwise(lit(0i64))?)
                    .alias("extra"),
            ],
        )?
        .collect()
        .await?;
    for b in &batches {
        for r in 0..b.num_rows() {
            let value = ScalarValue::try_from_array(b.column(0), r)?;
            let Some(w) = PartitionValue::from_scalar_value(&value) else {
                continue;
            };
            let w = w.window(task.grain, &task.timezone)?.key();
            let e = out.entry(w).or_default();
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

/// What the source says about one window: its rows, and for merge tables the keys it
/// produces that the published window lacks (and its rows with a NULL key).
struct Expected {
    rows: u64,
    missing_keys: Option<u64>,
    null_keys: u64,
    /// Without a key: the multiset comparison with the table.
    multiset: Option<Multiset>,
}

/// Without a key: the published window's rows against the source's, as multisets.
#[derive(Default, Clone, Copy)]
struct Multiset {
    /// Distinct rows the table holds more often than the source gives them.
    distinct_extra: u64,
    /// Copies in the table beyond the source's.
    extra: u64,
    /// Copies the source gives that the table lacks.
    missing: u64,
}

/// Internal column names of the multiplicity comparison.
const IN_TABLE: &str = "__idemlake_in_table";
const IN_SOURCE: &str = "__idemlake_in_source";

/// Without a key: the published window's rows against `source` (the task's result for `w`
/// on the independent path, `rows` rows), as multisets (NULL-aware: rows are grouped).
async fn compare_multisets(
    runner: &Runner,
    w: &Window,
    source: DataFrame,
    rows: u64,
) -> Result<Multiset> {
    let task = runner.task();
    let ctx = runner.checker().session();
    let table = runner.table().await?;
    if table.version().is_none() {
        return Ok(Multiset {
            missing: rows,
            ..Multiset::default()
        });
    }
    table.update_datafusion_session(&ctx.state())?;
    let published = ctx
        .read_table(table.table_provider().await?)?
        .filter(WindowRange::of(task, w).filter(column(&task.partition_by)))?;
    let names: Vec<String> = source
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let typed = published.schema().clone();
    let mut table_side = Vec::new();
    let mut source_side = Vec::new();
    for n in &names {
        let field = typed.field_with_unqualified_name(n).map_err(|_| {
            crate::error::Error::runtime(format!(
                "the published table has no column `{n}` the task's query returns"
            ))
        })?;
        table_side.push(column(n));
        source_side.push(cast(column(n), field.data_type().clone()).alias(n));
    }
    table_side.extend([lit(1i64).alias(IN_TABLE), lit(0i64).alias(IN_SOURCE)]);
    source_side.extend([lit(0i64).alias(IN_TABLE), lit(1i64).alias(IN_SOURCE)]);
    let (t, s) = (column(IN_TABLE), column(IN_SOURCE));
    let int = arrow::datatypes::DataType::Int64;
    let extra = when(t.clone().gt(s.clone()), t.clone() - s.clone()).otherwise(lit(0i64))?;
    let missing = when(s.clone().gt(t.clone()), s.clone() - t.clone()).otherwise(lit(0i64))?;
    let batches = published
        .select(table_side)?
        .union(source.select(source_side)?)?
        .aggregate(
            names.iter().map(|n| column(n)).collect(),
            vec![
                sum(column(IN_TABLE)).alias(IN_TABLE),
                sum(column(IN_SOURCE)).alias(IN_SOURCE),
            ],
        )?
        .filter(t.clone().not_eq(s.clone()))?
        .aggregate(
            vec![],
            vec![
                sum(when(t.gt(s), lit(1i64)).otherwise(lit(0i64))?).alias("keys"),
                sum(cast(extra, int.clone())).alias("extra"),
                sum(cast(missing, int)).alias("missing"),
            ],
        )?
        .collect()
        .await?;
    let mut out = [0u64; 3];
    for b in &batches {
        for (i, slot) in out.iter_mut().enumerate() {
            if let ScalarValue::Int64(Some(n)) = ScalarValue::try_from_array(b.column(i), 0)?
                .cast_to(&arrow::datatypes::DataType::Int64)?
            {
                *slot += n as u64;
            }
        }
    }
    Ok(Multiset {
        distinct_extra: out[0],
        extra: out[1],
        missing: out[2],
    })
}

async fn expected(runner: &Runner, w: &Window) -> Result<Expected> {
    let task = runner.task();
    let ctx = runner.checker().session();
    let planned = plan::plan_query_window(ctx, task, w).await?;
    let rows = planned.df.clone().count().await? as u64;
    if task.mode != Mode::Merge {
        let multiset = if task.key.is_empty() {
            Some(compare_multisets(runner, w, planned.df.clone(), rows).await?)
        } else {
            None
        };
        return Ok(Expected {
            rows,
            missing_keys: None,
            null_keys: 0,
            multiset,
        });
    }
    let keys: Vec<Expr> = task.key.iter().map(|k| column(k)).collect();
    let any_null = keys
        .iter()
        .map(|k| k.clone().is_null())
        .reduce(Expr::or)
        .expect("merge has a key");
    let null_keys = planned.df.clone().filter(any_null.clone())?.count().await? as u64;
    let produced = planned
        .df
        .clone()
        .filter(datafusion::prelude::not(any_null))?
        .select(keys)?
        .distinct()?;
    let table = runner.table().await?;
    let missing = if table.version().is_some() {
        table.update_datafusion_session(&ctx.state())?;
        let range = WindowRange::of(task, w);
        let theirs: Vec<String> = task
            .key
            .iter()
            .map(|k| format!("__idemlake_t_{k}"))
            .collect();
        let published: DataFrame = ctx
            .read_table(table.table_provider().await?)?
            .filter(range.filter(column(&task.partition_by)))?
            .select(
                task.key
                    .iter()
                    .zip(&theirs)
                    .map(|(k, t)| column(k).alias(t))
                    .collect::<Vec<_>>(),
            )?;
        let left: Vec<&str> = task.key.iter().map(String::as_str).collect();
        let right: Vec<&str> = theirs.iter().map(String::as_str).collect();
        produced
            .join(published, JoinType::LeftAnti, &left, &right, None)?
            .count()
            .await? as u64
    } else {
        produced.count().await? as u64
    };
    Ok(Expected {
        rows,
        missing_keys: Some(missing),
        null_keys,
        multiset: None,
    })
}

/// What is wrong with a window holding `rows` (`dup_keys` keys seen more than once,
/// `dup_rows` rows too many) that the source says should hold `e`.
fn problems(e: &Expected, rows: u64, dup_keys: u64, dup_rows: u64) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(m) = e.multiset {
        if m.extra > 0 {
            problems.push(format!(
                "{} extra row(s) ({} distinct) beyond the source's copies",
                m.extra, m.distinct_extra
            ));
        }
        if m.missing > 0 {
            problems.push(format!(
                "{} row(s) the source gives are missing from the table",
                m.missing
            ));
        }
    } else if dup_keys > 0 {
        problems.push(format!(
            "{dup_keys} duplicate key(s), {dup_rows} extra row(s)"
        ));
    }
    match e.missing_keys {
        // Merge: every key the source produces is present; kept rows are fine.
        Some(missing) => {
            if missing > 0 {
                problems.push(format!(
                    "{missing} key(s) the source produces are not in the table"
                ));
            }
            if e.null_keys > 0 {
                problems.push(format!(
                    "the source gives {} row(s) with a NULL key, which a merge cannot publish",
                    e.null_keys
                ));
            }
        }
        None => {
            if rows == 0 && e.rows > 0 {
                problems.push(format!("no data, the source has {} row(s)", e.rows));
            } else if rows != e.rows {
                problems.push(format!("{rows} row(s), the source gives {}", e.rows));
            }
        }
    }
    problems
}

/// Each window's source side on the independent path (a few windows at once), or why it has
/// none. A window reaching a landing-zone file off the zone's layout is an error, as in `run`:
/// that window's, reported with it, not the whole audit's.
async fn source_sides(runner: &Runner, windows: &[Window]) -> Vec<Result<Expected>> {
    let mut reached = Vec::with_capacity(windows.len());
    for w in windows {
        reached.push(runner.reach(std::slice::from_ref(w)).await);
    }
    let expected: Vec<Result<Expected>> = futures::stream::iter(windows.iter())
        .map(|w| expected(runner, w))
        .buffered(2)
        .collect()
        .await;
    reached
        .into_iter()
        .zip(expected)
        .map(|(r, e)| r.and(e))
        .collect()
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
    let columns: Vec<String> = plan::plan(runner.checker().session(), task, None)
        .await?
        .schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|c| c != &task.partition_by)
        .collect();
    let actual = table_side(runner.checker().session(), runner, from, to, &columns).await?;
    let across = across::keys_across_windows(runner.checker().session(), runner, from, to).await?;
    // The source side, per window on the independent path (a few windows at once).
    let sides = source_sides(runner, &windows).await;

    let audited = runner.table().await?.version().map(|v| v as i64);
    let mut out = Vec::with_capacity(windows.len());
    for (w, e) in windows.iter().zip(sides) {
        let e = match e {
            Err(e) if e.kind() == crate::error::ErrorKind::Input => {
                out.push(WindowAudit::failed(
                    &task.name,
                    w.into(),
                    audited,
                    e.message(),
                ));
                continue;
            }
            e => e?,
        };
        let [rows, mut dup_keys, mut dup_rows] = actual.get(&w.key()).copied().unwrap_or_default();
        if let Some(m) = e.multiset {
            (dup_keys, dup_rows) = (m.distinct_extra, m.extra);
        }
        let mut problems = problems(&e, rows, dup_keys, dup_rows);
        // Reported, not damage: see `across`.
        let elsewhere = across.as_ref().map(|a| a.get(&w.key()));
        let mut reconciliation = Vec::new();
        if with_reconcile {
            reconciliation = reconcile::window(runner, w, rows).await?;
            if reconciliation.iter().any(|c| !c.ok) {
                problems.push(format!(
                    "reconciliation: {}",
                    checks::describe_failures(&reconciliation)
                ));
            }
        }
        out.push(WindowAudit {
            task: task.name.clone(),
            window: w.into(),
            status: if problems.is_empty() { "ok" } else { "damaged" },
            table_version: audited,
            // A merge updates every copy of a key: re-running cannot remove extra copies.
            retryable: !problems.is_empty() && !unmergeable(task, dup_keys),
            rows,
            expected_rows: e.rows,
            duplicate_keys: dup_keys,
            duplicate_rows: dup_rows,
            missing_keys: e.missing_keys,
            missing_rows: e.multiset.map(|m| m.missing),
            keys_in_other_windows: elsewhere.map(|e| e.map_or(0, |(n, _)| *n)),
            key_in_other_windows: elsewhere.flatten().map(|(_, example)| example.clone()),
            problems,
            reconciliation,
        });
    }
    Ok(out)
}
