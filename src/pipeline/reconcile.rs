//! Reconciliation: prove the output agrees with the source before anything is published.
//!
//! Checks compare one-row results column by column (matched by name): `[reconcile].source` run
//! on the pinned sources against `[reconcile].output` run on exactly the rows being written.
//! Numbers compare exactly (integers and decimals without rounding) unless the column has a
//! relative tolerance; other values compare by their SQL text; NULL equals only NULL. The
//! always-on checks are rows produced == rows staged (before the commit) and rows produced ==
//! rows the committed log says the window holds (read back after the commit).

use std::collections::BTreeMap;

use arrow::array::RecordBatch;
use datafusion::common::ScalarValue;

use crate::error::{Error, Result};
pub use crate::report::record::Check;

/// The single row of a reconciliation query, by column name.
fn single_row(what: &str, batches: &[RecordBatch]) -> Result<BTreeMap<String, ScalarValue>> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows != 1 {
        return Err(Error::runtime(format!(
            "[reconcile].{what} must return exactly one row, it returned {rows}; aggregate it (e.g. SELECT count(*) AS rows …)"
        )));
    }
    let b = batches.iter().find(|b| b.num_rows() == 1).expect("one row");
    let mut out = BTreeMap::new();
    for (i, f) in b.schema().fields().iter().enumerate() {
        out.insert(
            f.name().clone(),
            ScalarValue::try_from_array(b.column(i), 0)?,
        );
    }
    Ok(out)
}

/// A number in exact form where possible.
#[derive(Debug, Clone, Copy)]
enum Num {
    /// value × 10^-scale
    Exact(i128, i8),
    Float(f64),
}

impl Num {
    fn of(v: &ScalarValue) -> Option<Num> {
        use ScalarValue::*;
        Some(match v {
            Int8(Some(x)) => Num::Exact(i128::from(*x), 0),
            Int16(Some(x)) => Num::Exact(i128::from(*x), 0),
            Int32(Some(x)) => Num::Exact(i128::from(*x), 0),
            Int64(Some(x)) => Num::Exact(i128::from(*x), 0),
            UInt8(Some(x)) => Num::Exact(i128::from(*x), 0),
            UInt16(Some(x)) => Num::Exact(i128::from(*x), 0),
            UInt32(Some(x)) => Num::Exact(i128::from(*x), 0),
            UInt64(Some(x)) => Num::Exact(i128::from(*x), 0),
            Decimal128(Some(x), _, s) => Num::Exact(*x, *s),
            Float32(Some(x)) => Num::Float(f64::from(*x)),
            Float64(Some(x)) => Num::Float(*x),
            _ => return None,
        })
    }
    fn as_f64(self) -> f64 {
        match self {
            Num::Exact(v, s) => v as f64 / 10f64.powi(i32::from(s)),
            Num::Float(f) => f,
        }
    }
    /// Exact equality; scales are aligned without rounding.
    fn exactly_eq(self, other: Num) -> bool {
        match (self, other) {
            (Num::Exact(a, sa), Num::Exact(b, sb)) => {
                let s = sa.max(sb);
                let up = |v: i128, from: i8| {
                    v.checked_mul(10i128.checked_pow(u32::try_from(s - from).unwrap_or(0))?)
                };
                matches!((up(a, sa), up(b, sb)), (Some(x), Some(y)) if x == y)
            }
            (a, b) => a.as_f64() == b.as_f64(),
        }
    }
}

/// Compare the two queries' single rows.
pub fn compare(
    source: &[RecordBatch],
    output: &[RecordBatch],
    tolerance: &BTreeMap<String, f64>,
) -> Result<Vec<Check>> {
    let s = single_row("source", source)?;
    let o = single_row("output", output)?;
    let mut checks = Vec::new();
    for (name, sv) in &s {
        let ov = o
            .get(name)
            .ok_or_else(|| Error::runtime(format!("[reconcile].output has no column `{name}`")))?;
        let tol = tolerance.get(name).copied();
        let ok = match (sv.is_null(), ov.is_null()) {
            (true, true) => true,
            (true, false) | (false, true) => false,
            (false, false) => match (Num::of(sv), Num::of(ov), tol) {
                (Some(a), Some(b), Some(t)) => {
                    let (a, b) = (a.as_f64(), b.as_f64());
                    (a - b).abs() <= t * a.abs().max(b.abs())
                }
                (Some(a), Some(b), None) => a.exactly_eq(b),
                _ => sv.to_string() == ov.to_string(),
            },
        };
        checks.push(Check {
            check: name.clone(),
            source: sv.to_string(),
            output: ov.to_string(),
            ok,
            tolerance: tol,
            computed: None,
        });
    }
    Ok(checks)
}

/// A one-line description of the failed checks.
pub fn describe_failures(checks: &[Check]) -> String {
    checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: source {} vs output {}", c.check, c.source, c.output))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Float64Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(n: i64, revenue_cents: i128, ratio: f64) -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("rows", DataType::Int64, false),
            Field::new("revenue", DataType::Decimal128(25, 2), true),
            Field::new("ratio", DataType::Float64, true),
        ]));
        vec![
            RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(Int64Array::from(vec![n])),
                    Arc::new(
                        Decimal128Array::from(vec![revenue_cents])
                            .with_precision_and_scale(25, 2)
                            .unwrap(),
                    ),
                    Arc::new(Float64Array::from(vec![ratio])),
                ],
            )
            .unwrap(),
        ]
    }

    #[test]
    fn equal_rows_pass_and_differences_fail() {
        let none = BTreeMap::new();
        let c = compare(&batch(10, 12345, 0.5), &batch(10, 12345, 0.5), &none).unwrap();
        assert!(c.iter().all(|c| c.ok), "{c:?}");
        let c = compare(&batch(10, 12345, 0.5), &batch(11, 12345, 0.5), &none).unwrap();
        assert_eq!(describe_failures(&c), "rows: source 10 vs output 11");
        // A one-cent difference in a decimal is caught exactly.
        let c = compare(&batch(10, 12345, 0.5), &batch(10, 12346, 0.5), &none).unwrap();
        assert!(!c.iter().find(|c| c.check == "revenue").unwrap().ok);
    }

    #[test]
    fn tolerance_is_relative() {
        let tol = BTreeMap::from([("ratio".to_string(), 1e-6)]);
        let c = compare(&batch(1, 1, 1.0), &batch(1, 1, 1.0 + 1e-9), &tol).unwrap();
        assert!(c.iter().all(|c| c.ok));
        let c = compare(&batch(1, 1, 1.0), &batch(1, 1, 1.001), &tol).unwrap();
        assert!(!c.iter().all(|c| c.ok));
    }

    #[test]
    fn queries_must_return_one_row() {
        let mut two = batch(1, 1, 1.0);
        two.extend(batch(1, 1, 1.0));
        assert!(compare(&two, &batch(1, 1, 1.0), &BTreeMap::new()).is_err());
    }
}
