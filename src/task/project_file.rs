//! The project file, `idemlake.toml` beside `tables/`: settings of the project as a whole,
//! where a task file holds one table's. Optional; it holds the `[lake]` section (where the
//! tables live, unless a flag or the environment says) and the `[lineage]` section (where
//! OpenLineage events go, see `lineage`). Parsed when the project is resolved, so a
//! mistake in it is reported before anything runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};

/// The project file's name, in the project directory.
pub const FILE_NAME: &str = "idemlake.toml";

/// How long one OpenLineage event may take to send unless `[lineage] timeout_secs` says.
pub const DEFAULT_LINEAGE_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest `[lineage] timeout_secs`: an event may delay a window by this much.
const MAX_LINEAGE_TIMEOUT_SECS: f64 = 60.0;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProjectFile {
    lineage: Option<RawLineage>,
    lake: Option<RawLake>,
}

/// The `[lake]` section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLake {
    uri: Option<String>,
}

/// The `[lineage]` section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLineage {
    transport: Option<String>,
    url: Option<String>,
    endpoint: Option<String>,
    path: Option<String>,
    timeout_secs: Option<f64>,
    namespace: Option<String>,
}

/// Where the events go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineageTransport {
    /// POST to a Marquez-compatible server: `{url}/{endpoint}`.
    Http,
    /// One JSON line per event appended to a file.
    File(PathBuf),
    /// One JSON line per event on stderr.
    Console,
}

/// A validated `[lineage]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct LineageSection {
    /// `None`: not named (an `OPENLINEAGE_URL` in the environment may choose HTTP).
    pub transport: Option<LineageTransport>,
    pub url: Option<url::Url>,
    pub endpoint: Option<String>,
    pub timeout: Duration,
    pub namespace: Option<String>,
}

/// What the project file says (all defaults when there is none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectFile {
    pub lineage: Option<LineageSection>,
    /// `[lake] uri`: the lake root when neither `--lake` nor `IDEMLAKE_LAKE` names one (a
    /// relative path is the project directory's).
    pub lake: Option<String>,
}

impl ProjectFile {
    /// Read `<dir>/idemlake.toml`, if there is one.
    pub fn read(dir: &Path) -> Result<ProjectFile> {
        let file = dir.join(FILE_NAME);
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ProjectFile::default()),
            Err(e) => {
                return Err(Error::input(format!(
                    "{}: cannot read: {e}",
                    file.display()
                )));
            }
        };
        ProjectFile::parse(&text, &file, dir)
    }

    /// Parse the text of the project file `file`; relative paths are taken from `dir`.
    pub fn parse(text: &str, file: &Path, dir: &Path) -> Result<ProjectFile> {
        let shown = file.display();
        let raw: RawProjectFile =
            toml::from_str(text).map_err(|e| Error::input(format!("{shown}: {e}")))?;
        let fail =
            |key: &str, msg: String| Error::input(format!("{shown}: [lineage].{key}: {msg}"));
        let lineage = match raw.lineage {
            None => None,
            Some(l) => Some(l.validate(dir, &fail)?),
        };
        let lake = match raw.lake.and_then(|l| l.uri) {
            Some(u) if u.trim().is_empty() => {
                return Err(Error::input(format!(
                    "{shown}: [lake].uri is empty: name a directory or s3://bucket/prefix, or remove the key"
                )));
            }
            other => other,
        };
        Ok(ProjectFile { lineage, lake })
    }
}

impl RawLineage {
    fn validate(self, dir: &Path, fail: &dyn Fn(&str, String) -> Error) -> Result<LineageSection> {
        let url = match &self.url {
            None => None,
            Some(u) => {
                let url = url::Url::parse(u)
                    .map_err(|e| fail("url", format!("`{u}` is not a URL: {e}")))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(fail(
                        "url",
                        format!("must be http:// or https://, got `{u}`"),
                    ));
                }
                Some(url)
            }
        };
        let path = self.path.filter(|p| !p.trim().is_empty());
        let transport = match self.transport.as_deref().map(str::trim) {
            None if url.is_some() => Some(LineageTransport::Http),
            None => path.as_ref().map(|p| LineageTransport::File(dir.join(p))),
            Some("http") => Some(LineageTransport::Http),
            Some("console") => Some(LineageTransport::Console),
            Some("file") => match &path {
                Some(p) => Some(LineageTransport::File(dir.join(p))),
                None => return Err(fail("path", "transport \"file\" needs a path".into())),
            },
            Some(other) => {
                return Err(fail(
                    "transport",
                    format!("must be \"http\", \"file\" or \"console\", got \"{other}\""),
                ));
            }
        };
        let timeout = match self.timeout_secs {
            None => DEFAULT_LINEAGE_TIMEOUT,
            Some(s) if s > 0.0 && s <= MAX_LINEAGE_TIMEOUT_SECS => Duration::from_secs_f64(s),
            Some(s) => {
                return Err(fail(
                    "timeout_secs",
                    format!("must be above 0 and at most {MAX_LINEAGE_TIMEOUT_SECS}, got {s}"),
                ));
            }
        };
        let namespace = match self.namespace {
            Some(n) if n.trim().is_empty() => {
                return Err(fail("namespace", "must not be empty".into()));
            }
            n => n,
        };
        Ok(LineageSection {
            transport,
            url,
            endpoint: self.endpoint,
            timeout,
            namespace,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ProjectFile> {
        ProjectFile::parse(text, Path::new("/p/idemlake.toml"), Path::new("/p"))
    }

    #[test]
    fn the_lineage_section_picks_its_transport() {
        let l = parse("[lineage]\nurl = \"http://m:5000\"\n")
            .unwrap()
            .lineage
            .unwrap();
        assert_eq!(l.transport, Some(LineageTransport::Http));
        assert_eq!(l.timeout, DEFAULT_LINEAGE_TIMEOUT);
        let l = parse("[lineage]\npath = \"lineage.jsonl\"\ntimeout_secs = 0.5\n")
            .unwrap()
            .lineage
            .unwrap();
        assert_eq!(
            l.transport,
            Some(LineageTransport::File("/p/lineage.jsonl".into()))
        );
        assert_eq!(l.timeout, Duration::from_millis(500));
        let l = parse("[lineage]\ntransport = \"console\"\n")
            .unwrap()
            .lineage
            .unwrap();
        assert_eq!(l.transport, Some(LineageTransport::Console));
        assert_eq!(parse("").unwrap(), ProjectFile::default());
    }

    #[test]
    fn mistakes_in_the_lineage_section_are_input_errors() {
        for (text, says) in [
            ("[lineage]\ntransport = \"kafka\"\n", "transport"),
            ("[lineage]\ntransport = \"file\"\n", "needs a path"),
            ("[lineage]\nurl = \"ftp://x\"\n", "http"),
            ("[lineage]\ntimeout_secs = 0\n", "timeout_secs"),
            ("[lineage]\nnamespace = \" \"\n", "namespace"),
            ("[lineage]\nzz = 1\n", "unknown field"),
            ("[other]\n", "unknown field"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Input);
            assert!(e.message().contains(says), "{text}: {}", e.message());
        }
    }
}
