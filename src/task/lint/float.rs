//! Rule `float_aggregate`: an aggregate that adds floating-point values (`sum` and `avg` of a
//! float, `stddev`, `var`, `covar`, `corr`, `regr_*` of anything: DataFusion computes those in
//! floating point; as an aggregate or a window function) gives results whose last digits depend
//! on the order the values are added, and that order differs between a run of a window and
//! the same window in a backfill (another partitioning of the same rows), so a re-run would
//! not publish the same rows. Refused unless allowed; aggregating a DECIMAL is exact. An
//! integer argument (`avg` of a `BIGINT`) is not refused: its partial sums are exact below
//! 2^53.

use datafusion::common::DFSchema;
use datafusion::logical_expr::expr::WindowFunctionDefinition;
use datafusion::logical_expr::{Expr, ExprSchemable};

use super::order::OrderFinding;

/// Aggregates that add their arguments: order-dependent for a floating-point argument only
/// (integer partial sums are exact below 2^53, decimal ones always).
const ADDING: [&str; 3] = ["sum", "avg", "mean"];

/// Aggregates DataFusion 55 computes in floating point whatever their argument's type
/// (incremental means and divisions): order-dependent always.
const FLOATING: [&str; 16] = [
    "stddev",
    "stddev_pop",
    "var",
    "var_pop",
    "var_samp",
    "covar",
    "covar_samp",
    "covar_pop",
    "corr",
    "regr_slope",
    "regr_intercept",
    "regr_r2",
    "regr_avgx",
    "regr_avgy",
    "regr_sxx",
    "regr_sxy",
];

/// The finding for `e` (an aggregate or window function over `schema`'s rows) if it adds
/// floating-point values.
pub fn float_finding(e: &Expr, schema: &DFSchema) -> Option<OrderFinding> {
    let (name, args) = match e {
        Expr::AggregateFunction(f) => (f.func.name(), &f.params.args),
        Expr::WindowFunction(w) => match &w.fun {
            WindowFunctionDefinition::AggregateUDF(udf) => (udf.name(), &w.params.args),
            _ => return None,
        },
        _ => return None,
    };
    let name = name.to_ascii_lowercase();
    let float = match (
        ADDING.contains(&name.as_str()),
        FLOATING.contains(&name.as_str()),
    ) {
        (true, _) => args
            .iter()
            .find(|a| a.get_type(schema).is_ok_and(|t| t.is_floating()))?,
        (false, true) => args.first()?,
        (false, false) => return None,
    };
    Some(OrderFinding {
        rule: "float_aggregate",
        word: name.clone(),
        message: format!(
            "{name}({float}) adds floating-point values, and the last digits of its result depend on the order they are added, which differs between a run of a window and the same window in a backfill: re-runs would not publish the same rows; sum a DECIMAL instead (e.g. sum(CAST(… AS DECIMAL(38, 9))); a variance or correlation from exact sums of DECIMALs)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use crate::task::lint::tests::rules_of;

    /// Regression (a task summing DOUBLEs published other last digits from `backfill` than
    /// from `run` of the same window, so a re-run changed the table): adding aggregates of
    /// floating-point values are refused, aggregates of integers and decimals are not.
    #[tokio::test]
    async fn aggregates_adding_floating_point_values_are_refused() {
        let float = |w: &str| vec![("float_aggregate", w.to_string())];
        for (sql, want) in [
            (
                "SELECT d, sum(CAST(x AS DOUBLE)) AS s FROM t GROUP BY d",
                float("sum"),
            ),
            (
                "SELECT d, avg(CAST(x AS FLOAT)) AS a FROM t GROUP BY d",
                float("avg"),
            ),
            (
                "SELECT d, stddev(CAST(x AS DOUBLE)) AS a FROM t GROUP BY d",
                float("stddev"),
            ),
            (
                "SELECT d, x, sum(CAST(x AS DOUBLE)) OVER (PARTITION BY d) AS s FROM t",
                float("sum"),
            ),
            (
                "SELECT d, sum(x) AS s, avg(x) AS a FROM t GROUP BY d",
                vec![],
            ),
            (
                "SELECT d, sum(CAST(x AS DECIMAL(20, 2))) AS s FROM t GROUP BY d",
                vec![],
            ),
            (
                "SELECT d, max(CAST(x AS DOUBLE)) AS m FROM t GROUP BY d",
                vec![],
            ),
            (
                "SELECT d, stddev(x) AS s FROM t GROUP BY d",
                float("stddev"),
            ),
            ("SELECT d, corr(x, x) AS c FROM t GROUP BY d", float("corr")),
        ] {
            assert_eq!(rules_of(sql).await, want, "{sql}");
        }
    }
}
