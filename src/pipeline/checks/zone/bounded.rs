//! The values of a DATE or BIGINT partition level that a scan's filters bound on both sides.

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};

use super::MAX_PRUNED_SCANS;

/// Every value of column `name` (of type `ty`) between the tightest lower and upper bounds
/// that `filters` (conjunctions of comparisons with literals, `BETWEEN`, `=`) impose; `None`
/// without both bounds, for another type, or above [`MAX_PRUNED_SCANS`] values. A superset is
/// fine: the caller keeps only the values every filter accepts.
pub fn values(filters: &[Expr], name: &str, ty: &DataType) -> Option<Vec<ScalarValue>> {
    if !matches!(ty, DataType::Date32 | DataType::Int64) {
        return None;
    }
    let mut lo: Option<i64> = None;
    let mut hi: Option<i64> = None;
    let mut bound = |op: Operator, v: i64| match op {
        Operator::GtEq => lo = Some(lo.map_or(v, |l| l.max(v))),
        Operator::Gt => lo = Some(lo.map_or(v + 1, |l| l.max(v + 1))),
        Operator::LtEq => hi = Some(hi.map_or(v, |h| h.min(v))),
        Operator::Lt => hi = Some(hi.map_or(v - 1, |h| h.min(v - 1))),
        Operator::Eq => {
            lo = Some(lo.map_or(v, |l| l.max(v)));
            hi = Some(hi.map_or(v, |h| h.min(v)));
        }
        _ => {}
    };
    for f in filters.iter().flat_map(split_conjunction) {
        match f {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                let (op, v) = match (left.as_ref(), right.as_ref()) {
                    (Expr::Column(c), Expr::Literal(v, _)) if c.name == name => (*op, v),
                    (Expr::Literal(v, _), Expr::Column(c)) if c.name == name => match op.swap() {
                        Some(op) => (op, v),
                        None => continue,
                    },
                    _ => continue,
                };
                if let Some(v) = integer(v, ty) {
                    bound(op, v);
                }
            }
            Expr::Between(Between {
                expr,
                negated: false,
                low,
                high,
            }) => {
                let (Expr::Column(c), Expr::Literal(l, _), Expr::Literal(h, _)) =
                    (expr.as_ref(), low.as_ref(), high.as_ref())
                else {
                    continue;
                };
                if c.name != name {
                    continue;
                }
                if let (Some(l), Some(h)) = (integer(l, ty), integer(h, ty)) {
                    bound(Operator::GtEq, l);
                    bound(Operator::LtEq, h);
                }
            }
            _ => {}
        }
    }
    let (lo, hi) = (lo?, hi?);
    if hi < lo {
        return Some(Vec::new());
    }
    if hi - lo >= MAX_PRUNED_SCANS as i64 {
        return None;
    }
    Some(
        (lo..=hi)
            .map(|v| match ty {
                DataType::Date32 => ScalarValue::Date32(Some(v as i32)),
                _ => ScalarValue::Int64(Some(v)),
            })
            .collect(),
    )
}

/// A literal as the column's integer domain (days for a DATE), if it casts to the type.
fn integer(v: &ScalarValue, ty: &DataType) -> Option<i64> {
    match v.cast_to(ty).ok()? {
        ScalarValue::Date32(Some(d)) => Some(d as i64),
        ScalarValue::Int64(Some(n)) => Some(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::logical_expr::{col, lit};

    use super::*;

    fn date(s: &str) -> ScalarValue {
        ScalarValue::try_from_string(s.to_string(), &DataType::Date32).unwrap()
    }

    #[test]
    fn a_windows_range_names_its_days() {
        let f = [col("dt")
            .gt_eq(lit(date("2026-11-28")))
            .and(col("dt").lt(lit(date("2026-11-30"))))];
        assert_eq!(
            values(&f, "dt", &DataType::Date32),
            Some(vec![date("2026-11-28"), date("2026-11-29")])
        );
        // Reversed comparisons, BETWEEN, and the tightest of several bounds.
        let f = [
            lit(date("2026-11-27")).lt(col("dt")),
            col("dt").between(lit(date("2026-11-01")), lit(date("2026-11-28"))),
        ];
        assert_eq!(
            values(&f, "dt", &DataType::Date32),
            Some(vec![date("2026-11-28")])
        );
        let f = [col("n").eq(lit(7i64))];
        assert_eq!(
            values(&f, "n", &DataType::Int64),
            Some(vec![ScalarValue::Int64(Some(7))])
        );
        let f = [col("n").gt(lit(7i64)), col("n").lt(lit(7i64))];
        assert_eq!(values(&f, "n", &DataType::Int64), Some(vec![]));
    }

    #[test]
    fn without_two_bounds_or_with_too_many_values_there_is_no_answer() {
        let one_side = [col("dt").gt_eq(lit(date("2026-11-28")))];
        assert_eq!(values(&one_side, "dt", &DataType::Date32), None);
        let year = [
            col("dt").gt_eq(lit(date("2026-01-01"))),
            col("dt").lt(lit(date("2027-01-01"))),
        ];
        assert_eq!(values(&year, "dt", &DataType::Date32), None);
        let text = [col("s").eq(lit("a"))];
        assert_eq!(values(&text, "s", &DataType::Utf8), None);
        let other = [col("x").eq(lit(1i64)), col("n").lt(lit(3i64))];
        assert_eq!(values(&other, "n", &DataType::Int64), None);
        // A disjunction bounds nothing here (DataFusion's filter decides per directory).
        let or = [col("n").eq(lit(1i64)).or(col("n").eq(lit(2i64)))];
        assert_eq!(values(&or, "n", &DataType::Int64), None);
    }
}
