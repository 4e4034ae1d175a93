use super::output::delta_type;
use super::*;

#[test]
fn delta_types() {
    assert_eq!(delta_type(&DataType::Utf8View).unwrap(), DataType::Utf8);
    assert_eq!(
        delta_type(&DataType::Timestamp(TimeUnit::Nanosecond, None)).unwrap(),
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );
    assert!(delta_type(&DataType::Null).is_err());
}

#[test]
fn parameter_types_are_the_bound_values_types() {
    let tz = jiff::tz::TimeZone::get("Europe/Paris").unwrap();
    for grain in [Grain::Hour, Grain::Day, Grain::Week, Grain::Month] {
        let at = jiff::Timestamp::UNIX_EPOCH.to_zoned(tz.clone());
        let w = Window::containing(grain, &at).unwrap();
        let values: Vec<(String, DataType)> = WindowRange::new(grain, "d", &w)
            .params()
            .into_iter()
            .map(|(k, v)| (k, v.data_type()))
            .collect();
        assert_eq!(values, param_types(grain), "{grain:?}");
    }
}
