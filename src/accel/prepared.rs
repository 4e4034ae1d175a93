//! Prepared window plans: a task's queries planned, linted and optimised once per runner, then
//! bound per window.
//!
//! Planning is a fixed cost per query — SQL parsing, the lints, the logical optimiser — that a
//! backfill of thousands of small windows paid three times per window (a fifth of an initial
//! load's CPU, perf on SF1 lineitem). Here the main query and `[reconcile].output` are
//! planned once against a *template* session whose tables have the
//! schemas the window sessions will have (shared sources as empty in-memory tables with the
//! slices' columns). A window then only swaps in its own tables, binds its parameters,
//! simplifies the now-constant expressions and plans the physical execution (or, for a query
//! over one shared slice, derives it from an earlier window's: see `reuse`). A
//! `[reconcile].output` query without parameters is the same physical plan for every window
//! but for the output stream it reads: it is planned once, and each window gets a copy with
//! its own stream as the leaf (every node above it rebuilt, so no execution state is shared).
//!
//! Invariants:
//! - A window runs the same logical query as when planned on its own: the template is the
//!   task's SQL planned and checked by `plan`, with only table providers of identical schema
//!   substituted and parameters bound (DataFusion's own prepared-statement binding).
//! - Anything that does not match — a table of another schema in the window's session (a
//!   source read directly after an over-budget chunk), a plan the optimiser cannot take
//!   unbound — makes the window plan itself the ordinary way (`bind` returns `None`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::catalog::default_table_source::provider_as_source;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{ScalarValue, TableReference};
use datafusion::datasource::MemTable;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::optimizer::Optimizer;
use datafusion::optimizer::simplify_expressions::SimplifyExpressions;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::prelude::{DataFrame, SessionContext};

use crate::accel::reuse::{Reuse, same_columns};
use crate::error::Result;
use crate::task::Task;
use crate::task::plan::{self, OUTPUT_TABLE, Planned};
use crate::task::range::WindowRange;
use crate::task::window::Window;

/// A task's queries, optimised with the window parameters unbound.
pub struct Prepared {
    main: LogicalPlan,
    output: Option<LogicalPlan>,
    schema: SchemaRef,
    sql_hash: String,
    /// `[reconcile].output`'s physical plan, once made, when it takes no parameters: it is
    /// the same for every window but for the output stream it reads (swapped per window).
    output_exec: Option<Arc<OnceLock<Arc<dyn ExecutionPlan>>>>,
    /// The main query's physical plan, reused across windows.
    main_exec: Reuse,
    /// The sources planned as in-memory slices (shared scans): a window without a slice of
    /// each plans itself (bound to the source's own table, a plan made for a slice would
    /// scan it without the filters pushed into it: every file of a landing zone).
    sliced: Vec<String>,
}

/// A window's physical plans, from a [`Prepared`] task.
pub struct WindowPlans {
    pub main: Arc<dyn ExecutionPlan>,
    /// `[reconcile].output`, optimised and bound, reading the table `output`.
    output: Option<LogicalPlan>,
    pub task_ctx: Arc<TaskContext>,
    /// The window session's state the plans were made in (planning the output side reuses it).
    state: SessionState,
    output_exec: Option<Arc<OnceLock<Arc<dyn ExecutionPlan>>>>,
}

impl Prepared {
    /// Plan `task` in `template` (the tables window sessions will have, by schema).
    pub async fn new(template: &SessionContext, task: &Task) -> Result<Prepared> {
        let planned = plan::plan(template, task, None).await?;
        // The SQL planner types a placeholder from what it is compared with (a nanosecond
        // timestamp without zone, say); a plan optimised with that type and then bound with
        // idemlake's value of another type compares mismatched types. Prepare only queries
        // whose parameters have exactly the types they are bound with.
        let wanted: HashMap<String, arrow::datatypes::DataType> =
            plan::param_types(task.grain).into_iter().collect();
        let output_df = match &task.reconcile {
            Some(_) => {
                let empty = Arc::new(MemTable::try_new(planned.schema.clone(), vec![vec![]])?);
                Some(plan::plan_output_query(template, task, empty, None).await?)
            }
            None => None,
        };
        let mut queries = vec![planned.df.logical_plan()];
        queries.extend(output_df.as_ref().map(|d| d.logical_plan()));
        for q in queries {
            for (id, ty) in q.get_parameter_types()? {
                let bound = wanted.get(id.trim_start_matches('$'));
                if let Some(ty) = ty
                    && bound != Some(&ty)
                {
                    return Err(crate::error::Error::runtime(format!(
                        "{id} is typed {ty} by the SQL but bound as {}",
                        bound
                            .map(|b| b.to_string())
                            .unwrap_or_else(|| "nothing".into())
                    )));
                }
            }
        }
        let state = template.state();
        let main = state.optimize(planned.df.logical_plan())?;
        let output = match output_df {
            Some(df) => Some(df.into_optimized_plan()?),
            None => None,
        };
        let fixed = match &output {
            Some(p) => p.get_parameter_types()?.is_empty(),
            None => false,
        };
        Ok(Prepared {
            main,
            output,
            schema: planned.schema,
            sql_hash: planned.sql_hash,
            output_exec: fixed.then(|| Arc::new(OnceLock::new())),
            main_exec: Reuse::default(),
            sliced: Vec::new(),
        })
    }

    /// The same, planned with `sliced` as in-memory slices (see [`Prepared::bind`]).
    pub fn sliced(mut self, sliced: Vec<String>) -> Prepared {
        self.sliced = sliced;
        self
    }

    /// The task planned for `window` in `session`, with its physical plans; `None` if the
    /// session's tables do not match the template (plan the window the ordinary way).
    pub async fn bind(
        &self,
        session: &crate::accel::scan::WindowSession,
        task: &Task,
        window: &Window,
    ) -> Result<Option<(Planned, WindowPlans)>> {
        let range = WindowRange::of(task, window);
        let params = range.params();
        if self.sliced.iter().any(|name| {
            session
                .slice(&TableReference::bare(name.as_str()))
                .is_none()
        }) {
            return Ok(None);
        }
        let mut providers = HashMap::new();
        {
            for (name, schema) in scans(&self.main) {
                if providers.contains_key(&name) {
                    continue;
                }
                let Ok(provider) = session.provider(&name).await else {
                    return Ok(None);
                };
                if !same_columns(&provider.schema(), &schema) {
                    return Ok(None);
                }
                providers.insert(name, provider);
            }
        }
        let state = session.state();
        let main = instantiate(&self.main, &providers, &params, &state)?;
        let output = match &self.output {
            Some(p) => Some(bind_params(p.clone(), &params, &state)?),
            None => None,
        };
        let slices = |t: &TableReference| session.slice(t);
        let main_exec = self.main_exec.physical(&main, &state, &slices).await?;
        // The DataFrame is for callers that show or inspect the plan; execution uses the
        // physical plans. `[reconcile].source` is not prepared: it runs on the independent
        // check path (`checks`), never on the accelerated one.
        let planned = Planned {
            df: DataFrame::new(state.clone(), main),
            schema: self.schema.clone(),
            range: Some(range),
            sql_hash: self.sql_hash.clone(),
            reconcile_source: None,
        };
        let plans = WindowPlans {
            main: main_exec,
            output,
            task_ctx: state.task_ctx(),
            state,
            output_exec: self.output_exec.clone(),
        };
        Ok(Some((planned, plans)))
    }
}

impl WindowPlans {
    /// `[reconcile].output` reading `provider` (whose one stream partition is `part`) as the
    /// `output` table.
    pub async fn output(
        &self,
        provider: Arc<dyn TableProvider>,
        part: Arc<dyn PartitionStream>,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(p) = &self.output else {
            return Ok(None);
        };
        if let Some(plan) = self.output_exec.as_ref().and_then(|c| c.get())
            && let Some(fed) = feed(plan.clone(), part)?
        {
            return Ok(Some(fed));
        }
        let providers = HashMap::from([(TableReference::bare(OUTPUT_TABLE), provider)]);
        let p = swap_tables(p.clone(), &providers)?;
        let state = &self.state;
        let plan = state
            .query_planner()
            .create_physical_plan(&p, state)
            .await?;
        if let Some(cell) = &self.output_exec {
            let _ = cell.set(plan.clone());
        }
        Ok(Some(plan))
    }
}

/// `plan` (a physical plan of `[reconcile].output`) reading `part` instead of the output
/// stream it was planned with: its one streaming leaf is replaced and every node above it is
/// rebuilt (fresh nodes, so windows share no execution state). `None` if the plan does not
/// have exactly one streaming leaf, or has an operator with dynamic filters (state that a
/// rebuilt node would still share).
fn feed(
    plan: Arc<dyn ExecutionPlan>,
    part: Arc<dyn PartitionStream>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut leaves = 0;
    let mut dynamic = false;
    let fed = plan
        .transform_up(|node| {
            dynamic |= !node.dynamic_expressions_produced().is_empty();
            let Some(s) = node.downcast_ref::<StreamingTableExec>() else {
                return Ok(Transformed::no(node));
            };
            leaves += 1;
            let projection: Option<Vec<usize>> = s.projection().as_ref().map(|p| p.to_vec());
            let exec = StreamingTableExec::try_new(
                s.partition_schema().clone(),
                vec![part.clone()],
                projection.as_ref(),
                s.projected_output_ordering(),
                s.is_infinite(),
                s.limit(),
            )?;
            Ok(Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>))
        })?
        .data;
    Ok((leaves == 1 && !dynamic).then_some(fed))
}

/// Every table scanned by `plan` (subqueries included), with the schema it was planned with.
fn scans(plan: &LogicalPlan) -> Vec<(TableReference, SchemaRef)> {
    let mut out = Vec::new();
    let _ = plan.apply_with_subqueries(|p| {
        if let LogicalPlan::TableScan(s) = p {
            out.push((s.table_name.clone(), s.source.schema()));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

/// Point every scan of a table in `providers` at that provider.
fn swap_tables(
    plan: LogicalPlan,
    providers: &HashMap<TableReference, Arc<dyn TableProvider>>,
) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|p| match p {
            LogicalPlan::TableScan(mut s) => match providers.get(&s.table_name) {
                Some(provider) => {
                    s.source = provider_as_source(provider.clone());
                    Ok(Transformed::yes(LogicalPlan::TableScan(s)))
                }
                None => Ok(Transformed::no(LogicalPlan::TableScan(s))),
            },
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// Bind the window parameters and fold the expressions they made constant.
fn bind_params(
    plan: LogicalPlan,
    params: &[(String, ScalarValue)],
    state: &SessionState,
) -> Result<LogicalPlan> {
    let map: HashMap<String, ScalarValue> = params.iter().cloned().collect();
    let bound = plan.with_param_values(map)?;
    let simplify = Optimizer::with_rules(vec![Arc::new(SimplifyExpressions::new())]);
    Ok(simplify.optimize(bound, state, |_, _| {})?)
}

fn instantiate(
    plan: &LogicalPlan,
    providers: &HashMap<TableReference, Arc<dyn TableProvider>>,
    params: &[(String, ScalarValue)],
    state: &SessionState,
) -> Result<LogicalPlan> {
    bind_params(swap_tables(plan.clone(), providers)?, params, state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};

    /// One plan of an aggregate over the output stream serves several windows: each reads
    /// its own stream.
    #[tokio::test]
    async fn a_fed_output_plan_reads_the_new_stream() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let ctx = SessionContext::new();
        let (provider, _, first_tx) =
            crate::pipeline::execute::output_channel(schema.clone()).unwrap();
        ctx.register_table(OUTPUT_TABLE, provider).unwrap();
        let plan = ctx
            .sql("SELECT count(*) AS n, sum(x) AS s FROM output")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        drop(first_tx);
        for values in [vec![1i64, 2, 3], vec![10, 20]] {
            let (_, part, tx) = crate::pipeline::execute::output_channel(schema.clone()).unwrap();
            let fed = feed(plan.clone(), part)
                .unwrap()
                .expect("one streaming leaf");
            let task = ctx.task_ctx();
            let run = tokio::spawn(datafusion::physical_plan::collect(fed, task));
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(Int64Array::from(values.clone()))],
            )
            .unwrap();
            tx.send(batch).await.unwrap();
            drop(tx);
            let out = run.await.unwrap().unwrap();
            let n = out[0]
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            let s = out[0]
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            assert_eq!(n.value(0), values.len() as i64);
            assert_eq!(s.value(0), values.iter().sum::<i64>());
        }
    }
}
