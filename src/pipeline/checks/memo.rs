//! The checks' memo: the per-window results of a grouped check query, kept in the target
//! table's `_idemlake/checks/` and reused by a later run that would compute them from the
//! same files the same way.
//!
//! A window's source side is a function of the check query, the windows' bounds, the sources'
//! declarations and the bytes of the files the query reads. The key is a SHA-256 of: this
//! binary (version, size, modification time), the task's sources as declared (format and its
//! options), the Delta sources' pinned versions, the measure, the windows' bounds, the physical
//! plan as DataFusion displays it (filters with their bound literals, projections, aggregates)
//! and, for each of its scans, the schema it produces and every file it reads — path, size,
//! modification time, ETag or version, partition values, byte range — as its own planning
//! listed them (DataFusion's listing, delta-rs's file list at the pinned version, the checks'
//! own zone listing). A file rewritten (another size, modification time or ETag), added or
//! removed changes the key; so does another query, window, declaration, Delta version or
//! build of idemlake. A plan with a scan whose files it cannot name (an in-memory table,
//! another provider's leaf) is not memoised. What it assumes: a file whose bytes change also
//! changes its size, modification time or ETag (as the runner's own change detection does).
//!
//! What it does not share: the runner never reads or writes the memo, and a result is only
//! ever written by the checks' own query (see `grouped`), so a memoised source side is what
//! the check computed over those files by its own route. Every check still compares it with
//! the window's staged output, and the read-back still runs. A memo that cannot be read or
//! written is a miss (logged), never a failure. The plain twin: `IDEMLAKE_CHECK_MEMO=0` (or
//! `IDEMLAKE_ACCELERATE=0`, or `IDEMLAKE_CHECK_BATCH=1`).
//!
//! On S3 the memo is read and written through the checks' own client; a hit costs one GET, a
//! miss one GET and one PUT.

use std::sync::Arc;

use arrow::array::{Array, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::{ExecutionPlan, displayable};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sha2::{Digest, Sha256};

use super::grouped::{Measure, PerWindow};
use super::zone::ZoneScanExec;

/// Where memo entries live, below the table's root.
pub const PREFIX: &str = "_idemlake/checks";

/// The schema metadata naming an entry's measure.
const MEASURE: &str = "idemlake.check.measure";

/// The checks' memo of one target table.
pub struct Memo {
    store: Arc<dyn ObjectStore>,
    /// The table's root in `store`.
    root: Path,
    /// What every key of this run includes: this binary, the task's sources as its file
    /// declares them, the Delta sources' pinned versions.
    context: String,
}

impl Memo {
    /// The memo of the table at `root` in `store`, for a run whose keys all include `context`
    /// (see [`Memo::context`]).
    pub fn new(store: Arc<dyn ObjectStore>, root: Path, context: String) -> Memo {
        Memo {
            store,
            root,
            context,
        }
    }

    /// What every key of a run includes: this binary (its version, size and modification
    /// time: a rebuilt checker never trusts an older one's results), the task's `sources` as
    /// declared (format and its options) and the Delta sources' pinned versions (a Delta file
    /// read again at another version may have other deletion vectors). `None` if the binary
    /// cannot be named: no memo then.
    pub fn context(
        sources: &[crate::task::Source],
        pins: &[crate::pipeline::sources::SourceVersion],
    ) -> Option<String> {
        let exe = std::fs::metadata(std::env::current_exe().ok()?).ok()?;
        let built = exe
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        let deltas: Vec<(&str, Option<i64>)> = pins
            .iter()
            .filter(|p| p.format == crate::task::Format::Delta)
            .map(|p| (p.alias.as_str(), p.version))
            .collect();
        Some(format!(
            "{} {} {}\n{sources:?}\n{deltas:?}",
            env!("CARGO_PKG_VERSION"),
            exe.len(),
            built.as_nanos()
        ))
    }

    /// The key of running `plan` for `windows` (the measure and the windows' bounds; see
    /// [`key`]).
    pub fn key(&self, plan: &Arc<dyn ExecutionPlan>, windows: &str) -> Option<String> {
        key(plan, &format!("{}\n{windows}", self.context))
    }

    fn path(&self, key: &str) -> Path {
        self.root
            .parts()
            .chain(Path::from(format!("{PREFIX}/{key}.arrow")).parts())
            .collect()
    }

    /// The results memoised under `key` for `windows` windows measured by `measure`; `None`
    /// on a miss (or an entry that does not read back as such).
    pub async fn get(&self, key: &str, measure: Measure, windows: usize) -> Option<Vec<PerWindow>> {
        let got = match self.store.get(&self.path(key)).await {
            Ok(got) => got.bytes().await,
            Err(e) => Err(e),
        };
        let bytes = match got {
            Ok(b) => b,
            Err(object_store::Error::NotFound { .. }) => return None,
            Err(e) => {
                tracing::info!(key, "the checks' memo could not be read: {e}");
                return None;
            }
        };
        match decode(&bytes, measure, windows) {
            Ok(results) => Some(results),
            Err(e) => {
                tracing::info!(key, "the checks' memo entry is not usable: {e}");
                None
            }
        }
    }

    /// Keep `results` under `key` (a failure is logged: the next run computes them again).
    pub async fn put(&self, key: &str, measure: Measure, results: &[PerWindow]) {
        let bytes = match encode(measure, results) {
            Ok(b) => b,
            Err(e) => {
                tracing::info!(key, "the checks' results are not memoised: {e}");
                return;
            }
        };
        if let Err(e) = self
            .store
            .put(&self.path(key), PutPayload::from(bytes))
            .await
        {
            tracing::info!(key, "the checks' memo could not be written: {e}");
        }
    }
}

/// The memo key of running `plan` for `context` (see the module documentation); `None` if a
/// scan of the plan cannot name the files it reads.
pub fn key(plan: &Arc<dyn ExecutionPlan>, context: &str) -> Option<String> {
    let mut h = Sha256::new();
    h.update(context.as_bytes());
    h.update(b"\0");
    h.update(
        displayable(plan.as_ref())
            .indent(true)
            .to_string()
            .as_bytes(),
    );
    scans(plan, &mut h)?;
    Some(hex::encode(h.finalize()))
}

/// Hash what every scan below `plan` reads; `None` at a leaf that cannot say.
fn scans(plan: &Arc<dyn ExecutionPlan>, h: &mut Sha256) -> Option<()> {
    let children = plan.children();
    if children.is_empty() {
        // The columns and types it produces (a zone's schema comes from a file it may not
        // read; a cast to it is part of the answer).
        h.update(format!("{:?}\0", plan.schema()).as_bytes());
        if let Some(z) = plan.downcast_ref::<ZoneScanExec>() {
            h.update(b"zone\0");
            files(z.files().iter(), h);
        } else if let Some(d) = plan.downcast_ref::<DataSourceExec>() {
            let config = d.data_source().downcast_ref::<FileScanConfig>()?;
            h.update(b"files\0");
            h.update(config.object_store_url.as_str().as_bytes());
            for group in &config.file_groups {
                h.update(b"group\0");
                files(group.iter(), h);
            }
        } else if !(plan.is::<EmptyExec>() || plan.is::<PlaceholderRowExec>()) {
            return None;
        }
    }
    for c in children {
        scans(c, h)?;
    }
    Some(())
}

/// Whether every local file the scans below `plan` read (DataFusion's, and the checks' own
/// zone reader's) still has the size and modification time their listing gave (what the key
/// holds): results over a file that changed while the query ran are not memoised. A file
/// listed without a modification time (delta-rs names a Delta table's files by path and
/// size; the key holds the table's pinned version) is compared by size. Remote files are not
/// asked again (a request each): the checks' zone reader reads them conditionally on their
/// listed ETag, and elsewhere the memo relies on a changed object having another ETag.
pub fn still_as_listed(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let same = |f: &PartitionedFile| {
        let m = &f.object_meta;
        let path = std::path::Path::new("/").join(m.location.as_ref());
        let untimed = m.last_modified.timestamp_nanos_opt() == Some(0);
        std::fs::metadata(path).is_ok_and(|now| {
            now.len() == m.size
                && (untimed
                    || now
                        .modified()
                        .is_ok_and(|t| chrono::DateTime::<chrono::Utc>::from(t) == m.last_modified))
        })
    };
    if let Some(d) = plan.downcast_ref::<DataSourceExec>()
        && let Some(config) = d.data_source().downcast_ref::<FileScanConfig>()
        && config.object_store_url.as_str().starts_with("file://")
        && !config.file_groups.iter().all(|g| g.iter().all(same))
    {
        return false;
    }
    if let Some(z) = plan.downcast_ref::<ZoneScanExec>()
        && z.is_local()
        && !z.files().iter().all(same)
    {
        return false;
    }
    plan.children().into_iter().all(still_as_listed)
}

fn files<'a>(files: impl Iterator<Item = &'a PartitionedFile>, h: &mut Sha256) {
    for f in files {
        let m = &f.object_meta;
        let line = format!(
            "{}|{}|{}|{:?}|{:?}|{:?}|{:?}\n",
            m.location,
            m.size,
            m.last_modified.timestamp_nanos_opt().unwrap_or_default(),
            m.e_tag,
            m.version,
            f.partition_values,
            f.range.as_ref().map(|r| (r.start, r.end)),
        );
        h.update(line.as_bytes());
    }
}

fn measure_name(m: Measure) -> &'static str {
    match m {
        Measure::Query => "query",
        Measure::Rows => "rows",
        Measure::Content => "content",
    }
}

/// `results` as one Arrow IPC file: the query's rows (one per window), or the counts, or the
/// fingerprints.
fn encode(measure: Measure, results: &[PerWindow]) -> Result<Vec<u8>, String> {
    let meta =
        std::collections::HashMap::from([(MEASURE.to_string(), measure_name(measure).to_string())]);
    let u64s = |cols: Vec<(&str, Vec<u64>)>| -> Result<RecordBatch, String> {
        let fields: Vec<Field> = cols
            .iter()
            .map(|(n, _)| Field::new(*n, DataType::UInt64, false))
            .collect();
        let arrays: Vec<Arc<dyn Array>> = cols
            .into_iter()
            .map(|(_, v)| Arc::new(UInt64Array::from(v)) as Arc<dyn Array>)
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(|e| e.to_string())
    };
    let batch = match measure {
        Measure::Query => {
            let rows: Vec<&RecordBatch> = results
                .iter()
                .map(|r| match r {
                    PerWindow::Query(b) if b.num_rows() == 1 => Ok(b),
                    _ => Err("not one row per window".to_string()),
                })
                .collect::<Result<_, _>>()?;
            let schema = rows.first().ok_or("no windows")?.schema();
            arrow::compute::concat_batches(&schema, rows).map_err(|e| e.to_string())?
        }
        Measure::Rows => u64s(vec![(
            "rows",
            results
                .iter()
                .map(|r| match r {
                    PerWindow::Rows(n) => Ok(*n),
                    _ => Err("not a row count".to_string()),
                })
                .collect::<Result<_, _>>()?,
        )])?,
        Measure::Content => {
            let fps: Vec<super::Fingerprint> = results
                .iter()
                .map(|r| match r {
                    PerWindow::Content(f) => Ok(*f),
                    _ => Err("not a fingerprint".to_string()),
                })
                .collect::<Result<_, _>>()?;
            u64s(vec![
                ("rows", fps.iter().map(|f| f.rows).collect()),
                ("sum", fps.iter().map(|f| f.sum).collect()),
                ("xor", fps.iter().map(|f| f.xor).collect()),
            ])?
        }
    };
    let schema = Arc::new(batch.schema().as_ref().clone().with_metadata(meta));
    let batch = batch
        .with_schema(schema.clone())
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut w =
        arrow::ipc::writer::FileWriter::try_new(&mut out, &schema).map_err(|e| e.to_string())?;
    w.write(&batch).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    drop(w);
    Ok(out)
}

/// The results [`encode`] wrote, if they are `windows` windows measured by `measure`.
fn decode(bytes: &[u8], measure: Measure, windows: usize) -> Result<Vec<PerWindow>, String> {
    let reader = arrow::ipc::reader::FileReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| e.to_string())?;
    let schema = reader.schema();
    if schema.metadata().get(MEASURE).map(String::as_str) != Some(measure_name(measure)) {
        return Err("another measure".into());
    }
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let batch = arrow::compute::concat_batches(&schema, &batches).map_err(|e| e.to_string())?;
    if batch.num_rows() != windows {
        return Err(format!("{} windows, not {windows}", batch.num_rows()));
    }
    let column = |name: &str| -> Result<&UInt64Array, String> {
        batch
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
            .ok_or_else(|| format!("no column {name}"))
    };
    Ok(match measure {
        Measure::Query => {
            let plain = Arc::new(schema.as_ref().clone().with_metadata(Default::default()));
            let batch =
                RecordBatch::try_new(plain, batch.columns().to_vec()).map_err(|e| e.to_string())?;
            (0..windows)
                .map(|i| PerWindow::Query(batch.slice(i, 1)))
                .collect()
        }
        Measure::Rows => column("rows")?
            .values()
            .iter()
            .map(|n| PerWindow::Rows(*n))
            .collect(),
        Measure::Content => {
            let (rows, sum, xor) = (column("rows")?, column("sum")?, column("xor")?);
            (0..windows)
                .map(|i| {
                    PerWindow::Content(super::Fingerprint {
                        rows: rows.value(i),
                        sum: sum.value(i),
                        xor: xor.value(i),
                    })
                })
                .collect()
        }
    })
}

#[cfg(test)]
mod tests;
