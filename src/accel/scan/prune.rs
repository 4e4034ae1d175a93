//! The filters a shared scan keeps besides its slicing column: every conjunct of a source's
//! reference that names that source's columns alone, so a chunk's scan prunes as each of its
//! windows would (a landing zone's `dt` directories, whatever order the task writes its
//! conjuncts in, `year`/`month`/`day` levels, `make_date(…)`, casts, a widened time-zone
//! bound, a constant filter on another partition column).
//!
//! Why a chunk's rows stay a superset of each window's: a row a window reaches satisfies every
//! conjunct above that reference with the window's parameters bound. A conjunct without
//! parameters ([`Prune::Always`]) is kept as it is. A conjunct `E op P` ([`Prune::Bounded`]),
//! `E` over the source's columns and `P` over window parameters alone, holds for the row and
//! some window `w` of the chunk, so `E >= least(P(w) …)` (for `>`/`>=`), `E <= greatest(P(w)
//! …)` (for `<`/`<=`), or both (for `=`) hold too. Each window's query applies all its
//! filters again on its slice. Only sources read through one reference keep these filters
//! (with several, a conjunct of one reference need not hold for the rows of another).

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, TableReference};
use datafusion::functions::core::expr_fn::{greatest, least};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, lit};

use crate::task::range::WindowRange;

/// One conjunct a chunk's scan of a source keeps (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub enum Prune {
    /// A conjunct without window parameters.
    Always(Expr),
    /// `expr op by`: `by` holds window parameters and no column.
    Bounded { expr: Expr, op: Operator, by: Expr },
}

/// The conjuncts of `conjuncts` a chunk's scan of the reference `qualifier` may keep.
pub fn of(conjuncts: &[&Expr], qualifier: &TableReference) -> Vec<Prune> {
    let mut out = Vec::new();
    for e in conjuncts {
        if own_columns_only(e, qualifier) && !has_placeholder(e) {
            out.push(Prune::Always((*e).clone()));
            continue;
        }
        match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                if let Some(p) = bounded(left, *op, right, qualifier) {
                    out.push(p);
                } else if let Some(op) = op.swap()
                    && let Some(p) = bounded(right, op, left, qualifier)
                {
                    out.push(p);
                }
            }
            Expr::Between(b) if !b.negated => {
                for (op, by) in [(Operator::GtEq, &b.low), (Operator::LtEq, &b.high)] {
                    out.extend(bounded(&b.expr, op, by, qualifier));
                }
            }
            _ => {}
        }
    }
    out
}

/// `expr op by` as a [`Prune::Bounded`], when `expr` names this reference's columns alone and
/// `by` window parameters alone.
fn bounded(expr: &Expr, op: Operator, by: &Expr, qualifier: &TableReference) -> Option<Prune> {
    let usable = matches!(
        op,
        Operator::Gt | Operator::GtEq | Operator::Lt | Operator::LtEq | Operator::Eq
    );
    let source_side = own_columns_only(expr, qualifier) && !has_placeholder(expr);
    let window_side = has_placeholder(by) && by.column_refs().is_empty() && plain(by);
    (usable && source_side && window_side).then(|| Prune::Bounded {
        expr: expr.clone(),
        op,
        by: by.clone(),
    })
}

/// Whether `e` names at least one column, all of `qualifier`, and nothing volatile or nested.
fn own_columns_only(e: &Expr, qualifier: &TableReference) -> bool {
    let columns = e.column_refs();
    !columns.is_empty()
        && columns
            .iter()
            .all(|c| c.relation.as_ref() == Some(qualifier))
        && plain(e)
}

/// No subquery, no volatile function, no aggregate or window function.
fn plain(e: &Expr) -> bool {
    let mut ok = true;
    let _ = e.apply(|e| {
        ok &= !matches!(
            e,
            Expr::ScalarSubquery(_)
                | Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::AggregateFunction(_)
                | Expr::WindowFunction(_)
                | Expr::OuterReferenceColumn(..)
        ) && !matches!(e, Expr::ScalarFunction(f) if f.func.signature().volatility != datafusion::logical_expr::Volatility::Immutable);
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok
}

fn has_placeholder(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.apply(|e| {
        found |= matches!(e, Expr::Placeholder(_));
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

impl Prune {
    /// Whether this is a bound of the bare column `column` by window parameters.
    pub fn bounds_column(&self, column: &str) -> bool {
        matches!(self, Prune::Bounded { expr: Expr::Column(c), .. } if c.name == column)
    }

    /// The same conjunct with this reference's columns named as `alias`'s (the chunk scan's
    /// table).
    pub fn requalified(self, alias: &str) -> Prune {
        let q = |e: Expr| {
            e.transform(|e| {
                Ok(match e {
                    Expr::Column(c) => {
                        Transformed::yes(Expr::Column(Column::new(Some(alias), c.name)))
                    }
                    other => Transformed::no(other),
                })
            })
            .map(|t| t.data)
            .expect("renaming columns cannot fail")
        };
        match self {
            Prune::Always(e) => Prune::Always(q(e)),
            Prune::Bounded { expr, op, by } => Prune::Bounded {
                expr: q(expr),
                op,
                by,
            },
        }
    }

    /// The filters a scan serving the windows of `ranges` keeps for this conjunct (`None`
    /// when a window does not bind one of its parameters).
    pub fn filters(&self, ranges: &[WindowRange]) -> Option<Vec<Expr>> {
        let (expr, op, by) = match self {
            Prune::Always(e) => return Some(vec![e.clone()]),
            Prune::Bounded { expr, op, by } => (expr, *op, by),
        };
        let bound: Vec<Expr> = ranges.iter().map(|r| bind(by, r)).collect::<Option<_>>()?;
        if bound.is_empty() {
            return None;
        }
        let low = || expr.clone().gt_eq(least(bound.clone()));
        let high = || expr.clone().lt_eq(greatest(bound.clone()));
        Some(match op {
            Operator::Gt | Operator::GtEq => vec![low()],
            Operator::Lt | Operator::LtEq => vec![high()],
            _ => vec![low(), high()],
        })
    }
}

/// `e` with its window parameters bound to `range`'s values.
fn bind(e: &Expr, range: &WindowRange) -> Option<Expr> {
    let mut missing = false;
    let bound = e
        .clone()
        .transform(|e| {
            Ok(match e {
                Expr::Placeholder(p) => match range.param(p.id.trim_start_matches('$')) {
                    Some(v) => Transformed::yes(lit(v)),
                    None => {
                        missing = true;
                        Transformed::no(Expr::Placeholder(p))
                    }
                },
                other => Transformed::no(other),
            })
        })
        .ok()?
        .data;
    (!missing).then_some(bound)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::datasource::MemTable;
    use datafusion::prelude::SessionContext;

    /// The landing task's source bounds, its conjuncts in the order `sql` writes them.
    async fn bounds_of(sql: &str) -> Vec<super::super::bounds::Bound> {
        let ctx = SessionContext::new();
        let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let schema = Arc::new(Schema::new(vec![
            Field::new("ts", ts, true),
            Field::new("v", DataType::Int64, true),
            Field::new("dt", DataType::Date32, false),
            Field::new("year", DataType::Int64, false),
            Field::new("month", DataType::Int64, false),
            Field::new("day", DataType::Int64, false),
            Field::new("city", DataType::Utf8, false),
        ]));
        let t = MemTable::try_new(schema, vec![vec![]]).unwrap();
        ctx.register_table("events", Arc::new(t)).unwrap();
        let df = ctx.sql(sql).await.unwrap();
        super::super::bounds::analyze(&["events"], &[df.logical_plan()])
    }

    fn shown(b: &super::super::bounds::Bound) -> Vec<String> {
        b.prunes.iter().map(|p| format!("{p:?}")).collect()
    }

    /// Regression (shared scans kept one bound column and dropped every other filter on the
    /// source): with `ts` first, the `dt` bounds are kept beside it; so are `make_date` of
    /// three levels, a cast, a widened bound and a constant filter on another column.
    #[tokio::test]
    async fn every_filter_on_the_sources_own_columns_is_kept_in_any_order() {
        let b = bounds_of(
            "SELECT * FROM events WHERE ts >= $window_start_ts AND ts < $window_end_ts \
             AND dt >= $window_start AND dt < $window_end",
        )
        .await;
        assert_eq!(b[0].column, "ts");
        let p = shown(&b[0]);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p.iter().all(|p| p.contains("name: \"dt\"")), "{p:?}");
        let b = bounds_of(
            "SELECT * FROM events e WHERE e.ts >= $window_start_ts AND e.ts < $window_end_ts \
             AND make_date(e.year, e.month, e.day) >= $window_start \
             AND CAST(e.dt AS VARCHAR) < CAST($window_end + INTERVAL '1 day' AS VARCHAR) \
             AND e.city = 'Paris' AND e.v > e.year",
        )
        .await;
        let p = shown(&b[0]);
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p[0].contains("make_date"), "{p:?}");
        assert!(p[1].starts_with("Bounded { expr: Cast"), "{p:?}");
        assert!(
            p[2].starts_with("Always") && p[2].contains("Paris"),
            "{p:?}"
        );
        assert!(p[3].starts_with("Always"), "{p:?}");
        // Requalified as the source's own table, whatever the task's alias.
        assert!(p.iter().all(|p| !p.contains("\"e\"")), "{p:?}");
    }

    /// Filters that do not restrict the source's own rows alone are not kept: a volatile
    /// function, a parameter mixed with a column on one side.
    #[tokio::test]
    async fn filters_that_do_not_bound_the_source_alone_are_left_out() {
        let b = bounds_of(
            "SELECT * FROM events WHERE ts >= $window_start_ts AND ts < $window_end_ts \
             AND random() < 0.5 AND dt + 1 >= $window_start + v",
        )
        .await;
        assert_eq!(shown(&b[0]), Vec::<String>::new());
    }

    /// Over many windows a bound keeps every row any of them reaches: the least of the lower
    /// bounds, the greatest of the upper ones.
    #[test]
    fn a_bound_over_many_windows_spans_all_of_them() {
        use crate::task::range::WindowRange;
        use crate::task::window::{Grain, Window};
        use datafusion::logical_expr::expr::Placeholder;
        use datafusion::logical_expr::{Expr, Operator, col};
        let windows: Vec<Window> = ["2026-11-02", "2026-11-01", "2026-11-05"]
            .iter()
            .map(|d| Window::parse(d, Grain::Day, &jiff::tz::TimeZone::UTC).unwrap())
            .collect();
        let ranges: Vec<WindowRange> = windows
            .iter()
            .map(|w| WindowRange::new(Grain::Day, "dt", w))
            .collect();
        let by = Expr::Placeholder(Placeholder::new_with_field("$window_end".into(), None));
        let p = super::Prune::Bounded {
            expr: col("dt"),
            op: Operator::Lt,
            by,
        };
        let f = p.filters(&ranges).unwrap();
        assert_eq!(f.len(), 1);
        let shown = f[0].to_string();
        assert!(shown.contains("greatest"), "{shown}");
        for d in ["2026-11-02", "2026-11-03", "2026-11-06"] {
            assert!(shown.contains(d), "{shown}");
        }
    }
}
