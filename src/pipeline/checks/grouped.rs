//! Grouped checks: the source side of many windows' checks from one query.
//!
//! A backfill of N windows checked window by window reads the source N times. When the check
//! query has the everyday shape, the same numbers come from one query per batch of windows:
//!
//! - exactly one node of the plan holds the window parameters: a filter whose conditions on
//!   them are `X >= $window_start AND X < $window_end` (either bound parameter, `_ts` or not,
//!   either side of the comparison), for one or more expressions `X` of a date, timestamp or
//!   integer type (a landing zone's task bounds `dt` and `ts`);
//! - above it only projections, aliases, parameter-free filters, sorts without a limit,
//!   `DISTINCT`, grouped aggregates, and for a `[reconcile].source` its one aggregate (see
//!   `carry`).
//!
//! The bounds are bound to the batch's first start and last end, and each row carries the
//! index of the window its `X`s fall in, `window_of(X)`, up to the result, grouped by it.
//! Anything else (bounds in another form, a `UNION`, joins, limits or window functions above
//! the filter, parameters elsewhere, a `[reconcile].source` with more than its one aggregate)
//! is [`NotGroupable`] and is checked window by window, as the plain twin checks every query
//! (`IDEMLAKE_CHECK_BATCH=1`, or `IDEMLAKE_ACCELERATE=0`). This is written against
//! DataFusion's logical plan of the check query and shares nothing with `accel`.
//!
//! Why the numbers are the same: the rewrite runs on the analysed plan, where each bound
//! comparison is `X op P` with both sides of one type `T`; a row belongs to window `i` exactly
//! when `lo_i <= X < hi_i` in `T`'s order (`lo_i`, `hi_i` the bound parameters of window `i`
//! cast to `T` as the comparison casts them); with several `X`, exactly when this holds for
//! each. The windows' intervals must be disjoint and ascending in `T` (checked), so each row
//! falls in at most one; rows between the batch's windows (a `--missing` gap) fall in none
//! and are dropped. Every node above carries the index: the grouped aggregates and `DISTINCT`
//! with it among their keys, so each window keeps its own groups. A window no row falls in gets
//! the query's result over no rows (the filter replaced by `false`).

use std::collections::HashMap;

use arrow::array::RecordBatch;
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::execution::SessionState;
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    BinaryExpr, Expr, ExprSchemable, Filter, LogicalPlan, LogicalPlanBuilder, Operator, ScalarUDF,
    col, lit,
};
use datafusion::prelude::DataFrame;

use crate::task::Task;
use crate::task::range::WindowRange;
use crate::task::window::Window;

mod carry;
mod results;
mod window_of;
use carry::{carry, without_projected_parameters};
use window_of::WindowOf;

/// The column the grouped query carries each row's window index in.
const WINDOW_COL: &str = "__idemlake_window";

/// Why a check query is checked window by window.
#[derive(Debug)]
pub struct NotGroupable(pub String);

impl<E: std::fmt::Display> From<E> for NotGroupable {
    fn from(e: E) -> Self {
        NotGroupable(e.to_string())
    }
}

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

/// One per-window result of a grouped query.
#[derive(Debug, Clone)]
pub enum PerWindow {
    Query(RecordBatch),
    /// A query's whole result (a window checked by itself).
    Batches(Vec<RecordBatch>),
    Rows(u64),
    Content(super::Fingerprint),
}

/// One bounded expression of the window filter: `X >= lower AND X < upper` with `lower`,
/// `upper` window parameters, possibly cast to the comparison's type.
struct Pair {
    /// The bounded expression `X`, in the filter's input schema.
    x: Expr,
    /// The lower bound's parameter (`window_start`, `window_start_ts`).
    lower: String,
    /// The upper bound's parameter (`window_end`, `window_end_ts`).
    upper: String,
    /// The type both sides of each bound comparison have.
    ty: DataType,
}

/// A check query analysed for grouping.
pub struct Grouped {
    state: SessionState,
    /// The analysed, unbound plan.
    plan: LogicalPlan,
    measure: Measure,
    /// The window filter's bounded expressions (a landing zone's task bounds its partition
    /// column and its timestamp): a row passing the filter is in window `i` when each lies in
    /// window `i`'s bounds.
    pairs: Vec<Pair>,
}

fn has_placeholder(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.apply(|e| {
        if matches!(e, Expr::Placeholder(_)) {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

fn node_has_placeholder(p: &LogicalPlan) -> bool {
    p.expressions().iter().any(has_placeholder)
}

/// `P` when it is a window parameter, bare or cast: its name and the type it is compared as.
fn parameter(e: &Expr) -> Option<(String, DataType)> {
    match e {
        Expr::Placeholder(p) => {
            let ty = p.field.as_ref()?.data_type().clone();
            Some((p.id.trim_start_matches('$').to_string(), ty))
        }
        Expr::Cast(c) => match c.expr.as_ref() {
            Expr::Placeholder(p) => Some((
                p.id.trim_start_matches('$').to_string(),
                c.field.data_type().clone(),
            )),
            _ => None,
        },
        _ => None,
    }
}

/// A conjunct `X >= lower` / `lower <= X` (true) or `X < upper` / `upper > X` (false).
fn bound(e: &Expr) -> Option<(bool, Expr, String, DataType)> {
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
    let (name, ty) = parameter(p)?;
    let ok = if lower {
        matches!(name.as_str(), "window_start" | "window_start_ts")
    } else {
        matches!(name.as_str(), "window_end" | "window_end_ts")
    };
    (ok && !has_placeholder(x)).then(|| (lower, x.as_ref().clone(), name, ty))
}

/// The bounded expressions of a window filter: each bounded from both sides, by the window
/// parameters, in one type.
fn pairs_of(f: &Filter) -> std::result::Result<Vec<Pair>, NotGroupable> {
    let (mut lowers, mut uppers): (Vec<(Expr, String, DataType)>, Vec<_>) = (vec![], vec![]);
    for c in split_conjunction(&f.predicate) {
        if !has_placeholder(c) {
            continue;
        }
        let Some((is_lower, x, p, ty)) = bound(c) else {
            return Err(NotGroupable(format!(
                "the window filter has a condition other than X >= start AND X < end: {c}"
            )));
        };
        let side = if is_lower { &mut lowers } else { &mut uppers };
        if side.iter().any(|(y, _, _)| *y == x) {
            return Err(NotGroupable(format!(
                "the window filter bounds {x} twice from one side"
            )));
        }
        side.push((x, p, ty));
    }
    if lowers.is_empty() || lowers.len() != uppers.len() {
        return Err(NotGroupable(
            "the window filter does not bound each expression from both sides".into(),
        ));
    }
    let mut pairs = Vec::with_capacity(lowers.len());
    for (x, lp, lty) in lowers {
        let Some((_, up, uty)) = uppers.iter().find(|(y, _, _)| *y == x).cloned() else {
            return Err(NotGroupable(format!(
                "the window filter bounds {x} from below only"
            )));
        };
        let xty = x.get_type(f.input.schema())?;
        if lty != uty || xty != lty {
            return Err(NotGroupable(format!(
                "the window bounds compare different types ({x}: {xty}, {lty}, {uty})"
            )));
        }
        if !window_of::orderable(&lty) {
            return Err(NotGroupable(format!("{lty} is not grouped by window")));
        }
        pairs.push(Pair {
            x,
            lower: lp,
            upper: up,
            ty: lty,
        });
    }
    Ok(pairs)
}

impl Grouped {
    /// Analyse `df` (the check query planned with its parameters unbound).
    pub fn new(df: DataFrame, measure: Measure) -> std::result::Result<Grouped, NotGroupable> {
        let (state, plan) = df.into_parts();
        let mut plan =
            state
                .analyzer()
                .execute_and_check(plan, state.config_options(), |_, _| {})?;
        if measure == Measure::Rows {
            plan = without_projected_parameters(plan)?;
        }
        let mut holders = Vec::new();
        plan.apply(|p| {
            if node_has_placeholder(p) {
                holders.push(p.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        // A subquery bound by the window (`IN (SELECT … HAVING …)`, a scalar average) would
        // be bound to the whole batch's range: what it computes would mix the windows.
        let mut in_subqueries = 0usize;
        plan.apply_with_subqueries(|p| {
            in_subqueries += usize::from(node_has_placeholder(p));
            Ok(TreeNodeRecursion::Continue)
        })?;
        if in_subqueries != holders.len() {
            return Err(NotGroupable(
                "a subquery uses the window parameters (each window's subquery differs)".into(),
            ));
        }
        // One node holds the window parameters, a window filter.
        let pairs = match holders.as_slice() {
            [LogicalPlan::Filter(f)] => pairs_of(f)?,
            [] => return Err(NotGroupable("the query has no window filter".into())),
            _ => {
                return Err(NotGroupable(
                    "the window parameters are not all in one window filter".into(),
                ));
            }
        };
        Ok(Grouped {
            state,
            plan,
            measure,
            pairs,
        })
    }

    /// Each window's bounds of `pair` in its comparison's type; an error unless disjoint and
    /// ascending.
    fn bounds(
        pair: &Pair,
        task: &Task,
        windows: &[Window],
    ) -> std::result::Result<(Vec<ScalarValue>, Vec<ScalarValue>), NotGroupable> {
        let value = |params: &[(String, ScalarValue)], name: &str| {
            let v = params
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| NotGroupable(format!("no parameter {name}")))?;
            v.cast_to(&pair.ty).map_err(NotGroupable::from)
        };
        let (mut lo, mut hi) = (Vec::new(), Vec::new());
        for w in windows {
            let params = WindowRange::of(task, w).params();
            lo.push(value(&params, &pair.lower)?);
            hi.push(value(&params, &pair.upper)?);
        }
        let less = |a: &ScalarValue, b: &ScalarValue, or_equal: bool| {
            matches!(a.partial_cmp(b), Some(std::cmp::Ordering::Less)) || (or_equal && a == b)
        };
        for i in 0..lo.len() {
            let disjoint = i + 1 == lo.len() || less(&hi[i], &lo[i + 1], true);
            if !less(&lo[i], &hi[i], false) || !disjoint {
                return Err(NotGroupable(format!(
                    "the windows are not disjoint and ascending as {}",
                    pair.ty
                )));
            }
        }
        Ok((lo, hi))
    }

    /// The index of the window a row falls in (NULL for none): each bounded expression's
    /// window, when all of them agree.
    fn window_key(
        &self,
        task: &Task,
        windows: &[Window],
    ) -> std::result::Result<Expr, NotGroupable> {
        let mut keys = Vec::with_capacity(self.pairs.len());
        for pair in &self.pairs {
            let (lo, hi) = Self::bounds(pair, task, windows)?;
            let window_of = ScalarUDF::new_from_impl(WindowOf::new(pair.ty.clone(), &lo, &hi)?);
            keys.push(window_of.call(vec![pair.x.clone()]));
        }
        // A row is in window i when every bounded expression is: its index, or NULL.
        Ok(match keys.as_slice() {
            [one] => one.clone(),
            [first, rest @ ..] => {
                let same = rest
                    .iter()
                    .map(|k| first.clone().eq(k.clone()))
                    .reduce(Expr::and)
                    .expect("two keys or more");
                datafusion::logical_expr::when(same, first.clone()).end()?
            }
            [] => unreachable!("a grouped query has a bounded expression"),
        })
    }

    /// The per-window results for `windows` (ascending, disjoint), from one query computed
    /// now.
    pub async fn evaluate(
        &self,
        task: &Task,
        windows: &[Window],
    ) -> std::result::Result<(Vec<PerWindow>, Vec<crate::report::record::Scanned>), NotGroupable>
    {
        let key = self.window_key(task, windows)?;
        let mut aggregated = false;
        let mut grouped = carry(&self.plan, &key, self.measure, &mut aggregated)?;
        match (self.measure, aggregated) {
            (Measure::Rows, false) => {
                grouped = LogicalPlanBuilder::from(grouped)
                    .aggregate(vec![col(WINDOW_COL)], vec![count(lit(1)).alias("rows")])?
                    .build()?;
            }
            (Measure::Query, true) | (Measure::Content, false) => {}
            _ => {
                return Err(NotGroupable(
                    "the query is not one aggregate over the window filter".into(),
                ));
            }
        }
        // The batch's range: the first window's lower bound, the last window's upper bound.
        let first = WindowRange::of(task, &windows[0]).params();
        let last = WindowRange::of(task, windows.last().expect("a batch has windows")).params();
        let mut values: HashMap<String, ScalarValue> = HashMap::new();
        for (name, v) in first {
            if name.starts_with("window_start") {
                values.insert(name, v);
            }
        }
        for (name, v) in last {
            if name.starts_with("window_end") {
                values.insert(name, v);
            }
        }
        let bound = grouped.with_param_values(values)?;
        let df = DataFrame::new(self.state.clone(), bound);
        let plan = df.create_physical_plan().await?;
        let results = self.results(plan.clone(), windows.len()).await?;
        Ok((results, super::read::scans(&plan)))
    }

    /// The query's result over no rows: its window filter replaced by `false`.
    async fn over_no_rows(&self) -> std::result::Result<RecordBatch, NotGroupable> {
        let plan = self
            .plan
            .clone()
            .transform_up(|p| match p {
                LogicalPlan::Filter(f) if has_placeholder(&f.predicate) => {
                    let f = Filter::try_new(lit(false), f.input)?;
                    Ok(Transformed::yes(LogicalPlan::Filter(f)))
                }
                other => Ok(Transformed::no(other)),
            })?
            .data;
        let batches = DataFrame::new(self.state.clone(), plan).collect().await?;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if rows != 1 {
            return Err(NotGroupable(format!(
                "the query gives {rows} rows over no rows"
            )));
        }
        let b = batches.into_iter().find(|b| b.num_rows() == 1);
        Ok(b.expect("one row"))
    }
}

#[cfg(test)]
mod tests;
