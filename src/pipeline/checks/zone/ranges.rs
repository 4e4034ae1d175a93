//! A remote Parquet file read by ranges for the checks' own reader (see `files`): its footer,
//! then the column chunks a scan needs, through the checks' own client; and every read of the
//! checks' reader pinned to the version of the file its listing saw ([`pinned`],
//! [`unchanged`], [`local_unchanged`]): what the checks read is what their key names
//! (`checks::memo`), or the read fails.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::error::{DataFusionError, Result as DfResult};
use futures::FutureExt;
use futures::future::BoxFuture;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

/// An ETag as a value to compare: without a weak marker (`W/`) or quotes; `None` if empty
/// (some S3-compatible servers list versioned objects with an empty ETag).
fn etag(e: &Option<String>) -> Option<&str> {
    let e = e.as_deref()?.trim();
    let e = e.strip_prefix("W/").unwrap_or(e).trim_matches('"');
    (!e.is_empty()).then_some(e)
}

/// A read of a remote file's version its listing saw: conditional on the listed ETag when
/// the listing gave one (storage refuses the read if the object was replaced since). The
/// returned object's metadata is checked too ([`unchanged`]).
pub fn pinned(listed: &ObjectMeta, range: Option<Range<u64>>) -> GetOptions {
    GetOptions {
        if_match: listed
            .e_tag
            .clone()
            .filter(|_| etag(&listed.e_tag).is_some()),
        range: range.map(GetRange::Bounded),
        ..Default::default()
    }
}

/// Whether the object a read returned is the one listed: same size, and the same ETag (quotes
/// and weak markers aside); without a listed ETag, the same modification time. `Err`: what
/// differs.
pub fn unchanged(listed: &ObjectMeta, got: &ObjectMeta) -> std::result::Result<(), String> {
    if got.size != listed.size {
        return Err(format!(
            "it changed after it was listed ({} bytes, listed with {})",
            got.size, listed.size
        ));
    }
    let same = match (etag(&listed.e_tag), etag(&got.e_tag)) {
        (Some(a), Some(b)) => a == b,
        (Some(_), None) => false,
        (None, _) => got.last_modified == listed.last_modified,
    };
    if same {
        Ok(())
    } else {
        Err("it changed after it was listed (another ETag or modification time)".to_string())
    }
}

/// A fetched file and its permit to be held in memory.
pub type Fetched = (Bytes, tokio::sync::OwnedSemaphorePermit);

/// `file` fetched whole, pinned to its listed version, if it has at most `whole` bytes, once
/// one of `held` is free; `None`: read it by ranges.
pub async fn fetch(
    store: Arc<dyn ObjectStore>,
    file: PartitionedFile,
    whole: u64,
    held: Arc<tokio::sync::Semaphore>,
) -> DfResult<(PartitionedFile, Option<Fetched>)> {
    if file.object_meta.size > whole {
        return Ok((file, None));
    }
    let permit = held
        .acquire_owned()
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
    let listed = &file.object_meta;
    let got = async {
        let got = store
            .get_opts(&listed.location, pinned(listed, None))
            .await?;
        if let Err(why) = unchanged(listed, &got.meta) {
            return Err(object_store::Error::Precondition {
                path: listed.location.to_string(),
                source: why.into(),
            });
        }
        got.bytes().await
    }
    .await
    .map_err(|e| DataFusionError::ObjectStore(Box::new(e)))?;
    Ok((file, Some((got, permit))))
}

/// Whether an opened local file is the one listed: same size and modification time (a file
/// replaced since has another; one rewritten in place while it is read is not caught here).
pub fn local_unchanged(
    listed: &ObjectMeta,
    opened: &std::fs::Metadata,
) -> std::result::Result<(), String> {
    let modified = opened
        .modified()
        .map(chrono::DateTime::<chrono::Utc>::from)
        .map_err(|e| e.to_string())?;
    if opened.len() == listed.size && modified == listed.last_modified {
        Ok(())
    } else {
        Err(format!(
            "it changed after it was listed ({} bytes modified at {modified}, listed with {} at {})",
            opened.len(),
            listed.size,
            listed.last_modified
        ))
    }
}

/// A remote file read by ranges, each read pinned to the listed version ([`pinned`]).
pub struct Ranges {
    pub store: Arc<dyn ObjectStore>,
    pub listed: ObjectMeta,
}

fn parquet_error(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl Ranges {
    async fn range(&self, range: Range<u64>) -> object_store::Result<Bytes> {
        let location: &Path = &self.listed.location;
        let got = self
            .store
            .get_opts(location, pinned(&self.listed, Some(range)))
            .await?;
        if let Err(why) = unchanged(&self.listed, &got.meta) {
            return Err(object_store::Error::Precondition {
                path: location.to_string(),
                source: why.into(),
            });
        }
        got.bytes().await
    }
}

impl AsyncFileReader for Ranges {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, Result<Bytes>> {
        async move { self.range(range).await.map_err(parquet_error) }.boxed()
    }

    fn get_byte_ranges(&mut self, ranges: Vec<Range<u64>>) -> BoxFuture<'_, Result<Vec<Bytes>>> {
        async move {
            // Nearby ranges in one read, as object_store's `get_ranges` does.
            object_store::coalesce_ranges(
                &ranges,
                |r| self.range(r),
                object_store::OBJECT_STORE_COALESCE_DEFAULT,
            )
            .await
            .map_err(parquet_error)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.listed.size;
            let metadata = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}
