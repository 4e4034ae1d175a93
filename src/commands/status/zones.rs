//! Landing zones whose files changed in a published window's reach since the run that
//! published it (`stale_inputs`): for a zone that declares its arrival days (`arrival`, one
//! date column, or a year, a month and a day, and an hour), given as a directory or a glob,
//! the arrival-day directories the window reaches (and their hours in reach) are listed again
//! and compared,
//! file by file (path, size, modification time), with the files the publishing run recorded
//! that it read. A file added, rewritten or removed there makes the window stale, named. One
//! `status` lists each zone's top level once and each directory in reach once ([`Listings`]:
//! for this command only, nothing is kept after it).

use std::collections::BTreeMap;
use std::sync::Arc;

use deltalake::DeltaTable;
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::path::Path;

use crate::error::{Error, Result};
use crate::report::record::FileRead;
use crate::report::states::WindowStatus;
use crate::task::arrival::Arrival;
use crate::task::{Source, Task};

/// What changed in each declared zone within `st`'s reach since its publishing run, as
/// `"<alias>: <path> (added|rewritten|removed)"`.
pub(super) async fn changed_files(
    table: &DeltaTable,
    task: &Task,
    st: &WindowStatus,
    listings: &mut Listings,
) -> Result<Vec<String>> {
    let zones: Vec<(&Source, &Arrival)> = task
        .sources
        .iter()
        .filter_map(|s| Some((s, s.arrival.as_ref()?)))
        .filter(|(_, a)| matches!(a.columns.len(), 1 | 3 | 4))
        .collect();
    let (Some(version), Some(run)) = (st.table_version, st.run_id.as_deref()) else {
        return Ok(Vec::new());
    };
    if zones.is_empty() {
        return Ok(Vec::new());
    }
    let Some(record) = crate::delta::actions::run_record(table, version, run).await? else {
        return Ok(Vec::new());
    };
    let ctx = crate::session::build(crate::session::Profile::Checks)?;
    let mut out = Vec::new();
    for (source, arrival) in zones {
        let Some(read) = recorded_reads(&record, &source.alias) else {
            continue;
        };
        let extension = crate::pipeline::landing::listing_options(&ctx, source)
            .map(|o| o.file_extension)
            .unwrap_or_default();
        let Some(now) = listings.in_reach(source, arrival, st, &extension).await? else {
            continue;
        };
        let before: BTreeMap<String, (u64, String)> = read
            .into_iter()
            .map(|f| (f.path, (f.size, f.modified)))
            .collect();
        for (path, was) in &before {
            match now.get(path) {
                None => out.push(format!("{}: {path} (removed)", source.alias)),
                Some(is) if is != was => out.push(format!("{}: {path} (rewritten)", source.alias)),
                Some(_) => {}
            }
        }
        for path in now.keys().filter(|p| !before.contains_key(*p)) {
            out.push(format!("{}: {path} (added)", source.alias));
        }
    }
    Ok(out)
}

/// The files the run recorded it read from the zone `alias`; `None` when it recorded none
/// (an older record).
fn recorded_reads(record: &serde_json::Value, alias: &str) -> Option<Vec<FileRead>> {
    let source = record
        .get("sources")?
        .as_array()?
        .iter()
        .find(|s| s.get("alias").and_then(|a| a.as_str()) == Some(alias))?;
    serde_json::from_value(source.get("read")?.clone()).ok()
}

/// What one `status` listed of each zone: its top-level directories (and for a
/// `year/month/day` zone, the months and days of the years in reach), and the files of each
/// directory in some window's reach, listed once each.
#[derive(Default)]
pub(super) struct Listings {
    stores: BTreeMap<String, Arc<dyn ObjectStore>>,
    /// The directories right below each directory listed, by zone and path.
    dirs: BTreeMap<(String, String), Vec<Path>>,
    files: BTreeMap<(String, String), Vec<object_store::ObjectMeta>>,
}

impl Listings {
    /// The zone's files now in the arrival-day directories `st` reaches, by path: size and
    /// modification time (as the run record writes them).
    async fn in_reach(
        &mut self,
        source: &Source,
        arrival: &Arrival,
        st: &WindowStatus,
        extension: &str,
    ) -> Result<Option<BTreeMap<String, (u64, String)>>> {
        let parse = |s: &str| {
            s.parse::<jiff::Timestamp>()
                .map_err(|e| Error::runtime(format!("window bound {s}: {e}")))
        };
        let (start, end) = (parse(&st.window.start)?, parse(&st.window.end)?);
        let (first, last) = arrival.days(start, end)?;
        // An hourly arrival: the hours in reach of each day (`None`: every hour).
        let hours = arrival
            .hourly()
            .then(|| arrival.span(start, end))
            .transpose()?;
        // A glob's root, and its file names' pattern (its `key=*` levels are the arrival's).
        let (root, glob) = crate::pipeline::landing::split_glob(&source.uri)?;
        let store = self.store(&root)?;
        let Some(dirs) = self
            .day_dirs((source, &root), arrival, &store, (first, last))
            .await?
        else {
            return Ok(None);
        };
        let mut out = BTreeMap::new();
        for (dir, date) in dirs {
            let key = (source.uri.clone(), dir.to_string());
            if !self.files.contains_key(&key) {
                let listed = store.list(Some(&dir)).try_collect().await?;
                self.files.insert(key.clone(), listed);
            }
            for m in &self.files[&key] {
                let name = m.location.filename().unwrap_or_default();
                if name.starts_with(['.', '_']) || !name.ends_with(extension) {
                    continue;
                }
                if glob.as_ref().is_some_and(|g| !g.matches_file(name)) {
                    continue;
                }
                if let Some((first, last)) = hours {
                    // The level right below the day: the file's arrival hour.
                    let hour = m.location.prefix_match(&dir).and_then(|mut p| {
                        let level = p.next()?;
                        let text = level.as_ref();
                        let value = text.rsplit_once('=').map_or(text, |(_, v)| v);
                        let h = value.parse::<i8>().ok()?;
                        jiff::civil::DateTime::new(
                            date.year(),
                            date.month(),
                            date.day(),
                            h,
                            0,
                            0,
                            0,
                        )
                        .ok()
                    });
                    if !hour.is_some_and(|h| first <= h && h <= last) {
                        continue;
                    }
                }
                let modified = chrono::DateTime::<chrono::Utc>::from_timestamp_micros(
                    m.last_modified.timestamp_micros(),
                )
                .unwrap_or_default();
                out.insert(m.location.to_string(), (m.size, modified.to_rfc3339()));
            }
        }
        Ok(Some(out))
    }

    /// The arrival-day directories of the zone in `[first, last]` (`dt=` at the top level, or
    /// `year=/month=/day=`, or the same levels without names), each level listed once per
    /// `status`; `None` when the top level holds no directory of the arrival's first column.
    async fn day_dirs(
        &mut self,
        (source, root): (&Source, &str),
        arrival: &Arrival,
        store: &Arc<dyn ObjectStore>,
        (first, last): (jiff::civil::Date, jiff::civil::Date),
    ) -> Result<Option<Vec<(Path, jiff::civil::Date)>>> {
        let root = datafusion::datasource::listing::ListingTableUrl::parse(root)?;
        let in_reach = |d: Option<jiff::civil::Date>| d.is_some_and(|d| first <= d && d <= last);
        // `key=value` directories, or (`partitioning = "directories"`) names that are values.
        let unnamed = matches!(
            source.partitioning,
            crate::task::Partitioning::Directories(_)
        );
        let value = |dir: &Path, column: &str| -> Option<String> {
            let name = dir.filename()?;
            if unnamed {
                return (!name.starts_with(['.', '_'])).then(|| name.to_string());
            }
            Some(name.strip_prefix(column)?.strip_prefix('=')?.to_string())
        };
        let mut dirs = Vec::new();
        let tops = self.children(&source.uri, store, root.prefix()).await?;
        // The arrival days are read from the top levels (`dt=`, or `year=/month=/day=`): a zone
        // laid out otherwise (`region=eu/year=…`) is not compared rather than shown changed.
        if !tops.is_empty() && !tops.iter().any(|t| value(t, &arrival.columns[0]).is_some()) {
            return Ok(None);
        }
        for top in tops {
            match arrival.columns.as_slice() {
                [dt] => {
                    let day = value(&top, dt).and_then(|v| v.get(..10)?.parse().ok());
                    if let Some(day) = day.filter(|d| in_reach(Some(*d))) {
                        dirs.push((top, day));
                    }
                }
                [y, m, d] | [y, m, d, _] => {
                    let int = |dir: &Path, c: &str| value(dir, c)?.parse::<i64>().ok();
                    let Some(year) = int(&top, y) else { continue };
                    if year < i64::from(first.year()) || year > i64::from(last.year()) {
                        continue;
                    }
                    for month in self.children(&source.uri, store, &top).await? {
                        let Some(mo) = int(&month, m) else { continue };
                        let (lo, hi) = ((first.year(), first.month()), (last.year(), last.month()));
                        let this = (
                            i16::try_from(year).unwrap_or(i16::MAX),
                            i8::try_from(mo).unwrap_or(i8::MAX),
                        );
                        if this < lo || this > hi {
                            continue;
                        }
                        for day in self.children(&source.uri, store, &month).await? {
                            let date = int(&day, d).and_then(|dd| {
                                jiff::civil::Date::new(
                                    i16::try_from(year).ok()?,
                                    i8::try_from(mo).ok()?,
                                    i8::try_from(dd).ok()?,
                                )
                                .ok()
                            });
                            if let Some(date) = date.filter(|d| in_reach(Some(*d))) {
                                dirs.push((day, date));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(Some(dirs))
    }

    /// The directories right below `dir` of the zone at `uri`, listed once per `status` (with
    /// a delimiter).
    async fn children(
        &mut self,
        uri: &str,
        store: &Arc<dyn ObjectStore>,
        dir: &Path,
    ) -> Result<Vec<Path>> {
        let key = (uri.to_string(), dir.to_string());
        if let Some(c) = self.dirs.get(&key) {
            return Ok(c.clone());
        }
        let listed = store.list_with_delimiter(Some(dir)).await?.common_prefixes;
        self.dirs.insert(key, listed.clone());
        Ok(listed)
    }

    /// A store of `status`'s own for the zone at `uri` (an S3 client shared with nothing, or
    /// the local file system).
    fn store(&mut self, uri: &str) -> Result<Arc<dyn ObjectStore>> {
        if let Some(s) = self.stores.get(uri) {
            return Ok(s.clone());
        }
        let root = datafusion::datasource::listing::ListingTableUrl::parse(uri)?;
        let url = url::Url::parse(root.as_str()).map_err(|e| Error::runtime(e.to_string()))?;
        let store: Arc<dyn ObjectStore> = match crate::storage::own_store_for(&url)? {
            Some((_, store)) => store,
            None => Arc::new(object_store::local::LocalFileSystem::new()),
        };
        self.stores.insert(uri.to_string(), store.clone());
        Ok(store)
    }
}
