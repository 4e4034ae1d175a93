//! A PostgreSQL table's columns as Arrow types, and its rows as Arrow batches.
//!
//! Each column is mapped by its declared type (`format_type` in the catalog), or refused by
//! name (exit 2): integers, `real`/`double precision`, `boolean`, `text`/`varchar`/`char`,
//! `date`, `timestamp` (no zone: read as UTC), `timestamptz` (to UTC), `numeric(p, s)` (to
//! `Decimal128(p, s)`; `numeric` without a precision is refused), `uuid`, `json`/`jsonb` and
//! enums (as text). The values of the text-mapped types and of `numeric` are selected as text
//! (`col::text`) and converted here; the others are read in PostgreSQL's binary format.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Date32Builder, Float32Builder, Float64Builder, Int16Builder,
    Int32Builder, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use tokio_postgres::Row;

use crate::error::{Error, Result};

/// One column: its name, how the remote query selects it, its Arrow type.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    /// The select-list item: `"name"`, or `"name"::text`.
    pub select: String,
    pub arrow: DataType,
    /// Whether the database compares and orders its values as the checks' DataFusion route
    /// does with what it reads: not for `character(n)` (padded), `uuid` and `json(b)` (typed
    /// equality), enums (declaration order) and floats.
    pub alike: bool,
}

/// The column `name` of declared type `declared` (`format_type`, with `typtype` `e` for an
/// enum), or why it is refused.
pub fn column(table: &str, name: &str, declared: &str, enumerated: bool) -> Result<Column> {
    let quoted = format!("\"{}\"", name.replace('"', "\"\""));
    let text = |arrow, alike| Column {
        name: name.to_string(),
        select: format!("{quoted}::text"),
        arrow,
        alike,
    };
    let native = |arrow: DataType| Column {
        name: name.to_string(),
        select: quoted.clone(),
        alike: !arrow.is_floating(),
        arrow,
    };
    let base = declared.split('(').next().unwrap_or(declared).trim();
    Ok(match base {
        "smallint" => native(DataType::Int16),
        "integer" => native(DataType::Int32),
        "bigint" => native(DataType::Int64),
        "real" => native(DataType::Float32),
        "double precision" => native(DataType::Float64),
        "boolean" => native(DataType::Boolean),
        "text" | "character varying" => text(DataType::Utf8, true),
        "character" | "uuid" | "json" | "jsonb" => text(DataType::Utf8, false),
        "date" => native(DataType::Date32),
        "timestamp with time zone" => native(DataType::Timestamp(
            TimeUnit::Microsecond,
            Some("UTC".into()),
        )),
        "timestamp without time zone" => native(DataType::Timestamp(TimeUnit::Microsecond, None)),
        "numeric" => {
            let (p, s) = precision(declared).ok_or_else(|| {
                Error::input(format!(
                    "column `{name}` of {table} is `numeric` without a precision and scale: idemlake reads numeric(p, s) as a decimal; declare it so, or read the table through a view that casts it"
                ))
            })?;
            text(DataType::Decimal128(p, s), true)
        }
        _ if enumerated => text(DataType::Utf8, false),
        _ => {
            return Err(Error::input(format!(
                "column `{name}` of {table} is `{declared}`, which idemlake does not read (arrays, composite and other types): read the table through a view that casts it to text or a scalar type"
            )));
        }
    })
}

/// `numeric(p, s)`'s precision and scale (`numeric(p)`: scale 0).
fn precision(declared: &str) -> Option<(u8, i8)> {
    let inner = declared.split_once('(')?.1.strip_suffix(')')?;
    let mut parts = inner.split(',').map(|p| p.trim().parse::<i64>().ok());
    let p = parts.next()??;
    let s = parts.next().flatten().unwrap_or(0);
    (1..=38).contains(&p).then_some(())?;
    Some((u8::try_from(p).ok()?, i8::try_from(s).ok()?))
}

/// `rows` as one batch of `schema` (the columns in `columns`' order).
pub fn batch(schema: &SchemaRef, columns: &[Column], rows: &[Row]) -> Result<RecordBatch> {
    let arrays = columns
        .iter()
        .enumerate()
        .map(|(i, c)| array(&c.arrow, rows, i))
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), arrays)?)
}

/// Column `i` of `rows` as an array of `ty`.
fn array(ty: &DataType, rows: &[Row], i: usize) -> Result<ArrayRef> {
    macro_rules! build {
        ($builder:ty, $rust:ty) => {{
            let mut b = <$builder>::with_capacity(rows.len());
            for r in rows {
                b.append_option(r.try_get::<_, Option<$rust>>(i).map_err(super::failure)?);
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    Ok(match ty {
        DataType::Int16 => build!(Int16Builder, i16),
        DataType::Int32 => build!(Int32Builder, i32),
        DataType::Int64 => build!(Int64Builder, i64),
        DataType::Float32 => build!(Float32Builder, f32),
        DataType::Float64 => build!(Float64Builder, f64),
        DataType::Boolean => build!(BooleanBuilder, bool),
        DataType::Utf8 => {
            let mut b = StringBuilder::with_capacity(rows.len(), rows.len() * 16);
            for r in rows {
                b.append_option(r.try_get::<_, Option<&str>>(i).map_err(super::failure)?);
            }
            Arc::new(b.finish())
        }
        DataType::Date32 => {
            let epoch = jiff::civil::date(1970, 1, 1);
            let mut b = Date32Builder::with_capacity(rows.len());
            for r in rows {
                let d = r
                    .try_get::<_, Option<jiff::civil::Date>>(i)
                    .map_err(super::failure)?;
                b.append_option(d.map(|d| (d - epoch).get_days()));
            }
            Arc::new(b.finish())
        }
        DataType::Timestamp(_, Some(_)) => {
            let mut b = TimestampMicrosecondBuilder::with_capacity(rows.len());
            for r in rows {
                let t = r
                    .try_get::<_, Option<jiff::Timestamp>>(i)
                    .map_err(super::failure)?;
                b.append_option(t.map(|t| t.as_microsecond()));
            }
            Arc::new(b.finish().with_timezone("UTC"))
        }
        DataType::Timestamp(_, None) => {
            let mut b = TimestampMicrosecondBuilder::with_capacity(rows.len());
            for r in rows {
                let t = r
                    .try_get::<_, Option<jiff::civil::DateTime>>(i)
                    .map_err(super::failure)?;
                let us = t
                    .map(|t| t.to_zoned(jiff::tz::TimeZone::UTC).map(|z| z.timestamp()))
                    .transpose()
                    .map_err(|e| Error::runtime(e.to_string()))?;
                b.append_option(us.map(|t| t.as_microsecond()));
            }
            Arc::new(b.finish())
        }
        DataType::Decimal128(_, _) => {
            let text = array(&DataType::Utf8, rows, i)?;
            let options = arrow::compute::CastOptions {
                safe: false,
                ..Default::default()
            };
            arrow::compute::cast_with_options(&text, ty, &options)?
        }
        other => return Err(Error::runtime(format!("no reader for {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_types_map_or_are_refused_by_name() {
        let c = |d: &str| column("public.t", "c", d, false);
        assert_eq!(
            c("numeric(12,2)").unwrap().arrow,
            DataType::Decimal128(12, 2)
        );
        assert_eq!(c("numeric(12,2)").unwrap().select, "\"c\"::text");
        assert_eq!(c("bigint").unwrap().select, "\"c\"");
        assert_eq!(c("character varying(20)").unwrap().arrow, DataType::Utf8);
        assert_eq!(c("jsonb").unwrap().arrow, DataType::Utf8);
        assert!(
            c("numeric")
                .unwrap_err()
                .to_string()
                .contains("without a precision")
        );
        assert!(
            c("integer[]")
                .unwrap_err()
                .to_string()
                .contains("`integer[]`")
        );
        assert_eq!(
            column("public.t", "s", "status", true).unwrap().arrow,
            DataType::Utf8
        );
    }
}
