//! Order dependence: SQL whose result depends on the order rows arrive in, which may change
//! between runs (files listed in another order, partitions finishing in another order).
//!
//! Rules (each named by what `[lint] allow` accepts):
//! - `limit`: LIMIT/OFFSET needs an ORDER BY over every column the limited rows carry.
//! - `distinct_on`: DISTINCT ON needs its ON and ORDER BY to cover every column of the rows
//!   it keeps.
//! - `aggregate_order`: an order-sensitive aggregate (`array_agg`, `string_agg`,
//!   `first_value`, `last_value`, `nth_value`) needs its own ORDER BY, covering every column
//!   its arguments read: rows tied on the ORDER BY then carry equal arguments, so any order
//!   among them gives the same result. `any_value` is arbitrary whatever its order.
//! - `window_order`: a numbering, offset or value window function (`row_number`, `ntile`,
//!   `lag`, `first_value`, …), an order-sensitive aggregate used as a window function, or
//!   any aggregate over a `ROWS` frame smaller than its partition, needs an ORDER BY (the
//!   numbering and offset functions in any case), and its PARTITION BY and ORDER BY together
//!   must cover every column the window's rows carry to the result (the columns the
//!   projection above reads, and the function's arguments). Rows tied on them are then
//!   identical in everything the result shows, so numbering or ordering them differently
//!   yields the same rows. Without a projection above, every input column counts.
//!
//!   `rank`, `dense_rank`, `percent_rank` and `cume_dist` give rows tied on the ORDER BY the
//!   same value, so they are deterministic with any ORDER BY, or none.
//!
//! The rule is about names: a column that is unique on its own (an id) does not make an
//! order total unless the other output columns are in the ORDER BY too (the lint cannot
//! know uniqueness); `[lint] allow` accepts such a query.
//! - `float_aggregate`: sums and other adding aggregates of floating-point values (see
//!   `float`).

use std::collections::{BTreeSet, HashSet};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::{Expr, LogicalPlan, WindowFrameBound, WindowFrameUnits};

use crate::error::Result;

/// Window functions whose result depends on row order. Not `rank`, `dense_rank`,
/// `percent_rank` or `cume_dist`: rows tied on the ORDER BY (peers) get the same value
/// whatever order they arrive in, and without an ORDER BY every row of a partition is a peer.
const ORDER_SENSITIVE: [&str; 7] = [
    "row_number",
    "ntile",
    "lag",
    "lead",
    "first_value",
    "last_value",
    "nth_value",
];

/// Aggregates whose result depends on the order of their input rows (DataFusion 55).
const ORDER_SENSITIVE_AGGREGATES: [&str; 5] = [
    "array_agg",
    "string_agg",
    "first_value",
    "last_value",
    "nth_value",
];

/// Aggregates that return an arbitrary row's value, whatever the order.
const ARBITRARY_AGGREGATES: [&str; 1] = ["any_value"];

/// One order-dependent construct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderFinding {
    /// What `[lint] allow` names to accept it.
    pub rule: &'static str,
    /// The function (or keyword) to locate in the SQL text.
    pub word: String,
    pub message: String,
}

/// Unqualified names of the columns `exprs` reference.
fn column_names<'a>(exprs: impl IntoIterator<Item = &'a Expr>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in exprs {
        for c in e.column_refs() {
            out.insert(c.name.clone());
        }
    }
    out
}

/// Every order-dependent construct of `plan` (subqueries included).
pub fn order_dependence(plan: &LogicalPlan) -> Result<Vec<OrderFinding>> {
    let mut found = Vec::new();
    let mut checked: HashSet<*const LogicalPlan> = HashSet::new();
    plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::Limit(limit) => found.extend(limit_finding(limit.input.as_ref())),
            LogicalPlan::Distinct(datafusion::logical_expr::Distinct::On(on)) => {
                found.extend(distinct_on_finding(on));
            }
            LogicalPlan::Projection(p) => {
                // The windows right below a projection: it says which columns they carry.
                let mut needed = column_names(&p.expr);
                let mut below = p.input.as_ref();
                loop {
                    match below {
                        LogicalPlan::SubqueryAlias(a) => below = a.input.as_ref(),
                        LogicalPlan::Sort(s) => below = s.input.as_ref(),
                        LogicalPlan::Window(w) => {
                            found.extend(window_findings(&w.window_expr, &w.input, &needed));
                            needed.extend(column_names(&w.window_expr));
                            checked.insert(below as *const LogicalPlan);
                            below = w.input.as_ref();
                        }
                        _ => break,
                    }
                }
            }
            LogicalPlan::Window(w) if !checked.contains(&(node as *const LogicalPlan)) => {
                let all: BTreeSet<String> = w
                    .input
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
                found.extend(window_findings(&w.window_expr, &w.input, &all));
            }
            _ => {}
        }
        let below = node.inputs().first().map(|i| i.schema().clone());
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                if let Some(schema) = &below {
                    found.extend(super::float::float_finding(e, schema));
                }
                if let Expr::AggregateFunction(f) = e {
                    found.extend(aggregate_finding(
                        f.func.name(),
                        &f.params.args,
                        &f.params.order_by,
                    ));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// LIMIT/OFFSET over `input`: walk down to the Sort it applies to, noting what the rows
/// consist of.
fn limit_finding(input: &LogicalPlan) -> Option<OrderFinding> {
    let mut needed: Option<BTreeSet<String>> = None;
    let mut below = input;
    let sort = loop {
        match below {
            LogicalPlan::Projection(p) => {
                needed.get_or_insert_with(|| column_names(&p.expr));
                below = p.input.as_ref();
            }
            LogicalPlan::SubqueryAlias(a) => below = a.input.as_ref(),
            LogicalPlan::Sort(s) => break Some(s),
            _ => break None,
        }
    };
    let finding = |message: String| OrderFinding {
        rule: "limit",
        word: "limit".to_string(),
        message,
    };
    let Some(s) = sort else {
        return Some(finding(
            "LIMIT/OFFSET without ORDER BY picks arbitrary rows: which ones may change between runs"
                .to_string(),
        ));
    };
    let sorted = column_names(s.expr.iter().map(|e| &e.expr));
    let needed = needed.unwrap_or_else(|| {
        s.input
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    });
    let missing: Vec<String> = needed.difference(&sorted).cloned().collect();
    (!missing.is_empty()).then(|| {
        finding(format!(
            "LIMIT/OFFSET with an ORDER BY that is not total: rows tied on the sort keys may be picked differently between runs; add {} to the ORDER BY",
            missing.join(", ")
        ))
    })
}

/// DISTINCT ON keeps the first row of each group in its ORDER BY: the ON and ORDER BY
/// expressions must cover every column the kept rows carry.
fn distinct_on_finding(on: &datafusion::logical_expr::DistinctOn) -> Option<OrderFinding> {
    let carried = column_names(&on.select_expr);
    let mut keys = column_names(&on.on_expr);
    if let Some(sort) = &on.sort_expr {
        keys.extend(column_names(sort.iter().map(|s| &s.expr)));
    }
    let missing: Vec<String> = carried.difference(&keys).cloned().collect();
    (!missing.is_empty()).then(|| OrderFinding {
        rule: "distinct_on",
        word: "distinct".to_string(),
        message: format!(
            "DISTINCT ON keeps whichever row of a group comes first in its ORDER BY, and rows tied on it differ in {m}: which one is kept may change between runs; add {m} to the ORDER BY",
            m = missing.join(", ")
        ),
    })
}

/// An aggregate `name(args ORDER BY order_by)`: order-sensitive ones need an ORDER BY over
/// their arguments' columns; arbitrary ones are refused.
fn aggregate_finding(
    name: &str,
    args: &[Expr],
    order_by: &[datafusion::logical_expr::SortExpr],
) -> Option<OrderFinding> {
    let name = name.to_lowercase();
    if ARBITRARY_AGGREGATES.contains(&name.as_str()) {
        return Some(OrderFinding {
            rule: "aggregate_order",
            word: name.clone(),
            message: format!(
                "{name}() returns the value of whichever row comes first, which may change between runs; use min() or max(), or an order-sensitive aggregate with a total ORDER BY"
            ),
        });
    }
    if !ORDER_SENSITIVE_AGGREGATES.contains(&name.as_str()) {
        return None;
    }
    let read = column_names(args);
    let sorted = column_names(order_by.iter().map(|s| &s.expr));
    let missing: Vec<String> = read.difference(&sorted).cloned().collect();
    if missing.is_empty() {
        return None;
    }
    let message = if order_by.is_empty() {
        format!(
            "{name}() without ORDER BY depends on the order rows arrive in, which may change between runs; write {name}(… ORDER BY {})",
            missing.join(", ")
        )
    } else {
        format!(
            "{name}(… ORDER BY …) with an ORDER BY that is not total: rows tied on it may come in any order; add {} to its ORDER BY",
            missing.join(", ")
        )
    };
    Some(OrderFinding {
        rule: "aggregate_order",
        word: name,
        message,
    })
}

/// Whether a window function's result depends on the order of rows within its partition.
fn order_sensitive(wf: &WindowFunction, name: &str) -> bool {
    if ORDER_SENSITIVE.contains(&name)
        || ORDER_SENSITIVE_AGGREGATES.contains(&name)
        || ARBITRARY_AGGREGATES.contains(&name)
    {
        return true;
    }
    // An aggregate over a ROWS frame smaller than the partition sums different rows for rows
    // tied on the ORDER BY (RANGE and GROUPS frames take peers together).
    let frame = &wf.params.window_frame;
    let whole = matches!(&frame.start_bound, WindowFrameBound::Preceding(v) if v.is_null())
        && matches!(&frame.end_bound, WindowFrameBound::Following(v) if v.is_null());
    frame.units == WindowFrameUnits::Rows && !whole
}

/// The window functions of one Window node over `input`, whose rows carry `needed` columns
/// (by name) to the result.
fn window_findings(
    exprs: &[Expr],
    input: &LogicalPlan,
    needed: &BTreeSet<String>,
) -> Vec<OrderFinding> {
    let columns: BTreeSet<String> = input
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut found = Vec::new();
    for e in exprs {
        let mut inner = e;
        while let Expr::Alias(a) = inner {
            inner = a.expr.as_ref();
        }
        let Expr::WindowFunction(wf) = inner else {
            continue;
        };
        let name = wf.fun.name().to_lowercase();
        if !order_sensitive(wf, &name) {
            continue;
        }
        let p = &wf.params;
        let mut carried: BTreeSet<String> = needed.intersection(&columns).cloned().collect();
        carried.extend(column_names(&p.args));
        let mut keys = column_names(&p.partition_by);
        keys.extend(column_names(p.order_by.iter().map(|s| &s.expr)));
        let missing: Vec<String> = carried.difference(&keys).cloned().collect();
        let message = if p.order_by.is_empty()
            && (ORDER_SENSITIVE.contains(&name.as_str()) || !missing.is_empty())
        {
            format!(
                "{name}() OVER (…) without ORDER BY takes the rows of a partition in an arbitrary order that may change between runs"
            )
        } else if !missing.is_empty() {
            format!(
                "{name}() OVER (…) with an ORDER BY that is not total: rows tied on its PARTITION BY and ORDER BY differ in {m}, and may be taken in a different order between runs; add {m} to the ORDER BY",
                m = missing.join(", ")
            )
        } else {
            continue;
        };
        found.push(OrderFinding {
            rule: "window_order",
            word: name,
            message,
        });
    }
    found
}
