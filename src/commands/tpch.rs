//! TPC-H test and demo data, generated in-process with `tpchgen-arrow`.
//!
//! Writes `lineitem.parquet` and `orders.parquet` for a scale factor (SF 0.01 is ~60k
//! lineitems, SF 1 ~6M). Generation is deterministic: the same scale gives the same rows.
//! Files are written to a temporary name and renamed, so a half-written file is never read.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::record_batch::RecordBatchReader;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use tpchgen::generators::{LineItemGenerator, OrderGenerator};
use tpchgen_arrow::{LineItemArrow, OrderArrow};

use crate::error::{Error, Result};

/// Generate TPC-H `lineitem` and `orders` into `dir` unless they already exist.
/// Returns the paths written or found.
pub fn generate(dir: &Path, scale: f64, force: bool) -> Result<Vec<PathBuf>> {
    if !(scale > 0.0 && scale <= 1000.0) {
        return Err(Error::input(format!(
            "scale factor must be in (0, 1000], got {scale}"
        )));
    }
    std::fs::create_dir_all(dir)?;
    let lineitem = dir.join("lineitem.parquet");
    let orders = dir.join("orders.parquet");
    if force || !lineitem.exists() {
        let batches =
            LineItemArrow::new(LineItemGenerator::new(scale, 1, 1)).with_batch_size(64 * 1024);
        write(&lineitem, batches)?;
    }
    if force || !orders.exists() {
        let batches = OrderArrow::new(OrderGenerator::new(scale, 1, 1)).with_batch_size(64 * 1024);
        write(&orders, batches)?;
    }
    Ok(vec![lineitem, orders])
}

fn write(path: &Path, mut batches: impl RecordBatchReader) -> Result<()> {
    let tmp = path.with_extension("parquet.tmp");
    let file = File::create(&tmp)?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let schema = batches.schema();
    let mut w = ArrowWriter::try_new(file, schema, Some(props))
        .map_err(|e| Error::runtime(format!("writing {}: {e}", path.display())))?;
    for b in batches.by_ref() {
        w.write(&b?)
            .map_err(|e| Error::runtime(format!("writing {}: {e}", path.display())))?;
    }
    w.close()
        .map_err(|e| Error::runtime(format!("writing {}: {e}", path.display())))?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
