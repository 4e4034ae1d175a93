//! Staging a window: where its rows are written before anything is published (the table's own
//! directory for an overwrite, a private temporary directory for a merge or `verify`), with
//! which writer settings, and the execution itself with its `[reconcile].output` tee.
//!
//! Invariant: staged files are invisible to readers until a commit names them; a failure
//! here leaves at most unreferenced files, which the caller discards.

use std::sync::Arc;

use datafusion::prelude::SessionContext;
use deltalake::datafile::writer::WriterConfig;
use object_store::local::LocalFileSystem;

use crate::error::{Error, Result};
use crate::pipeline::execute::{self, Sink, Staged};
use crate::task::plan::{self, Planned};
use crate::task::range::WindowRange;
use crate::task::{Mode, Task};

/// A sink writing unpartitioned Parquet files into a local temporary directory.
pub fn temp_sink(
    dir: &tempfile::TempDir,
    planned: &Planned,
) -> Result<(Arc<dyn object_store::ObjectStore>, WriterConfig)> {
    Ok((
        Arc::new(LocalFileSystem::new_with_prefix(dir.path())?)
            as Arc<dyn object_store::ObjectStore>,
        WriterConfig::new(
            planned.schema.clone(),
            vec![],
            None,
            None,
            None,
            delta_kernel::table_properties::DataSkippingNumIndexedCols::NumColumns(32),
            None,
        ),
    ))
}

/// A private temporary directory for staged rows.
pub fn temp_dir(prefix: &str) -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix(prefix).tempdir()?)
}

pub fn tempdir_for_merge(task: &Task) -> Result<Option<tempfile::TempDir>> {
    Ok(match task.mode {
        Mode::Overwrite => None,
        Mode::Merge => Some(
            tempfile::Builder::new()
                .prefix("idemlake-merge-")
                .tempdir()?,
        ),
    })
}

/// Execute the plan into `sink`, teeing into the output-reconcile query if there is one;
/// every row must lie in `range` (the window's).
pub async fn stage(
    ctx: &SessionContext,
    task: &Task,
    range: &WindowRange,
    plans: (&Planned, Option<&crate::accel::prepared::WindowPlans>),
    sink: Sink,
) -> Result<Staged> {
    let (planned, plans) = plans;
    let tee = match &task.reconcile {
        None => None,
        Some(_) => {
            let (provider, part, tx) = execute::output_channel(planned.schema.clone())?;
            let prepared = match plans {
                Some(p) => p.output(provider.clone(), part).await?,
                None => None,
            };
            let out = match prepared {
                Some(out) => out,
                None => {
                    plan::plan_output_query(ctx, task, provider, Some(&planned.params()))
                        .await?
                        .create_physical_plan()
                        .await?
                }
            };
            Some((tx, out))
        }
    };
    let (main, task_ctx) = match plans {
        Some(p) => (p.main.clone(), p.task_ctx.clone()),
        None => (
            planned.df.clone().create_physical_plan().await?,
            Arc::new(planned.df.task_ctx()),
        ),
    };
    execute::stage(main, task_ctx, planned.schema.clone(), range, sink, tee).await
}

/// A merge key must be non-NULL and unique within one run's output.
///
/// A NULL key value never matches in the merge condition (`target.k = source.k` is unknown
/// for NULL), so every re-run would insert another copy of such a row: NULL keys are
/// refused, naming each key column that holds them and how many rows do.
pub async fn check_unique_key(
    source: datafusion::prelude::DataFrame,
    key: &[String],
) -> Result<()> {
    use datafusion::functions_aggregate::expr_fn::count;
    use datafusion::prelude::{col, lit, when};
    let nulls: Vec<_> = key
        .iter()
        .map(|k| {
            let c = col(datafusion::common::Column::from_name(k));
            datafusion::functions_aggregate::expr_fn::sum(
                when(c.is_null(), lit(1i64))
                    .otherwise(lit(0i64))
                    .expect("valid CASE"),
            )
            .alias(format!("__idemlake_nulls_{k}"))
        })
        .collect();
    let counted = source.clone().aggregate(vec![], nulls)?.collect().await?;
    let mut found = Vec::new();
    let Some(b) = counted.iter().find(|b| b.num_rows() == 1) else {
        return Err(Error::runtime(
            "the NULL check of [write].key returned no row; nothing was published",
        ));
    };
    {
        for (i, k) in key.iter().enumerate() {
            let v = datafusion::common::ScalarValue::try_from_array(b.column(i), 0)?;
            if let datafusion::common::ScalarValue::Int64(Some(n)) = v
                && n > 0
            {
                found.push(format!("`{k}` is NULL in {n} row(s)"));
            }
        }
    }
    if !found.is_empty() {
        return Err(Error::runtime(format!(
            "[write].key ({}) has NULL values in this run's output: {}; a NULL key never matches in a merge, so every re-run would insert those rows again. Nothing was published: filter or fill NULL keys in the task's SQL (e.g. COALESCE), or use overwrite mode",
            key.join(", "),
            found.join(", ")
        )));
    }
    let keys: Vec<_> = key
        .iter()
        .map(|k| col(datafusion::common::Column::from_name(k)))
        .collect();
    let dups = source
        .aggregate(keys, vec![count(lit(1)).alias("n")])?
        .filter(col("n").gt(lit(1i64)))?
        .limit(0, Some(3))?
        .collect()
        .await?;
    let n: usize = dups.iter().map(|b| b.num_rows()).sum();
    if n > 0 {
        let shown = arrow::util::pretty::pretty_format_batches(&dups)?.to_string();
        return Err(Error::runtime(format!(
            "[write].key ({}) is not unique in this run's output, so a merge would be ambiguous; nothing was published. Duplicates (first {n}):\n{shown}",
            key.join(", ")
        )));
    }
    Ok(())
}
