//! A CSV zone's files are read by column position (arrow's CSV reader skips a header line, it
//! does not match it), so a file whose header differs from the first file's — the same
//! columns in another order, one more, one fewer — had its values read into other columns,
//! every check passing since every route reads alike. Before the runner's routes scan a CSV
//! zone's files, each file's header is read (its first 64 KiB at most, once per run) and must
//! be the zone's; a file whose header differs fails the window with exit 2 naming it and both
//! headers, and nothing is read.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::logical_expr::Expr;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt};

use super::{LandingZone, Listing};
use crate::error::{Error, Result};

/// How much of a file is read for its header.
const HEADER_BYTES: u64 = 64 << 10;

/// How much of a file is read for a header longer than [`HEADER_BYTES`].
const MAX_HEADER_BYTES: u64 = 4 << 20;

/// Files' headers read at once.
const CONCURRENT_READS: usize = 16;

/// The header check of a CSV zone's files (see the module documentation).
#[derive(Debug)]
pub struct Headers {
    zone: Arc<LandingZone>,
    delimiter: u8,
    /// The files (location, size) whose headers this run found to be the zone's.
    checked: Mutex<HashSet<(Path, u64)>>,
}

impl Headers {
    pub fn new(zone: Arc<LandingZone>, delimiter: u8) -> Headers {
        Headers {
            zone,
            delimiter,
            checked: Mutex::new(HashSet::new()),
        }
    }

    /// Check the headers of the files a scan with `filters` reads (the run's pinned listings).
    pub async fn check(&self, filters: &[Expr]) -> Result<()> {
        let files = self.zone.files(filters, Listing::Pinned).await?;
        let todo: Vec<ObjectMeta> = {
            let done = self.checked.lock().expect("not poisoned");
            files
                .into_iter()
                .map(|f| f.object_meta)
                .filter(|m| !done.contains(&(m.location.clone(), m.size)))
                .collect()
        };
        let want: Vec<String> = self
            .zone
            .file_schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let read = futures::stream::iter(todo.into_iter().map(|m| async move {
            let got = self.header(&m).await?;
            Ok::<_, Error>((m, got))
        }))
        .buffer_unordered(CONCURRENT_READS);
        let read: Vec<(ObjectMeta, Vec<String>)> = read.try_collect().await?;
        for (m, got) in read {
            if got != want {
                return Err(Error::input(format!(
                    "source `{}`: the header of {} is `{}`, not the zone's `{}` (taken from its first file in path order): CSV files are read by column position, so its values would be read into other columns; nothing was read — rewrite the file with the zone's header, or move it out of the zone",
                    self.zone.alias,
                    self.zone.shown(&m.location),
                    got.join(","),
                    want.join(",")
                )));
            }
            let mut done = self.checked.lock().expect("not poisoned");
            done.insert((m.location, m.size));
        }
        Ok(())
    }

    /// The column names of file `m`'s header (see [`read_header`]); a file with no complete
    /// first line yet is still being written: a retryable failure.
    async fn header(&self, m: &ObjectMeta) -> Result<Vec<String>> {
        let compression = self.zone.compression;
        read_header(self.zone.store.as_ref(), m, self.delimiter, compression)
            .await?
            .map_err(|read| incomplete(&self.zone.alias, &self.zone.shown(&m.location), read))
    }
}

/// The column names of CSV file `m`'s header in `store`: its first line, read whole (a header
/// longer than `HEADER_BYTES` is read up to `MAX_HEADER_BYTES`); `Err(bytes read)` if
/// they hold no complete line.
pub async fn read_header(
    store: &dyn object_store::ObjectStore,
    m: &ObjectMeta,
    delimiter: u8,
    compression: Option<FileCompressionType>,
) -> Result<std::result::Result<Vec<String>, usize>> {
    let head = |bytes| start_of(bytes, compression);
    let mut bytes = head(
        store
            .get_range(&m.location, 0..m.size.min(HEADER_BYTES))
            .await?,
    );
    if !bytes.contains(&b'\n') && m.size > HEADER_BYTES {
        bytes = head(
            store
                .get_range(&m.location, 0..m.size.min(MAX_HEADER_BYTES))
                .await?,
        );
    }
    if !bytes.contains(&b'\n') {
        return Ok(Err(bytes.len()));
    }
    let format = arrow::csv::reader::Format::default()
        .with_header(true)
        .with_delimiter(delimiter);
    let (schema, _) = format.infer_schema(std::io::Cursor::new(bytes), Some(0))?;
    Ok(Ok(schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()))
}

/// The text at the start of a file whose first bytes are `bytes`: as they are, or decompressed
/// as far as they go (a prefix of a compressed stream decodes up to where it is cut).
fn start_of(bytes: bytes::Bytes, compression: Option<FileCompressionType>) -> Vec<u8> {
    use std::io::Read as _;
    let Some(c) = compression else {
        return bytes.to_vec();
    };
    let Ok(mut r) = c.convert_read(std::io::Cursor::new(bytes)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = r.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if out.contains(&b'\n') {
            break;
        }
    }
    out
}

/// A file of source `alias` (shown as `file`) whose first `read` bytes hold no complete line.
pub fn incomplete(alias: &str, file: &str, read: usize) -> Error {
    Error::runtime(format!(
        "source `{alias}`: {file} has no complete header line (within its first {read} bytes): it may still be written; retry later"
    ))
}
