//! Registering a file source that may be a landing zone.

use std::sync::Arc;

use datafusion::datasource::listing::ListingOptions;
use datafusion::prelude::{CsvReadOptions, JsonReadOptions, ParquetReadOptions, SessionContext};

use super::{LandingZone, ZoneTable};
use crate::error::Result;
use crate::task::{Format, Source};

/// Which table a landing zone is read through in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The runner's: [`ZoneTable`], pruned listings pinned for the run.
    Zone,
    /// DataFusion's own listing table, refusing lossy conversions of a file's columns
    /// (`casts::StrictCasts`), text read exactly: the runner's plain twin and the independent
    /// checks on the local engine (see `LandingZone::plain_table`).
    Plain,
    /// DataFusion's own listing table as it is (a remote engine).
    Listing,
}

/// Register source `s` in `ctx` if it is a landing zone (a directory with `key=value` levels,
/// or `partitioning = "hive"`); `None` when it is not one (the caller registers it as before).
/// `root`: the location's delimiter listing, if the caller made one (not made again).
pub async fn register(
    ctx: &SessionContext,
    s: &Source,
    route: Route,
    root: Option<object_store::ListResult>,
) -> Result<Option<Arc<LandingZone>>> {
    let Some(options) = listing_options(ctx, s) else {
        return Ok(None);
    };
    let at = (s.alias.as_str(), s.uri.as_str());
    let Some(zone) =
        LandingZone::open(ctx, at, (&s.partitioning, s.schema_from), options, root).await?
    else {
        return Ok(None);
    };
    let zone = Arc::new(zone);
    tracing::debug!(
        source = %s.alias,
        columns = ?zone.partition_columns(),
        ?route,
        "a landing zone (Hive-style partitions)"
    );
    let table: Arc<dyn datafusion::catalog::TableProvider> = match route {
        Route::Zone => match zone.exact_table(None)? {
            Some(table) => table,
            None => Arc::new(ZoneTable::new(zone.clone())),
        },
        Route::Plain => zone.plain_table(None, super::Plain::Twin)?,
        Route::Listing => Arc::new(zone.listing_table()?),
    };
    ctx.register_table(s.alias.as_str(), table)?;
    Ok(Some(zone))
}

/// The listing options of a directory of `s`'s format (the session's defaults, the source's
/// CSV options; with a glob location, any file the glob matches); `None` for a Delta source.
pub fn listing_options(ctx: &SessionContext, s: &Source) -> Option<ListingOptions> {
    use datafusion::datasource::file_format::options::ReadOptions;
    let config = ctx.copied_config();
    let table = ctx.copied_table_options();
    let options = match s.format {
        Format::Parquet => ParquetReadOptions::default().to_listing_options(&config, table),
        Format::Csv => CsvReadOptions::new()
            .has_header(s.csv_header)
            .delimiter(s.csv_delimiter)
            .to_listing_options(&config, table),
        Format::Json => JsonReadOptions::default().to_listing_options(&config, table),
        Format::Delta | Format::Postgres => return None,
    };
    // A glob names its files itself (`*/*.jsonl`, `*/*.tsv`): no extension is required too.
    match super::glob::split(&s.uri) {
        Ok((_, Some(_))) => Some(options.with_file_extension("")),
        _ => Some(options),
    }
}
