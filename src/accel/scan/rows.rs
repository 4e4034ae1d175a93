//! A source's rows for a chunk of windows, sorted on the bound column, and the zero-copy
//! slice of them each window gets.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow::compute::{SortOptions, cast, concat, sort_to_indices, take};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;

use super::bounds::as_i64;
use crate::error::Result;

/// One source's rows for a chunk of windows, sorted on the bound column.
pub(super) struct Rows {
    pub(super) batch: RecordBatch,
    pub(super) keys: Vec<i64>,
}

impl Rows {
    /// `parts` (batches in arrival order) as one batch sorted on `column`.
    ///
    /// Columns are gathered in parallel (one thread per core, largest columns first): the
    /// gather is most of a chunk's assembly, and while the next chunk is assembled the
    /// windows of the last one may all be done (the cores would otherwise wait on one).
    pub(super) fn sorted(schema: SchemaRef, parts: Vec<RecordBatch>, column: &str) -> Result<Rows> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let at = schema.index_of(column)?;
        if parts.is_empty() {
            let batch = RecordBatch::new_empty(schema);
            return Ok(Rows {
                batch,
                keys: Vec::new(),
            });
        }
        let column_of =
            |i: usize| -> Vec<&dyn Array> { parts.iter().map(|b| b.column(i).as_ref()).collect() };
        let key = concat(&column_of(at))?;
        let order = sort_to_indices(&key, Some(SortOptions::default()), None)?;
        let mut by_size: Vec<usize> = (0..schema.fields().len()).collect();
        let size = |i: usize| -> usize {
            parts
                .iter()
                .map(|b| b.column(i).get_buffer_memory_size())
                .sum()
        };
        by_size.sort_by_key(|i| std::cmp::Reverse(size(*i)));
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, by_size.len().max(1));
        let next = AtomicUsize::new(0);
        let gather = || -> Result<Vec<(usize, ArrayRef)>> {
            let mut out = Vec::new();
            while let Some(&i) = by_size.get(next.fetch_add(1, Ordering::Relaxed)) {
                let whole = if i == at {
                    key.clone()
                } else {
                    concat(&column_of(i))?
                };
                out.push((i, take(&whole, &order, None)?));
            }
            Ok(out)
        };
        let gathered: Vec<Result<Vec<(usize, ArrayRef)>>> = std::thread::scope(|s| {
            let helpers: Vec<_> = (1..threads).map(|_| s.spawn(gather)).collect();
            let mut all = vec![gather()];
            all.extend(
                helpers
                    .into_iter()
                    .map(|h| h.join().expect("gather thread")),
            );
            all
        });
        let mut columns: Vec<Option<ArrayRef>> = vec![None; schema.fields().len()];
        for part in gathered {
            for (i, c) in part? {
                columns[i] = Some(c);
            }
        }
        let columns: Vec<ArrayRef> = columns
            .into_iter()
            .map(|c| c.expect("every column gathered"))
            .collect();
        drop(parts);
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(order.len()));
        let batch = RecordBatch::try_new_with_options(schema, columns, &options)?;
        let keys = cast(batch.column(at), &DataType::Int64)?;
        let keys = keys
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("cast to Int64")
            .iter()
            .map(|v| v.unwrap_or(i64::MIN))
            .collect();
        Ok(Rows { batch, keys })
    }
}

/// Copy view arrays (Utf8View/BinaryView) so a batch holds only its own strings, not the
/// decoded pages they point into (which would keep the whole scan's buffers alive).
pub(super) fn compact(batch: RecordBatch) -> Result<RecordBatch> {
    use arrow::array::AsArray;
    let mut changed = false;
    let columns: Vec<Arc<dyn Array>> = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Utf8View => {
                changed = true;
                Arc::new(c.as_string_view().gc()) as Arc<dyn Array>
            }
            DataType::BinaryView => {
                changed = true;
                Arc::new(c.as_binary_view().gc()) as Arc<dyn Array>
            }
            _ => c.clone(),
        })
        .collect();
    if !changed {
        return Ok(batch);
    }
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// The rows of `r` with key in `[lo, hi]`, or `[lo, hi)` if `strict` (zero-copy).
pub(super) fn slice(
    r: &Rows,
    lo: &ScalarValue,
    hi: &ScalarValue,
    strict: bool,
) -> Option<RecordBatch> {
    let (lo, hi) = (as_i64(lo)?, as_i64(hi)?);
    let mut start = r.keys.partition_point(|k| *k < lo);
    let mut end = r
        .keys
        .partition_point(|k| if strict { *k < hi } else { *k <= hi });
    if crate::fault::mutation("slice-drop-row") && end > start {
        end -= 1;
    }
    if crate::fault::mutation("slice-move-row") && end > start {
        start += 1;
        end = (end + 1).min(r.keys.len());
    }
    Some(r.batch.slice(start, end.saturating_sub(start)))
}

/// `batch` as up to `n` partitions of consecutive rows (parallel scans of the slice).
pub(super) fn split(batch: &RecordBatch, n: usize) -> Vec<Vec<RecordBatch>> {
    let n = n.max(1);
    let rows = batch.num_rows();
    if rows < 8192 || n == 1 {
        return vec![vec![batch.clone()]];
    }
    let per = rows.div_ceil(n);
    (0..n)
        .map(|i| {
            let start = (i * per).min(rows);
            let len = per.min(rows - start);
            vec![batch.slice(start, len)]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::chunk::Tally;
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn slices_are_inclusive_and_sorted() {
        let keys = vec![5i64, 1, 8, 2, 3, 2];
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys))]).unwrap();
        // Two parts in arrival order: sorted together into one batch.
        let parts = [batch.slice(3, 3), batch.slice(0, 3)];
        let r = Rows::sorted(batch.schema(), parts.to_vec(), "k").unwrap();
        let keys_of = |lo: i64, hi: i64| {
            let s = slice(
                &r,
                &ScalarValue::Int64(Some(lo)),
                &ScalarValue::Int64(Some(hi)),
                false,
            )
            .unwrap();
            let k = s.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            k.values().to_vec()
        };
        assert_eq!(keys_of(2, 5), vec![2, 2, 3, 5]);
        assert_eq!(r.keys, vec![1, 2, 2, 3, 5, 8]);
        assert_eq!(keys_of(6, 7), Vec::<i64>::new());
        assert_eq!(keys_of(8, 9), vec![8]);
        assert_eq!(keys_of(i64::MIN, i64::MAX).len(), 6);
        // A strict upper bound stops short of it.
        let strict = slice(
            &r,
            &ScalarValue::Int64(Some(2)),
            &ScalarValue::Int64(Some(5)),
            true,
        )
        .unwrap();
        assert_eq!(strict.num_rows(), 3);
    }

    #[test]
    fn a_census_counts_rows_by_inclusive_bounds() {
        let t = Tally {
            keys: vec![1, 2, 5],
            below: vec![0, 3, 4, 6],
            bounds: vec![],
        };
        assert_eq!(t.rows(1, 2), 4);
        assert_eq!(t.rows(2, 2), 1);
        assert_eq!(t.rows(3, 4), 0);
        assert_eq!(t.rows(2, 5), 3);
        assert_eq!(t.rows(0, 10), 6);
        assert_eq!(t.rows(6, 10), 0);
    }
}
