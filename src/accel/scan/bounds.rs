//! Which sources of a task can be shared across windows: the analysis of its unbound plans.
//!
//! A source is shareable when *every* reference to it is restricted by a lower and an upper
//! bound on one column by window parameters, through filters, inner joins and table aliases
//! only. Anything the analysis cannot prove (a reference inside a subquery expression, behind
//! an outer join, aggregation or projection; bounds of different columns or types) leaves the
//! source un-shared. Invariant: a window's rows of a shared source are exactly those whose
//! bound column lies within the inclusive bounds `Bound::window_bounds` gives for it.

use std::collections::HashSet;

use arrow::array::{Array, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Column, ScalarValue, TableReference};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, JoinType, LogicalPlan, Operator};

use super::prune::Prune;
use crate::task::range::WindowRange;

/// How one reference to a source is bounded by window parameters.
#[derive(Debug, Clone, PartialEq)]
struct Leaf {
    column: String,
    lower: String,
    upper: String,
    /// The upper bound is strict (`<`): rows equal to it are out of reach.
    strict: bool,
    /// Every conjunct of the reference on its own columns (see `prune`).
    prunes: Vec<Prune>,
}

/// A source whose every reference is bounded on one column.
#[derive(Debug, Clone)]
pub struct Bound {
    pub alias: String,
    pub column: String,
    /// (lower parameter, upper parameter) of each reference.
    pub leaves: Vec<(String, String)>,
    /// Every reference's upper bound is strict (`<`): a window's rows stop short of `hi`.
    pub upper_strict: bool,
    /// The conjuncts a chunk's scan keeps besides the bound column's span, columns named as
    /// `alias`'s (see `prune`; none when the source is read through several references).
    pub prunes: Vec<Prune>,
}

impl Bound {
    /// The inclusive bounds `[lo, hi]` of the rows a window can see, as ScalarValues: its
    /// range's parameters (see [`WindowRange::params`]) the references bound this source by.
    pub fn window_bounds(&self, range: &WindowRange) -> Option<(ScalarValue, ScalarValue)> {
        let mut lo: Option<ScalarValue> = None;
        let mut hi: Option<ScalarValue> = None;
        for (l, u) in &self.leaves {
            let (l, u) = (range.param(l)?, range.param(u)?);
            if lo.as_ref().is_none_or(|x| &l < x) {
                lo = Some(l);
            }
            if hi.as_ref().is_none_or(|x| &u > x) {
                hi = Some(u);
            }
        }
        Some((lo?, hi?))
    }
}

/// Which sources of a task can be shared, found from its unbound plans.
pub fn analyze(aliases: &[&str], plans: &[&LogicalPlan]) -> Vec<Bound> {
    let mut out = Vec::new();
    for alias in aliases {
        let mut total = 0usize;
        let mut leaves = Vec::new();
        for p in plans {
            total += count_scans(p, alias);
            let mut found = Vec::new();
            walk(p, &[], &mut found);
            leaves.extend(
                found
                    .into_iter()
                    .filter(|(table, _)| same_name(table, alias))
                    .map(|(_, leaf)| leaf),
            );
        }
        if total == 0 || leaves.len() != total {
            continue;
        }
        let Some(leaves) = leaves.into_iter().collect::<Option<Vec<Leaf>>>() else {
            continue;
        };
        let column = leaves[0].column.clone();
        if leaves.iter().any(|l| l.column != column) {
            continue;
        }
        // The bound column's own bounds are the chunk's span already.
        let prunes = match leaves.as_slice() {
            [one] => one
                .prunes
                .iter()
                .filter(|p| !p.bounds_column(&column))
                .cloned()
                .map(|p| p.requalified(alias))
                .collect(),
            _ => Vec::new(),
        };
        out.push(Bound {
            alias: alias.to_string(),
            column,
            upper_strict: leaves.iter().all(|l| l.strict),
            leaves: leaves.into_iter().map(|l| (l.lower, l.upper)).collect(),
            prunes,
        });
    }
    out
}

fn same_name(table: &TableReference, alias: &str) -> bool {
    table.table().eq_ignore_ascii_case(alias)
}

/// Every scan of `alias` in `plan`, subqueries included.
fn count_scans(plan: &LogicalPlan, alias: &str) -> usize {
    let mut n = 0;
    let _ = plan.apply_with_subqueries(|p| {
        if let LogicalPlan::TableScan(s) = p
            && same_name(&s.table_name, alias)
        {
            n += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    });
    n
}

/// The scan a node stands for if it is a scan under table aliases only, with the qualifier
/// its columns carry above it.
fn leaf_scan(plan: &LogicalPlan) -> Option<(TableReference, TableReference)> {
    match plan {
        LogicalPlan::TableScan(s) => Some((s.table_name.clone(), s.table_name.clone())),
        LogicalPlan::SubqueryAlias(a) => {
            leaf_scan(&a.input).map(|(table, _)| (table, a.alias.clone()))
        }
        _ => None,
    }
}

/// Collect, for each scan reachable through plan inputs, the bound its filters impose
/// (`None` if it has none). `above` are the conjuncts that restrict this node's rows.
fn walk(plan: &LogicalPlan, above: &[&Expr], out: &mut Vec<(TableReference, Option<Leaf>)>) {
    if let Some((table, qualifier)) = leaf_scan(plan) {
        out.push((table, leaf_bound(above, &qualifier)));
        return;
    }
    match plan {
        LogicalPlan::Filter(f) => {
            let mut next: Vec<&Expr> = above.to_vec();
            next.extend(split_conjunction(&f.predicate));
            walk(&f.input, &next, out);
        }
        LogicalPlan::Join(j) if j.join_type == JoinType::Inner => {
            let mut next: Vec<&Expr> = above.to_vec();
            if let Some(f) = &j.filter {
                next.extend(split_conjunction(f));
            }
            walk(&j.left, &next, out);
            walk(&j.right, &next, out);
        }
        other => {
            for input in other.inputs() {
                walk(input, &[], out);
            }
        }
    }
}

fn param_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Placeholder(p) => Some(p.id.trim_start_matches('$').to_string()),
        _ => None,
    }
}

fn column_of<'a>(e: &'a Expr, qualifier: &TableReference) -> Option<&'a Column> {
    match e {
        Expr::Column(c) if c.relation.as_ref() == Some(qualifier) => Some(c),
        _ => None,
    }
}

/// One lower and one upper window-parameter bound on the same column of `qualifier`.
fn leaf_bound(conjuncts: &[&Expr], qualifier: &TableReference) -> Option<Leaf> {
    let mut lowers: Vec<(String, String)> = Vec::new();
    let mut uppers: Vec<(String, String, bool)> = Vec::new();
    for e in conjuncts {
        match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let (c, p, op) = if let (Some(c), Some(p)) =
                    (column_of(left, qualifier), param_name(right))
                {
                    (c, p, *op)
                } else if let (Some(c), Some(p)) = (column_of(right, qualifier), param_name(left)) {
                    let Some(swapped) = op.swap() else { continue };
                    (c, p, swapped)
                } else {
                    continue;
                };
                match op {
                    Operator::Gt | Operator::GtEq => lowers.push((c.name.clone(), p)),
                    Operator::Lt => uppers.push((c.name.clone(), p, true)),
                    Operator::LtEq => uppers.push((c.name.clone(), p, false)),
                    Operator::Eq => {
                        lowers.push((c.name.clone(), p.clone()));
                        uppers.push((c.name.clone(), p, false));
                    }
                    _ => {}
                }
            }
            Expr::Between(b) if !b.negated => {
                if let (Some(c), Some(lo), Some(hi)) = (
                    column_of(&b.expr, qualifier),
                    param_name(&b.low),
                    param_name(&b.high),
                ) {
                    lowers.push((c.name.clone(), lo));
                    uppers.push((c.name.clone(), hi, false));
                }
            }
            _ => {}
        }
    }
    // Any one lower and upper bound of the column bounds the rows (all conjuncts hold).
    lowers.iter().find_map(|(c, lo)| {
        uppers
            .iter()
            .find(|(c2, _, _)| c2 == c)
            .map(|(_, hi, strict)| Leaf {
                column: c.clone(),
                lower: lo.clone(),
                upper: hi.clone(),
                strict: *strict,
                prunes: super::prune::of(conjuncts, qualifier),
            })
    })
}

/// Column types whose order survives a cast to Int64 (so slices can be found by binary search).
pub fn sliceable(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
    )
}

pub fn as_i64(v: &ScalarValue) -> Option<i64> {
    let a = cast(&v.to_array().ok()?, &DataType::Int64).ok()?;
    let a = a.as_any().downcast_ref::<Int64Array>()?;
    (a.len() == 1 && a.is_valid(0)).then(|| a.value(0))
}

/// Every column name referenced by an expression anywhere in `plans` (subqueries included).
/// A superset of what the SQL reads from each source, so planning it against a slice holding
/// only these columns resolves exactly as against the source.
pub fn mentioned_columns(plans: &[&LogicalPlan]) -> HashSet<String> {
    let mut out = HashSet::new();
    for p in plans {
        let _ = p.apply_with_subqueries(|node| {
            for e in node.expressions() {
                for c in e.column_refs() {
                    out.insert(c.name.clone());
                }
            }
            if let LogicalPlan::TableScan(s) = node {
                for f in &s.filters {
                    for c in f.column_refs() {
                        out.insert(c.name.clone());
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::prelude::SessionContext;
    use std::sync::Arc;

    async fn bounds_of(sql: &str) -> Vec<(String, String, Vec<(String, String)>)> {
        let ctx = SessionContext::new();
        let li = Arc::new(Schema::new(vec![
            Field::new("l_orderkey", DataType::Int64, true),
            Field::new("l_shipdate", DataType::Date32, true),
            Field::new("l_commitdate", DataType::Date32, true),
            Field::new("l_quantity", DataType::Float64, true),
        ]));
        let o = Arc::new(Schema::new(vec![
            Field::new("o_orderkey", DataType::Int64, true),
            Field::new("o_orderdate", DataType::Date32, true),
        ]));
        for (name, schema) in [("lineitem", li), ("orders", o)] {
            let t = MemTable::try_new(schema, vec![vec![]]).unwrap();
            ctx.register_table(name, Arc::new(t)).unwrap();
        }
        let df = ctx.sql(sql).await.unwrap();
        analyze(&["lineitem", "orders"], &[df.logical_plan()])
            .into_iter()
            .map(|b| (b.alias, b.column, b.leaves))
            .collect()
    }

    fn leaf(lo: &str, hi: &str) -> (String, String) {
        (lo.to_string(), hi.to_string())
    }

    #[tokio::test]
    async fn a_window_filter_on_one_column_is_shared() {
        let b = bounds_of(
            "SELECT * FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end",
        )
        .await;
        assert_eq!(
            b,
            vec![(
                "lineitem".into(),
                "l_shipdate".into(),
                vec![leaf("window_start", "window_end")]
            )]
        );
        // Aliases, flipped comparisons and BETWEEN are understood.
        let b = bounds_of(
            "SELECT l.l_orderkey FROM lineitem AS l WHERE $window_end > l.l_shipdate AND l.l_quantity > 1 AND $window_start <= l.l_shipdate",
        )
        .await;
        assert_eq!(b[0].2, vec![leaf("window_start", "window_end")]);
        let b = bounds_of(
            "SELECT l_orderkey FROM lineitem WHERE l_shipdate BETWEEN $window_start AND $window_end",
        )
        .await;
        assert_eq!(b[0].1, "l_shipdate");
    }

    #[tokio::test]
    async fn strict_upper_bounds_are_known() {
        let strict = |sql: &'static str| async move {
            let ctx = SessionContext::new();
            let li = Arc::new(Schema::new(vec![
                Field::new("l_orderkey", DataType::Int64, true),
                Field::new("l_shipdate", DataType::Date32, true),
            ]));
            ctx.register_table(
                "lineitem",
                Arc::new(MemTable::try_new(li, vec![vec![]]).unwrap()),
            )
            .unwrap();
            let df = ctx.sql(sql).await.unwrap();
            analyze(&["lineitem"], &[df.logical_plan()])[0].upper_strict
        };
        let q =
            "SELECT * FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end";
        assert!(strict(q).await);
        let q =
            "SELECT * FROM lineitem WHERE $window_end > l_shipdate AND $window_start <= l_shipdate";
        assert!(strict(q).await);
        let q = "SELECT * FROM lineitem WHERE l_shipdate BETWEEN $window_start AND $window_end";
        assert!(!strict(q).await);
        // One reference reaching its upper bound is enough to keep rows equal to it.
        let q = "SELECT a.l_orderkey FROM lineitem a JOIN lineitem b ON a.l_orderkey = b.l_orderkey WHERE a.l_shipdate >= $window_start AND a.l_shipdate < $window_end AND b.l_shipdate >= $window_start AND b.l_shipdate <= $window_end";
        assert!(!strict(q).await);
    }

    #[tokio::test]
    async fn unbounded_or_hidden_references_are_not_shared() {
        // Only a lower bound.
        assert!(
            bounds_of("SELECT * FROM lineitem WHERE l_shipdate >= $window_start")
                .await
                .is_empty()
        );
        // An OR does not bound every row.
        assert!(
            bounds_of("SELECT * FROM lineitem WHERE l_shipdate >= $window_start AND (l_shipdate < $window_end OR l_quantity > 5)")
                .await
                .is_empty()
        );
        // A second, unbounded reference in a subquery expression.
        assert!(
            bounds_of("SELECT * FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end AND l_quantity > (SELECT avg(l_quantity) FROM lineitem)")
                .await
                .is_empty()
        );
        // Bounds on different columns in two references.
        assert!(
            bounds_of("SELECT l_orderkey FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end \
                       UNION ALL SELECT l_orderkey FROM lineitem WHERE l_commitdate >= $window_start AND l_commitdate < $window_end")
                .await
                .is_empty()
        );
        // The filter sits above a LEFT join on the optional side: not a restriction of the scan.
        let b = bounds_of(
            "SELECT o.o_orderkey FROM orders o LEFT JOIN lineitem l ON l.l_orderkey = o.o_orderkey \
             WHERE o.o_orderdate >= $window_start AND o.o_orderdate < $window_end AND l.l_shipdate >= $window_start AND l.l_shipdate < $window_end",
        )
        .await;
        assert!(b.is_empty(), "{b:?}");
    }

    #[tokio::test]
    async fn inner_joins_share_each_bounded_side() {
        let b = bounds_of(
            "SELECT o.o_orderkey, l.l_quantity FROM orders o JOIN lineitem l ON l.l_orderkey = o.o_orderkey \
             WHERE l.l_shipdate >= $window_start AND l.l_shipdate < $window_end",
        )
        .await;
        assert_eq!(
            b,
            vec![(
                "lineitem".into(),
                "l_shipdate".into(),
                vec![leaf("window_start", "window_end")]
            )]
        );
        // Two references with their own bounds: the union of both is kept.
        let b = bounds_of(
            "SELECT l_orderkey FROM lineitem WHERE l_shipdate >= $window_start AND l_shipdate < $window_end \
             UNION ALL SELECT l_orderkey FROM lineitem WHERE l_shipdate >= $window_start_ts AND l_shipdate <= $window_end",
        )
        .await;
        assert_eq!(
            b[0].2,
            vec![
                leaf("window_start", "window_end"),
                leaf("window_start_ts", "window_end")
            ]
        );
    }
}
