//! The run's output as Delta stores it: each column cast to its Delta type, every column
//! nullable, and the window column and key checked against the query's columns.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::Column;
use datafusion::prelude::{DataFrame, cast, col};

use crate::error::{Error, Result};
use crate::task::Task;
use crate::task::window::Grain;

/// The Delta type a DataFusion output type is stored as, or why it cannot be stored.
pub(super) fn delta_type(dt: &DataType) -> std::result::Result<DataType, String> {
    Ok(match dt {
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
        DataType::Timestamp(_, _) => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        DataType::Date64 => DataType::Date32,
        DataType::Dictionary(_, v) => delta_type(v)?,
        DataType::Float16 => DataType::Float32,
        DataType::UInt8 => DataType::Int16,
        DataType::UInt16 => DataType::Int32,
        DataType::UInt32 | DataType::UInt64 => DataType::Int64,
        DataType::Null => return Err("is an untyped NULL; CAST it to the type you mean".into()),
        DataType::Time32(_)
        | DataType::Time64(_)
        | DataType::Duration(_)
        | DataType::Interval(_) => {
            return Err(format!(
                "has type {dt}, which Delta Lake cannot store; cast it to a string, number or timestamp"
            ));
        }
        other => other.clone(),
    })
}

/// Cast the query output to the Delta schema and check the window column and key.
pub(super) fn normalize_output(df: DataFrame, task: &Task) -> Result<(DataFrame, SchemaRef)> {
    let file = task.sql_file.display();
    let mut seen = std::collections::HashSet::new();
    let mut exprs = Vec::new();
    let mut fields = Vec::new();
    for (qualifier, field) in df.schema().iter() {
        let name = field.name();
        if !seen.insert(name.clone()) {
            return Err(Error::input(format!(
                "{file}: the query returns two columns named `{name}`; alias one of them"
            )));
        }
        let target = delta_type(field.data_type())
            .map_err(|why| Error::input(format!("{file}: output column `{name}` {why}")))?;
        let c = col(Column::new(qualifier.cloned(), name));
        let e = if &target == field.data_type() {
            c
        } else {
            cast(c, target.clone())
        };
        exprs.push(e.alias(name));
        fields.push(Field::new(name, target, true));
    }
    let schema = Arc::new(Schema::new(fields));

    let part = schema.field_with_name(&task.partition_by).map_err(|_| {
        Error::input(format!(
            "{}: [target].partition_by: the query has no column `{}` (it returns {})",
            task.file.display(),
            task.partition_by,
            names(&schema)
        ))
    })?;
    let ok = match task.grain {
        Grain::Hour => matches!(part.data_type(), DataType::Timestamp(_, _)),
        _ => part.data_type() == &DataType::Date32,
    };
    if !ok {
        let want = if task.grain.uses_dates() {
            format!("a DATE for grain {} (e.g. CAST(x AS DATE))", task.grain)
        } else {
            "a TIMESTAMP (UTC) for grain hour (e.g. date_trunc('hour', ts))".to_string()
        };
        return Err(Error::input(format!(
            "{}: window column `{}` is {}; it must be {want}",
            task.file.display(),
            task.partition_by,
            part.data_type()
        )));
    }
    for k in &task.key {
        if schema.field_with_name(k).is_err() {
            return Err(Error::input(format!(
                "{}: [write].key: the query has no column `{k}` (it returns {})",
                task.file.display(),
                names(&schema)
            )));
        }
    }
    if schema.fields().len() == 1 {
        return Err(Error::input(format!(
            "{}: the query returns only the window column `{}`; a Delta table needs at least one other column",
            task.file.display(),
            task.partition_by
        )));
    }
    let df = df.select(exprs)?;
    Ok((df, schema))
}

/// The column names of `schema`, comma-separated (for messages).
pub fn names(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
