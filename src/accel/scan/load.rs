//! Reading one chunk of windows: every shared source scanned once for the chunk's bounds
//! (or the whole run's, for the census), small batches merged as they arrive, within the
//! memory budget.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::array::{Array, Int64Array, RecordBatch};
use arrow::compute::{cast, concat_batches};
use arrow::datatypes::DataType;
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::Expr;
use datafusion::prelude::{DataFrame, SessionContext, col, lit};
use futures::StreamExt;

use super::Shared;
use super::bounds::{Bound, as_i64};
use super::chunk::{MERGE_BYTES, SMALL_ROWS, Tally};
use super::rows::{Rows, compact};
use crate::error::Result;
use crate::task::window::Window;

impl Shared {
    /// Read every shared source once for `windows` (sorted on its bound column), within the
    /// budget; `None` if over budget.
    pub(super) async fn load(
        &self,
        base: &SessionContext,
        windows: &[Window],
    ) -> Result<Option<Arc<HashMap<String, Rows>>>> {
        let started = std::time::Instant::now();
        if let Some(rows) = self.kept_whole(windows) {
            // The census kept every row of the run: each chunk is a view of them.
            tracing::debug!(
                windows = windows.len(),
                "shared scan: a view of the census's rows"
            );
            return Ok(Some(rows));
        }
        // The first chunk of a run of more windows than it holds takes the census.
        let census: Option<Vec<Window>> = {
            let all = self.windows.lock().expect("not poisoned");
            (all.list.len() > windows.len() && !self.census_taken.swap(true, Ordering::SeqCst))
                .then(|| all.list.clone())
        };
        if let Some(c) = &census {
            self.census_len.store(c.len(), Ordering::SeqCst);
        }
        let mut out = HashMap::new();
        let mut counts: HashMap<String, Tally> = HashMap::new();
        let mut bytes = 0u64;
        let mut spans = Some(HashMap::new());
        for b in &self.bounds {
            let Some(loaded) = self
                .load_source(base, b, windows, census.as_deref(), bytes)
                .await?
            else {
                return Ok(None);
            };
            bytes += loaded.bytes;
            if let Some(all) = &census {
                counts.insert(b.alias.clone(), self.tally(b, all, loaded.census));
            }
            match (loaded.whole, spans.as_mut()) {
                (Some(span), Some(spans)) => {
                    spans.insert(b.alias.clone(), span);
                }
                _ => spans = None,
            }
            out.insert(b.alias.clone(), loaded.rows);
        }
        self.resize(windows.len(), bytes, false);
        if census.is_some() {
            *self.census.lock().expect("not poisoned") = Some(Arc::new(counts));
        }
        let out = Arc::new(out);
        if let Some(spans) = spans.filter(|_| census.is_some()) {
            *self.whole.lock().expect("not poisoned") = Some((out.clone(), spans));
        }
        tracing::debug!(
            windows = windows.len(),
            kb = bytes / 1024,
            ms = started.elapsed().as_millis() as u64,
            census = census.is_some(),
            whole_run = self.whole.lock().expect("not poisoned").is_some(),
            "shared scan loaded"
        );
        Ok(Some(out))
    }

    /// The rows the census kept for the whole run, if it kept them all and they cover every
    /// source's span of `windows` (a window appended after the census may lie outside).
    fn kept_whole(&self, windows: &[Window]) -> Option<Arc<HashMap<String, Rows>>> {
        let whole = self.whole.lock().expect("not poisoned").clone()?;
        let (rows, spans) = whole;
        if !self.census_covers(windows) {
            return None;
        }
        for b in &self.bounds {
            let (lo, hi) = self.span(b, windows)?;
            let (lo, hi) = (as_i64(&lo)?, as_i64(&hi)?);
            let (kept_lo, kept_hi) = spans.get(&b.alias)?;
            if lo < *kept_lo || hi > *kept_hi {
                return None;
            }
        }
        Some(rows)
    }

    /// The scan of source `b` for a chunk: its rows within `[lo, hi]` (`hi` excluded when
    /// every reference's upper bound is strict; see [`chunk_filter`]), only the columns the
    /// task mentions.
    async fn chunk_scan(
        &self,
        base: &SessionContext,
        b: &Bound,
        windows: &[Window],
        (lo, hi): (ScalarValue, ScalarValue),
    ) -> Result<DataFrame> {
        let c = col(Column::new(Some(b.alias.as_str()), b.column.as_str()));
        let df = base.table(b.alias.as_str()).await?;
        // Filter pushdown pays off when a scan keeps a thin slice (one window); a chunk
        // keeps a large share of scattered rows, and decoding its filter column first and
        // then skipping between the survivors costs more than decoding everything
        // (measured on SF1 lineitem: a 300-day chunk took ~1.3 s with pushdown).
        let df = if windows.len() > 16 {
            // A copy of the state (same catalog): only its configuration changes.
            let mut state = base.state();
            state
                .config_mut()
                .options_mut()
                .execution
                .parquet
                .pushdown_filters = false;
            let (_, plan) = df.into_parts();
            DataFrame::new(state, plan)
        } else {
            df
        };
        let keep: Vec<Expr> = df
            .schema()
            .columns()
            .into_iter()
            .filter(|c| self.columns.contains(&c.name) || c.name == b.column)
            .map(Expr::Column)
            .collect();
        let ty = df
            .schema()
            .field_with_unqualified_name(&b.column)?
            .data_type()
            .clone();
        let mut filter = chunk_filter(c, &ty, lo, hi, b.upper_strict);
        // Every other filter the windows put on this source's own columns (see `prune`).
        let ranges: Vec<_> = windows.iter().map(|w| self.range(w)).collect();
        for p in &b.prunes {
            for f in p.filters(&ranges).into_iter().flatten() {
                filter = filter.and(f);
            }
        }
        tracing::debug!(source = %b.alias, %filter, "shared scan filter");
        Ok(df.filter(filter)?.select(keep)?)
    }

    /// Read one shared source for `windows`, `used` bytes of the budget already taken by
    /// the chunk's other sources. With a `census` (the whole run's windows) the scan covers
    /// the run, counts every key and keeps the chunk's rows. `None`: over budget, or bounds
    /// that are not whole numbers.
    async fn load_source(
        &self,
        base: &SessionContext,
        b: &Bound,
        windows: &[Window],
        census: Option<&[Window]>,
        used: u64,
    ) -> Result<Option<Loaded>> {
        let Some((lo, hi)) = self.span(b, windows) else {
            return Ok(None);
        };
        let scanned = match census {
            Some(all) => match self.span(b, all) {
                Some(span) => span,
                None => return Ok(None),
            },
            None => (lo.clone(), hi.clone()),
        };
        let (Some(lo_i), Some(hi_i)) = (as_i64(&lo), as_i64(&hi)) else {
            return Ok(None);
        };
        // The run's span, kept whole while the census's rows fit half the budget.
        let mut whole = census.and_then(|_| Some((as_i64(&scanned.0)?, as_i64(&scanned.1)?)));
        let df = self
            .chunk_scan(base, b, census.unwrap_or(windows), scanned)
            .await?;
        let key_at = df.schema().as_arrow().index_of(&b.column)?;
        let schema = Arc::new(df.schema().as_arrow().clone());
        let mut stream = df.execute_stream().await?;
        let mut census_keys: HashMap<i64, u64> = HashMap::new();
        let mut acc = Accumulated::new(schema.clone());
        while let Some(batch) = stream.next().await {
            let mut batch = batch?;
            if census.is_some() {
                // The scan covers the whole run: count every window's rows; keep them all
                // while they fit (later chunks then read nothing), else the chunk's.
                let keep = if whole.is_some() {
                    (i64::MIN, i64::MAX)
                } else {
                    (lo_i, hi_i)
                };
                batch = count_keys(batch, key_at, &mut census_keys, keep)?;
            }
            acc.push(compact(batch)?)?;
            if whole.is_some() && used + acc.bytes() > self.budget / 2 {
                whole = None;
                acc.retain(key_at, (lo_i, hi_i))?;
            }
            if used + acc.bytes() > self.budget {
                self.over_budget(&b.alias, windows.len(), used, &acc, census.is_some());
                return Ok(None);
            }
        }
        let (parts, bytes, rows) = acc.finish()?;
        self.measured(&b.alias, bytes, rows);
        Ok(Some(Loaded {
            rows: Rows::sorted(schema, parts, &b.column)?,
            bytes,
            census: census_keys,
            whole,
        }))
    }

    /// A chunk's source went over the budget: size the next chunk down (and stop sharing
    /// when not even one window fits).
    pub(super) fn over_budget(
        &self,
        alias: &str,
        windows: usize,
        used: u64,
        acc: &Accumulated,
        census: bool,
    ) {
        self.measured(alias, acc.bytes(), acc.rows);
        self.resize(windows, used, true);
        if census {
            // The next (smaller) first chunk takes the census again.
            self.census_taken.store(false, Ordering::SeqCst);
        }
        if windows == 1 {
            // Not even one window fits: stop trying for the rest of the run.
            self.off.store(true, Ordering::SeqCst);
        }
        tracing::info!(
            windows,
            budget_kb = self.budget / 1024,
            "shared scan over budget; these windows read their sources directly"
        );
    }
}

/// One source's rows read for a chunk: sorted, their bytes, and the census's count per key.
pub(super) struct Loaded {
    pub(super) rows: Rows,
    pub(super) bytes: u64,
    pub(super) census: HashMap<i64, u64>,
    /// The span (inclusive, as whole numbers) of the rows kept, when the census kept the
    /// whole run's rather than the chunk's.
    pub(super) whole: Option<(i64, i64)>,
}

/// Count every key of `batch` (column `key_at`) into `census`; keep the rows within `[lo, hi]`.
pub(super) fn count_keys(
    batch: RecordBatch,
    key_at: usize,
    census: &mut HashMap<i64, u64>,
    span: (i64, i64),
) -> Result<RecordBatch> {
    keys_within(batch, key_at, span, |k| *census.entry(k).or_insert(0) += 1)
}

/// The rows of `batch` whose key (column `key_at`, as a whole number) lies within `[lo, hi]`,
/// `seen` called with every key.
fn keys_within(
    batch: RecordBatch,
    key_at: usize,
    (lo, hi): (i64, i64),
    mut seen: impl FnMut(i64),
) -> Result<RecordBatch> {
    let keys = cast(batch.column(key_at), &DataType::Int64)?;
    let keys = keys.as_any().downcast_ref::<Int64Array>().expect("Int64");
    let mut keep = Vec::with_capacity(keys.len());
    let mut all = true;
    for k in keys.iter() {
        let kept = k.is_some_and(|k| {
            seen(k);
            lo <= k && k <= hi
        });
        all &= kept;
        keep.push(kept);
    }
    if all {
        return Ok(batch);
    }
    Ok(arrow::compute::filter_record_batch(
        &batch,
        &arrow::array::BooleanArray::from(keep),
    )?)
}

/// A filtered scan yields many small batches whose buffers' fixed overhead dwarfs their rows
/// (~4 MB for one day of lineitem in ~700 batches vs ~0.5 MB once concatenated): small
/// batches are merged as they arrive, so the budget and the chunk sizing see what the rows
/// really cost. Large ones are kept as they come.
pub(super) struct Accumulated {
    pub(super) schema: arrow::datatypes::SchemaRef,
    pub(super) parts: Vec<RecordBatch>,
    pub(super) small: Vec<RecordBatch>,
    pub(super) small_bytes: u64,
    pub(super) kept: u64,
    pub(super) rows: u64,
}

impl Accumulated {
    pub(super) fn new(schema: arrow::datatypes::SchemaRef) -> Accumulated {
        Accumulated {
            schema,
            parts: Vec::new(),
            small: Vec::new(),
            small_bytes: 0,
            kept: 0,
            rows: 0,
        }
    }

    /// Bytes held so far.
    pub(super) fn bytes(&self) -> u64 {
        self.kept + self.small_bytes
    }

    pub(super) fn push(&mut self, batch: RecordBatch) -> Result<()> {
        self.rows += batch.num_rows() as u64;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let size = batch.get_array_memory_size() as u64;
        if batch.num_rows() >= SMALL_ROWS {
            // Large enough to count as it is (it is copied once, into the chunk).
            self.kept += size;
            self.parts.push(batch);
        } else {
            self.small_bytes += size;
            self.small.push(batch);
        }
        if self.small_bytes > MERGE_BYTES {
            self.merge_small()?;
        }
        Ok(())
    }

    pub(super) fn merge_small(&mut self) -> Result<()> {
        let merged = concat_batches(&self.schema, &self.small)?;
        self.small.clear();
        self.small_bytes = 0;
        self.kept += merged.get_array_memory_size() as u64;
        self.parts.push(merged);
        Ok(())
    }

    /// Keep only the rows whose key (column `key_at`) lies within `span` (the census gave up
    /// keeping the whole run: the chunk's rows stay).
    pub(super) fn retain(&mut self, key_at: usize, span: (i64, i64)) -> Result<()> {
        let parts = std::mem::take(&mut self.parts);
        let small = std::mem::take(&mut self.small);
        (self.kept, self.small_bytes, self.rows) = (0, 0, 0);
        for batch in parts.into_iter().chain(small) {
            self.push(compact(keys_within(batch, key_at, span, |_| ())?)?)?;
        }
        Ok(())
    }

    /// The batches, their bytes and rows.
    pub(super) fn finish(mut self) -> Result<(Vec<RecordBatch>, u64, u64)> {
        if !self.small.is_empty() {
            self.merge_small()?;
        }
        Ok((self.parts, self.kept, self.rows))
    }
}

/// The filter of a chunk scan of column `c` (of type `ty`) over `[lo, hi]`, `hi` excluded when
/// `strict` (no window of the chunk reaches it, see `Bound::upper_strict`).
///
/// A one-day range of a DATE column (a day window: `c >= x AND c < x + 1`) is the equality
/// `c = x`. DataFusion pushes each conjunct into the Parquet reader as a row filter of its
/// own, applied in turn; on a source not sorted by `c` the first (`c >= x`) keeps about half
/// the rows, scattered, and building and intersecting that selection costs more than the
/// rest of the filtering. The equality is one filter that keeps only the window's rows, and
/// prunes row groups and pages as the range does. Only for a DATE column bounded by DATE
/// values: a timestamp compared with a date is not equal to it all day long.
fn chunk_filter(c: Expr, ty: &DataType, lo: ScalarValue, hi: ScalarValue, strict: bool) -> Expr {
    if let (DataType::Date32, ScalarValue::Date32(Some(l)), ScalarValue::Date32(Some(h))) =
        (ty, &lo, &hi)
        && (if strict {
            h.checked_sub(1) == Some(*l)
        } else {
            h == l
        })
    {
        return c.eq(lit(lo));
    }
    if strict {
        c.clone().gt_eq(lit(lo)).and(c.lt(lit(hi)))
    } else {
        c.clone().gt_eq(lit(lo)).and(c.lt_eq(lit(hi)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_census_that_gives_up_the_whole_run_keeps_the_chunks_rows_only() {
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("k", DataType::Int64, true),
        ]));
        let batch = |keys: Vec<Option<i64>>| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(keys))]).unwrap()
        };
        let mut acc = Accumulated::new(schema.clone());
        acc.push(batch((0..5000).map(Some).collect())).unwrap();
        acc.push(batch(vec![Some(3), None, Some(7000), Some(10)]))
            .unwrap();
        let before = acc.bytes();
        acc.retain(0, (3, 10)).unwrap();
        let (parts, bytes, rows) = acc.finish().unwrap();
        let kept: Vec<i64> = parts
            .iter()
            .flat_map(|b| {
                let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                a.iter().map(|v| v.unwrap()).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(kept, vec![3, 4, 5, 6, 7, 8, 9, 10, 3, 10]);
        assert_eq!(rows, 10);
        assert!(bytes < before, "{bytes} < {before}");
        // Counting keeps every key's count whatever it keeps.
        let mut census = HashMap::new();
        let kept = count_keys(
            batch(vec![Some(1), Some(2), Some(2)]),
            0,
            &mut census,
            (2, 2),
        );
        assert_eq!(kept.unwrap().num_rows(), 2);
        assert_eq!((census[&1], census[&2]), (1, 2));
    }

    fn filter(ty: DataType, lo: ScalarValue, hi: ScalarValue, strict: bool) -> String {
        chunk_filter(col("c"), &ty, lo, hi, strict).to_string()
    }

    #[test]
    fn a_one_day_date_range_is_an_equality_and_other_ranges_stay_ranges() {
        let d = |v| ScalarValue::Date32(Some(v));
        let eq = "c = Date32(\"1995-06-17\")";
        assert_eq!(filter(DataType::Date32, d(9298), d(9299), true), eq);
        assert_eq!(filter(DataType::Date32, d(9298), d(9298), false), eq);
        // An empty strict range stays what it is.
        assert_eq!(
            filter(DataType::Date32, d(9298), d(9298), true),
            "c >= Date32(\"1995-06-17\") AND c < Date32(\"1995-06-17\")"
        );
        assert_eq!(
            filter(DataType::Date32, d(9298), d(9301), true),
            "c >= Date32(\"1995-06-17\") AND c < Date32(\"1995-06-20\")"
        );
        assert_eq!(
            filter(DataType::Date32, d(9298), d(9299), false),
            "c >= Date32(\"1995-06-17\") AND c <= Date32(\"1995-06-18\")"
        );
        // A timestamp column bounded by dates: `ts = DATE x` would keep only midnight.
        let ts = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None);
        assert_eq!(
            filter(ts, d(9298), d(9299), true),
            "c >= Date32(\"1995-06-17\") AND c < Date32(\"1995-06-18\")"
        );
        // Bounds of another type than DATE.
        let t = |v| ScalarValue::TimestampMicrosecond(Some(v), Some("UTC".into()));
        let ty = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
        assert!(filter(ty, t(0), t(1), true).contains(" AND "));
    }
}
