//! Keys in more than one window of the audited range. The key is unique within a window by
//! construction (an overwrite replaces the window, a merge upserts into it), but not across
//! windows: a merge keeps a row whose window column changed in its old window while it
//! inserts it into its new one, and other writers may do anything. One query over the range
//! (the key columns and the partition column only): per key, the distinct windows holding it.
//! Rows with a NULL in the key are left out (a NULL matches nothing, as in `unique` checks).

use std::collections::BTreeMap;

use datafusion::functions_aggregate::expr_fn::{array_agg, count};
use datafusion::prelude::{Expr, SessionContext, lit};

use super::{BUCKET, COUNT, bucket, column};
use crate::delta::partition::PartitionValue;
use crate::error::Result;
use crate::pipeline::runner::Runner;
use crate::task::range::WindowRange;
use crate::task::window::Window;

/// Per window key: how many of its keys other windows of the range hold too, and one such
/// key (`col=value, …`) with the labels of the windows holding it.
pub(super) type Across = BTreeMap<(i64, i64), (u64, String)>;

/// The keys of `[from, to]` that more than one window holds (`None` for a task without a key).
pub(super) async fn keys_across_windows(
    ctx: &SessionContext,
    runner: &Runner,
    from: &Window,
    to: &Window,
) -> Result<Option<Across>> {
    let task = runner.task();
    if task.key.is_empty() {
        return Ok(None);
    }
    let table = runner.table().await?;
    let mut out = Across::new();
    if table.version().is_none() {
        return Ok(Some(out));
    }
    table.update_datafusion_session(&ctx.state())?;
    let started = std::time::Instant::now();
    let range = WindowRange::of(task, from).through(&WindowRange::of(task, to));
    let keys: Vec<Expr> = task.key.iter().map(|k| column(k)).collect();
    let no_null = keys
        .iter()
        .map(|k| k.clone().is_not_null())
        .reduce(Expr::and)
        .expect("a key");
    let mut distinct = vec![bucket(task).alias(BUCKET)];
    distinct.extend(keys.clone());
    let batches = ctx
        .read_table(table.table_provider().await?)?
        .filter(range.filter(column(&task.partition_by)).and(no_null))?
        .aggregate(distinct, vec![])?
        .aggregate(
            keys,
            vec![
                count(lit(1)).alias(COUNT),
                array_agg(column(BUCKET)).alias(BUCKET),
            ],
        )?
        .filter(column(COUNT).gt(lit(1i64)))?
        .collect()
        .await?;
    let n = task.key.len();
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        keys = batches.iter().map(|b| b.num_rows()).sum::<usize>(),
        "keys held by more than one window of the range"
    );
    for b in &batches {
        let lists = b
            .column(n + 1)
            .as_any()
            .downcast_ref::<arrow::array::ListArray>()
            .ok_or_else(|| crate::error::Error::runtime("array_agg gave no list"))?;
        for r in 0..b.num_rows() {
            let buckets = lists.value(r);
            let mut windows = Vec::new();
            for i in 0..buckets.len() {
                let value = datafusion::common::ScalarValue::try_from_array(&buckets, i)?;
                if let Some(p) = PartitionValue::from_scalar_value(&value) {
                    windows.push(p.window(task.grain, &task.timezone)?);
                }
            }
            windows.sort_by_key(Window::key);
            let key = (0..n)
                .map(|c| {
                    let v = arrow::util::display::array_value_to_string(b.column(c), r)?;
                    Ok(format!("{}={v}", task.key[c]))
                })
                .collect::<Result<Vec<_>>>()?;
            let labels: Vec<String> = windows.iter().map(Window::label).collect();
            for w in &windows {
                let e = out
                    .entry(w.key())
                    .or_insert_with(|| (0, format!("{} in {}", key.join(", "), labels.join(", "))));
                e.0 += 1;
            }
        }
    }
    Ok(Some(out))
}
