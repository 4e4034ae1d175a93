//! `window_of(X)`, the scalar function the grouped query groups by: the index of the window
//! each row's `X` falls in, found by binary search over the windows' bounds.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, UInt32Array};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use super::NotGroupable;

/// `window_of(X)`: the index of the window `X` falls in (`lo_i <= X < hi_i` in the order of
/// `X`'s type), or NULL.
#[derive(Debug)]
pub(super) struct WindowOf {
    /// What identifies it: its bounds' bytes (two with the same bounds are the same
    /// function).
    identity: Vec<u8>,
    signature: Signature,
    bounds: Bounds,
}

impl PartialEq for WindowOf {
    fn eq(&self, other: &Self) -> bool {
        self.identity == other.identity
    }
}
impl Eq for WindowOf {}
impl std::hash::Hash for WindowOf {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity.hash(state);
    }
}

/// The windows' bounds, in a form `X` compares with.
#[derive(Debug)]
enum Bounds {
    /// Dates, timestamps and integers: their `i64` representation orders them as their type
    /// does (a date is its day number, a timestamp its count of units since the epoch, both
    /// sides of one type and unit). A native comparison per step of the search.
    Ints { lo: Vec<i64>, hi: Vec<i64> },
    /// Any other type: the arrow row format, whose byte order is the type's order.
    Rows {
        converter: Arc<RowConverter>,
        lo: Arc<Rows>,
        hi: Arc<Rows>,
    },
}

/// Types whose values are compared as their `i64` representation.
fn as_ints(ty: &DataType) -> bool {
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

/// `a`'s values as `i64` (nulls kept), for a type [`as_ints`] accepts.
fn ints(a: &ArrayRef) -> datafusion::error::Result<arrow::array::Int64Array> {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    // A date becomes its day (millisecond) count, a timestamp its raw count of units since
    // the epoch (UTC whatever its zone: no conversion to local time).
    let a = arrow::compute::cast(a, &DataType::Int64)?;
    Ok(a.as_primitive::<Int64Type>().clone())
}

impl WindowOf {
    pub(super) fn new(
        ty: DataType,
        lo: &[ScalarValue],
        hi: &[ScalarValue],
    ) -> std::result::Result<WindowOf, NotGroupable> {
        let native = as_ints(&ty) && crate::config::get().accelerate;
        WindowOf::with(ty, lo, hi, native)
    }

    /// `native`: compare as `i64` (for a type [`as_ints`] accepts), else in the row format.
    pub(super) fn with(
        ty: DataType,
        lo: &[ScalarValue],
        hi: &[ScalarValue],
        native: bool,
    ) -> std::result::Result<WindowOf, NotGroupable> {
        let array = |v: &[ScalarValue]| -> std::result::Result<ArrayRef, NotGroupable> {
            Ok(ScalarValue::iter_to_array(v.iter().cloned())?)
        };
        let (lo, hi) = (array(lo)?, array(hi)?);
        let mut identity = ty.to_string().into_bytes();
        let bounds = if native {
            let values = |a: &ArrayRef| -> std::result::Result<Vec<i64>, NotGroupable> {
                let i = ints(a)?;
                if i.null_count() > 0 {
                    return Err(NotGroupable("a window bound is NULL".into()));
                }
                Ok(i.values().to_vec())
            };
            Bounds::Ints {
                lo: values(&lo)?,
                hi: values(&hi)?,
            }
        } else {
            let converter = RowConverter::new(vec![SortField::new(ty)])?;
            let (l, h) = (
                converter.convert_columns(&[lo])?,
                converter.convert_columns(&[hi])?,
            );
            Bounds::Rows {
                converter: Arc::new(converter),
                lo: Arc::new(l),
                hi: Arc::new(h),
            }
        };
        match &bounds {
            Bounds::Ints { lo, hi } => {
                identity.push(0);
                for v in lo.iter().chain(hi) {
                    identity.extend_from_slice(&v.to_le_bytes());
                }
            }
            Bounds::Rows { lo, hi, .. } => {
                identity.push(1);
                for r in lo.iter().chain(hi.iter()) {
                    identity.extend_from_slice(&(r.as_ref().len() as u64).to_le_bytes());
                    identity.extend_from_slice(r.as_ref());
                }
            }
        }
        Ok(WindowOf {
            identity,
            signature: Signature::any(1, Volatility::Immutable),
            bounds,
        })
    }

    pub(super) fn index(&self, x: &ArrayRef) -> datafusion::error::Result<UInt32Array> {
        match &self.bounds {
            Bounds::Ints { lo, hi } => {
                let x = ints(x)?;
                Ok(x.iter()
                    .map(|v| {
                        let v = v?;
                        // The last window whose lower bound is <= v.
                        let i = lo.partition_point(|l| *l <= v).checked_sub(1)?;
                        (v < hi[i]).then_some(i as u32)
                    })
                    .collect())
            }
            Bounds::Rows { converter, lo, hi } => {
                let rows = converter.convert_columns(std::slice::from_ref(x))?;
                Ok((0..x.len())
                    .map(|r| {
                        if x.is_null(r) {
                            return None;
                        }
                        let v = rows.row(r);
                        let (mut a, mut b) = (0, lo.num_rows());
                        while a < b {
                            let m = (a + b) / 2;
                            if lo.row(m) <= v {
                                a = m + 1;
                            } else {
                                b = m;
                            }
                        }
                        let i = a.checked_sub(1)?;
                        (v < hi.row(i)).then_some(i as u32)
                    })
                    .collect())
            }
        }
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
