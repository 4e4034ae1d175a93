//! `audit --reconcile`: the task's own independent check, per window, against what the table
//! holds now.
//!
//! - `[reconcile]` `source`/`output`: the source query on the independent path against the
//!   output query over the published window;
//! - `[reconcile] default = "content"`: the fingerprint of every row the task's query gives
//!   for the window on the independent path (`source_content`, as `run` computes it) against
//!   the fingerprint of the published window's rows. For a merge table, only the published
//!   rows whose key the query produces count: rows it no longer produces are kept by design;
//! - the default `source_rows`: the row (or, for merge tables, key) comparison audit makes
//!   without `--reconcile` already; nothing more runs, and `note` says so.

use datafusion::common::JoinType;
use datafusion::prelude::{DataFrame, cast};

use super::column;
use crate::error::{Error, Result};
use crate::pipeline::checks::content;
use crate::pipeline::reconcile::{self, Check};
use crate::pipeline::runner::Runner;
use crate::task::plan;
use crate::task::range::WindowRange;
use crate::task::window::Window;
use crate::task::{DefaultCheck, Mode, Task};

/// The checks `--reconcile` adds for `w` (empty: the task's check is the comparison audit
/// always makes). `rows`: the rows the published window holds.
pub(super) async fn window(runner: &Runner, w: &Window, rows: u64) -> Result<Vec<Check>> {
    let task = runner.task();
    if task.reconcile.is_some() {
        return if rows > 0 {
            queries(runner, w).await
        } else {
            Ok(Vec::new())
        };
    }
    match task.checking.default {
        Some(DefaultCheck::Content) => Ok(vec![fingerprints(runner, w).await?]),
        Some(DefaultCheck::Rows) | None => Ok(Vec::new()),
    }
}

/// What `--reconcile` did for `task` without `[reconcile]` queries (`None`: it has them).
pub fn note(task: &Task) -> Option<String> {
    if task.reconcile.is_some() {
        return None;
    }
    let compared = match task.mode {
        Mode::Merge => "the keys the source produces, present in the table",
        _ => "rows against expected",
    };
    match task.checking.default {
        Some(DefaultCheck::Content) => Some(format!(
            "--reconcile: {}'s default check source_content (a fingerprint of every row) compared each window with the source",
            task.name
        )),
        Some(DefaultCheck::Rows) => Some(format!(
            "--reconcile: {} has no [reconcile] queries; its check is the default source_rows, which audit always compares ({compared}): nothing more ran",
            task.name
        )),
        None => Some(format!(
            "--reconcile: {} has no [reconcile] queries and no default check (independent = false): nothing more ran",
            task.name
        )),
    }
}

/// `[reconcile].source` for the window (independent path) vs `[reconcile].output` over the
/// published window.
async fn queries(runner: &Runner, w: &Window) -> Result<Vec<Check>> {
    let task = runner.task();
    let r = task.reconcile.as_ref().expect("checked");
    let ctx = runner.checker().session();
    let planned = plan::plan_window(ctx, task, w, false).await?;
    let src = planned
        .reconcile_source
        .clone()
        .expect("planned with [reconcile]")
        .collect()
        .await?;
    let table = runner.table().await?;
    table.update_datafusion_session(&ctx.state())?;
    let published = ctx
        .read_table(table.table_provider().await?)?
        .filter(planned.window_range()?.filter(column(&task.partition_by)))?;
    let out =
        plan::plan_output_query(ctx, task, published.into_view(), Some(&planned.params())).await?;
    reconcile::compare(&src, &out.collect().await?, &r.tolerance)
}

/// `source_content`: the fingerprint of the task's rows for `w` on the independent path
/// against the published window's (its query's columns, in the query's types).
async fn fingerprints(runner: &Runner, w: &Window) -> Result<Check> {
    let task = runner.task();
    let ctx = runner.checker().session();
    let mut source = plan::plan_query_window(ctx, task, w).await?.df;
    let table = runner.table().await?;
    let output = if table.version().is_some() {
        table.update_datafusion_session(&ctx.state())?;
        let published = ctx
            .read_table(table.table_provider().await?)?
            .filter(WindowRange::of(task, w).filter(column(&task.partition_by)))?;
        let mut columns = Vec::new();
        for f in source.schema().fields() {
            if published
                .schema()
                .field_with_unqualified_name(f.name())
                .is_err()
            {
                return Err(Error::runtime(format!(
                    "the published table has no column `{}` the task's query returns",
                    f.name()
                )));
            }
            columns.push(cast(column(f.name()), f.data_type().clone()).alias(f.name()));
        }
        let mut published = published.select(columns)?;
        if task.mode == Mode::Merge {
            (source, published) = produced_keys_only(task, source, published)?;
        }
        content::of_dataframe(published).await?
    } else {
        content::Fingerprint::default()
    };
    let expected = content::of_dataframe(source).await?;
    Ok(Check {
        check: "source_content".into(),
        source: expected.to_string(),
        output: output.to_string(),
        ok: expected == output,
        tolerance: None,
        computed: None,
    })
}

/// A merge table: the source's rows with a key (a NULL key is reported apart) and the
/// published rows whose key the source produces.
fn produced_keys_only(
    task: &Task,
    source: DataFrame,
    published: DataFrame,
) -> Result<(DataFrame, DataFrame)> {
    let any_null = task
        .key
        .iter()
        .map(|k| column(k).is_null())
        .reduce(datafusion::prelude::Expr::or)
        .expect("merge has a key");
    let source = source.filter(datafusion::prelude::not(any_null))?;
    let theirs: Vec<String> = task
        .key
        .iter()
        .map(|k| format!("__idemlake_s_{k}"))
        .collect();
    let keys = source.clone().select(
        task.key
            .iter()
            .zip(&theirs)
            .map(|(k, t)| column(k).alias(t))
            .collect::<Vec<_>>(),
    )?;
    let left: Vec<&str> = task.key.iter().map(String::as_str).collect();
    let right: Vec<&str> = theirs.iter().map(String::as_str).collect();
    let published = published.join(keys.distinct()?, JoinType::LeftSemi, &left, &right, None)?;
    Ok((source, published))
}
