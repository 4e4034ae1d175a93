//! The rows of committed files as their own Parquet footers say, read from storage through
//! the read-back's own client.

use crate::delta::partition::WindowFile;
use crate::error::{Error, Result};

/// Files whose footers are read at once.
const FOOTERS_AT_ONCE: usize = 16;
/// The bytes read from a file's end at first: its footer, unless the metadata is larger.
const FOOTER_GUESS: u64 = 64 * 1024;

/// The rows `files` hold as each one's own Parquet footer says, read from `store` (the table's
/// root): what a reader of the committed files gets, not the `numRecords` statistics this
/// run's writer put in its adds (which `rows_staged` already compared with the rows produced).
pub async fn footer_rows(
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    files: &[WindowFile],
) -> Result<u64> {
    use futures::{StreamExt, TryStreamExt};
    let paths: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    let counts: Vec<u64> = futures::stream::iter(paths.into_iter().map(|p| {
        let store = store.clone();
        async move { file_rows(store, p).await }
    }))
    .buffer_unordered(FOOTERS_AT_ONCE)
    .try_collect()
    .await?;
    Ok(counts.iter().sum())
}

/// The number of rows in the footer of the Parquet file at `path`.
async fn file_rows(
    store: std::sync::Arc<dyn object_store::ObjectStore>,
    path: String,
) -> Result<u64> {
    use object_store::{GetOptions, GetRange};
    let bad =
        |e: &dyn std::fmt::Display| Error::runtime(format!("read-back: the footer of {path}: {e}"));
    let location = object_store::path::Path::parse(&path).map_err(|e| bad(&e))?;
    let get = |range: GetRange| {
        let (store, location) = (store.clone(), location.clone());
        async move {
            let options = GetOptions {
                range: Some(range),
                ..Default::default()
            };
            let got = store.get_opts(&location, options).await?;
            let size = got.meta.size;
            Ok::<_, object_store::Error>((got.bytes().await?, size))
        }
    };
    let (tail, size) = get(GetRange::Suffix(FOOTER_GUESS))
        .await
        .map_err(|e| bad(&e))?;
    let n = tail.len();
    if n < 8 || &tail[n - 4..] != b"PAR1" {
        return Err(bad(&"not a Parquet file"));
    }
    let len = u64::from(u32::from_le_bytes(
        tail[n - 8..n - 4].try_into().expect("4 bytes"),
    ));
    let metadata = if len + 8 <= n as u64 {
        tail.slice(n - 8 - len as usize..n - 8)
    } else {
        let start = size
            .checked_sub(len + 8)
            .ok_or_else(|| bad(&"a footer longer than the file"))?;
        get(GetRange::Bounded(start..size - 8))
            .await
            .map_err(|e| bad(&e))?
            .0
    };
    let md = parquet::file::metadata::ParquetMetaDataReader::decode_metadata(&metadata)
        .map_err(|e| bad(&e))?;
    u64::try_from(md.file_metadata().num_rows()).map_err(|e| bad(&e))
}
