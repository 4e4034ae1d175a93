//! Independent checks: the source side of every window's reconciliation, computed by a route
//! that none of the accelerations touch.
//!
//! The task query runs through shared chunk scans sliced per window, prepared plans, physical
//! plans derived by literal substitution and memory-mapped sources. A check that read the
//! source the same way would share their bugs: a slice missing a row would be missing on both
//! sides and reconciliation would agree. So the [`Checker`] has its own DataFusion session:
//! the sources registered as plain listing tables read through object_store's ordinary local
//! or S3 store (Delta sources pinned at the versions the runner pinned), no scan cache, no
//! prepared or derived plan — every window's check query is planned from the task's SQL text
//! with that window's parameters bound. Parquet pruning and filter pushdown stay on: they are
//! DataFusion's, not idemlake's.
//!
//! What is checked per window:
//! - with `[reconcile]`: its `source` query, here, against its `output` query over the rows
//!   written;
//! - without `[reconcile]`, for a row-preserving task (projections and filters of one source,
//!   see [`row_preserving`]): the number of rows the task's own query gives here (`source_rows`)
//!   against the rows written;
//! - other tasks without `[reconcile]` get only the checks every run makes (`rows_staged`, the
//!   read-back).
//!
//! A run of many windows (a backfill, a run with lookback) first reads, once, the columns the
//! checks use of each source — a plain scan of the whole source, no filter, no slicing — and
//! holds them in memory ([`Checker::hold_in_memory`], within the memory budget): each window's
//! check then filters memory instead of decoding the source files again (at SF 1, a day's check
//! went from decoding 6 M rows of two columns to filtering them in memory).
//!
//! Invariant: nothing here depends on `scan`, `prepared`, `reuse`, `mapped` or `filemap`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;

use crate::error::Result;
use crate::pipeline::sources::{self, SourceVersion};
use crate::task::Task;
use crate::task::window::Window;

/// What the source says a window's output must reconcile to.
pub enum SourceSide {
    /// The `[reconcile].source` query's rows.
    Reconcile(Vec<RecordBatch>),
    /// Rows the task's query gives for the window (row-preserving tasks without `[reconcile]`).
    Rows(u64),
    /// Nothing derivable: the task has no `[reconcile]` and is not row-preserving.
    Unchecked,
}

/// A source held in memory: the provider it replaced, and the columns held.
type Held = (Arc<dyn TableProvider>, BTreeSet<String>);

/// Which queries a run of windows makes on the check path.
#[derive(Debug, Clone, Copy)]
pub enum Queries {
    /// A run's checks: `[reconcile].source`, or the task's own query counted.
    Checks,
    /// `audit`: the task's own query per window, and `[reconcile].source` with `--reconcile`.
    Audit { reconcile: bool },
}

/// The independent check path of one runner.
pub struct Checker {
    ctx: SessionContext,
    /// Sources held in memory (see [`Checker::hold_in_memory`]): the provider they replaced
    /// and the columns held.
    held: tokio::sync::Mutex<BTreeMap<String, Held>>,
}

impl Checker {
    /// A session of its own with the task's sources registered plainly (Delta sources at
    /// `pins`, the versions the runner read).
    pub async fn new(task: &Task, pins: &[SourceVersion]) -> Result<Checker> {
        let ctx = plain_session()?;
        sources::register_pinned(&ctx, &task.sources, pins).await?;
        Ok(Checker {
            ctx,
            held: tokio::sync::Mutex::new(BTreeMap::new()),
        })
    }

    /// Hold the columns the checks read of each source in memory, for a run of many windows
    /// (see the module documentation). A source over the memory budget, or one that cannot
    /// be read now, stays as it is: its windows' checks read it directly.
    pub async fn hold_in_memory(&self, task: &Task, queries: Queries) {
        let budget = crate::config::get().memory_budget();
        if budget == 0 {
            return;
        }
        let columns = match self.checked_columns(task, queries).await {
            Ok(c) => c,
            Err(e) => {
                tracing::info!("the checks read their sources directly: {e}");
                return;
            }
        };
        let mut held = self.held.lock().await;
        let mut used = 0u64;
        for (alias, mut cols) in columns {
            let original = match held.get(&alias) {
                // Already held with these columns (and maybe more).
                Some((_, have)) if cols.is_subset(have) => continue,
                Some((original, have)) => {
                    cols.extend(have.iter().cloned());
                    original.clone()
                }
                None => match self.ctx.table_provider(alias.as_str()).await {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::info!(alias, "the checks read the source directly: {e}");
                        continue;
                    }
                },
            };
            match self
                .load(&alias, &original, &cols, budget.saturating_sub(used))
                .await
            {
                Ok(Some(bytes)) => {
                    used += bytes;
                    held.insert(alias.clone(), (original, cols));
                    tracing::debug!(
                        alias,
                        kb = bytes / 1024,
                        "the checks hold the source in memory"
                    );
                }
                Ok(None) => tracing::info!(
                    alias,
                    "source over the memory budget: the checks read it directly"
                ),
                Err(e) => tracing::info!(alias, "the checks read the source directly: {e}"),
            }
        }
    }

    /// The columns of each source that `queries` read.
    async fn checked_columns(
        &self,
        task: &Task,
        queries: Queries,
    ) -> Result<BTreeMap<String, BTreeSet<String>>> {
        let planned = crate::task::plan::plan(&self.ctx, task, None).await?;
        let preserving = row_preserving(planned.df.logical_plan());
        let mut plans = Vec::new();
        match (queries, planned.reconcile_source) {
            (Queries::Checks, Some(src)) => plans.push(src.into_optimized_plan()?),
            (Queries::Checks, None) if preserving => plans.push(planned.df.into_optimized_plan()?),
            (Queries::Checks, None) => return Ok(BTreeMap::new()),
            (Queries::Audit { reconcile }, src) => {
                plans.push(planned.df.into_optimized_plan()?);
                if let (true, Some(src)) = (reconcile, src) {
                    plans.push(src.into_optimized_plan()?);
                }
            }
        }
        let aliases: BTreeSet<&str> = task.sources.iter().map(|s| s.alias.as_str()).collect();
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for plan in &plans {
            plan.apply_with_subqueries(|p| {
                if let LogicalPlan::TableScan(scan) = p
                    && aliases.contains(scan.table_name.table())
                {
                    let cols = out.entry(scan.table_name.table().to_string()).or_default();
                    cols.extend(
                        scan.projected_schema
                            .fields()
                            .iter()
                            .map(|f| f.name().clone()),
                    );
                    for f in &scan.filters {
                        cols.extend(f.column_refs().into_iter().map(|c| c.name.clone()));
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
        }
        Ok(out)
    }

    /// Read `columns` of source `alias` (its `original` provider) whole and register them in
    /// its place; `None` (and nothing changed) if they take more than `budget` bytes.
    async fn load(
        &self,
        alias: &str,
        original: &Arc<dyn TableProvider>,
        columns: &BTreeSet<String>,
        budget: u64,
    ) -> Result<Option<u64>> {
        let cols: Vec<&str> = columns.iter().map(String::as_str).collect();
        let df = self
            .ctx
            .read_table(original.clone())?
            .select_columns(&cols)?;
        let schema = Arc::new(df.schema().as_arrow().clone());
        let mut stream = df.execute_stream().await?;
        let parts = self.ctx.copied_config().target_partitions().max(1);
        let mut partitions: Vec<Vec<RecordBatch>> = vec![Vec::new(); parts];
        let (mut bytes, mut n) = (0u64, 0usize);
        while let Some(batch) = futures::StreamExt::next(&mut stream).await {
            let batch = batch?;
            bytes += batch.get_array_memory_size() as u64;
            if bytes > budget {
                return Ok(None);
            }
            partitions[n % parts].push(batch);
            n += 1;
        }
        // One batch per partition: a window's check then filters a few large arrays instead of
        // paying DataFusion's per-batch overhead (allocations, task wake-ups) on hundreds.
        let partitions = partitions
            .iter()
            .map(|p| Ok(vec![arrow::compute::concat_batches(&schema, p)?]))
            .collect::<Result<Vec<_>>>()?;
        let table = datafusion::datasource::MemTable::try_new(schema, partitions)?;
        self.ctx.deregister_table(alias)?;
        self.ctx.register_table(alias, Arc::new(table))?;
        Ok(Some(bytes))
    }

    /// The session checks run in.
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// The source side of `window`'s reconciliation, planned from the task's SQL here.
    pub async fn source_side(&self, task: &Task, window: &Window) -> Result<SourceSide> {
        if let Some(src) = crate::task::plan::plan_reconcile_source(&self.ctx, task, window).await?
        {
            return Ok(SourceSide::Reconcile(src.collect().await?));
        }
        let planned = crate::task::plan::plan_query_window(&self.ctx, task, window).await?;
        if row_preserving(planned.df.logical_plan()) {
            return Ok(SourceSide::Rows(planned.df.count().await? as u64));
        }
        Ok(SourceSide::Unchecked)
    }
}

/// A DataFusion session with idemlake's SQL settings and Delta support, reading local files
/// through object_store's plain local store (no memory maps).
pub fn plain_session() -> Result<SessionContext> {
    crate::accel::session::session(false)
}

/// Whether every output row of `plan` is one input row of a single table, projected and
/// filtered: then the rows a window must hold can be counted from the source. Anything else
/// (aggregates, joins, unions, limits, distinct, window functions, subqueries, unnest) is not.
pub fn row_preserving(plan: &LogicalPlan) -> bool {
    let mut scans = 0;
    let mut ok = true;
    let _ = plan.apply_with_subqueries(|p| {
        match p {
            LogicalPlan::TableScan(_) => scans += 1,
            LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
            }
            _ => ok = false,
        }
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok && scans == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn shape(sql: &str) -> bool {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT, b INT, d DATE) AS VALUES (1, 2, DATE '2026-01-01')")
            .await
            .unwrap();
        ctx.sql("CREATE TABLE u (a INT) AS VALUES (1)")
            .await
            .unwrap();
        let df = ctx.sql(sql).await.unwrap();
        row_preserving(df.logical_plan())
    }

    #[tokio::test]
    async fn only_projections_and_filters_of_one_table_are_row_preserving() {
        assert!(shape("SELECT a, b + 1 AS c, d FROM t WHERE d >= DATE '2026-01-01'").await);
        assert!(shape("SELECT x.a FROM t AS x WHERE x.b > 0").await);
        assert!(!shape("SELECT d, count(*) FROM t GROUP BY d").await);
        assert!(!shape("SELECT t.a FROM t JOIN u ON t.a = u.a").await);
        assert!(!shape("SELECT DISTINCT a FROM t").await);
        assert!(!shape("SELECT a FROM t ORDER BY a LIMIT 1").await);
        assert!(!shape("SELECT a FROM t UNION ALL SELECT a FROM u").await);
        assert!(!shape("SELECT a FROM t WHERE a IN (SELECT a FROM u)").await);
        assert!(!shape("SELECT a, row_number() OVER (ORDER BY a) FROM t").await);
    }
}
