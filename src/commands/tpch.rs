//! TPC-H test and demo data, generated in-process with `tpchgen-arrow`.
//!
//! Writes `lineitem.parquet` and `orders.parquet` for a scale factor (SF 0.01 is ~60k
//! lineitems, SF 1 ~6M). Generation is deterministic: the same scale gives the same rows.
//! Files are written to a temporary name and renamed, so a half-written file is never read.
//! Each file records its scale factor in its footer (key `idemlake.tpch_scale`): an existing
//! file is kept only when it was generated at the scale asked for, so a directory holding
//! another scale (or files of unknown origin) is regenerated, never passed off as the new one.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::record_batch::RecordBatchReader;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use tpchgen::generators::{LineItemGenerator, OrderGenerator};
use tpchgen_arrow::{LineItemArrow, OrderArrow};

use crate::error::{Error, Result};

/// The footer key holding the scale factor a file was generated at.
const SCALE_KEY: &str = "idemlake.tpch_scale";

/// Generate TPC-H `lineitem` and `orders` into `dir` unless files of this scale exist there
/// already (`force`: regenerate anyway). Returns the paths written or found.
pub fn generate(dir: &Path, scale: f64, force: bool) -> Result<Vec<PathBuf>> {
    if !(scale > 0.0 && scale <= 1000.0) {
        return Err(Error::input(format!(
            "scale factor must be in (0, 1000], got {scale}"
        )));
    }
    std::fs::create_dir_all(dir)?;
    let lineitem = dir.join("lineitem.parquet");
    let orders = dir.join("orders.parquet");
    if force || !has_scale(&lineitem, scale) {
        let batches =
            LineItemArrow::new(LineItemGenerator::new(scale, 1, 1)).with_batch_size(64 * 1024);
        write(&lineitem, batches, scale)?;
    }
    if force || !has_scale(&orders, scale) {
        let batches = OrderArrow::new(OrderGenerator::new(scale, 1, 1)).with_batch_size(64 * 1024);
        write(&orders, batches, scale)?;
    }
    Ok(vec![lineitem, orders])
}

/// Whether `path` is a Parquet file generated at `scale` (its footer says so).
fn has_scale(path: &Path, scale: f64) -> bool {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let Ok(file) = File::open(path) else {
        return false;
    };
    let Ok(reader) = SerializedFileReader::new(file) else {
        return false;
    };
    let recorded = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == SCALE_KEY))
        .and_then(|k| k.value.as_deref())
        .and_then(|v| v.parse::<f64>().ok());
    recorded == Some(scale)
}

fn write(path: &Path, mut batches: impl RecordBatchReader, scale: f64) -> Result<()> {
    let tmp = path.with_extension("parquet.tmp");
    let file = File::create(&tmp)?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            SCALE_KEY.to_string(),
            scale.to_string(),
        )]))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(path: &Path) -> i64 {
        use parquet::file::reader::FileReader as _;
        parquet::file::reader::SerializedFileReader::new(File::open(path).unwrap())
            .unwrap()
            .metadata()
            .file_metadata()
            .num_rows()
    }

    /// Defect (issue 37): `gen-tpch --scale 0.002` into a directory holding SF 0.001 kept the
    /// old files and said the new scale was ready (`SCALE=1 make demo` after `make demo` stayed
    /// at SF 0.01). Files of another scale are replaced; files of the same scale are kept.
    #[test]
    fn a_new_scale_replaces_files_of_another_scale() {
        let dir = tempfile::tempdir().unwrap();
        let [_, orders] = generate(dir.path(), 0.001, false)
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(rows(&orders), 1_500);
        let [lineitem, orders] = generate(dir.path(), 0.002, false)
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(rows(&orders), 3_000);
        let lines = rows(&lineitem);
        assert!(lines > 6_000, "{lines}");
        let before = std::fs::metadata(&lineitem).unwrap().modified().unwrap();
        generate(dir.path(), 0.002, false).unwrap();
        let after = std::fs::metadata(&lineitem).unwrap().modified().unwrap();
        assert_eq!(before, after, "the same scale is not generated again");
    }
}
