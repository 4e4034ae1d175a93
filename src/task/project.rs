//! Project layout and configuration resolution.
//!
//! Configuration flows defaults → environment → flags (clap folds the environment variables
//! `IDEMLAKE_PROJECT` / `IDEMLAKE_LAKE` into the flags). The project directory holds `tables/`;
//! the lake defaults to `<project>/lake`, a local directory (embedded, zero set-up). Tasks are
//! looked up by table name. Resolution is cheap and reads no data.

use std::path::{Path, PathBuf};

use url::Url;

use crate::error::{Error, Result};
use crate::task::Task;

/// A resolved project: where the task files are and where the tables live.
#[derive(Debug, Clone)]
pub struct Project {
    pub dir: PathBuf,
    /// The lake root as a URL (`file:///…/lake/` or `s3://bucket/prefix/`), always ending in `/`.
    pub lake: Url,
}

/// Parse a location (URL or local path, relative to `base`) into a directory URL.
pub fn location_url(location: &str, base: &Path) -> Result<Url> {
    let mut url = if location.contains("://") {
        Url::parse(location)
            .map_err(|e| Error::input(format!("invalid location `{location}`: {e}")))?
    } else {
        let p = Path::new(location);
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        };
        let p = normalize(&p);
        Url::from_directory_path(&p)
            .map_err(|_| Error::input(format!("invalid local path `{}`", p.display())))?
    };
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// Lexically normalise `a/./b/../c` without touching the filesystem.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl Project {
    /// Resolve the project from the raw flag values (already merged with the environment).
    pub fn resolve(project: Option<&Path>, lake: Option<&str>) -> Result<Project> {
        let cwd = std::env::current_dir()
            .map_err(|e| Error::runtime(format!("cannot read the current directory: {e}")))?;
        let dir = match project {
            Some(p) if p.is_absolute() => p.to_path_buf(),
            Some(p) => cwd.join(p),
            None => cwd.clone(),
        };
        let dir = normalize(&dir);
        if !dir.is_dir() {
            return Err(Error::input(format!(
                "project directory {} does not exist",
                dir.display()
            )));
        }
        let lake = match lake {
            Some(l) if !l.trim().is_empty() => location_url(l, &cwd)?,
            _ => location_url("lake", &dir)?,
        };
        Ok(Project { dir, lake })
    }

    pub fn tables_dir(&self) -> PathBuf {
        self.dir.join("tables")
    }

    /// All task names (table names) in `tables/`, sorted.
    pub fn task_names(&self) -> Result<Vec<String>> {
        let dir = self.tables_dir();
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| Error::input(format!("cannot list {}: {e}", dir.display())))?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Load the task for table `name` (or a path to a `.toml` task file).
    pub fn task(&self, name: &str) -> Result<Task> {
        let as_path = Path::new(name);
        let file = if name.ends_with(".toml") && as_path.is_file() {
            as_path.to_path_buf()
        } else {
            self.tables_dir().join(format!("{name}.toml"))
        };
        if !file.is_file() {
            let known = self.task_names().unwrap_or_default();
            return Err(Error::input(format!(
                "no task `{name}`: {} does not exist (tasks here: {})",
                file.display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        }
        Task::load(&file, &self.dir)
    }

    /// Where the task's Delta table lives.
    pub fn table_url(&self, task: &Task) -> Result<Url> {
        match &task.target_uri {
            Some(uri) => location_url(uri, &self.dir),
            None => self
                .lake
                .join(&format!("{}/", task.name))
                .map_err(|e| Error::input(format!("invalid table location: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_become_directory_urls() {
        let u = location_url("lake", Path::new("/p")).unwrap();
        assert_eq!(u.as_str(), "file:///p/lake/");
        let u = location_url("../x/./lake", Path::new("/p/q")).unwrap();
        assert_eq!(u.as_str(), "file:///p/x/lake/");
        let u = location_url("s3://bucket/prefix", Path::new("/p")).unwrap();
        assert_eq!(u.as_str(), "s3://bucket/prefix/");
        assert_eq!(u.join("t/").unwrap().as_str(), "s3://bucket/prefix/t/");
    }
}
