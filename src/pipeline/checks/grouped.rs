//! Grouped checks: the source side of many windows' checks from one query per batch.
//!
//! **The shape.** The window parameters appear in one node of the check query, a filter whose
//! conditions on them are `X >= <start>` and `X < <end>` (either way round, `_ts` or not) for
//! one or more expressions `X` of a date, timestamp or integer type. Above the filter come only
//! projections, aliases, sorts without a limit, `DISTINCT` and grouped aggregates, or, for a
//! `[reconcile].source`, ungrouped aggregates. A row count leaves out the projections on top
//! first, whatever they compute. Any other query is checked window by window, as the plain twin
//! checks every query (`IDEMLAKE_CHECK_BATCH=1`).
//!
//! **The formulation.** The query is bound to the batch's range (the first window's start,
//! the last one's end). At the filter each row is tagged `window_of(X)`: the window whose
//! `[lo, hi)` holds its `X` (every `X` in the same one, else none). Every node above keeps the
//! tag as one more column and one more key of each aggregate and `DISTINCT`, and each window's
//! result is read off the rows with its tag.
//!
//! **Why the numbers are the same.** Each bound is `X op P` with both sides of one type, and the
//! windows' bounds cast to that type are disjoint and ascending (checked). So a row passes
//! window `i`'s filter exactly when it is tagged `i`, and every node above computes per tag what
//! it computes per window. A window no row falls in gets the query's result over no rows.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::execution::SessionState;
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    BinaryExpr, Distinct, Expr, ExprSchemable, Filter, LogicalPlan, LogicalPlanBuilder, Operator,
    ScalarUDF, col, lit,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::DataFrame;

use crate::task::Task;
use crate::task::range::WindowRange;
use crate::task::window::Window;

mod window_of;
use window_of::{WindowOf, orderable};

/// The column the grouped query carries each row's window index in.
const TAG: &str = "__idemlake_window";

/// Why a check query is checked window by window.
#[derive(Debug)]
pub struct NotGroupable(pub String);

impl<E: std::fmt::Display> From<E> for NotGroupable {
    fn from(e: E) -> Self {
        NotGroupable(e.to_string())
    }
}

type Grouping<T> = std::result::Result<T, NotGroupable>;

/// What the grouped query gives per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// The check query's own one-row result (`[reconcile].source`).
    Query,
    /// The number of rows the query gives (the task's own query).
    Rows,
    /// The content fingerprint of the rows the query gives (see `content`).
    Content,
}

/// One window's source side.
#[derive(Debug, Clone)]
pub enum PerWindow {
    Query(RecordBatch),
    /// A query's whole result (a window checked by itself).
    Batches(Vec<RecordBatch>),
    Rows(u64),
    Content(super::Fingerprint),
}

/// An expression `X` the window filter bounds by two window parameters, compared as `ty`.
struct Bounded {
    x: Expr,
    lower: String,
    upper: String,
    ty: DataType,
}

/// A check query analysed for grouping.
pub struct Grouped {
    state: SessionState,
    /// The analysed, unbound plan.
    plan: LogicalPlan,
    measure: Measure,
    bounded: Vec<Bounded>,
}

fn has_param(e: &Expr) -> bool {
    e.exists(|e| Ok(matches!(e, Expr::Placeholder(_))))
        .unwrap_or(true)
}

/// `X >= P` / `P <= X` (lower: true) or `X < P` / `P > X` (false), `P` a window parameter
/// of that side, bare or cast: `X`, the side, the parameter and the type they are compared as.
fn bound(e: &Expr) -> Option<(Expr, bool, String, DataType)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
        return None;
    };
    let (x, p, lower) = match op {
        Operator::GtEq => (left, right, true),
        Operator::Lt => (left, right, false),
        Operator::LtEq => (right, left, true),
        Operator::Gt => (right, left, false),
        _ => return None,
    };
    let (id, ty) = match p.as_ref() {
        Expr::Placeholder(p) => (&p.id, p.field.as_ref()?.data_type().clone()),
        Expr::Cast(c) => match c.expr.as_ref() {
            Expr::Placeholder(p) => (&p.id, c.field.data_type().clone()),
            _ => return None,
        },
        _ => return None,
    };
    let name = id.trim_start_matches('$').to_string();
    let sides: [&str; 2] = match lower {
        true => ["window_start", "window_start_ts"],
        false => ["window_end", "window_end_ts"],
    };
    (sides.contains(&name.as_str()) && !has_param(x)).then(|| (x.as_ref().clone(), lower, name, ty))
}

/// The expressions the window filter `f` bounds, each exactly once from each side.
fn bounded(f: &Filter) -> Grouping<Vec<Bounded>> {
    let mut sides: [Vec<(Expr, String, DataType)>; 2] = Default::default();
    for c in split_conjunction(&f.predicate)
        .into_iter()
        .filter(|c| has_param(c))
    {
        let (x, lower, p, ty) = bound(c).ok_or_else(|| {
            NotGroupable(format!(
                "the window filter has a condition other than X >= start AND X < end: {c}"
            ))
        })?;
        sides[usize::from(lower)].push((x, p, ty));
    }
    let [uppers, lowers] = sides;
    let once = |side: &[(Expr, String, DataType)], x: &Expr| {
        side.iter().filter(|s| s.0 == *x).count() == 1
    };
    if lowers.is_empty()
        || lowers.len() != uppers.len()
        || !lowers
            .iter()
            .all(|l| once(&lowers, &l.0) && once(&uppers, &l.0))
    {
        return Err(NotGroupable(
            "the window filter does not bound each expression once from each side".into(),
        ));
    }
    lowers
        .into_iter()
        .map(|(x, lower, ty)| {
            let (_, upper, uty) = uppers.iter().find(|u| u.0 == x).cloned().expect("checked");
            if uty != ty || x.get_type(f.input.schema())? != ty || !orderable(&ty) {
                return Err(NotGroupable(format!(
                    "{x} is not bounded in one orderable type"
                )));
            }
            Ok(Bounded {
                x,
                lower,
                upper,
                ty,
            })
        })
        .collect()
}

impl Grouped {
    /// Analyse `df` (the check query planned with its parameters unbound).
    pub fn new(df: DataFrame, measure: Measure) -> Grouping<Grouped> {
        let (state, plan) = df.into_parts();
        let mut plan =
            state
                .analyzer()
                .execute_and_check(plan, state.config_options(), |_, _| {})?;
        if measure == Measure::Rows {
            plan = counted(plan);
        }
        // Every node using the window parameters, subqueries included: only the filter may.
        let mut holders = Vec::new();
        plan.apply_with_subqueries(|p| {
            if p.expressions().iter().any(has_param) {
                holders.push(p.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        let [LogicalPlan::Filter(f)] = holders.as_slice() else {
            return Err(NotGroupable(
                "the window parameters are not all in one filter".into(),
            ));
        };
        let bounded = bounded(f)?;
        Ok(Grouped {
            state,
            plan,
            measure,
            bounded,
        })
    }

    /// The per-window results for `windows` (ascending, disjoint), from one query computed
    /// now, and what it read.
    pub async fn evaluate(
        &self,
        task: &Task,
        windows: &[Window],
    ) -> Grouping<(Vec<PerWindow>, Vec<crate::report::record::Scanned>)> {
        let params: Vec<Vec<(String, ScalarValue)>> = windows
            .iter()
            .map(|w| WindowRange::of(task, w).params())
            .collect();
        let value =
            |p: &[(String, ScalarValue)], name: &str, ty: &DataType| -> Grouping<ScalarValue> {
                let v = p
                    .iter()
                    .find(|(n, _)| n == name)
                    .ok_or_else(|| NotGroupable(format!("no parameter {name}")))?;
                Ok(v.1.cast_to(ty)?)
            };
        let mut tags = Vec::with_capacity(self.bounded.len());
        for b in &self.bounded {
            let side = |name: &str| {
                params
                    .iter()
                    .map(|p| value(p, name, &b.ty))
                    .collect::<Grouping<Vec<_>>>()
            };
            let udf = WindowOf::new(b.ty.clone(), &side(&b.lower)?, &side(&b.upper)?)?;
            tags.push(ScalarUDF::new_from_impl(udf).call(vec![b.x.clone()]));
        }
        // A row is in window i when every bounded expression is.
        let tag = match tags.as_slice() {
            [one] => one.clone(),
            [first, rest @ ..] => {
                let same = rest
                    .iter()
                    .map(|t| first.clone().eq(t.clone()))
                    .reduce(Expr::and);
                datafusion::logical_expr::when(same.expect("two or more"), first.clone()).end()?
            }
            [] => unreachable!("a window filter bounds an expression"),
        };
        let mut aggregated = false;
        let mut plan = carry(&self.plan, &tag, self.measure, &mut aggregated)?;
        if aggregated != (self.measure == Measure::Query) {
            return Err(NotGroupable(
                "a [reconcile].source is one aggregate over the window filter".into(),
            ));
        }
        if self.measure == Measure::Rows {
            plan = LogicalPlanBuilder::from(plan)
                .aggregate(vec![col(TAG)], vec![count(lit(1))])?
                .build()?;
        }
        // The batch's range: the first window's start, the last window's end.
        let last = params.last().expect("a batch has windows");
        let mut range: HashMap<String, ScalarValue> = HashMap::new();
        range.extend(
            params[0]
                .iter()
                .filter(|p| p.0.starts_with("window_start"))
                .cloned(),
        );
        range.extend(
            last.iter()
                .filter(|p| p.0.starts_with("window_end"))
                .cloned(),
        );
        let physical = DataFrame::new(self.state.clone(), plan.with_param_values(range)?)
            .create_physical_plan()
            .await?;
        let results = self.results(physical.clone(), windows.len()).await?;
        Ok((results, super::read::scans(&physical)))
    }

    /// Each window's result from the rows of `plan` (the bound grouped query).
    async fn results(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        windows: usize,
    ) -> Grouping<Vec<PerWindow>> {
        use futures::StreamExt;
        let task_ctx = Arc::new(datafusion::execution::TaskContext::from(&self.state));
        let mut stream = datafusion::physical_plan::execute_stream(plan, task_ctx)?;
        let mut fingerprints = vec![super::Fingerprint::default(); windows];
        let mut out: Vec<Option<PerWindow>> = vec![None; windows];
        while let Some(b) = stream.next().await {
            let b = b?;
            let at = b.schema().index_of(TAG)?;
            let tags = b
                .column(at)
                .as_primitive_opt::<arrow::datatypes::UInt32Type>()
                .ok_or_else(|| NotGroupable("the tag is not UInt32".into()))?
                .clone();
            let values = b.project(
                &(0..b.num_columns())
                    .filter(|i| *i != at)
                    .collect::<Vec<_>>(),
            )?;
            let hashes = match self.measure {
                Measure::Content => super::content::row_hashes(&b, Some(TAG))?,
                _ => Vec::new(),
            };
            for r in (0..b.num_rows()).filter(|r| tags.is_valid(*r)) {
                let i = tags.value(r) as usize;
                match self.measure {
                    Measure::Content => fingerprints[i].add(hashes[r]),
                    Measure::Query => out[i] = Some(PerWindow::Query(values.slice(r, 1))),
                    Measure::Rows => {
                        let n = values
                            .column(0)
                            .as_primitive_opt::<Int64Type>()
                            .map(|a| a.value(r));
                        out[i] = Some(PerWindow::Rows(
                            n.ok_or_else(|| NotGroupable("a count is not Int64".into()))? as u64,
                        ));
                    }
                }
            }
        }
        if self.measure == Measure::Content {
            return Ok(fingerprints.into_iter().map(PerWindow::Content).collect());
        }
        let mut none = None;
        let mut results = Vec::with_capacity(windows);
        for o in out {
            results.push(match (o, self.measure) {
                (Some(r), _) => r,
                (None, Measure::Rows) => PerWindow::Rows(0),
                (None, _) => {
                    if none.is_none() {
                        none = Some(self.over_no_rows().await?);
                    }
                    PerWindow::Query(none.clone().expect("just set"))
                }
            });
        }
        Ok(results)
    }

    /// The query's result over no rows: its window filter replaced by `false`.
    async fn over_no_rows(&self) -> Grouping<RecordBatch> {
        let plan = self.plan.clone().transform_up(|p| match p {
            LogicalPlan::Filter(f) if has_param(&f.predicate) => Ok(Transformed::yes(
                LogicalPlan::Filter(Filter::try_new(lit(false), f.input)?),
            )),
            other => Ok(Transformed::no(other)),
        })?;
        let batches = DataFrame::new(self.state.clone(), plan.data)
            .collect()
            .await?;
        match batches
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .collect::<Vec<_>>()
            .as_slice()
        {
            [one] if one.num_rows() == 1 => Ok(one.clone()),
            _ => Err(NotGroupable(
                "the query does not give one row over no rows".into(),
            )),
        }
    }
}

/// The plan whose rows `plan` gives, for counting them: the projections and aliases on top
/// left out, whatever window parameters they compute (they change no row count). A parameter
/// a projection below computes may reach a key, a `DISTINCT` or a filter: it stays, and the
/// query is checked window by window.
fn counted(plan: LogicalPlan) -> LogicalPlan {
    match plan {
        LogicalPlan::Projection(p) => counted(Arc::unwrap_or_clone(p.input)),
        LogicalPlan::SubqueryAlias(a) => counted(Arc::unwrap_or_clone(a.input)),
        other => other,
    }
}

/// `plan` with each row's window tag carried from the window filter up to the result (see the
/// module documentation for which nodes may lie between them).
fn carry(
    plan: &LogicalPlan,
    tag: &Expr,
    measure: Measure,
    aggregated: &mut bool,
) -> Grouping<LogicalPlan> {
    let up = |p: &LogicalPlan, aggregated: &mut bool| -> Grouping<LogicalPlanBuilder> {
        Ok(LogicalPlanBuilder::from(carry(
            p, tag, measure, aggregated,
        )?))
    };
    let built = match plan {
        LogicalPlan::Filter(f) if has_param(&f.predicate) => {
            let mut exprs: Vec<Expr> = f
                .input
                .schema()
                .columns()
                .into_iter()
                .map(Expr::Column)
                .collect();
            exprs.push(tag.clone().alias(TAG));
            LogicalPlanBuilder::from(plan.clone()).project(exprs)?
        }
        LogicalPlan::Projection(p) => {
            up(&p.input, aggregated)?.project(p.expr.iter().cloned().chain([col(TAG)]))?
        }
        LogicalPlan::SubqueryAlias(s) => up(&s.input, aggregated)?.alias(s.alias.clone())?,
        LogicalPlan::Sort(s) if s.fetch.is_none() && measure != Measure::Query => {
            return carry(&s.input, tag, measure, aggregated);
        }
        LogicalPlan::Distinct(Distinct::All(input)) if measure != Measure::Query => {
            up(input, aggregated)?.distinct()?
        }
        // Grouped aggregates (no ROLLUP or CUBE) for a row count or fingerprint; ungrouped ones
        // (one row per window) for a [reconcile].source.
        LogicalPlan::Aggregate(a)
            if a.group_expr.is_empty() == (measure == Measure::Query)
                && !a
                    .group_expr
                    .iter()
                    .any(|e| matches!(e, Expr::GroupingSet(_))) =>
        {
            *aggregated |= a.group_expr.is_empty();
            let group = a.group_expr.iter().cloned().chain([col(TAG)]);
            up(&a.input, aggregated)?.aggregate(group, a.aggr_expr.clone())?
        }
        other => {
            return Err(NotGroupable(format!(
                "a {} between the window filter and the result",
                other.display()
            )));
        }
    };
    Ok(built.build()?)
}

#[cfg(test)]
mod tests;
