//! Project layout and configuration resolution.
//!
//! Configuration flows defaults → project file → environment → flags (clap folds the
//! environment variables `IDEMLAKE_PROJECT` / `IDEMLAKE_LAKE` into the flags). The project
//! directory holds `tables/` and, optionally, the project file `idemlake.toml` (see
//! `project_file`); the lake is `[lake] uri` there, else `<project>/lake`, a local directory (embedded, zero set-up). Tasks are looked up by table
//! name. Resolution is cheap and reads no data.

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
    /// The project file (`idemlake.toml`), defaults if there is none.
    pub file: crate::task::project_file::ProjectFile,
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
        let file = crate::task::project_file::ProjectFile::read(&dir)?;
        let lake = match (lake, &file.lake) {
            (Some(l), _) if !l.trim().is_empty() => location_url(l, &cwd)?,
            (_, Some(l)) => location_url(l, &dir)?,
            _ => location_url("lake", &dir)?,
        };
        Ok(Project { dir, lake, file })
    }

    pub fn tables_dir(&self) -> PathBuf {
        self.dir.join("tables")
    }

    /// What to do when the project directory holds no `tables/`.
    fn not_a_project_hint(&self) -> String {
        format!(
            "{} is not an idemlake project (it has no tables/): pass --project DIR (or set IDEMLAKE_PROJECT) naming the directory that holds tables/, or create a project here with `idemlake init`",
            self.dir.display()
        )
    }

    /// All task names (table names) in `tables/`, sorted.
    pub fn task_names(&self) -> Result<Vec<String>> {
        let dir = self.tables_dir();
        let entries = std::fs::read_dir(&dir).map_err(|e| {
            Error::input(format!(
                "cannot list {}: {e}. {}",
                dir.display(),
                self.not_a_project_hint()
            ))
        })?;
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
        self.task_in_chain(name, &mut Vec::new())
    }

    /// Load task `name`, resolving its `task = "…"` sources to those tasks' tables; `chain`
    /// holds the tasks being resolved above it (a task met again is a cycle).
    fn task_in_chain(&self, name: &str, chain: &mut Vec<String>) -> Result<Task> {
        let mut task = self.task_file(name)?;
        chain.push(task.name.clone());
        for i in 0..task.sources.len() {
            let Some(up) = task.sources[i].upstream.clone() else {
                continue;
            };
            let alias = task.sources[i].alias.clone();
            if let Some(at) = chain.iter().position(|n| *n == up) {
                let mut cycle = chain[at..].to_vec();
                cycle.push(up.clone());
                return Err(Error::input(format!(
                    "{}: [sources.{alias}] task = \"{up}\" makes a dependency cycle: {}",
                    task.file.display(),
                    cycle.join(" → ")
                )));
            }
            let upstream = self.task_in_chain(&up, chain)?;
            check_nesting(&task, &upstream, &alias)?;
            task.sources[i].uri = self.table_url(&upstream)?.to_string();
        }
        for check in &mut task.checks {
            if let crate::task::checks::CheckKind::Relationship {
                to_task, to_uri, ..
            } = &mut check.kind
            {
                let other = self.task_file(to_task).map_err(|e| {
                    Error::input(format!(
                        "{}: [checks].relationships: {}",
                        task.file.display(),
                        e.message()
                    ))
                })?;
                *to_uri = self.table_url(&other)?.to_string();
            }
        }
        chain.pop();
        Ok(task)
    }

    /// The task file `name` (a name in `tables/`, or a path to a `.toml`), parsed.
    fn task_file(&self, name: &str) -> Result<Task> {
        let as_path = Path::new(name);
        let file = if name.ends_with(".toml") && as_path.is_file() {
            as_path.to_path_buf()
        } else {
            self.tables_dir().join(format!("{name}.toml"))
        };
        if !file.is_file() && !self.tables_dir().is_dir() {
            return Err(Error::input(format!(
                "no task `{name}`: {} does not exist. {}",
                file.display(),
                self.not_a_project_hint()
            )));
        }
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

/// A downstream window must cover whole upstream windows: the upstream grain nests in the
/// downstream one (hour → anything, day → day/week/month, week → week, month → month) and,
/// above hours, both compute their windows in the same time zone. Hours of a zone whose
/// offset is not whole hours (Asia/Kolkata) straddle the days of other zones: they are
/// accepted, and windows relate by overlap (`task::overlap`), so such an hour feeds both days.
fn check_nesting(down: &Task, up: &Task, alias: &str) -> Result<()> {
    use crate::task::window::Grain::{Day, Hour, Month, Week};
    let nests = match (up.grain, down.grain) {
        (Hour, _) => true,
        (Day, Day | Week | Month) => true,
        (a, b) => a == b,
    };
    let fail = |why: String| {
        Error::input(format!(
            "{}: [sources.{alias}] task = \"{}\": {why}",
            down.file.display(),
            up.name
        ))
    };
    if !nests {
        return Err(fail(format!(
            "its {} windows do not fit whole in this task's {} windows (a window must read whole upstream windows: hour → day → week or month, never finer or across weeks and months)",
            up.grain.as_str(),
            down.grain.as_str()
        )));
    }
    if up.grain != Hour && up.timezone_name != down.timezone_name {
        return Err(fail(format!(
            "its {} windows are in {}, this task's in {}: they do not line up",
            up.grain.as_str(),
            up.timezone_name,
            down.timezone_name
        )));
    }
    Ok(())
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
