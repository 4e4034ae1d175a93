//! Prepared window plans: a task's queries planned, linted and optimised once per runner, then
//! bound per window.
//!
//! Planning is a fixed cost per query — SQL parsing, the lints, the logical optimiser — that a
//! backfill of thousands of small windows paid three times per window (a fifth of an initial
//! load's CPU, perf on SF1 lineitem). Here the main query, `[reconcile].source` and
//! `[reconcile].output` are planned once against a *template* session whose tables have the
//! schemas the window sessions will have (shared sources as empty in-memory tables with the
//! slices' columns). A window then only swaps in its own tables, binds its parameters,
//! simplifies the now-constant expressions and plans the physical execution.
//!
//! Invariants:
//! - A window runs the same logical query as when planned on its own: the template is the
//!   task's SQL planned and checked by `plan`, with only table providers of identical schema
//!   substituted and parameters bound (DataFusion's own prepared-statement binding).
//! - Anything that does not match — a table of another schema in the window's session (a
//!   source read directly after an over-budget chunk), a plan the optimiser cannot take
//!   unbound — makes the window plan itself the ordinary way (`bind` returns `None`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::catalog::default_table_source::provider_as_source;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{ScalarValue, TableReference};
use datafusion::datasource::MemTable;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::optimizer::Optimizer;
use datafusion::optimizer::simplify_expressions::SimplifyExpressions;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SessionContext};

use crate::error::Result;
use crate::plan::{self, OUTPUT_TABLE, Planned};
use crate::task::Task;
use crate::window::Window;

/// A task's queries, optimised with the window parameters unbound.
pub struct Prepared {
    main: LogicalPlan,
    source: Option<LogicalPlan>,
    output: Option<LogicalPlan>,
    schema: SchemaRef,
    sql_hash: String,
}

/// A window's physical plans, from a [`Prepared`] task.
pub struct WindowPlans {
    pub main: Arc<dyn ExecutionPlan>,
    /// `[reconcile].source` (the [`Planned`] returned with these plans leaves it `None`).
    pub source: Option<Arc<dyn ExecutionPlan>>,
    /// `[reconcile].output`, optimised and bound, reading the table `output`.
    output: Option<LogicalPlan>,
    pub task_ctx: Arc<TaskContext>,
    /// The window session's state the plans were made in (planning the output side reuses it).
    state: SessionState,
}

impl Prepared {
    /// Plan `task` in `template` (the tables window sessions will have, by schema).
    pub async fn new(template: &SessionContext, task: &Task) -> Result<Prepared> {
        let planned = plan::plan(template, task, None).await?;
        let state = template.state();
        let main = state.optimize(planned.df.logical_plan())?;
        let source = match &planned.reconcile_source {
            Some(df) => Some(state.optimize(df.logical_plan())?),
            None => None,
        };
        let output = match &task.reconcile {
            Some(_) => {
                let empty = Arc::new(MemTable::try_new(planned.schema.clone(), vec![vec![]])?);
                let df = plan::plan_output_query(template, task, empty, None).await?;
                Some(df.into_optimized_plan()?)
            }
            None => None,
        };
        Ok(Prepared {
            main,
            source,
            output,
            schema: planned.schema,
            sql_hash: planned.sql_hash,
        })
    }

    /// The task planned for `window` in `session`, with its physical plans; `None` if the
    /// session's tables do not match the template (plan the window the ordinary way).
    pub async fn bind(
        &self,
        session: &crate::scan::WindowSession,
        task: &Task,
        window: &Window,
    ) -> Result<Option<(Planned, WindowPlans)>> {
        let params = plan::window_params(task.grain, window);
        let mut providers = HashMap::new();
        for p in std::iter::once(&self.main).chain(&self.source) {
            for (name, schema) in scans(p) {
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
        let source = match &self.source {
            Some(p) => Some(instantiate(p, &providers, &params, &state)?),
            None => None,
        };
        let output = match &self.output {
            Some(p) => Some(bind_params(p.clone(), &params, &state)?),
            None => None,
        };
        let planner = state.query_planner().clone();
        let main_exec = planner.create_physical_plan(&main, &state).await?;
        let source_exec = match &source {
            Some(p) => Some(planner.create_physical_plan(p, &state).await?),
            None => None,
        };
        // The DataFrame is for callers that show or inspect the plan; execution uses the
        // physical plans (and `reconcile_source` stays `None`: `plans.source` is it).
        let planned = Planned {
            df: DataFrame::new(state.clone(), main),
            schema: self.schema.clone(),
            params,
            sql_hash: self.sql_hash.clone(),
            reconcile_source: None,
        };
        let plans = WindowPlans {
            main: main_exec,
            source: source_exec,
            output,
            task_ctx: state.task_ctx(),
            state,
        };
        Ok(Some((planned, plans)))
    }
}

impl WindowPlans {
    /// `[reconcile].output` reading `provider` as the `output` table.
    pub async fn output(
        &self,
        provider: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(p) = &self.output else {
            return Ok(None);
        };
        let providers = HashMap::from([(TableReference::bare(OUTPUT_TABLE), provider)]);
        let p = swap_tables(p.clone(), &providers)?;
        let state = &self.state;
        Ok(Some(
            state
                .query_planner()
                .create_physical_plan(&p, state)
                .await?,
        ))
    }
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

/// Same column names, types and nullability, in the same order (metadata aside).
fn same_columns(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields().iter().zip(b.fields()).all(|(x, y)| {
            x.name() == y.name()
                && x.data_type() == y.data_type()
                && x.is_nullable() == y.is_nullable()
        })
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
