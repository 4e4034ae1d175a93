//! The options of a directory source read as a landing zone: `partitioning` and
//! `partition_columns`, `schema_from`, `on_missing`, `arrival` with `arrival_timezone` and
//! `lateness`.

use super::RawSource;
use crate::error::Result;
use crate::task::checks::Severity;
use crate::task::spec::{
    Fail, Format, OnMissing, PartitionColumn, PartitionKind, Partitioning, SchemaFrom,
    is_identifier,
};

/// `arrival = "dt"` or `arrival = ["year", "month", "day"]`.
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
pub(super) enum Columns {
    One(String),
    Many(Vec<String>),
}

/// The `arrival`, `arrival_timezone` and `lateness` options, validated (see
/// `task::arrival`): not for a Delta source; the time zone one jiff knows.
pub(super) fn parse_arrival(
    s: &RawSource,
    format: Format,
    field: &str,
    fail: &Fail<'_>,
) -> Result<Option<crate::task::arrival::Arrival>> {
    let Some(columns) = &s.arrival else {
        if s.lateness.is_some()
            || s.arrival_timezone.is_some()
            || s.event_time.is_some()
            || s.on_late.is_some()
        {
            return Err(fail(
                field,
                "`lateness`, `arrival_timezone`, `event_time` and `on_late` need `arrival`: the partition column(s) giving a file's arrival day, e.g. arrival = \"dt\"".into(),
            ));
        }
        return Ok(None);
    };
    let key = format!("{field}.arrival");
    if !format.reads_files() {
        return Err(fail(
            &key,
            "applies to directory sources (landing zones), not to a table".into(),
        ));
    }
    let columns = match columns {
        Columns::One(c) => vec![c.trim().to_string()],
        Columns::Many(cs) => cs.iter().map(|c| c.trim().to_string()).collect(),
    };
    if !matches!(columns.len(), 1 | 3 | 4) || columns.iter().any(|c| !is_identifier(c)) {
        return Err(fail(
            &key,
            "names one date partition column (\"dt\"), a year, a month and a day column ([\"year\", \"month\", \"day\"]), or those and an hour column ([\"year\", \"month\", \"day\", \"hour\"])".into(),
        ));
    }
    let timezone = s
        .arrival_timezone
        .as_deref()
        .unwrap_or("UTC")
        .trim()
        .to_string();
    if jiff::tz::TimeZone::get(&timezone).is_err() {
        return Err(fail(
            &format!("{field}.arrival_timezone"),
            format!("`{timezone}` is not an IANA time zone (e.g. \"UTC\", \"America/New_York\")"),
        ));
    }
    let lateness_us = match &s.lateness {
        None => 0,
        Some(text) => crate::task::arrival::Arrival::lateness(text)
            .map_err(|e| fail(&format!("{field}.lateness"), e))?,
    };
    let (event_time, on_late) = parse_on_late(s, field, fail)?;
    Ok(Some(crate::task::arrival::Arrival {
        columns,
        timezone,
        lateness_us,
        event_time,
        on_late,
    }))
}

/// `event_time` (a column name) and `on_late` (`warn`, the default, or `fail`, which needs
/// `event_time`).
fn parse_on_late(
    s: &RawSource,
    field: &str,
    fail: &Fail<'_>,
) -> Result<(Option<String>, Severity)> {
    let event_time = s.event_time.as_deref().map(str::trim).map(str::to_string);
    if event_time.as_deref().is_some_and(|c| !is_identifier(c)) {
        return Err(fail(
            &format!("{field}.event_time"),
            "names the column holding each row's event time, e.g. \"ts\"".into(),
        ));
    }
    let on_late = match s.on_late.as_deref().map(str::trim) {
        None | Some("warn") => Severity::Warn,
        Some("fail") => Severity::Error,
        Some(other) => {
            return Err(fail(
                &format!("{field}.on_late"),
                format!(
                    "is `{other}`: use \"warn\" (publish and report rows no window reaches) or \"fail\" (publish nothing)"
                ),
            ));
        }
    };
    if s.on_late.is_some() && event_time.is_none() {
        return Err(fail(
            &format!("{field}.on_late"),
            "needs `event_time`, the column rows are placed in windows by".into(),
        ));
    }
    Ok((event_time, on_late))
}

/// The `on_missing` option, validated: `retry` (default) or `empty`, not for a Delta source.
pub(super) fn parse_on_missing(
    s: &RawSource,
    format: Format,
    field: &str,
    fail: &Fail<'_>,
) -> Result<OnMissing> {
    let field = format!("{field}.on_missing");
    match s.on_missing.as_deref().map(str::trim) {
        None => Ok(OnMissing::Retry),
        Some(_) if !format.reads_files() => Err(fail(
            &field,
            "applies to directory sources (landing zones), not to a table".into(),
        )),
        Some("retry") => Ok(OnMissing::Retry),
        Some("empty") => Ok(OnMissing::Empty),
        Some(other) => Err(fail(
            &field,
            format!(
                "is `{other}`: use \"retry\" (a window whose directories have not landed fails, retryable) or \"empty\" (it is a window with no rows)"
            ),
        )),
    }
}

/// The `schema_from` option, validated: `first` (default) or `last`, not for a Delta source.
pub(super) fn parse_schema_from(
    s: &RawSource,
    format: Format,
    field: &str,
    fail: &Fail<'_>,
) -> Result<SchemaFrom> {
    let field = format!("{field}.schema_from");
    match s.schema_from.as_deref().map(str::trim) {
        None | Some("first") => Ok(SchemaFrom::First),
        Some("last") if !format.reads_files() => Err(fail(
            &field,
            "a table's columns come from the table".into(),
        )),
        // Every CSV file of a zone must carry the zone's header (`landing::headers`): older
        // files without a column added later would all be refused.
        Some("last") if format == Format::Csv => Err(fail(
            &field,
            "a CSV zone's files must all carry one header (they are read by position), so its columns cannot come from its last file".into(),
        )),
        Some("last") => Ok(SchemaFrom::Last),
        Some(other) => Err(fail(
            &field,
            format!(
                "must be first or last (the file, in path order, a landing zone's columns come from), not `{other}`"
            ),
        )),
    }
}

/// Refuses an alias that is not a plain SQL identifier, or the reserved `output`.
/// The `partitioning` and `partition_columns` options, validated: columns imply `hive`, and
/// each is `name TYPE` with a plain identifier and a type idemlake reads directories as.
pub(super) fn parse_partitioning(
    s: &RawSource,
    format: Format,
    field: &str,
    fail: &Fail<'_>,
) -> Result<Partitioning> {
    let mode = s.partitioning.as_deref().map(str::trim);
    if !format.reads_files() {
        if mode.is_some() || s.partition_columns.is_some() {
            return Err(fail(
                field,
                "a table's partitions are its own: no partitioning options".into(),
            ));
        }
        return Ok(Partitioning::None);
    }
    let columns = match &s.partition_columns {
        None => None,
        Some(list) => Some(partition_columns(list, field, fail)?),
    };
    match (mode, columns) {
        (None | Some("auto"), None) => Ok(Partitioning::Auto),
        (Some("none"), None) => Ok(Partitioning::None),
        (Some("hive"), None) => Ok(Partitioning::Hive(Vec::new())),
        (None | Some("hive"), Some(cols)) => Ok(Partitioning::Hive(cols)),
        (Some("directories"), Some(cols)) => Ok(Partitioning::Directories(cols)),
        (Some("directories"), None) => Err(fail(
            &format!("{field}.partitioning"),
            "\"directories\" reads each directory level as a column named by partition_columns, in order: e.g. partition_columns = [\"year INT\", \"month INT\", \"day INT\", \"hour INT\"] for YYYY/MM/DD/HH/".into(),
        )),
        (Some("none" | "auto"), Some(_)) => Err(fail(
            &format!("{field}.partition_columns"),
            "declares partition columns: set partitioning = \"hive\" (key=value directories, or leave it out) or \"directories\" (YYYY/MM/DD/ levels without names)".into(),
        )),
        (Some(other), _) => Err(fail(
            &format!("{field}.partitioning"),
            format!("must be auto, hive, directories or none, got `{other}`"),
        )),
    }
}

/// `partition_columns = ["dt DATE", "hour BIGINT"]`, validated.
pub(super) fn partition_columns(
    list: &[String],
    field: &str,
    fail: &Fail<'_>,
) -> Result<Vec<PartitionColumn>> {
    let key = format!("{field}.partition_columns");
    if list.is_empty() {
        return Err(fail(
            &key,
            "is empty: name at least one column, e.g. [\"dt DATE\"]".into(),
        ));
    }
    let mut out: Vec<PartitionColumn> = Vec::new();
    for item in list {
        let mut parts = item.split_whitespace();
        let (Some(name), Some(ty), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(fail(
                &key,
                format!("`{item}` must be a column name and a type, e.g. \"dt DATE\""),
            ));
        };
        if !is_identifier(name) {
            return Err(fail(
                &key,
                format!("`{name}` is not a plain SQL identifier"),
            ));
        }
        let Some(kind) = PartitionKind::parse(ty) else {
            return Err(fail(
                &key,
                format!(
                    "`{ty}` (column `{name}`) is not a partition type: DATE, BIGINT or VARCHAR"
                ),
            ));
        };
        if out.iter().any(|c| c.name.eq_ignore_ascii_case(name)) {
            return Err(fail(&key, format!("names column `{name}` twice")));
        }
        out.push(PartitionColumn {
            name: name.to_string(),
            kind,
        });
    }
    Ok(out)
}
