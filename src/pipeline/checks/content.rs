//! The content fingerprint of a window's rows (`[reconcile] default = "content"`): the number
//! of rows, and the wrapping sum and the xor of a hash of each row. Both are independent of
//! the order rows come in, so the independent path's rows and the staged files' rows give
//! the same fingerprint exactly when they hold the same multiset of rows (up to a hash
//! collision): a wrong value in any column of any row is caught, not only a wrong count.
//!
//! A row's hash is SipHash (fixed keys) of its arrow row-format bytes, over its columns in
//! name order, each in a canonical type (string views, large strings and dictionaries as
//! plain strings, timestamps without their zone): the staged files read back and the query's
//! batches may differ in those representations while holding the same values.

use std::hash::Hasher;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, TimeUnit};
use arrow::row::{RowConverter, SortField};
use futures::StreamExt;

use crate::error::Result;

/// An order-independent fingerprint of a multiset of rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fingerprint {
    pub rows: u64,
    pub sum: u64,
    pub xor: u64,
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} rows {:016x}{:016x}", self.rows, self.sum, self.xor)
    }
}

impl Fingerprint {
    pub fn add(&mut self, hash: u64) {
        self.rows += 1;
        self.sum = self.sum.wrapping_add(hash);
        self.xor ^= hash;
    }

    /// The fingerprint of every row of `stream`.
    pub async fn of_stream(
        mut stream: datafusion::physical_plan::SendableRecordBatchStream,
    ) -> Result<Fingerprint> {
        let mut fp = Fingerprint::default();
        while let Some(batch) = stream.next().await {
            for h in row_hashes(&batch?, None)? {
                fp.add(h);
            }
        }
        Ok(fp)
    }
}

/// The type a column is hashed in.
fn canonical(ty: &DataType) -> DataType {
    match ty {
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
        DataType::Dictionary(_, v) => canonical(v),
        DataType::Timestamp(unit, _) => DataType::Timestamp(*unit, None),
        DataType::Date64 => DataType::Timestamp(TimeUnit::Millisecond, None),
        other => other.clone(),
    }
}

/// Whether a column of type `ty` can be fingerprinted.
pub fn hashable(ty: &DataType) -> bool {
    RowConverter::supports_fields(&[SortField::new(canonical(ty))])
}

/// The hash of each row of `batch` (without the column named `skip`).
pub fn row_hashes(batch: &RecordBatch, skip: Option<&str>) -> Result<Vec<u64>> {
    let schema = batch.schema();
    let mut names: Vec<(&str, usize)> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| Some(f.name().as_str()) != skip)
        .map(|(i, f)| (f.name().as_str(), i))
        .collect();
    names.sort();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(names.len());
    let mut fields = Vec::with_capacity(names.len());
    for (_, i) in names {
        let c = batch.column(i);
        let ty = canonical(c.data_type());
        columns.push(if *c.data_type() == ty {
            c.clone()
        } else {
            arrow::compute::cast(c, &ty)?
        });
        fields.push(SortField::new(ty));
    }
    if columns.is_empty() {
        return Ok(vec![0; batch.num_rows()]);
    }
    let converter = RowConverter::new(fields)?;
    let rows = converter.convert_columns(&columns)?;
    Ok(rows
        .iter()
        .map(|r| {
            #[allow(deprecated)]
            let mut h = std::hash::SipHasher::new_with_keys(0x1de3_1a4e, 0xc4ec_4c0d);
            h.write(r.as_ref());
            h.finish()
        })
        .collect())
}

/// The fingerprint of the rows of `df`.
pub async fn of_dataframe(df: datafusion::prelude::DataFrame) -> Result<Fingerprint> {
    Fingerprint::of_stream(df.execute_stream().await?).await
}

/// [`of_dataframe`], with what its scans read (see `read`).
pub async fn of_dataframe_scanned(
    df: datafusion::prelude::DataFrame,
) -> Result<(Fingerprint, Vec<crate::report::record::Scanned>)> {
    let task_ctx = Arc::new(df.task_ctx());
    let plan = df.create_physical_plan().await?;
    let stream = datafusion::physical_plan::execute_stream(plan.clone(), task_ctx)?;
    let fp = Fingerprint::of_stream(stream).await?;
    Ok((fp, super::read::scans(&plan)))
}

/// The fingerprint of a table's rows (the staged files, see `staged`).
pub async fn of_table(
    ctx: &datafusion::prelude::SessionContext,
    table: Arc<dyn datafusion::catalog::TableProvider>,
) -> Result<Fingerprint> {
    of_dataframe(ctx.read_table(table)?).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray, StringViewArray};
    use arrow::datatypes::{Field, Schema};

    fn batch(a: &[i64], b: &[&str], view: bool, swap: bool) -> RecordBatch {
        let a: ArrayRef = Arc::new(Int64Array::from(a.to_vec()));
        let b: ArrayRef = if view {
            Arc::new(StringViewArray::from(b.to_vec()))
        } else {
            Arc::new(StringArray::from(b.to_vec()))
        };
        let fa = Field::new("a", DataType::Int64, true);
        let fb = Field::new("b", b.data_type().clone(), true);
        if swap {
            RecordBatch::try_new(Arc::new(Schema::new(vec![fb, fa])), vec![b, a]).unwrap()
        } else {
            RecordBatch::try_new(Arc::new(Schema::new(vec![fa, fb])), vec![a, b]).unwrap()
        }
    }

    fn fp(batches: &[RecordBatch]) -> Fingerprint {
        let mut f = Fingerprint::default();
        for b in batches {
            for h in row_hashes(b, None).unwrap() {
                f.add(h);
            }
        }
        f
    }

    #[test]
    fn order_representation_and_column_order_do_not_matter_values_do() {
        let one = fp(&[batch(&[1, 2, 3], &["x", "y", "z"], false, false)]);
        let other = fp(&[
            batch(&[3], &["z"], true, true),
            batch(&[2, 1], &["y", "x"], false, true),
        ]);
        assert_eq!(one, other);
        assert_eq!(one.rows, 3);
        let changed = fp(&[batch(&[1, 2, 3], &["x", "y", "Z"], false, false)]);
        assert_ne!(one, changed);
        let swapped = fp(&[batch(&[1, 2, 3], &["y", "x", "z"], false, false)]);
        assert_ne!(one, swapped, "values moved between rows");
        let dup = fp(&[batch(&[1, 1, 3], &["x", "x", "z"], false, false)]);
        assert_ne!(one, dup);
    }
}
