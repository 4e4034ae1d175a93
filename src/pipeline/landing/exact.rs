//! Text zones (JSON, CSV) read with their schema's promises kept.
//!
//! A zone's schema comes from its first file: an integer there makes the column `BIGINT`. A
//! later file holding `1.5` in that column was read as 1 by arrow's JSON reader (it parses a
//! number that is not an integer as a float and truncates it), every check passing since both
//! routes read alike; arrow's CSV reader failed the scan as if it could be retried. The runner's
//! routes over a text zone instead read its integer columns as `DECIMAL(38, 18)` and convert
//! each value back only if it is a whole number of the column's type; any other value fails the
//! scan with exit 2 naming the column, the value and the source, and nothing is published.
//! (Fraction digits beyond the 18th are dropped by arrow's decimal parser: `1.0000000000000000001`
//! reads as 1. A value of more than 20 integer digits fails the scan as arrow reports it.)
//!
//! A CSV column with no value in the first file (a header-only file, an optional column left
//! empty that day) has no type (`NULL`), and arrow's CSV reader read every later value of it as
//! NULL. Such columns are read as text, and a value in one fails the scan alike (its type is
//! unknown). A CSV file whose header differs from the first file's (columns in another order,
//! one more or one fewer) was read by position; see `headers`.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Decimal128Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{ColumnarValue, Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;

use super::headers::Headers;
use super::{LandingZone, ZoneTable};
use crate::error::{Error, Result};

/// The scale integer columns are read with: wide enough that no fraction a writer prints is
/// cut off, narrow enough for every `BIGINT UNSIGNED` value (20 digits) in 38.
const SCALE: i8 = 18;

/// How a text zone's column of type `t` is read, if otherwise than as `t`: integers as
/// `DECIMAL(38, 18)`, and (`csv`) untyped columns as text.
fn read_as(t: &DataType, csv: bool) -> Option<DataType> {
    match t {
        t if t.is_integer() => Some(DataType::Decimal128(38, SCALE)),
        DataType::Null if csv => Some(DataType::Utf8),
        _ => None,
    }
}

/// `file_schema` with its columns read as `read_as` says, or `None` if none is.
pub fn read_schema(file_schema: &SchemaRef, csv: bool) -> Option<SchemaRef> {
    let fields: Vec<Field> = file_schema
        .fields()
        .iter()
        .map(|f| match read_as(f.data_type(), csv) {
            Some(t) => f.as_ref().clone().with_data_type(t),
            None => f.as_ref().clone(),
        })
        .collect();
    if fields
        .iter()
        .zip(file_schema.fields())
        .all(|(a, b)| a == b.as_ref())
    {
        return None;
    }
    Some(Arc::new(
        Schema::new(fields).with_metadata(file_schema.metadata().clone()),
    ))
}

impl LandingZone {
    /// The runner's table (`plain`: its plain twin, DataFusion's listing table) over a zone of
    /// a text format (see the module documentation); `None` for a Parquet zone, or one with
    /// nothing to keep.
    pub fn exact_table(
        self: &Arc<Self>,
        plain: Option<super::plain::Plain>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        let format = &self.options.format;
        if format.downcast_ref::<ParquetFormat>().is_some() {
            return Ok(None);
        }
        let csv = format.downcast_ref::<CsvFormat>();
        let headers = csv
            .filter(|c| c.options().has_header.unwrap_or(true))
            .map(|c| Headers::new(self.clone(), c.options().delimiter));
        let read = read_schema(&self.file_schema, csv.is_some());
        if read.is_none() && headers.is_none() {
            return Ok(None);
        }
        let read = read.unwrap_or_else(|| self.file_schema.clone());
        let read_fields = read.fields().clone();
        let inner: Arc<dyn TableProvider> = match plain {
            None => Arc::new(ZoneTable::reading(
                self.clone(),
                self.table_schema_of(&read),
                read,
            )),
            // The plain twin: DataFusion's own listing table (levels without names: see
            // `plain_table`).
            Some(super::plain::Plain::Twin) if self.named => {
                Arc::new(datafusion::datasource::listing::ListingTable::try_new(
                    self.listing_config(self.options.clone(), &read)?,
                )?)
            }
            Some(_) => {
                let (url, options) = self.listing_parts(self.options.clone())?;
                let schemas = (read.clone(), self.table_schema_of(&read));
                let table = super::plain::PlainTable::new(url, options, schemas, None);
                Arc::new(table.named(self.named))
            }
        };
        // The files' columns read otherwise; never a partition column (an `INT` level such as
        // `year=2024` must keep pruning the listing).
        let changed = self
            .file_schema
            .fields()
            .iter()
            .zip(read_fields.iter())
            .filter(|(a, b)| a.data_type() != b.data_type())
            .map(|(a, _)| a.name().clone())
            .collect();
        Ok(Some(Arc::new(ExactInts {
            inner,
            schema: self.table_schema(),
            changed,
            alias: self.alias.clone(),
            headers,
            origin: Origin::Zone,
        })))
    }
}

/// Where a text source's column types were inferred from, as a refusal explains it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A landing zone's first file.
    Zone,
    /// The first rows of a file source (DataFusion infers from 1,000 records).
    File,
}

impl Origin {
    fn from(self) -> &'static str {
        match self {
            Origin::Zone => "the zone's first file",
            Origin::File => "the source's first 1,000 rows",
        }
    }

    fn remedy(self) -> &'static str {
        match self {
            Origin::Zone => "make the zone's first file hold the wider type",
            Origin::File => "put a value of the wider type among the first rows",
        }
    }
}

/// The runner's table over a text file source that is not a landing zone (one file, or a
/// directory of files without `key=value` levels): `inner` reads the files with `read`, the
/// schema [`read_schema`] gave for `schema`, the types DataFusion inferred from their first
/// rows. Filters on the columns read otherwise stay above the scan.
pub fn exact_file_table(
    inner: Arc<dyn TableProvider>,
    schema: SchemaRef,
    read: &SchemaRef,
    alias: &str,
) -> Arc<dyn TableProvider> {
    let changed = schema
        .fields()
        .iter()
        .zip(read.fields().iter())
        .filter(|(a, b)| a.data_type() != b.data_type())
        .map(|(a, _)| a.name().clone())
        .collect();
    Arc::new(ExactInts {
        inner,
        schema,
        changed,
        alias: alias.to_string(),
        headers: None,
        origin: Origin::File,
    })
}

/// A table read through `inner` (some of whose columns are read otherwise, see
/// [`read_schema`]), presenting `schema`, the zone's own types; `headers`: the CSV files'
/// headers to check before a scan reads them.
#[derive(Debug)]
pub struct ExactInts {
    inner: Arc<dyn TableProvider>,
    schema: SchemaRef,
    /// The files' columns read otherwise than as `schema` has them.
    changed: std::collections::HashSet<String>,
    alias: String,
    headers: Option<Headers>,
    origin: Origin,
}

impl ExactInts {
    /// Whether `filter` names a column read otherwise (such filters stay above the scan).
    fn names_changed(&self, filter: &Expr) -> bool {
        filter
            .column_refs()
            .iter()
            .any(|c| self.changed.contains(&c.name))
    }
}

#[async_trait]
impl TableProvider for ExactInts {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::common::Result<Vec<TableProviderFilterPushDown>> {
        let inner = self.inner.supports_filters_pushdown(filters)?;
        Ok(filters
            .iter()
            .zip(inner)
            .map(|(f, answer)| match self.names_changed(f) {
                true => TableProviderFilterPushDown::Inexact,
                false => answer,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let pushed: Vec<Expr> = filters
            .iter()
            .filter(|f| !self.names_changed(f))
            .cloned()
            .collect();
        let limit = limit.filter(|_| pushed.len() == filters.len());
        if let Some(h) = &self.headers {
            h.check(&pushed)
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
        }
        let plan = self.inner.scan(state, projection, &pushed, limit).await?;
        let read = plan.schema();
        let mut exact = false;
        let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = read
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(f.name(), i));
                let want = self.schema.field_with_name(f.name()).map(|w| w.data_type());
                let expr: Arc<dyn PhysicalExpr> = match want {
                    Ok(to) if to != f.data_type() => {
                        exact = true;
                        Arc::new(ExactInt {
                            input: column,
                            to: to.clone(),
                            name: f.name().clone(),
                            alias: self.alias.clone(),
                            origin: self.origin,
                        })
                    }
                    _ => column,
                };
                (expr, f.name().clone())
            })
            .collect();
        if !exact {
            return Ok(plan);
        }
        Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
    }
}

/// A decimal column converted to integer type `to`, failing on any value that is not a whole
/// number of that type.
#[derive(Debug, Eq)]
struct ExactInt {
    input: Arc<dyn PhysicalExpr>,
    to: DataType,
    name: String,
    alias: String,
    origin: Origin,
}

impl PartialEq for ExactInt {
    fn eq(&self, other: &Self) -> bool {
        self.input.eq(&other.input) && self.to == other.to && self.name == other.name
    }
}

impl Hash for ExactInt {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.input.hash(state);
        self.to.hash(state);
        self.name.hash(state);
    }
}

impl fmt::Display for ExactInt {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "exact_{}({})", self.to, self.input)
    }
}

impl ExactInt {
    fn convert(&self, array: &ArrayRef) -> datafusion::common::Result<ArrayRef> {
        if self.to == DataType::Null {
            return self.untyped(array);
        }
        let decimals = array
            .as_any()
            .downcast_ref::<Decimal128Array>()
            .ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "column `{}` read as {}, not a decimal",
                    self.name,
                    array.data_type()
                ))
            })?;
        let unit = 10i128.pow(SCALE as u32);
        let (lo, hi) = bounds(&self.to);
        for v in decimals.iter().flatten() {
            if v % unit != 0 {
                return Err(self.refuse(v, "is not a whole number"));
            }
            if !(lo..=hi).contains(&(v / unit)) {
                return Err(self.refuse(v, "is out of the type's range"));
            }
        }
        let whole = decimals
            .unary::<_, arrow::datatypes::Decimal128Type>(|v| v / unit)
            .with_precision_and_scale(38, 0)?;
        Ok(arrow::compute::cast(&whole, &self.to)?)
    }

    /// A column the first file gave no type, read as text: NULL throughout, or refused.
    fn untyped(&self, array: &ArrayRef) -> datafusion::common::Result<ArrayRef> {
        let text = arrow::compute::cast(array, &DataType::Utf8)?;
        let text = text.as_any().downcast_ref::<arrow::array::StringArray>();
        if let Some(v) = text.and_then(|t| t.iter().flatten().next()) {
            return Err(DataFusionError::External(Box::new(Error::input(format!(
                "source `{}`: column `{}` holds `{v}` in one of the window's files, but it has no value in {}, so its type is unknown (NULL) and every value would be read as NULL; nothing was published — {}",
                self.alias,
                self.name,
                self.origin.from(),
                match self.origin {
                    Origin::Zone =>
                        "give the zone's first file a value in that column, or move that file out of the zone",
                    Origin::File => "give the column a value among the file's first rows",
                }
            )))));
        }
        Ok(Arc::new(arrow::array::NullArray::new(array.len())))
    }

    fn refuse(&self, raw: i128, why: &str) -> DataFusionError {
        let value = Decimal128Array::from(vec![raw])
            .with_precision_and_scale(38, SCALE)
            .map(|a| a.value_as_string(0))
            .unwrap_or_default();
        let value = value.trim_end_matches('0').trim_end_matches('.');
        DataFusionError::External(Box::new(Error::input(format!(
            "source `{}`: column `{}` holds {value} in one of the window's files, which {why}: the source's type for it is {} (taken from {}), and reading the value as one would change it, so nothing was published — rewrite the file, or {}",
            self.alias,
            self.name,
            self.to,
            self.origin.from(),
            self.origin.remedy()
        ))))
    }
}

/// The smallest and largest value of integer type `t`.
fn bounds(t: &DataType) -> (i128, i128) {
    use DataType::*;
    match t {
        Int8 => (i8::MIN as i128, i8::MAX as i128),
        Int16 => (i16::MIN as i128, i16::MAX as i128),
        Int32 => (i32::MIN as i128, i32::MAX as i128),
        UInt8 => (0, u8::MAX as i128),
        UInt16 => (0, u16::MAX as i128),
        UInt32 => (0, u32::MAX as i128),
        UInt64 => (0, u64::MAX as i128),
        _ => (i64::MIN as i128, i64::MAX as i128),
    }
}

impl PhysicalExpr for ExactInt {
    fn data_type(&self, _input_schema: &Schema) -> datafusion::common::Result<DataType> {
        Ok(self.to.clone())
    }

    fn nullable(&self, input_schema: &Schema) -> datafusion::common::Result<bool> {
        self.input.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> datafusion::common::Result<ColumnarValue> {
        let array = self.input.evaluate(batch)?.into_array(batch.num_rows())?;
        Ok(ColumnarValue::Array(self.convert(&array)?))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> datafusion::common::Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(ExactInt {
            input: children[0].clone(),
            to: self.to.clone(),
            name: self.name.clone(),
            alias: self.alias.clone(),
            origin: self.origin,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests;
