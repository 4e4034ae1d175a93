//! Text file sources (CSV, JSON lines) that are not landing zones: compressed files read
//! decompressed, and integer columns read exactly on the runner's routes.
//!
//! - A single file named with a compression suffix (`events.csv.gz`, `.bz2`, `.xz`, `.zst`)
//!   is read through DataFusion's decompression, on every route (the checks' too). It was read
//!   as text before: an invalid-UTF-8 error, exit 1, retryable.
//! - DataFusion infers a text file's column types from its first 1,000 records. A value
//!   after them that is not of the inferred type was changed without a word (arrow's JSON
//!   reader reads `1.5` into a `BIGINT` column as 1) or failed the scan as if retrying could
//!   help (CSV). The runner's routes read such columns as landing zones do
//!   (`landing::exact_file_table`): a value that cannot be kept fails the window, exit 2.

use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig};
use datafusion::prelude::SessionContext;

use super::listing_url;
use crate::error::Result;
use crate::pipeline::landing::{Route, exact_file_table, read_schema};
use crate::task::{Format, Source};

/// The compression a single file's name says it has (its last suffix), if any DataFusion
/// reads: `events.csv.gz` is gzip.
pub(super) fn compression_of(location: &str) -> Option<FileCompressionType> {
    let name = location.rsplit('/').next().unwrap_or(location);
    let (_, suffix) = name.rsplit_once('.')?;
    match suffix.to_ascii_lowercase().as_str() {
        "gz" | "gzip" => Some(FileCompressionType::GZIP),
        "bz2" => Some(FileCompressionType::BZIP2),
        "xz" => Some(FileCompressionType::XZ),
        "zst" | "zstd" => Some(FileCompressionType::ZSTD),
        _ => None,
    }
}

/// Register text source `s` with listing `options` in `ctx`: on the runner's routes (`route`
/// other than [`Route::Listing`]) with its integer and untyped columns read exactly.
pub(super) async fn register(
    ctx: &SessionContext,
    s: &Source,
    options: ListingOptions,
    route: Route,
) -> Result<()> {
    let url = listing_url(&s.uri)?;
    let csv = s.format == Format::Csv;
    let schema = options.infer_schema(&ctx.state(), &url).await?;
    let read = match route {
        Route::Listing => None,
        Route::Zone | Route::Plain => read_schema(&schema, csv),
    };
    let table = |schema| -> Result<Arc<dyn TableProvider>> {
        let config = ListingTableConfig::new(url.clone())
            .with_listing_options(options.clone())
            .with_schema(schema);
        Ok(Arc::new(ListingTable::try_new(config)?))
    };
    let provider = match read {
        Some(read) => exact_file_table(table(read.clone())?, schema, &read, &s.alias),
        None => table(schema)?,
    };
    ctx.register_table(s.alias.as_str(), provider)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_last_suffix_names_its_compression() {
        for (name, want) in [
            ("data/ev.csv.gz", Some(FileCompressionType::GZIP)),
            ("s3://b/ev.JSON.GZ", Some(FileCompressionType::GZIP)),
            ("ev.csv.bz2", Some(FileCompressionType::BZIP2)),
            ("ev.csv.xz", Some(FileCompressionType::XZ)),
            ("ev.json.zst", Some(FileCompressionType::ZSTD)),
            ("ev.csv", None),
            ("ev.gz/part.csv", None),
            ("ev", None),
        ] {
            assert_eq!(compression_of(name), want, "{name}");
        }
    }
}
