//! A landing zone's files may disagree with its schema (taken from its first file): a column
//! missing from a file is NULL, and a column of another type is converted to the zone's type
//! only when every value of that type fits (`widens`). Anything else, in a column the scan
//! reads (its projection or filters), — a `DOUBLE` into a
//! `BIGINT`, a `BIGINT` into an `INT`, text into a number — would change values silently, so
//! the scan fails instead, naming the column and both types (exit 2, nothing published).
//! Timestamps of another unit or time zone are converted as DataFusion does (a finer unit
//! truncated to the zone's). The runner's routes over a zone (its own table and its plain twin,
//! DataFusion's listing table, on the local engine) read through [`StrictCasts`].

use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::DataFusionError;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr_adapter::{
    DefaultPhysicalExprAdapterFactory, PhysicalExprAdapter, PhysicalExprAdapterFactory,
};

use crate::error::Error;

/// DataFusion's adapter of file columns to the zone's schema, refusing lossy conversions.
#[derive(Debug)]
pub struct StrictCasts {
    /// The source's alias, for the error.
    pub alias: String,
}

impl PhysicalExprAdapterFactory for StrictCasts {
    fn create(
        &self,
        logical_file_schema: SchemaRef,
        physical_file_schema: SchemaRef,
    ) -> datafusion::error::Result<Arc<dyn PhysicalExprAdapter>> {
        let inner = DefaultPhysicalExprAdapterFactory
            .create(logical_file_schema.clone(), physical_file_schema.clone())?;
        Ok(Arc::new(StrictAdapter {
            inner,
            logical: logical_file_schema,
            physical: physical_file_schema,
            alias: self.alias.clone(),
        }))
    }
}

/// DataFusion's adapter for one file, refusing a lossy conversion of a column the scan reads
/// (its projection and its filters: the columns the rewritten expressions name).
#[derive(Debug)]
struct StrictAdapter {
    inner: Arc<dyn PhysicalExprAdapter>,
    logical: SchemaRef,
    physical: SchemaRef,
    alias: String,
}

impl PhysicalExprAdapter for StrictAdapter {
    fn rewrite(
        &self,
        expr: Arc<dyn PhysicalExpr>,
    ) -> datafusion::error::Result<Arc<dyn PhysicalExpr>> {
        let mut refused = None;
        expr.apply(|e| {
            if let Some(c) = e.downcast_ref::<Column>()
                && let Ok(want) = self.logical.field_with_name(c.name())
                && let Ok(got) = self.physical.field_with_name(c.name())
                && !widens(got.data_type(), want.data_type())
            {
                refused = Some((
                    c.name().to_string(),
                    got.data_type().clone(),
                    want.data_type().clone(),
                ));
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if let Some((name, got, want)) = refused {
            return Err(DataFusionError::External(Box::new(Error::input(format!(
                "source `{}`: column `{name}` is {got} in one of the window's files but {want} in the zone's schema (taken from its first file); converting it could change values, so nothing was read — rewrite the file with the zone's type, or make the zone's first file hold the wider type",
                self.alias
            )))));
        }
        self.inner.rewrite(expr)
    }
}

/// Whether every value of type `from` converts to type `to` unchanged (timestamps: any unit
/// and zone; nested types: field by field).
pub fn widens(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let rank = |t: &DataType| match t {
        Int8 | UInt8 => 1,
        Int16 | UInt16 => 2,
        Int32 | UInt32 => 3,
        Int64 | UInt64 => 4,
        _ => 0,
    };
    let signed = |t: &DataType| matches!(t, Int8 | Int16 | Int32 | Int64);
    let unsigned = |t: &DataType| matches!(t, UInt8 | UInt16 | UInt32 | UInt64);
    let text = |t: &DataType| matches!(t, Utf8 | LargeUtf8 | Utf8View);
    let bytes = |t: &DataType| matches!(t, Binary | LargeBinary | BinaryView);
    match (from, to) {
        _ if from == to => true,
        (Null, _) => true,
        (f, t) if signed(f) && signed(t) => rank(f) <= rank(t),
        (f, t) if unsigned(f) && unsigned(t) => rank(f) <= rank(t),
        (f, t) if unsigned(f) && signed(t) => rank(f) < rank(t),
        (f, Float32) if signed(f) || unsigned(f) => rank(f) <= 2,
        (f, Float64) if signed(f) || unsigned(f) => rank(f) <= 3,
        (Float16, Float32 | Float64) | (Float32, Float64) => true,
        (f, t) if text(f) && text(t) => true,
        (f, t) if bytes(f) && bytes(t) => true,
        (Date32, Date64) => true,
        (Timestamp(..), Timestamp(..)) => true,
        (Decimal128(p1, s1), Decimal128(p2, s2) | Decimal256(p2, s2))
        | (Decimal256(p1, s1), Decimal256(p2, s2)) => {
            s2 >= s1 && (*p2 as i16 - *s2 as i16) >= (*p1 as i16 - *s1 as i16)
        }
        (Dictionary(_, v), t) => widens(v, t),
        (f, Dictionary(_, v)) => widens(f, v),
        (List(a) | LargeList(a), List(b) | LargeList(b)) => widens(a.data_type(), b.data_type()),
        (Struct(a), Struct(b)) => b.iter().all(|want| {
            a.iter()
                .find(|got| got.name() == want.name())
                .is_none_or(|got| widens(got.data_type(), want.data_type()))
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DataType::*;

    #[test]
    fn only_conversions_that_keep_every_value_widen() {
        for (from, to) in [
            (Int32, Int64),
            (UInt32, Int64),
            (Int32, Float64),
            (Int16, Float32),
            (Float32, Float64),
            (Utf8, Utf8View),
            (Date32, Date64),
            (Decimal128(10, 2), Decimal128(12, 3)),
        ] {
            assert!(widens(&from, &to), "{from} -> {to}");
        }
        for (from, to) in [
            (Float64, Int64),
            (Int64, Int32),
            (Int64, Float64),
            (UInt64, Int64),
            (Utf8, Int64),
            (Int64, Utf8),
            (Decimal128(12, 3), Decimal128(10, 2)),
            (Date64, Date32),
        ] {
            assert!(!widens(&from, &to), "{from} -> {to}");
        }
    }
}
