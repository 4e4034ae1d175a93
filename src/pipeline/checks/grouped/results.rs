//! Running a bound grouped query: its rows split into per-window results.

use arrow::array::{Array, RecordBatch, UInt32Array};
use datafusion::common::ScalarValue;

use super::{Grouped, Measure, NotGroupable, PerWindow, WINDOW_COL};

impl Grouped {
    /// The per-window results of running `plan` (the bound grouped query) for `windows`
    /// windows.
    pub(super) async fn results(
        &self,
        plan: std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        windows: usize,
    ) -> std::result::Result<Vec<PerWindow>, NotGroupable> {
        let task_ctx = std::sync::Arc::new(datafusion::execution::TaskContext::from(&self.state));
        if self.measure == Measure::Content {
            let stream = datafusion::physical_plan::execute_stream(plan, task_ctx)?;
            return fingerprints(stream, windows).await;
        }
        let batches = datafusion::physical_plan::collect(plan, task_ctx).await?;
        let mut out: Vec<Option<PerWindow>> = vec![None; windows];
        for b in &batches {
            let (w, idx) = window_index(b)?;
            let rest: Vec<usize> = (0..b.num_columns()).filter(|i| *i != w).collect();
            let values = b.project(&rest)?;
            for r in 0..b.num_rows() {
                if idx.is_null(r) {
                    continue;
                }
                let i = idx.value(r) as usize;
                out[i] = Some(match self.measure {
                    Measure::Query => PerWindow::Query(values.slice(r, 1)),
                    _ => PerWindow::Rows(rows_at(&values, r)?),
                });
            }
        }
        let mut empty = None;
        let mut results = Vec::with_capacity(out.len());
        for o in out {
            results.push(match o {
                Some(r) => r,
                None if self.measure == Measure::Rows => PerWindow::Rows(0),
                None => {
                    if empty.is_none() {
                        empty = Some(self.over_no_rows().await?);
                    }
                    PerWindow::Query(empty.clone().expect("just set"))
                }
            });
        }
        Ok(results)
    }
}

fn rows_at(values: &RecordBatch, r: usize) -> std::result::Result<u64, NotGroupable> {
    match ScalarValue::try_from_array(values.column(0), r)? {
        ScalarValue::Int64(Some(n)) => Ok(n as u64),
        other => Err(NotGroupable(format!("a row count of {other}"))),
    }
}

/// The grouped query's window column in `b`: its position and the window index of each row.
fn window_index(b: &RecordBatch) -> std::result::Result<(usize, &UInt32Array), NotGroupable> {
    let w = b.schema().index_of(WINDOW_COL)?;
    let idx = b
        .column(w)
        .as_any()
        .downcast_ref::<UInt32Array>()
        .ok_or_else(|| NotGroupable("the window column is not UInt32".into()))?;
    Ok((w, idx))
}

/// Each window's content fingerprint from the rows of `stream` (the carried plan's, each row
/// with its window's index).
async fn fingerprints(
    mut stream: datafusion::physical_plan::SendableRecordBatchStream,
    windows: usize,
) -> std::result::Result<Vec<PerWindow>, NotGroupable> {
    use futures::StreamExt;
    let mut out = vec![crate::pipeline::checks::Fingerprint::default(); windows];
    while let Some(b) = stream.next().await {
        let b = b?;
        let (_, idx) = window_index(&b)?;
        let hashes = crate::pipeline::checks::content::row_hashes(&b, Some(WINDOW_COL))?;
        for (r, h) in hashes.into_iter().enumerate() {
            if !idx.is_null(r) {
                out[idx.value(r) as usize].add(h);
            }
        }
    }
    Ok(out.into_iter().map(PerWindow::Content).collect())
}
