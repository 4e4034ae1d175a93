//! Source registration: each `[sources.<alias>]` becomes a table in the DataFusion session.
//!
//! Invariants: a Delta source is pinned to the version current when the run starts (the whole
//! run, reconciliation included, reads that one version); file sources are fingerprinted
//! (object paths, sizes and modification times) so the run record says exactly what was read.
//! Registration reads schemas and listings only, never rows.

use std::sync::Arc;

use datafusion::datasource::listing::ListingTableUrl;
use datafusion::prelude::{CsvReadOptions, JsonReadOptions, ParquetReadOptions, SessionContext};
use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};

mod postgres;
mod remote;
mod text;

use crate::engine::Engine;
use crate::error::{Error, Result, ResultExt};
use crate::pipeline::landing::{LandingZone, Route};
pub use crate::report::record::SourceVersion;
use crate::task::{Format, Source};
pub use postgres::{Whole, whole, whole_rows};

/// The URL DataFusion uses for a source location (local absolute path or URL).
pub(super) fn listing_url(uri: &str) -> Result<ListingTableUrl> {
    ListingTableUrl::parse(uri).input_err(format!("invalid source location `{uri}`"))
}

/// Which object-store client a session's S3 sources are read through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    /// The process's store for the bucket (`storage::store_for`: with the Delta log cache).
    Shared,
    /// A client built for this registration alone (`storage::own_store_for`: counted, no log
    /// cache), shared with no other session: the independent checks' route.
    Own,
}

/// Register every source of a task in `ctx`; returns what was pinned/fingerprinted.
/// On a remote `engine` a Delta source is registered as its pinned Parquet files (see
/// `register_files`).
pub async fn register(
    ctx: &SessionContext,
    sources: &[Source],
    engine: &Engine,
) -> Result<Vec<SourceVersion>> {
    Ok(register_with_zones(ctx, sources, engine).await?.0)
}

/// [`register`], also returning the landing zones among the sources (see `landing`): read
/// through their pinned listings on the local engine with the accelerations on, through
/// DataFusion's listing table otherwise.
pub async fn register_with_zones(
    ctx: &SessionContext,
    sources: &[Source],
    engine: &Engine,
) -> Result<(Vec<SourceVersion>, Vec<Arc<LandingZone>>)> {
    let route = match (engine.is_local(), crate::accel::session::accelerated()) {
        (true, true) => Route::Zone,
        (true, false) => Route::Plain,
        (false, _) => Route::Listing,
    };
    let mut out = Vec::with_capacity(sources.len());
    let mut zones = Vec::new();
    for s in sources {
        let (v, zone) = register_one(ctx, s, None, engine, (route, Client::Shared))
            .await
            .map_err(|e| e.context(format!("source `{}` ({})", s.alias, s.uri)))?;
        out.push(v);
        zones.extend(zone);
    }
    Ok((out, zones))
}

/// Register every source again in another session (the independent checks' own), Delta
/// sources at the versions `pins` recorded, so both sessions read the same inputs: landing
/// zones the runner `opened` are returned for the caller to register on the local engine (not
/// opened again), the others are registered on the plain route (DataFusion's listing table,
/// strict casts; as it is on a remote engine), and S3 sources through a client of their own
/// (no log cache, not the store the task's session reads through).
pub async fn register_pinned(
    ctx: &SessionContext,
    sources: &[Source],
    pins: &[SourceVersion],
    engine: &Engine,
    opened: &[Arc<LandingZone>],
) -> Result<Vec<Arc<LandingZone>>> {
    let mut zones = Vec::new();
    for s in sources {
        let reused = opened.iter().find(|z| z.alias == s.alias);
        if let Some(zone) = reused.filter(|_| engine.is_local()) {
            // Opened once (partition columns and file schema); read through this session's
            // own client, registered by the caller.
            register_client(ctx, s, Client::Own)?;
            zones.push(zone.clone());
            continue;
        }
        let pin = pins
            .iter()
            .find(|p| p.alias == s.alias)
            .and_then(|p| p.version);
        let route = if engine.is_local() {
            Route::Plain
        } else {
            Route::Listing
        };
        let (_, zone) = register_one(ctx, s, pin, engine, (route, Client::Own))
            .await
            .map_err(|e| e.context(format!("source `{}` ({})", s.alias, s.uri)))?;
        zones.extend(zone);
    }
    Ok(zones)
}

async fn register_one(
    ctx: &SessionContext,
    s: &Source,
    pin: Option<i64>,
    engine: &Engine,
    (route, client): (Route, Client),
) -> Result<(SourceVersion, Option<Arc<LandingZone>>)> {
    if s.format == Format::Postgres {
        if !engine.is_local() {
            return Err(Error::input(
                "a PostgreSQL source is read in this process: run the task on the local engine",
            ));
        }
        return Ok((postgres::register(ctx, s).await?, None));
    }
    let own = register_client(ctx, s, client)?;
    if s.format == Format::Delta {
        return Ok((register_delta(ctx, s, pin, engine, own).await?, None));
    }
    let (prefix, root) = match remote_prefix(ctx, s).await? {
        Some((p, listed)) => (Some(p), Some(listed)),
        None => (None, None),
    };
    let s = prefix.as_ref().unwrap_or(s);
    if let Some(zone) = crate::pipeline::landing::register(ctx, s, route, root).await? {
        // Each window records the files it read (see `landing`), not the whole source.
        let v = SourceVersion {
            alias: s.alias.clone(),
            format: s.format,
            version: None,
            files: None,
            fingerprint: None,
            read: Vec::new(),
            snapshot: None,
        };
        return Ok((v, Some(zone)));
    }
    Ok((
        register_file_source(ctx, s, route, client == Client::Shared).await?,
        None,
    ))
}

/// Register the object store `s` is read through in `ctx` (a remote location's: the process's,
/// or with [`Client::Own`] a client of the caller's own, returned).
fn register_client(
    ctx: &SessionContext,
    s: &Source,
    client: Client,
) -> Result<Option<Arc<dyn ObjectStore>>> {
    if !s.uri.contains("://") {
        return Ok(None);
    }
    let url =
        url::Url::parse(&s.uri).map_err(|e| Error::input(format!("invalid source URL: {e}")))?;
    let store = match client {
        Client::Shared => crate::storage::store_for(&url)?,
        Client::Own => crate::storage::own_store_for(&url)?,
    };
    let Some((bucket, store)) = store else {
        return Ok(None);
    };
    register_store(ctx, &bucket, store.clone());
    Ok((client == Client::Own).then_some(store))
}

/// Register a Delta source, at version `pin` if given (else the latest): through delta-rs on
/// the local engine, as its pinned Parquet files on a remote one; through `own` (a client of
/// the caller's, see [`Client::Own`]) if given, else the process's store for the location.
async fn register_delta(
    ctx: &SessionContext,
    s: &Source,
    pin: Option<i64>,
    engine: &Engine,
    own: Option<Arc<dyn ObjectStore>>,
) -> Result<SourceVersion> {
    let url = crate::task::project::location_url(&s.uri, std::path::Path::new("/"))?;
    if let (None, Ok(path)) = (&s.upstream, url.to_file_path())
        && !path.exists()
    {
        return Err(Error::input(format!(
            "{} does not exist (check the source's `uri`)",
            path.display()
        )));
    }
    let mut table = match own {
        Some(store) => {
            crate::delta::table::builder_for(&url)?.with_storage_backend(store, url.clone())
        }
        None => crate::delta::table::builder(&url)?,
    }
    .build()?;
    let loaded = match pin {
        Some(v) => table.load_version(v as u64).await,
        None => table.load().await,
    };
    if let Err(e) = loaded {
        return Err(match &s.upstream {
            Some(up) if pin.is_none() => Error::runtime(format!(
                "it is task `{up}`'s table, which cannot be read yet (run `{up}` first): {e}"
            )),
            None if matches!(e, deltalake::DeltaTableError::NotATable(_))
                && holds_files(&table).await =>
            {
                Error::input(
                    "the location holds files but no Delta log (`_delta_log/`), so it is not a Delta table; set the source's `format` to its files' format (parquet, csv or json), or point `uri` at the table's root",
                )
            }
            _ => Error::runtime(format!("cannot open delta table: {e}")),
        });
    }
    let version = table.version();
    if engine.is_local() {
        table.update_datafusion_session(&ctx.state())?;
        let provider = table.table_provider().await?;
        ctx.register_table(s.alias.as_str(), provider)?;
    } else {
        remote::register_files(ctx, &s.alias, &table).await?;
    }
    Ok(SourceVersion {
        alias: s.alias.clone(),
        format: s.format,
        version: version.map(|v| v as i64),
        files: None,
        fingerprint: None,
        read: Vec::new(),
        snapshot: None,
    })
}

/// Whether the location of `table` (which has no Delta log) holds any object: files of
/// another format, the task's mistake; an empty location may still become a table.
async fn holds_files(table: &deltalake::DeltaTable) -> bool {
    let store = table.log_store().object_store(None);
    let mut listed = store.list(None);
    matches!(futures::StreamExt::next(&mut listed).await, Some(Ok(_)))
}

/// A remote location without a trailing slash (`s3://raw/events`) names an object or a
/// prefix: an object that exists is a one-file source; otherwise, if anything lies under
/// `s3://raw/events/`, the source is that prefix (as a local path names a file or a
/// directory). `None`: keep `s` as it is (a location where nothing is is then reported as not
/// existing). A HEAD request, and a LIST if no object has that name (returned with the
/// prefix: a landing zone keeps it as its root's listing); none for local paths, globs and
/// locations ending in `/`.
async fn remote_prefix(
    ctx: &SessionContext,
    s: &Source,
) -> Result<Option<(Source, object_store::ListResult)>> {
    let plain = !s.uri.ends_with('/') && !s.uri.contains(['*', '?', '[']);
    if s.format == Format::Delta || !plain || !s.uri.contains("://") || s.uri.starts_with("file:") {
        return Ok(None);
    }
    let url = listing_url(&s.uri)?;
    let store = ctx.runtime_env().object_store(&url)?;
    match store.head(url.prefix()).await {
        Ok(_) => Ok(None),
        Err(object_store::Error::NotFound { .. }) => {
            // object_store lists a path's children: what lies under `events/`.
            let listed = store.list_with_delimiter(Some(url.prefix())).await?;
            if listed.objects.is_empty() && listed.common_prefixes.is_empty() {
                return Ok(None);
            }
            let prefix = Source {
                uri: format!("{}/", s.uri),
                ..s.clone()
            };
            Ok(Some((prefix, listed)))
        }
        Err(e) => Err(e.into()),
    }
}

/// Why a file source's location lists no files: a local location that does not exist, or an
/// S3 object that does not exist, is the task's mistake (exit 2, not retryable); an existing
/// directory or an S3 prefix with nothing in it yet is a runtime failure (files may land).
fn nothing_at(uri: &str, url: &ListingTableUrl) -> Error {
    if url.scheme() == "file" {
        let path = std::path::Path::new("/").join(url.prefix().as_ref());
        if !path.exists() {
            return Error::input(format!(
                "{} does not exist (check the source's `uri`)",
                path.display()
            ));
        }
        return Error::runtime(format!("no files found in {}", path.display()));
    }
    if url.is_collection() {
        return Error::runtime(format!("no objects found under {uri}"));
    }
    Error::input(format!("{uri} does not exist (check the source's `uri`)"))
}

/// Register a file source (Parquet, CSV or JSON) as a listing, fingerprinted; a text source
/// as `text` does (`route`: how it is read; `runner`: the runner's session, not the checks').
async fn register_file_source(
    ctx: &SessionContext,
    s: &Source,
    route: Route,
    runner: bool,
) -> Result<SourceVersion> {
    use datafusion::datasource::file_format::options::ReadOptions;
    let url = listing_url(&s.uri)?;
    let store = ctx.runtime_env().object_store(&url)?;
    let (files, fingerprint) = fingerprint(store.as_ref(), &url).await?;
    if files == 0 {
        return Err(nothing_at(&s.uri, &url));
    }
    // A single file keeps its own extension (and is read decompressed if its name says it is
    // compressed); a directory reads the format's usual extension.
    let (ext, compression) = if url.is_collection() {
        (None, None)
    } else {
        let ext = std::path::Path::new(url.prefix().as_ref())
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()));
        (
            ext.or(Some(String::new())),
            crate::pipeline::landing::compression_of(&s.uri),
        )
    };
    let alias = s.alias.as_str();
    let (config, table) = (ctx.copied_config(), ctx.copied_table_options());
    match s.format {
        Format::Parquet => {
            let mut o = ParquetReadOptions::default();
            if let Some(e) = &ext {
                o = o.file_extension(e);
            }
            ctx.register_parquet(alias, &s.uri, o).await?
        }
        Format::Csv => {
            let mut o = CsvReadOptions::new()
                .has_header(s.csv_header)
                .delimiter(s.csv_delimiter);
            if let Some(e) = &ext {
                o = o.file_extension(e);
            }
            if let Some(c) = compression {
                o = o.file_compression_type(c);
            }
            text::register(ctx, s, o.to_listing_options(&config, table), route, runner).await?
        }
        Format::Json => {
            let mut o = JsonReadOptions::default();
            if let Some(e) = &ext {
                o = o.file_extension(e);
            }
            if let Some(c) = compression {
                o = o.file_compression_type(c);
            }
            text::register(ctx, s, o.to_listing_options(&config, table), route, runner).await?
        }
        Format::Delta | Format::Postgres => unreachable!("register_one registers tables"),
    }
    Ok(SourceVersion {
        alias: s.alias.clone(),
        format: s.format,
        version: None,
        files: Some(files),
        fingerprint: Some(fingerprint),
        read: Vec::new(),
        snapshot: None,
    })
}

/// What each file source looks like now (fingerprints), to detect inputs changing under a
/// run; Delta sources report their latest version.
pub async fn current_versions(
    ctx: &SessionContext,
    sources: &[Source],
) -> Result<Vec<SourceVersion>> {
    let mut out = Vec::new();
    for s in sources {
        if s.format == Format::Delta {
            let url = crate::task::project::location_url(&s.uri, std::path::Path::new("/"))?;
            let mut table = crate::delta::table::builder(&url)?.build()?;
            table.load().await?;
            out.push(SourceVersion {
                alias: s.alias.clone(),
                format: s.format,
                version: table.version().map(|v| v as i64),
                files: None,
                fingerprint: None,
                read: Vec::new(),
                snapshot: None,
            });
            continue;
        }
        let prefix = remote_prefix(ctx, s).await?.map(|(p, _)| p);
        let url = listing_url(&prefix.as_ref().unwrap_or(s).uri)?;
        let store = ctx.runtime_env().object_store(&url)?;
        let (files, fp) = fingerprint(store.as_ref(), &url).await?;
        out.push(SourceVersion {
            alias: s.alias.clone(),
            format: s.format,
            version: None,
            files: Some(files),
            fingerprint: Some(fp),
            read: Vec::new(),
            snapshot: None,
        });
    }
    Ok(out)
}

/// The file sources whose files changed (listing, sizes, modification times, ETags) since
/// `pinned` was taken; Delta sources are pinned to a version and cannot change under a run.
pub async fn changed_since(
    ctx: &SessionContext,
    sources: &[Source],
    pinned: &[SourceVersion],
) -> Result<Vec<String>> {
    let mut changed = Vec::new();
    for s in sources.iter().filter(|s| s.format != Format::Delta) {
        let Some(before) = pinned
            .iter()
            .find(|p| p.alias == s.alias)
            .and_then(|p| p.fingerprint.as_deref())
        else {
            continue;
        };
        let url = listing_url(&s.uri)?;
        let store = ctx.runtime_env().object_store(&url)?;
        let (_, now) = fingerprint(store.as_ref(), &url).await?;
        if now != before {
            changed.push(s.alias.clone());
        }
    }
    Ok(changed)
}

/// List the objects under `url` and hash their identities (see `storage::identity`).
async fn fingerprint(store: &dyn ObjectStore, url: &ListingTableUrl) -> Result<(usize, String)> {
    let mut metas = if url.is_collection() {
        store
            .list(Some(url.prefix()))
            .try_collect::<Vec<_>>()
            .await?
    } else {
        match store.head(url.prefix()).await {
            Ok(m) => vec![m],
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e.into()),
        }
    };
    metas.retain(|m| {
        let name = m.location.filename().unwrap_or_default();
        !name.starts_with('.') && !name.starts_with('_')
    });
    metas.sort_by(|a, b| a.location.cmp(&b.location));
    let mut h = Sha256::new();
    let local = crate::storage::identity::is_local(url.scheme());
    for m in &metas {
        crate::storage::identity::FileId::of(m, local).hash_into(&mut h);
    }
    Ok((metas.len(), hex::encode(&h.finalize()[..8])))
}

/// Make `store` the object store for `url`'s scheme and authority in `ctx`.
pub fn register_store(ctx: &SessionContext, url: &url::Url, store: Arc<dyn ObjectStore>) {
    ctx.runtime_env().register_object_store(url, store);
}

#[cfg(test)]
mod tests;
