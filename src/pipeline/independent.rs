//! The verdict of a window's independent checks: its staged output against the source side
//! the checker computed by its own route (see `checks`).
//!
//! - `[reconcile]` `source`/`output`: the one-row queries compared column by column;
//! - the default check: `source_rows`, the rows the task's query gives on the independent
//!   path against the rows staged, and with `default = "content"` `source_content`, the
//!   fingerprint of those rows against the fingerprint of the staged files read back by plain
//!   DataFusion (not the batches the task query streamed into them).

use arrow::datatypes::SchemaRef;

use crate::error::{Error, Result};
use crate::pipeline::checks::{Checker, Measured, SourceSide, content, staged};
use crate::pipeline::reconcile::{self, Check};
use crate::pipeline::stages::StagedWindow;
use crate::task::{OnMismatch, Task};

/// The independent checks of `w` (schema: the query's output columns), and what a failed
/// one does.
pub async fn compare(
    checker: &Checker,
    task: &Task,
    w: &StagedWindow,
    schema: &SchemaRef,
) -> Result<(Vec<Check>, OnMismatch)> {
    let staged = &w.staged;
    let SourceSide { reconcile, default } = &w.source_side;
    let mut checks = Vec::new();
    let mut on_mismatch = task.checking.on_mismatch;
    match (&task.reconcile, reconcile) {
        (Some(r), Some((source_rows, computed))) => {
            let out = staged.output_aggregates.as_deref().unwrap_or_default();
            for mut c in reconcile::compare(source_rows, out, &r.tolerance)? {
                c.computed = Some(computed.clone());
                checks.push(c);
            }
            on_mismatch = r.on_mismatch;
        }
        (Some(_), None) => return Err(Error::runtime("[reconcile].source was not planned")),
        _ => {}
    }
    match default {
        None => {}
        Some((Measured::Rows(n), computed)) => {
            let mut c = Check::counts("source_rows", *n, staged.rows);
            c.computed = Some(computed.clone());
            checks.push(c);
        }
        Some((Measured::Content(fp), computed)) => {
            let mut c = Check::counts("source_rows", fp.rows, staged.rows);
            c.computed = Some(computed.clone());
            checks.push(c);
            let out = staged_content(checker, task, w, schema).await?;
            checks.push(Check {
                check: "source_content".into(),
                source: fp.to_string(),
                output: out.to_string(),
                ok: *fp == out,
                tolerance: None,
                computed: Some(computed.clone()),
            });
        }
    }
    Ok((checks, on_mismatch))
}

/// The content fingerprint of the staged files of `w`, read back in the checker's session
/// (the query's columns only).
async fn staged_content(
    checker: &Checker,
    task: &Task,
    w: &StagedWindow,
    schema: &SchemaRef,
) -> Result<content::Fingerprint> {
    let ctx = checker.session();
    let (table, registered) = staged::table(
        ctx,
        checker.staged_store(&w.store, w.temp.is_none()),
        &w.staged.adds,
        schema,
        &task.partition_by,
    )
    .await?;
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let fp = async {
        let df = ctx.read_table(table)?.select_columns(&names)?;
        content::of_dataframe(df).await
    }
    .await;
    staged::release(ctx, registered);
    fp
}

/// Whether `task` can be checked independently as it asks (`validate`, before any data is
/// read): a task that cannot is refused (exit 2) unless it opts out with
/// `[reconcile] independent = false` and a reason. `schema`: the query's output columns.
pub fn validate(task: &Task, schema: &SchemaRef) -> Result<()> {
    if task.checking.unchecked.is_some() {
        return Ok(());
    }
    if task.reconcile.is_none() && task.checking.default.is_none() {
        return Err(Error::input(format!(
            "{}: the task has no independent check; keep the default (`[reconcile] default = \"rows\"`) or opt out with `independent = false` and a `reason`",
            task.file.display()
        )));
    }
    if task.checking.default == Some(crate::task::DefaultCheck::Content) {
        for f in schema.fields() {
            if !content::hashable(f.data_type()) {
                return Err(Error::input(format!(
                    "{}: [reconcile] default = \"content\": column `{}` ({}) cannot be fingerprinted; use default = \"rows\", or opt out with `independent = false` and a `reason`",
                    task.file.display(),
                    f.name(),
                    f.data_type()
                )));
            }
        }
    }
    Ok(())
}
