//! Glob source locations: `s3://raw/events/*/part-*.parquet`, `data/events/dt=*/*.parquet`.
//!
//! The location is split at its first segment holding a glob character (`*`, `?`, `[`): what
//! comes before is the zone's root, a directory; what follows names one segment per directory
//! level and a last one for the file names. Directory segments may only be `*` or `key=*`:
//! which partitions a window reads is the SQL's business (its filters on the partition
//! columns prune the listing), and both routes (the zone's listing and DataFusion's listing
//! table, which matches globs against file names only) then read the same files.

use glob::Pattern;

use crate::error::{Error, Result};

/// The characters that start a glob (as DataFusion's listing URLs have them).
const GLOB_CHARS: [char; 3] = ['*', '?', '['];

/// A glob below a zone's root.
#[derive(Debug, Clone)]
pub struct Glob {
    /// One entry per directory level: the key its `key=*` segment names, if any.
    pub dirs: Vec<Option<String>>,
    /// The pattern of the file names (the last segment).
    pub file: Pattern,
}

impl Glob {
    /// Whether `name` (a file name, no directories) matches.
    pub fn matches_file(&self, name: &str) -> bool {
        self.file.matches(name)
    }

    /// Whether directory segment `name` at `depth` matches.
    pub fn matches_dir(&self, depth: usize, name: &str) -> bool {
        match self.dirs.get(depth) {
            None => false,
            Some(None) => true,
            Some(Some(key)) => name.split_once('=').is_some_and(|(k, _)| k == key),
        }
    }
}

/// `uri` split into its root (ending in `/`) and its glob, or `uri` itself and `None` when it
/// holds no glob character.
pub fn split(uri: &str) -> Result<(String, Option<Glob>)> {
    let Some(at) = uri.find(GLOB_CHARS) else {
        return Ok((uri.to_string(), None));
    };
    let Some(cut) = uri[..at].rfind('/') else {
        return Err(bad(
            uri,
            "the glob must follow a directory (`data/*.parquet`)",
        ));
    };
    let (root, rest) = (&uri[..=cut], &uri[cut + 1..]);
    let segments: Vec<&str> = rest.split('/').collect();
    let (file, dirs) = segments
        .split_last()
        .expect("split gives one segment at least");
    let mut keys = Vec::with_capacity(dirs.len());
    for d in dirs {
        keys.push(match *d {
            "*" => None,
            "**" => return Err(bad(uri, "`**` is not supported: give one `*` per directory level")),
            d => match d.strip_suffix("=*") {
                Some(k) if !k.is_empty() && !k.contains(GLOB_CHARS) => Some(k.to_string()),
                _ => {
                    return Err(bad(
                        uri,
                        &format!(
                            "directory segment `{d}` may only be `*` or `key=*`; choose partitions with the task's filters on the partition columns (WHERE dt >= ...)"
                        ),
                    ));
                }
            },
        });
    }
    if file.is_empty() || *file == "**" || file.contains('/') {
        return Err(bad(
            uri,
            "the last segment must name files (`part-*.parquet`)",
        ));
    }
    let file = Pattern::new(file).map_err(|e| bad(uri, &e.to_string()))?;
    Ok((root.to_string(), Some(Glob { dirs: keys, file })))
}

fn bad(uri: &str, why: &str) -> Error {
    Error::input(format!("invalid glob in source location `{uri}`: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_the_first_glob_segment() {
        let (root, g) = split("s3://raw/events/*/part-*.parquet").unwrap();
        assert_eq!(root, "s3://raw/events/");
        let g = g.unwrap();
        assert_eq!(g.dirs, vec![None]);
        assert!(g.matches_file("part-00001.parquet"));
        assert!(!g.matches_file("other.parquet"));
        assert!(g.matches_dir(0, "dt=2026-01-01"));
        let (root, g) = split("/data/events/dt=*/hour=*/*.parquet").unwrap();
        assert_eq!(root, "/data/events/");
        let g = g.unwrap();
        assert_eq!(g.dirs, vec![Some("dt".into()), Some("hour".into())]);
        assert!(!g.matches_dir(1, "dt=2026-01-01"));
        assert!(split("/data/events").unwrap().1.is_none());
    }

    #[test]
    fn refuses_what_the_routes_cannot_both_read() {
        for bad in [
            "/data/**/x.parquet",
            "/data/dt=2026-*/x.parquet",
            "*.parquet",
            "/data/*/",
        ] {
            assert!(split(bad).is_err(), "{bad}");
        }
    }
}
