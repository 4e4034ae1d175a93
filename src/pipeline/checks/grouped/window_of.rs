//! `window_of(X)`, the scalar function the grouped query groups by: the index of the window
//! each row's `X` falls in, found by binary search over the windows' bounds.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, UInt32Array};
use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use super::NotGroupable;

/// `window_of(X)`: the index of the window `X` falls in (`lo_i <= X < hi_i` in the order of
/// `X`'s type), or NULL. Two with the same type and bounds are the same function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct WindowOf {
    ty: DataType,
    signature: Signature,
    lo: Vec<i64>,
    hi: Vec<i64>,
}

/// Whether `X` of type `ty` can be grouped: dates, timestamps and integers, whose `i64`
/// representation orders them as their type does (a date is its day number, a timestamp its
/// count of units since the epoch, both sides of one type and unit).
pub(super) fn orderable(ty: &DataType) -> bool {
    matches!(
        ty,
        DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
    )
}

/// `a`'s values as `i64` (nulls kept), for a type [`orderable`] accepts.
fn ints(a: &ArrayRef) -> datafusion::error::Result<arrow::array::Int64Array> {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    // A date becomes its day (millisecond) count, a timestamp its raw count of units since
    // the epoch (UTC whatever its zone: no conversion to local time).
    let a = arrow::compute::cast(a, &DataType::Int64)?;
    Ok(a.as_primitive::<Int64Type>().clone())
}

impl WindowOf {
    /// The windows `[lo_i, hi_i)` (ascending, disjoint) of an [`orderable`] type `ty`.
    pub(super) fn new(
        ty: DataType,
        lo: &[ScalarValue],
        hi: &[ScalarValue],
    ) -> std::result::Result<WindowOf, NotGroupable> {
        if !orderable(&ty) {
            return Err(NotGroupable(format!("{ty} is not grouped by window")));
        }
        let values = |v: &[ScalarValue]| -> std::result::Result<Vec<i64>, NotGroupable> {
            let i = ints(&ScalarValue::iter_to_array(v.iter().cloned())?)?;
            if i.null_count() > 0 {
                return Err(NotGroupable("a window bound is NULL".into()));
            }
            Ok(i.values().to_vec())
        };
        let (lo, hi) = (values(lo)?, values(hi)?);
        Ok(WindowOf {
            ty,
            signature: Signature::any(1, Volatility::Immutable),
            lo,
            hi,
        })
    }

    /// Each value's window: the last window whose lower bound is <= it, if it is below that
    /// window's upper bound.
    pub(super) fn index(&self, x: &ArrayRef) -> datafusion::error::Result<UInt32Array> {
        Ok(ints(x)?
            .iter()
            .map(|v| {
                let v = v?;
                let i = self.lo.partition_point(|l| *l <= v).checked_sub(1)?;
                (v < self.hi[i]).then_some(i as u32)
            })
            .collect())
    }
}

impl ScalarUDFImpl for WindowOf {
    fn name(&self) -> &str {
        "idemlake_window_of"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::UInt32)
    }
    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let x = args.args[0].clone().into_array(args.number_rows)?;
        Ok(ColumnarValue::Array(Arc::new(self.index(&x)?)))
    }
}
