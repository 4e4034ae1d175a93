use super::*;
use proptest::prelude::*;

/// The window of `x` by looking at every window (ScalarValue's own order): the oracle.
fn oracle(lo: &[ScalarValue], hi: &[ScalarValue], x: &ScalarValue) -> Option<u32> {
    if x.is_null() {
        return None;
    }
    (0..lo.len())
        .find(|&i| lo[i] <= *x && *x < hi[i])
        .map(|i| i as u32)
}

fn scalar(ty: &DataType, v: Option<i64>) -> ScalarValue {
    match ty {
        DataType::Date32 => ScalarValue::Date32(v.map(|v| v as i32)),
        DataType::Int64 => ScalarValue::Int64(v),
        DataType::Timestamp(_, tz) => ScalarValue::TimestampMicrosecond(v, tz.clone()),
        other => unreachable!("{other}"),
    }
}

proptest! {
    /// A value's window agrees with the oracle, for dates, integers and zoned timestamps, windows with gaps between them,
    /// values before, between and after the windows, and NULLs.
    #[test]
    fn a_values_window_agrees_with_the_oracle(
        starts in proptest::collection::vec((0i64..50, 1i64..50), 1..40),
        xs in proptest::collection::vec(proptest::option::weighted(0.95, -100i64..3000), 1..200),
        kind in 0usize..3,
    ) {
        let ty = [
            DataType::Date32,
            DataType::Int64,
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("Europe/Berlin".into())),
        ][kind].clone();
        let (mut lo, mut hi, mut at) = (Vec::new(), Vec::new(), -20i64);
        for (gap, width) in starts {
            at += gap;
            lo.push(scalar(&ty, Some(at)));
            at += width;
            hi.push(scalar(&ty, Some(at)));
        }
        let x = ScalarValue::iter_to_array(xs.iter().map(|v| scalar(&ty, *v))).unwrap();
        let want: Vec<Option<u32>> = xs.iter().map(|v| oracle(&lo, &hi, &scalar(&ty, *v))).collect();
        let w = WindowOf::new(ty, &lo, &hi).unwrap();
        let got: Vec<Option<u32>> = w.index(&x).unwrap().iter().collect();
        prop_assert_eq!(got, want);
    }
}
