//! What a check query read, for its report: each scan of its executed physical plan, with the
//! files it was given and the rows it produced (DataFusion's own metrics).

use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::DataFrame;

use crate::error::Result;
use crate::report::record::Scanned;

/// The scans of `plan`, executed: one per file or in-memory source, in plan order.
pub fn scans(plan: &Arc<dyn ExecutionPlan>) -> Vec<Scanned> {
    let mut out = Vec::new();
    walk(plan, &mut out);
    out
}

fn walk(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Scanned>) {
    if let Some(exec) = plan.downcast_ref::<DataSourceExec>() {
        let rows = plan.metrics().and_then(|m| m.output_rows()).unwrap_or(0) as u64;
        let source = exec.data_source();
        if let Some(config) = source.downcast_ref::<FileScanConfig>() {
            // A large file may be read as several ranges: counted once.
            let files: std::collections::BTreeSet<&str> = config
                .file_groups
                .iter()
                .flat_map(|g| g.iter())
                .map(|f| f.object_meta.location.as_ref())
                .collect();
            let files: Vec<&str> = files.into_iter().collect();
            let location = format!("{}{}", config.object_store_url.as_str(), common_dir(&files));
            out.push(Scanned {
                location,
                files: files.len(),
                rows,
            });
        } else if source.is::<MemorySourceConfig>() {
            out.push(Scanned {
                location: "memory".into(),
                files: 0,
                rows,
            });
        }
        return;
    }
    // A database's scan: the query it sent.
    if plan.name() == "PostgresScan" {
        let shown = datafusion::physical_plan::displayable(plan.as_ref()).one_line();
        out.push(Scanned {
            location: shown.to_string().trim().to_string(),
            files: 0,
            rows: plan.metrics().and_then(|m| m.output_rows()).unwrap_or(0) as u64,
        });
        return;
    }
    for child in plan.children() {
        walk(child, out);
    }
}

/// The longest directory (ending in `/`) every path of `paths` lies under.
fn common_dir(paths: &[&str]) -> String {
    let Some(first) = paths.first() else {
        return String::new();
    };
    let mut len = first.len();
    for p in &paths[1..] {
        let same = first.bytes().zip(p.bytes()).take_while(|(a, b)| a == b);
        len = len.min(same.count());
    }
    // Cut at a `/` (ASCII, so always between characters), never inside a name.
    match first.as_bytes()[..len].iter().rposition(|b| *b == b'/') {
        Some(i) => first[..=i].to_string(),
        None => String::new(),
    }
}

/// `df` executed: its batches and its scans.
pub async fn collect(df: DataFrame) -> Result<(Vec<RecordBatch>, Vec<Scanned>)> {
    let task_ctx = Arc::new(df.task_ctx());
    let plan = df.create_physical_plan().await?;
    let batches = datafusion::physical_plan::collect(plan.clone(), task_ctx).await?;
    Ok((batches, scans(&plan)))
}

/// The number of rows `df` gives, and its scans (only the columns its filters need are read).
pub async fn count(df: DataFrame) -> Result<(u64, Vec<Scanned>)> {
    use datafusion::functions_aggregate::expr_fn::count;
    let counted = df.aggregate(vec![], vec![count(datafusion::prelude::lit(1)).alias("n")])?;
    let (batches, scans) = collect(counted).await?;
    let n = batches
        .iter()
        .find(|b| b.num_rows() == 1)
        .and_then(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .map(|a| a.value(0))
        })
        .ok_or_else(|| crate::error::Error::runtime("a count gave no row (a bug)"))?;
    Ok((n as u64, scans))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_directory_of_a_scans_files() {
        assert_eq!(
            common_dir(&["z/dt=1/a.parquet", "z/dt=1/b.parquet"]),
            "z/dt=1/"
        );
        assert_eq!(common_dir(&["z/dt=1/a.parquet", "z/dt=2/a.parquet"]), "z/");
        assert_eq!(common_dir(&["z/dt=10/a", "z/dt=1/a"]), "z/");
        assert_eq!(common_dir(&["a.parquet"]), "");
        assert_eq!(common_dir(&[]), "");
        // A common prefix ending inside a character is cut at the directory above.
        assert_eq!(common_dir(&["z/city=Zürich/a", "z/city=Zöblitz/a"]), "z/");
    }

    /// A count over a file reports that file and the rows its scan produced.
    #[tokio::test]
    async fn a_counted_query_reports_its_scans() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = datafusion::prelude::SessionContext::new();
        let path = dir.path().join("t.parquet");
        let df = ctx
            .sql("SELECT * FROM (VALUES (1), (2), (3)) AS t(a)")
            .await
            .unwrap();
        df.write_parquet(
            path.to_str().unwrap(),
            datafusion::dataframe::DataFrameWriteOptions::new(),
            None,
        )
        .await
        .unwrap();
        ctx.register_parquet("t", path.to_str().unwrap(), Default::default())
            .await
            .unwrap();
        let df = ctx.sql("SELECT a FROM t WHERE a > 1").await.unwrap();
        let (n, scans) = count(df).await.unwrap();
        assert_eq!(n, 2);
        assert_eq!(scans.len(), 1, "{scans:?}");
        assert_eq!(scans[0].files, 1);
        assert_eq!(scans[0].rows, 3);
        assert!(scans[0].location.starts_with("file:///"), "{scans:?}");
    }
}
