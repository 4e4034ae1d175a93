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
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::prelude::SessionContext;

use super::listing_url;
use crate::error::{Error, Result};
use crate::pipeline::landing::{
    Route, compression_of, exact_file_table, incomplete, read_header, read_schema,
};
use crate::task::{Format, Source};

/// Register text source `s` with listing `options` in `ctx`: on the runner's routes (`route`
/// other than [`Route::Listing`]) with its integer and untyped columns read exactly; in the
/// runner's session (`runner`, whatever its engine) a CSV directory's headers checked.
pub(super) async fn register(
    ctx: &SessionContext,
    s: &Source,
    options: ListingOptions,
    route: Route,
    runner: bool,
) -> Result<()> {
    let url = listing_url(&s.uri)?;
    let csv = s.format == Format::Csv;
    let schema = options.infer_schema(&ctx.state(), &url).await?;
    if csv && s.csv_header && url.is_collection() && runner {
        check_headers(ctx, s, &url, &options).await?;
    }
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

/// Every file of CSV directory `url` has the first file's header (in path order): arrow's CSV
/// reader reads by column position, so a file with the same columns in another order had its
/// values published in other columns, every check passing (every route reads alike). A file
/// whose header differs fails the run with exit 2 naming it and both headers; one with no
/// complete first line yet is still being written (retryable); an empty file is skipped, as
/// DataFusion's reader skips it. One read of at most 64 KiB per file and run; the whole
/// directory is read for every window anyway.
async fn check_headers(
    ctx: &SessionContext,
    s: &Source,
    url: &ListingTableUrl,
    options: &ListingOptions,
) -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    let store = ctx.runtime_env().object_store(url)?;
    let state = ctx.state();
    let mut files: Vec<object_store::ObjectMeta> = url
        .list_all_files(&state, store.as_ref(), &options.file_extension)
        .await?
        .try_filter(|m| futures::future::ready(m.size > 0))
        .try_collect()
        .await?;
    files.sort_by(|a, b| a.location.cmp(&b.location));
    let shown = |m: &object_store::ObjectMeta| match url.scheme() {
        "file" => format!("/{}", m.location),
        _ => format!("{}{}", url.object_store().as_str(), m.location),
    };
    let store = store.as_ref();
    let headers = futures::stream::iter(files.iter().map(|m| async move {
        let got = read_header(
            store,
            m,
            s.csv_delimiter,
            compression_of(m.location.as_ref()),
        )
        .await?;
        Ok::<_, Error>((m, got))
    }))
    .buffered(16);
    let headers: Vec<_> = headers.try_collect().await?;
    let mut first: Option<(&object_store::ObjectMeta, Vec<String>)> = None;
    for (m, got) in headers {
        let got = got.map_err(|read| incomplete(&s.alias, &shown(m), read))?;
        match &first {
            None => first = Some((m, got)),
            Some((f, want)) if &got != want => {
                return Err(Error::input(format!(
                    "the header of {} is `{}`, not `{}` (the header of {}, the first file in path order): CSV files are read by column position, so its values would be read into other columns; nothing was read — rewrite the file with that header, or move it out of the directory",
                    shown(m),
                    got.join(","),
                    want.join(","),
                    shown(f)
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::datasource::file_format::file_compression_type::FileCompressionType;

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
