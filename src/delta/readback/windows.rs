//! The read-back's own window→partition mapping: which window each file's partition value
//! lies in, by DataFusion evaluating the windows' replaceWhere predicates (the SQL each
//! commit records) over the values as the log writes them, cast to the partition column's
//! type — not by `delta::partition`'s keys, which build the commits.

use std::sync::Arc;

use arrow::array::{Array, RecordBatch, StringArray, UInt32Array};
use arrow::datatypes::DataType;
use datafusion::logical_expr::{cast, col, lit, when};
use datafusion::prelude::SessionContext;

use super::replay::LoggedFile;
use crate::error::{Error, Result};

/// For each of `files`, the index of the first of `predicates` (replaceWhere SQL on
/// `column`) its partition value satisfies, or `None`. The values are cast to `ty` (the
/// column's type in the table); a value that does not cast is an error.
pub async fn assign(
    column: &str,
    ty: &DataType,
    files: &[LoggedFile],
    predicates: &[String],
) -> Result<Vec<Option<usize>>> {
    let mut out = vec![None; files.len()];
    if files.is_empty() || predicates.is_empty() {
        return Ok(out);
    }
    let index = UInt32Array::from_iter_values(0..files.len() as u32);
    let values: StringArray = files.iter().map(|f| f.value.as_deref()).collect();
    let batch = RecordBatch::try_from_iter([
        ("i", Arc::new(index) as Arc<dyn Array>),
        ("v", Arc::new(values) as Arc<dyn Array>),
    ])?;
    let ctx = SessionContext::new();
    let df = ctx
        .read_batch(batch)?
        .select(vec![col("i"), cast(col("v"), ty.clone()).alias(column)])?;
    let parse = |p: &String| {
        df.parse_sql_expr(p).map_err(|e| {
            Error::runtime(format!(
                "read-back: the replaceWhere {p:?} does not parse: {e}"
            ))
        })
    };
    let mut case = when(parse(&predicates[0])?, lit(0u32));
    for (n, p) in predicates.iter().enumerate().skip(1) {
        case = case.when(parse(p)?, lit(n as u32));
    }
    let case = case
        .end()
        .map_err(|e| Error::runtime(format!("read-back: {e}")))?;
    let batches = df
        .select(vec![col("i"), case.alias("w")])?
        .collect()
        .await
        .map_err(|e| Error::runtime(format!("read-back: partition values of {column}: {e}")))?;
    for b in &batches {
        let i = b.column(0).as_any().downcast_ref::<UInt32Array>();
        let w = b.column(1).as_any().downcast_ref::<UInt32Array>();
        let (Some(i), Some(w)) = (i, w) else {
            return Err(Error::runtime("read-back: unexpected column types"));
        };
        for row in 0..b.num_rows() {
            if w.is_valid(row) {
                out[i.value(row) as usize] = Some(w.value(row) as usize);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, value: Option<&str>) -> LoggedFile {
        LoggedFile {
            path: path.into(),
            value: value.map(str::to_string),
        }
    }

    #[tokio::test]
    async fn replace_where_predicates_assign_partition_values_to_windows() {
        let days = [
            r#""d" >= DATE '1995-06-03' AND "d" < DATE '1995-06-04'"#.to_string(),
            r#""d" >= DATE '1995-06-04' AND "d" < DATE '1995-06-11'"#.to_string(),
        ];
        let files = [
            file("a", Some("1995-06-03")),
            file("b", Some("1995-06-10")),
            file("c", Some("1995-06-11")),
            file("n", None),
        ];
        let got = assign("d", &DataType::Date32, &files, &days).await.unwrap();
        assert_eq!(got, [Some(0), Some(1), None, None]);
        // Hours: a TIMESTAMP column, values as Delta writes them (UTC).
        let ts = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()));
        let hour = [
            r#""h" >= TIMESTAMP '2026-03-29T00:00:00Z' AND "h" < TIMESTAMP '2026-03-29T01:00:00Z'"#
                .to_string(),
        ];
        let files = [
            file("x", Some("2026-03-29 00:00:00")),
            file("y", Some("2026-03-29 01:00:00")),
            file("z", Some("2026-03-29T00:59:59.999999Z")),
        ];
        let got = assign("h", &ts, &files, &hour).await.unwrap();
        assert_eq!(got, [Some(0), None, Some(0)]);
        // A value that does not read is an error, not "outside every window".
        let bad = [file("q", Some("someday"))];
        assert!(assign("d", &DataType::Date32, &bad, &days).await.is_err());
    }
}
