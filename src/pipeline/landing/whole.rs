//! Reading a remote landing zone's small files with one request each.
//!
//! DataFusion's Parquet reader fetches a file's footer, then the column chunks it needs: two
//! GETs a file at least, and a landing zone's files are small (tens of KiB) while a request to
//! an object store costs a round trip. A file of at most [`WHOLE_FILE_BYTES`] is fetched whole,
//! once, and its footer and pages are served from that copy; larger files are read as
//! DataFusion reads them. Used by the runner's route ([`super::ZoneTable`]) on object stores
//! only; the checks' route does not use it (it reads through DataFusion's own reader).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::{
    DefaultParquetFileReaderFactory, ParquetFileReaderFactory,
};
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use futures::FutureExt;
use futures::future::BoxFuture;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

/// Files up to this size are fetched whole, with one request.
pub const WHOLE_FILE_BYTES: u64 = 1 << 20;

/// See the module documentation.
pub struct WholeSmallFiles {
    store: Arc<dyn ObjectStore>,
    larger: DefaultParquetFileReaderFactory,
}

impl fmt::Debug for WholeSmallFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WholeSmallFiles({})", self.store)
    }
}

impl WholeSmallFiles {
    pub fn new(store: Arc<dyn ObjectStore>) -> WholeSmallFiles {
        WholeSmallFiles {
            larger: DefaultParquetFileReaderFactory::new(store.clone()),
            store,
        }
    }
}

impl ParquetFileReaderFactory for WholeSmallFiles {
    fn create_reader(
        &self,
        partition_index: usize,
        file: PartitionedFile,
        metadata_size_hint: Option<usize>,
        metrics: &ExecutionPlanMetricsSet,
    ) -> datafusion::error::Result<Box<dyn AsyncFileReader + Send>> {
        if file.object_meta.size > WHOLE_FILE_BYTES {
            return self
                .larger
                .create_reader(partition_index, file, metadata_size_hint, metrics);
        }
        Ok(Box::new(WholeFile {
            store: self.store.clone(),
            location: file.object_meta.location,
            size: file.object_meta.size,
            bytes: None,
        }))
    }
}

/// One small file, fetched whole on first use.
struct WholeFile {
    store: Arc<dyn ObjectStore>,
    location: object_store::path::Path,
    /// The size the listing gave: a file of another size now was rewritten since.
    size: u64,
    bytes: Option<Bytes>,
}

impl WholeFile {
    async fn bytes(&mut self) -> parquet::errors::Result<Bytes> {
        if let Some(b) = &self.bytes {
            return Ok(b.clone());
        }
        let external = |e: object_store::Error| ParquetError::External(Box::new(e));
        let got = self.store.get(&self.location).await.map_err(external)?;
        let bytes = got.bytes().await.map_err(external)?;
        if bytes.len() as u64 != self.size {
            return Err(ParquetError::General(format!(
                "{} is {} bytes, the listing said {}: it changed while it was read",
                self.location,
                bytes.len(),
                self.size
            )));
        }
        self.bytes = Some(bytes.clone());
        Ok(bytes)
    }

    fn slice(bytes: &Bytes, range: Range<u64>) -> parquet::errors::Result<Bytes> {
        if range.start > range.end || range.end > bytes.len() as u64 {
            return Err(ParquetError::General(format!(
                "range {range:?} outside a file of {} bytes",
                bytes.len()
            )));
        }
        Ok(bytes.slice(range.start as usize..range.end as usize))
    }
}

impl AsyncFileReader for WholeFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move { WholeFile::slice(&self.bytes().await?, range) }.boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            let bytes = self.bytes().await?;
            ranges
                .into_iter()
                .map(|r| WholeFile::slice(&bytes, r))
                .collect()
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let bytes = self.bytes().await?;
            let mut reader = ParquetMetaDataReader::new();
            if let Some(o) = options {
                reader = reader
                    .with_column_index_policy(o.column_index_policy())
                    .with_offset_index_policy(o.offset_index_policy());
            }
            Ok(Arc::new(reader.parse_and_finish(&bytes)?))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use futures::TryStreamExt;
    use object_store::PutPayload;
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use parquet::arrow::ParquetRecordBatchStreamBuilder;

    use super::*;
    use crate::storage::wrap::{Intercept, Wrapped};

    /// Requests seen by [`Seen`] stores: (kind, object).
    static SEEN: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());

    #[derive(Debug)]
    struct Seen(InMemory);

    impl fmt::Display for Seen {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Seen")
        }
    }

    impl Intercept for Seen {
        fn inner(&self) -> &dyn ObjectStore {
            &self.0
        }
        fn request_hook(&self) -> Option<fn(&'static str, &Path, u64)> {
            Some(|kind, p, _| SEEN.lock().unwrap().push((kind, p.to_string())))
        }
    }

    /// A Parquet file of `rows` rows (two row groups) at `path` in a counting store.
    async fn file(path: &str, rows: i64) -> (Arc<dyn ObjectStore>, PartitionedFile) {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .unwrap();
        let mut buf = Vec::new();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some((rows / 2) as usize))
            .build();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(Wrapped(Seen(InMemory::new())));
        let location = Path::from(path);
        store.put(&location, PutPayload::from(buf)).await.unwrap();
        let meta = store.head(&location).await.unwrap();
        SEEN.lock().unwrap().retain(|(_, p)| p != path);
        (store, PartitionedFile::from(meta))
    }

    async fn read(
        store: Arc<dyn ObjectStore>,
        file: PartitionedFile,
    ) -> parquet::errors::Result<i64> {
        let reader = WholeFile {
            store,
            location: file.object_meta.location,
            size: file.object_meta.size,
            bytes: None,
        };
        let stream = ParquetRecordBatchStreamBuilder::new(reader)
            .await?
            .build()?;
        let batches: Vec<RecordBatch> = stream.try_collect().await?;
        Ok(batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .sum())
    }

    fn requests(path: &str) -> Vec<&'static str> {
        SEEN.lock()
            .unwrap()
            .iter()
            .filter(|(_, p)| p == path)
            .map(|(k, _)| *k)
            .collect()
    }

    /// A small file's footer and both row groups come from one GET.
    #[tokio::test]
    async fn a_small_file_is_read_with_one_request() {
        let (store, f) = file("zone/dt=2026-11-01/small.parquet", 1000).await;
        assert_eq!(read(store, f).await.unwrap(), (0..1000).sum::<i64>());
        assert_eq!(requests("zone/dt=2026-11-01/small.parquet"), vec!["GET"]);
    }

    /// A file whose size is not the listing's (rewritten since) is an error, not a mix.
    #[tokio::test]
    async fn a_small_file_rewritten_since_its_listing_is_refused() {
        let (store, mut f) = file("zone/dt=2026-11-02/changed.parquet", 100).await;
        f.object_meta.size += 1;
        let err = read(store, f).await.unwrap_err().to_string();
        assert!(err.contains("changed while it was read"), "{err}");
    }
}
