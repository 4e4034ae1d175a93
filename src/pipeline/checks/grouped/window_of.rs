//! `window_of(X)`, the function the grouped query tags each row with: the index of the
//! window its `X` falls in, by binary search over the windows' bounds.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
use arrow::datatypes::{DataType, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use super::{Grouping, NotGroupable};

/// `window_of(X)`: the index of the window `X` falls in (`lo_i <= X < hi_i`), or NULL, found
/// by binary search. Two with the same bounds are the same function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct WindowOf {
    signature: Signature,
    lo: Vec<i64>,
    hi: Vec<i64>,
}

/// Whether values of `ty` are ordered as their `i64` representation is: dates (days or
/// milliseconds), timestamps (units since the epoch, whatever the zone) and integers.
pub(super) fn orderable(ty: &DataType) -> bool {
    use DataType::*;
    matches!(
        ty,
        Date32 | Date64 | Timestamp(_, _) | Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32
    )
}

fn ints(a: &ArrayRef) -> datafusion::error::Result<arrow::array::Int64Array> {
    Ok(arrow::compute::cast(a, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

impl WindowOf {
    /// The windows `[lo_i, hi_i)` of an [`orderable`] type: an error unless they are disjoint
    /// and ascending.
    pub(super) fn new(ty: DataType, lo: &[ScalarValue], hi: &[ScalarValue]) -> Grouping<WindowOf> {
        let values = |v: &[ScalarValue]| -> Grouping<Vec<i64>> {
            let i = ints(&ScalarValue::iter_to_array(v.iter().cloned())?)?;
            match i.null_count() {
                0 => Ok(i.values().to_vec()),
                _ => Err(NotGroupable("a window bound is NULL".into())),
            }
        };
        let (lo, hi) = (values(lo)?, values(hi)?);
        let ascending =
            (0..lo.len()).all(|i| lo[i] < hi[i] && lo.get(i + 1).is_none_or(|next| hi[i] <= *next));
        if !orderable(&ty) || !ascending {
            return Err(NotGroupable(format!(
                "the windows are not disjoint and ascending as {ty}"
            )));
        }
        Ok(WindowOf {
            signature: Signature::any(1, Volatility::Immutable),
            lo,
            hi,
        })
    }

    /// Each value's window: the last window starting at or below it, if it ends above it.
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
