//! A check computed by the database itself: for a task whose tables are all tables of one
//! PostgreSQL database, the check's query is sent whole (see `sources::whole`) and the server
//! counts its rows, or computes the `[reconcile]` source query's totals, in the run's snapshot.
//! The report names the route (`database`) and the statement sent.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::compute::{CastOptions, cast_with_options};
use datafusion::prelude::DataFrame;

use crate::error::Result;
use crate::report::record::{Computed, Scanned};

/// The route of a check the database computed.
pub const ROUTE: &str = "database";

fn computed(sql: String, rows: u64) -> Computed {
    Computed {
        route: ROUTE.into(),
        windows: 1,
        scans: vec![Scanned {
            location: format!("PostgreSQL: {sql}"),
            files: 0,
            rows,
        }],
    }
}

/// The rows `df` gives, counted by its database; `None` when its plan is not one to send
/// whole, or the server refused it as written.
pub async fn count(df: &DataFrame) -> Result<Option<(u64, Computed)>> {
    let Some(whole) = crate::pipeline::sources::whole_rows(df.logical_plan()) else {
        return Ok(None);
    };
    Ok(whole
        .count()
        .await?
        .map(|n| (n, computed(whole.count_sql(), 1))))
}

/// The rows of `df` (a `[reconcile]` source query), computed by its database and typed as
/// the checks' plan types them; `None` as for [`count`], or when a value the server gave does
/// not convert to its column's type.
pub async fn collect(df: &DataFrame) -> Result<Option<(Vec<RecordBatch>, Computed)>> {
    let Some(whole) = crate::pipeline::sources::whole(df.logical_plan()) else {
        return Ok(None);
    };
    let schema = Arc::new(df.schema().as_arrow().clone());
    let width = schema.fields().len();
    let Some(rows) = whole.text_rows(width).await? else {
        return Ok(None);
    };
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        let text = StringArray::from_iter(rows.iter().map(|r| r[i].as_deref()));
        match cast_with_options(&text, field.data_type(), &strict) {
            Ok(c) => columns.push(c),
            Err(e) => {
                tracing::info!(
                    column = field.name(),
                    "the database's value does not convert to the check's type, which the checks then compute themselves: {e}"
                );
                return Ok(None);
            }
        }
    }
    let n = rows.len() as u64;
    let batch = RecordBatch::try_new(schema, columns)?;
    Ok(Some((vec![batch], computed(whole.text_sql(width), n))))
}
