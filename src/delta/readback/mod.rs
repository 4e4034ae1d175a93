//! Reading a commit back, by the read-back's own route: the committed version replayed from
//! storage through a client of its own ([`Route`]; `replay`: a starting snapshot loaded
//! through that client, then every later commit read back and parsed by the read-back
//! itself), each window's live files found by evaluating its replaceWhere predicate over the
//! partition values as the log writes them (`windows`, with DataFusion), checked against the
//! files the run added, and counted by their own Parquet footers (`footer`).
//!
//! Nothing here uses what the commit was built with: not the file map (`filemap`), not its
//! window→partition keys (`delta::partition`), not the published path's commit parser
//! (`delta::actions`), not the store the task's session and commits read through.

use deltalake::DeltaTable;
use deltalake::kernel::Add;

use crate::delta::partition::WindowFile;
use crate::error::{Error, Result};

mod footer;
mod replay;
mod windows;
pub use footer::footer_rows;
pub use replay::{LogReplay, LoggedFile};

/// A new S3 client (see `storage::own_store_for`) rooted at the table at `url`; `None` for
/// a local table.
pub fn own_root(url: &url::Url) -> Result<Option<std::sync::Arc<dyn object_store::ObjectStore>>> {
    let Some((_, store)) = crate::storage::own_store_for(url)? else {
        return Ok(None);
    };
    let root = object_store::path::Path::from_url_path(url.path())
        .map_err(|e| Error::runtime(format!("the table location {url}: {e}")))?;
    Ok(Some(std::sync::Arc::new(
        object_store::prefix::PrefixStore::new(store, root),
    )))
}

/// The read-back's own route to the table at `url`: on S3 a new client (counted, with a log
/// cache of its own — see `storage::own_cached_store_for` — and not the store the task's
/// session and commits use), for delta-rs's loads (`bucket`) and rooted at the table for
/// commit files and footers (`root`); for a local table, delta-rs's own local store and the
/// table's (neither keeps anything between reads).
#[derive(Clone)]
pub struct Route {
    pub url: url::Url,
    pub bucket: Option<std::sync::Arc<dyn object_store::ObjectStore>>,
    pub root: std::sync::Arc<dyn object_store::ObjectStore>,
}

impl Route {
    pub fn new(url: &url::Url, table: &DeltaTable) -> Result<Route> {
        let Some((_, bucket)) = crate::storage::own_cached_store_for(url)? else {
            return Ok(Route {
                url: url.clone(),
                bucket: None,
                root: table.log_store().object_store(None),
            });
        };
        let path = object_store::path::Path::from_url_path(url.path())
            .map_err(|e| Error::runtime(format!("the table location {url}: {e}")))?;
        Ok(Route {
            url: url.clone(),
            bucket: Some(bucket.clone()),
            root: std::sync::Arc::new(object_store::prefix::PrefixStore::new(bucket, path)),
        })
    }
}

/// What the read-back expects of one window of a commit.
pub struct Expected<'a> {
    /// The window's replaceWhere predicate (SQL on the partition column).
    pub predicate: String,
    /// The files this run staged for it (`None`: a merge, whose files delta-rs wrote).
    pub adds: Option<&'a [Add]>,
    /// The window's label, for messages.
    pub label: &'a str,
}

/// Read commit `version` of the table at `url` back (see the module's documentation): for
/// each of `windows`, its live files at `version` or why they cannot be confirmed. A file
/// the commit removed whose partition value lies in none of its windows fails every window.
///
/// `replay` is the read-back's replay, kept between commits (accelerated; `None` until first
/// needed, or after it failed): started at `version - 1` from a snapshot loaded through the
/// read-back's own client and advanced by reading each later commit through `store`. Its
/// plain twin (`IDEMLAKE_ACCELERATE=0`, and the fallback when a commit cannot be followed
/// that way) loads `version - 1` and `version` through that client (delta-rs's replay) and
/// compares them.
pub async fn read_back(
    replay: &mut Option<LogReplay>,
    route: &Route,
    column: &str,
    version: i64,
    windows: &[Expected<'_>],
) -> Result<Vec<std::result::Result<Vec<WindowFile>, String>>> {
    let mut followed = None;
    if crate::config::get().accelerate {
        match follow(replay, route, column, version).await {
            Ok(removed) => followed = Some(removed),
            Err(e) => {
                tracing::debug!(
                    "read-back by log replay failed ({}); loading version {version}",
                    e.message()
                );
                *replay = None;
            }
        }
    }
    let (live, removed, ty) = match (followed, replay.as_ref()) {
        (Some(removed), Some(r)) => (r.files(), removed, r.column_type.clone()),
        _ => {
            let after = LogReplay::open(route, column, version).await?;
            let removed = match version {
                0 => Vec::new(),
                v => gone(&LogReplay::open(route, column, v - 1).await?, &after),
            };
            (after.files(), removed, after.column_type.clone())
        }
    };
    let predicates: Vec<String> = windows.iter().map(|w| w.predicate.clone()).collect();
    let at = windows::assign(column, &ty, &live, &predicates).await?;
    let outside = windows::assign(column, &ty, &removed, &predicates)
        .await?
        .iter()
        .zip(&removed)
        .filter(|(w, _)| w.is_none())
        .map(|(_, f)| f.clone())
        .collect::<Vec<_>>();
    Ok(windows
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let files: Vec<WindowFile> = live
                .iter()
                .zip(&at)
                .filter(|(_, at)| **at == Some(i))
                .map(|(f, _)| WindowFile {
                    path: f.path.clone(),
                    rows: None,
                })
                .collect();
            judge(files, version, w, &outside)
        })
        .collect())
}

/// The replay brought to `version` (opened at `version - 1` first when there is none, or
/// it is past `version`): the files commit `version` removed.
async fn follow(
    replay: &mut Option<LogReplay>,
    route: &Route,
    column: &str,
    version: i64,
) -> Result<Vec<LoggedFile>> {
    if replay.as_ref().is_none_or(|r| r.version >= version) {
        *replay = Some(LogReplay::open(route, column, (version - 1).max(0)).await?);
    }
    let r = replay.as_mut().expect("just set");
    if r.version == version {
        return Ok(Vec::new());
    }
    r.advance(route.root.as_ref(), version).await
}

/// The files live in `before` and not in `after`, with their values in `before`.
fn gone(before: &LogReplay, after: &LogReplay) -> Vec<LoggedFile> {
    let kept: std::collections::HashSet<String> =
        after.files().into_iter().map(|f| f.path).collect();
    before
        .files()
        .into_iter()
        .filter(|f| !kept.contains(&f.path))
        .collect()
}

/// One window's read-back: its live `files` (exactly the run's adds, when known), and no file
/// removed `outside` every window of the commit.
fn judge(
    files: Vec<WindowFile>,
    version: i64,
    w: &Expected<'_>,
    outside: &[LoggedFile],
) -> std::result::Result<Vec<WindowFile>, String> {
    let mut errors = Vec::new();
    let files = match w.adds {
        Some(adds) => match check_window(files, version, adds, w.label) {
            Ok(files) => files,
            Err(e) => {
                errors.push(e.message().to_string());
                Vec::new()
            }
        },
        None => files,
    };
    if let Some(first) = outside.first() {
        errors.push(format!(
            "read-back: version {version} removed {} file(s) outside its windows' replaceWhere (e.g. {}, partition value {})",
            outside.len(),
            first.path,
            first.value.as_deref().unwrap_or("NULL")
        ));
    }
    match errors.is_empty() {
        true => Ok(files),
        false => Err(errors.join("; ")),
    }
}

/// The window's live files at `version` (as [`read_back`] found them), once checked to be
/// exactly the ones this run added.
pub fn check_window(
    live: Vec<WindowFile>,
    version: i64,
    adds: &[Add],
    window: &str,
) -> Result<Vec<WindowFile>> {
    let staged: std::collections::HashSet<&str> = adds.iter().map(|a| a.path.as_str()).collect();
    let foreign: Vec<&str> = live
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| !staged.contains(p))
        .collect();
    if let Some(first) = foreign.first() {
        return Err(Error::runtime(format!(
            "read-back: version {version} holds {} live file(s) in window {} that this run did not add (e.g. {first}): the window was not replaced whole",
            foreign.len(),
            window
        )));
    }
    let missing = staged.len() - (live.len() - foreign.len());
    if missing > 0 {
        return Err(Error::runtime(format!(
            "read-back: version {version} lacks {missing} of the {} file(s) this run staged for window {}",
            staged.len(),
            window
        )));
    }
    Ok(live)
}
