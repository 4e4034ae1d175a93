//! Integer columns of text zones (JSON, CSV) read exactly.
//!
//! A zone's schema comes from its first file: an integer there makes the column `BIGINT`. A
//! later file holding `1.5` in that column was read as 1 by arrow's JSON reader (it parses a
//! number that is not an integer as a float and truncates it), every check passing since both
//! routes read alike; arrow's CSV reader failed the scan as if it could be retried. The runner's
//! routes over a text zone instead read its integer columns as `DECIMAL(38, 18)` and convert
//! each value back only if it is a whole number of the column's type; any other value fails the
//! scan with exit 2 naming the column, the value and the source, and nothing is published.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Decimal128Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{ColumnarValue, Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::projection::ProjectionExec;

use crate::error::Error;

/// The scale integer columns are read with: wide enough that no fraction a writer prints is
/// cut off, narrow enough for every `BIGINT UNSIGNED` value (20 digits) in 38.
const SCALE: i8 = 18;

/// `file_schema` with its integer columns as `DECIMAL(38, 18)`, or `None` if it has none.
pub fn read_schema(file_schema: &SchemaRef) -> Option<SchemaRef> {
    if !file_schema
        .fields()
        .iter()
        .any(|f| is_integer(f.data_type()))
    {
        return None;
    }
    let fields: Vec<Field> = file_schema
        .fields()
        .iter()
        .map(|f| match is_integer(f.data_type()) {
            true => f
                .as_ref()
                .clone()
                .with_data_type(DataType::Decimal128(38, SCALE)),
            false => f.as_ref().clone(),
        })
        .collect();
    Some(Arc::new(
        Schema::new(fields).with_metadata(file_schema.metadata().clone()),
    ))
}

/// Whether `t` is one of arrow's integer types.
fn is_integer(t: &DataType) -> bool {
    t.is_integer()
}

/// A table read through `inner` (whose integer columns are decimals, see [`read_schema`]),
/// presenting `schema`, the zone's own types.
#[derive(Debug)]
pub struct ExactInts {
    pub inner: Arc<dyn TableProvider>,
    pub schema: SchemaRef,
    pub alias: String,
}

impl ExactInts {
    /// Whether `filter` names a column read as a decimal (such filters stay above the scan).
    fn names_decimal(&self, filter: &Expr) -> bool {
        filter.column_refs().iter().any(|c| {
            self.schema
                .field_with_name(&c.name)
                .is_ok_and(|f| is_integer(f.data_type()))
        })
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
            .map(|(f, answer)| match self.names_decimal(f) {
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
            .filter(|f| !self.names_decimal(f))
            .cloned()
            .collect();
        let limit = limit.filter(|_| pushed.len() == filters.len());
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

    fn refuse(&self, raw: i128, why: &str) -> DataFusionError {
        let value = Decimal128Array::from(vec![raw])
            .with_precision_and_scale(38, SCALE)
            .map(|a| a.value_as_string(0))
            .unwrap_or_default();
        let value = value.trim_end_matches('0').trim_end_matches('.');
        DataFusionError::External(Box::new(Error::input(format!(
            "source `{}`: column `{}` holds {value} in one of the window's files, which {why}: the zone's type for it is {} (taken from its first file), and reading the value as one would change it, so nothing was read — rewrite the file, or make the zone's first file hold the wider type",
            self.alias, self.name, self.to
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
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(to: DataType) -> ExactInt {
        ExactInt {
            input: Arc::new(Column::new("v", 0)),
            to,
            name: "v".into(),
            alias: "events".into(),
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
}
