//! Unit tests of `exact`: integer conversions, refusals by value.
use super::*;

fn exact(to: DataType) -> ExactInt {
    ExactInt {
        input: Arc::new(Column::new("v", 0)),
        to,
        name: "v".into(),
        alias: "events".into(),
        origin: Origin::Zone,
    }
}

fn decimals(values: &[Option<&str>]) -> ArrayRef {
    let parsed: Vec<Option<i128>> = values
        .iter()
        .map(|v| {
            v.map(|s| {
                arrow::compute::kernels::cast_utils::parse_decimal::<
                    arrow::datatypes::Decimal128Type,
                >(s, 38, SCALE)
                .unwrap()
            })
        })
        .collect();
    Arc::new(
        Decimal128Array::from(parsed)
            .with_precision_and_scale(38, SCALE)
            .unwrap(),
    )
}

#[test]
fn whole_numbers_of_the_type_convert_and_anything_else_is_refused_by_value() {
    let ok = exact(DataType::Int64)
        .convert(&decimals(&[
            Some("3"),
            Some("3.0"),
            Some("1e2"),
            None,
            Some("-7"),
        ]))
        .unwrap();
    let ok = ok
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .unwrap();
    assert_eq!(
        ok.iter().collect::<Vec<_>>(),
        [Some(3), Some(3), Some(100), None, Some(-7)]
    );
    for (to, value, said) in [
        (
            DataType::Int64,
            "1.5",
            "holds 1.5 in one of the window's files, which is not a whole number",
        ),
        (
            DataType::Int64,
            "9223372036854775808",
            "out of the type's range",
        ),
        (DataType::Int32, "2147483648", "out of the type's range"),
        (DataType::UInt64, "-1", "out of the type's range"),
    ] {
        let err = exact(to.clone())
            .convert(&decimals(&[Some("1"), Some(value)]))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(said) && text.contains("column `v`"),
            "{to} {value}: {text}"
        );
        let DataFusionError::External(e) = err else {
            panic!("{text}")
        };
        let e = e.downcast_ref::<Error>().expect("an idemlake error");
        assert_eq!(e.exit_code(), 2, "{text}");
    }
}
