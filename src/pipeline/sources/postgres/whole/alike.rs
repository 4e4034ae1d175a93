//! Which plans PostgreSQL computes as the checks' DataFusion route does (see the parent
//! module): the list is short on purpose, and whatever is not on it stays on DataFusion.
//!
//! - nodes: projections, filters, aggregates, aliases, joins, unions, `DISTINCT`, `VALUES`,
//!   and whole tables of one database;
//! - columns whose values the database compares as DataFusion compares what it reads (not
//!   `character(n)`, `uuid`, `json(b)`, enums or floats: see `rows::Column::alike`);
//! - literals of integer, decimal, text, boolean, date and UTC timestamp types (not floats,
//!   which PostgreSQL reads as exact numerics);
//! - `AND`/`OR`/`NOT`, equality, `IS [NOT] NULL`, `IN (…)`, `LIKE`, and ordering
//!   comparisons (`<`, `BETWEEN`) of integers, decimals, dates, timestamps and booleans only
//!   (text is ordered by the database's collation);
//! - casts between dates and timestamps, from an integer to a wider integer or a decimal, and
//!   of a `YYYY-MM-DD` literal to a date (no other text, nor any cast that rounds or formats);
//! - `count`, and `sum`/`min`/`max` of integers and decimals (`min`/`max` of dates and
//!   timestamps too).
//!
//! No arithmetic: an integer expression overflows in the database (an error) where DataFusion
//! wraps.

use std::collections::HashSet;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::{Distinct, Expr, ExprSchemable, LogicalPlan, Operator};

use super::super::snapshot::key;
use super::super::{PgTable, Settings};

/// The database every table of `plan` is in, when the whole plan is one it computes alike.
pub(super) fn database(plan: &LogicalPlan) -> Option<Settings> {
    let mut config: Option<Settings> = None;
    let mut unlike: HashSet<String> = HashSet::new();
    let mut ok = true;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            ok &= table(scan, &mut config, &mut unlike);
        }
        Ok(continue_if(ok))
    });
    let _ = plan.apply_with_subqueries(|node| {
        ok = ok && node_alike(node, &unlike);
        if !ok {
            tracing::debug!(node = %node.display(), "the check's query is not sent whole");
        }
        Ok(continue_if(ok))
    });
    config.filter(|_| ok)
}

fn continue_if(ok: bool) -> TreeNodeRecursion {
    match ok {
        true => TreeNodeRecursion::Continue,
        false => TreeNodeRecursion::Stop,
    }
}

/// Whether `scan` reads a whole table of the database `config` (set by the first), noting
/// the columns the database compares otherwise in `unlike`.
fn table(
    scan: &datafusion::logical_expr::TableScan,
    config: &mut Option<Settings>,
    unlike: &mut HashSet<String>,
) -> bool {
    let Ok(provider) = source_as_provider(&scan.source) else {
        return false;
    };
    let Some(pg) = provider.downcast_ref::<PgTable>() else {
        return false;
    };
    unlike.extend(
        pg.columns
            .iter()
            .filter(|c| !c.alike)
            .map(|c| c.name.clone()),
    );
    let same = match config {
        Some(c) => key(c) == key(&pg.config),
        None => {
            *config = Some(pg.config.clone());
            true
        }
    };
    same && scan.projection.is_none() && scan.fetch.is_none() && scan.filters.is_empty()
}

fn node_alike(node: &LogicalPlan, unlike: &HashSet<String>) -> bool {
    let kind = matches!(
        node,
        LogicalPlan::TableScan(_)
            | LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::Aggregate(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Join(_)
            | LogicalPlan::Union(_)
            | LogicalPlan::Distinct(Distinct::All(_))
            | LogicalPlan::EmptyRelation(_)
            | LogicalPlan::Values(_)
    );
    // The schema the node's expressions are evaluated over.
    let schema: &DFSchema = match (node, node.inputs().first()) {
        (LogicalPlan::Join(_), _) | (_, None) => node.schema(),
        (_, Some(input)) => input.schema(),
    };
    kind && node
        .expressions()
        .iter()
        .all(|e| expr_alike(e, schema, unlike))
}

/// Whether `e` is built only of what both engines compute alike (see the module).
fn expr_alike(e: &Expr, schema: &DFSchema, unlike: &HashSet<String>) -> bool {
    let ty = |e: &Expr| e.get_type(schema).ok();
    let orders = |e: &Expr| ty(e).is_some_and(|t| ordered(&t));
    let mut ok = true;
    let _ = e.apply(|e| {
        ok &= match e {
            Expr::Column(c) => !unlike.contains(&c.name),
            Expr::Literal(v, _) => literal_alike(v),
            Expr::Alias(_)
            | Expr::Not(_)
            | Expr::IsNull(_)
            | Expr::IsNotNull(_)
            | Expr::InList(_)
            | Expr::Like(_) => true,
            // A window's bound, in a plan not bound yet (asked once per task, see `checks`).
            Expr::Placeholder(_) => true,
            Expr::Between(b) => orders(&b.expr) && orders(&b.low) && orders(&b.high),
            Expr::BinaryExpr(b) => {
                use Operator::*;
                match b.op {
                    Eq | NotEq | IsDistinctFrom | IsNotDistinctFrom | And | Or => true,
                    Lt | LtEq | Gt | GtEq => orders(&b.left) && orders(&b.right),
                    _ => false,
                }
            }
            Expr::Cast(c) => {
                iso_date(&c.expr, c.field.data_type())
                    || ty(&c.expr).is_some_and(|from| cast_alike(&from, c.field.data_type()))
            }
            Expr::AggregateFunction(a) => {
                let args = |f: fn(&DataType) -> bool| {
                    a.params.args.iter().all(|e| ty(e).is_some_and(|t| f(&t)))
                };
                let plain = a.params.filter.is_none() && a.params.order_by.is_empty();
                plain
                    && match a.func.name() {
                        "count" => true,
                        "sum" => args(|t| t.is_integer() || is_decimal(t)),
                        "min" | "max" => args(ordered),
                        _ => false,
                    }
            }
            _ => false,
        };
        Ok(continue_if(ok))
    });
    ok
}

fn is_decimal(t: &DataType) -> bool {
    matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
}

/// Types both engines order alike.
fn ordered(t: &DataType) -> bool {
    t.is_integer()
        || is_decimal(t)
        || matches!(
            t,
            DataType::Date32 | DataType::Timestamp(..) | DataType::Boolean
        )
}

fn literal_alike(v: &ScalarValue) -> bool {
    use ScalarValue::*;
    match v {
        TimestampSecond(_, tz)
        | TimestampMillisecond(_, tz)
        | TimestampMicrosecond(_, tz)
        | TimestampNanosecond(_, tz) => tz.as_deref().is_none_or(|z| z == "UTC" || z == "+00:00"),
        Float16(_) | Float32(_) | Float64(_) => false,
        Null | Boolean(_) | Utf8(_) | LargeUtf8(_) | Utf8View(_) | Date32(_) | Decimal128(..)
        | Decimal256(..) => true,
        v => v.data_type().is_integer(),
    }
}

/// `DATE '2026-12-05'`: a date literal written `YYYY-MM-DD`, which both engines read alike
/// (no other text is parsed: a timestamp's offset, for one, PostgreSQL drops).
fn iso_date(e: &Expr, to: &DataType) -> bool {
    let Expr::Literal(ScalarValue::Utf8(Some(s)), _) = e else {
        return false;
    };
    let b = s.as_bytes();
    *to == DataType::Date32
        && b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

/// Casts both engines compute alike: none that rounds, formats or parses.
fn cast_alike(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let width = |t: &DataType| t.primitive_width().unwrap_or(0);
    from == to
        || matches!(
            (from, to),
            (Timestamp(..), Date32) | (Date32, Timestamp(..)) | (Timestamp(..), Timestamp(..))
        )
        || (from.is_integer() && to.is_signed_integer() && width(to) >= width(from))
        || (from.is_integer() && is_decimal(to))
}
