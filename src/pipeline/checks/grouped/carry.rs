//! The grouped query's plan: the check query with each row's window index carried from the
//! window filter up to the result (see the parent module for why the numbers are the same).

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, col, lit};

use super::{Measure, NotGroupable, WINDOW_COL, has_placeholder, node_has_placeholder};

/// `plan` with every window parameter a projection computes replaced by a NULL of its type:
/// projections do not change how many rows there are, so counting them needs only the filters'
/// parameters.
pub(super) fn without_projected_parameters(
    plan: LogicalPlan,
) -> std::result::Result<LogicalPlan, NotGroupable> {
    let plan = plan.transform_up(|p| {
        if !matches!(p, LogicalPlan::Projection(_)) || !node_has_placeholder(&p) {
            return Ok(Transformed::no(p));
        }
        p.map_expressions(|e| {
            e.transform_up(|e| match e {
                Expr::Placeholder(ph) => {
                    let ty = ph
                        .field
                        .as_ref()
                        .map(|f| f.data_type().clone())
                        .unwrap_or(DataType::Null);
                    Ok(Transformed::yes(lit(ScalarValue::try_from(&ty)?)))
                }
                other => Ok(Transformed::no(other)),
            })
        })
    })?;
    Ok(plan.data)
}

/// `plan` with the window index carried from the window filter up to the result: a
/// projection of `key` above the filter, passed through every projection, alias and
/// parameter-free filter above it, through sorts without a limit (dropped: order does not
/// change a count or a fingerprint), `DISTINCT` and grouped aggregates (the index joins
/// their keys, so each window keeps its own groups), and grouped by at the (single,
/// ungrouped) aggregate of a `[reconcile].source` query.
pub(super) fn carry(
    plan: &LogicalPlan,
    key: &Expr,
    measure: Measure,
    aggregated: &mut bool,
) -> std::result::Result<LogicalPlan, NotGroupable> {
    let carry = |p: &LogicalPlan, aggregated: &mut bool| carry(p, key, measure, aggregated);
    let built = match plan {
        LogicalPlan::Filter(f) if has_placeholder(&f.predicate) => {
            let mut exprs: Vec<Expr> = f
                .input
                .schema()
                .columns()
                .into_iter()
                .map(Expr::Column)
                .collect();
            exprs.push(key.clone().alias(WINDOW_COL));
            LogicalPlanBuilder::from(plan.clone()).project(exprs)?
        }
        LogicalPlan::Filter(f) if !*aggregated => {
            LogicalPlanBuilder::from(carry(&f.input, aggregated)?).filter(f.predicate.clone())?
        }
        LogicalPlan::Sort(s) if s.fetch.is_none() && measure != Measure::Query => {
            return carry(&s.input, aggregated);
        }
        LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(input))
            if measure != Measure::Query =>
        {
            LogicalPlanBuilder::from(carry(input, aggregated)?).distinct()?
        }
        LogicalPlan::Aggregate(a)
            if !a.group_expr.is_empty()
                && measure != Measure::Query
                // Grouping sets (ROLLUP, CUBE) have groups over all the keys, windows too.
                && !a.group_expr.iter().any(|e| matches!(e, Expr::GroupingSet(_))) =>
        {
            let input = carry(&a.input, aggregated)?;
            let mut group = a.group_expr.clone();
            group.push(col(WINDOW_COL));
            LogicalPlanBuilder::from(input).aggregate(group, a.aggr_expr.clone())?
        }
        LogicalPlan::Projection(p) => {
            let input = carry(&p.input, aggregated)?;
            let mut exprs = p.expr.clone();
            exprs.push(col(WINDOW_COL));
            LogicalPlanBuilder::from(input).project(exprs)?
        }
        LogicalPlan::SubqueryAlias(s) => {
            LogicalPlanBuilder::from(carry(&s.input, aggregated)?).alias(s.alias.clone())?
        }
        LogicalPlan::Aggregate(a) if a.group_expr.is_empty() && !*aggregated => {
            let input = carry(&a.input, aggregated)?;
            *aggregated = true;
            LogicalPlanBuilder::from(input).aggregate(vec![col(WINDOW_COL)], a.aggr_expr.clone())?
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
