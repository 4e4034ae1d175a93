//! A remote Parquet file read by ranges for the checks' own reader (see `files`): its footer,
//! then the column chunks a scan needs, through the checks' own client; and every read of the
//! checks' reader pinned to the version of the file its listing saw ([`pinned`],
//! [`unchanged`], [`local_unchanged`]): what the checks read is what their key names
//! (`checks::memo`), or the read fails.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

/// A read of the version of a file its listing saw: conditional on its ETag when the
/// listing gave one (storage refuses the read if the object was replaced since; a local
/// file's ETag is object_store's, of its inode, size and modification time). The body's
/// metadata is checked too ([`unchanged`]).
pub fn pinned(listed: &ObjectMeta, range: Option<Range<u64>>) -> GetOptions {
    GetOptions {
        if_match: listed.e_tag.clone(),
        range: range.map(GetRange::Bounded),
        ..Default::default()
    }
}

/// Whether the object a read returned is the one listed: same size, and the same ETag or
/// (without one) the same modification time. `Err`: what differs.
pub fn unchanged(listed: &ObjectMeta, got: &ObjectMeta) -> std::result::Result<(), String> {
    if got.size != listed.size {
        return Err(format!(
            "it changed after it was listed ({} bytes, listed with {})",
            got.size, listed.size
        ));
    }
    let same = match (&listed.e_tag, &got.e_tag) {
        (Some(a), Some(b)) => a == b,
        _ => got.last_modified == listed.last_modified,
    };
    if same {
        Ok(())
    } else {
        Err("it changed after it was listed (another ETag or modification time)".to_string())
    }
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
