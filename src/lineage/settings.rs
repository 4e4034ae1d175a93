//! Where the events go and what they are named, from the environment (as OpenLineage's own
//! clients read it, see `config::LineageEnv`) over the project file's `[lineage]` section.
//! A setting that cannot be used turns lineage off with a warning: lineage never fails a run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::LineageEnv;
use crate::task::project_file::{DEFAULT_LINEAGE_TIMEOUT, LineageSection, LineageTransport};

/// OpenLineage's default path of the lineage endpoint under the server's URL.
pub const DEFAULT_ENDPOINT: &str = "api/v1/lineage";

/// A run of a job, as a parent facet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    pub namespace: String,
    pub name: String,
    /// A UUID, hyphenated, lower case.
    pub run_id: String,
}

impl RunRef {
    /// `NAMESPACE/JOB/RUN_ID`, as Airflow's `lineage_parent_id` macro and dbt-ol's
    /// `OPENLINEAGE_PARENT_ID` write it: the run id after the last `/`, the namespace before the
    /// first; the run id must be a UUID (OpenLineage's run ids are).
    pub fn parse(s: &str) -> Result<RunRef, String> {
        let bad = |why: &str| format!("`{s}` is not NAMESPACE/JOB/RUN_ID: {why}");
        let (rest, run) = s.trim().rsplit_once('/').ok_or_else(|| bad("no `/`"))?;
        let (namespace, name) = rest.split_once('/').ok_or_else(|| bad("one `/` only"))?;
        if namespace.is_empty() || name.is_empty() {
            return Err(bad("an empty namespace or job name"));
        }
        let run = uuid::Uuid::parse_str(run).map_err(|_| bad("the run id is not a UUID"))?;
        Ok(RunRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
            run_id: run.hyphenated().to_string(),
        })
    }
}

/// The transport, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// `POST {url}/{endpoint}` with `Authorization: Bearer <api_key>` when a key is given.
    Http {
        url: url::Url,
        endpoint: String,
        api_key: Option<String>,
    },
    File(PathBuf),
    Console,
}

/// Everything the events need besides the runs themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub destination: Destination,
    /// How long one event may take to send.
    pub timeout: Duration,
    /// The namespace of idemlake's jobs.
    pub namespace: String,
    /// The orchestrator's run this process runs under, and the root of its runs.
    pub parent: Option<RunRef>,
    pub root: Option<RunRef>,
}

impl Settings {
    /// The settings of a project in `dir` whose project file has `section`; `None`: lineage
    /// is off (not configured, `OPENLINEAGE_DISABLED`, or a setting that cannot be used — said
    /// in a warning).
    pub fn resolve(
        env: &LineageEnv,
        section: Option<&LineageSection>,
        dir: &Path,
    ) -> Option<Settings> {
        if env.disabled {
            return None;
        }
        let destination = match destination(env, section) {
            Ok(d) => d?,
            Err(why) => {
                tracing::warn!("OpenLineage events are off: {why}");
                return None;
            }
        };
        let parent = parse_ref(
            "the parent run (OPENLINEAGE_PARENT_ID, --lineage-parent)",
            &env.parent,
        );
        let root = match &parent {
            None => None,
            Some(p) => {
                parse_ref("OPENLINEAGE_ROOT_PARENT_ID", &env.root_parent).or(Some(p.clone()))
            }
        };
        let namespace = env
            .namespace
            .clone()
            .or_else(|| section.and_then(|s| s.namespace.clone()))
            .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "idemlake".to_string());
        Some(Settings {
            destination,
            timeout: section.map_or(DEFAULT_LINEAGE_TIMEOUT, |s| s.timeout),
            namespace,
            parent,
            root,
        })
    }
}

/// The transport: `OPENLINEAGE_URL` (HTTP) over the project file's; `Ok(None)`: none is
/// configured.
fn destination(
    env: &LineageEnv,
    section: Option<&LineageSection>,
) -> Result<Option<Destination>, String> {
    let endpoint = env
        .endpoint
        .clone()
        .or_else(|| section.and_then(|s| s.endpoint.clone()))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
    let http = |url: url::Url| Destination::Http {
        url,
        endpoint: endpoint.clone(),
        api_key: env.api_key.clone(),
    };
    if let Some(u) = &env.url {
        let url =
            url::Url::parse(u).map_err(|e| format!("OPENLINEAGE_URL `{u}` is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "OPENLINEAGE_URL must be http:// or https://, got `{u}`"
            ));
        }
        return Ok(Some(http(url)));
    }
    let Some(section) = section else {
        return Ok(None);
    };
    Ok(match &section.transport {
        None => None,
        Some(LineageTransport::Http) => match &section.url {
            Some(url) => Some(http(url.clone())),
            None => {
                return Err(
                    "[lineage] transport = \"http\" needs a url (or OPENLINEAGE_URL)".into(),
                );
            }
        },
        Some(LineageTransport::File(p)) => Some(Destination::File(p.clone())),
        Some(LineageTransport::Console) => Some(Destination::Console),
    })
}

fn parse_ref(what: &str, value: &Option<String>) -> Option<RunRef> {
    match RunRef::parse(value.as_deref()?) {
        Ok(r) => Some(r),
        Err(why) => {
            tracing::warn!("{what} is ignored: {why}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "01932c4e-5a0b-7c3e-9f1a-2b3c4d5e6f70";

    #[test]
    fn a_parent_is_namespace_job_and_uuid() {
        let r = RunRef::parse(&format!("airflow/dag.task/{RUN}")).unwrap();
        assert_eq!(
            (r.namespace.as_str(), r.name.as_str(), r.run_id.as_str()),
            ("airflow", "dag.task", RUN)
        );
        // The job name may hold `/`; the namespace is before the first, the run after the last.
        let r = RunRef::parse(&format!("ns/a/b/{}", RUN.to_uppercase())).unwrap();
        assert_eq!((r.name.as_str(), r.run_id.as_str()), ("a/b", RUN));
        for bad in [
            "",
            "ns/job",
            &format!("/job/{RUN}"),
            &format!("ns//{RUN}"),
            "ns/job/not-a-uuid",
        ] {
            assert!(RunRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_environment_wins_over_the_project_file() {
        let section = LineageSection {
            transport: Some(LineageTransport::Console),
            url: None,
            endpoint: Some("custom/path".into()),
            timeout: Duration::from_secs(1),
            namespace: Some("from-file".into()),
        };
        let dir = Path::new("/work/my-project");
        let off = LineageEnv::default();
        let s = Settings::resolve(&off, Some(&section), dir).unwrap();
        assert_eq!(s.destination, Destination::Console);
        assert_eq!(
            (s.namespace.as_str(), s.timeout),
            ("from-file", Duration::from_secs(1))
        );
        let env = LineageEnv {
            url: Some("http://marquez:5000".into()),
            api_key: Some("k".into()),
            namespace: Some("from-env".into()),
            parent: Some(format!("airflow/dag.task/{RUN}")),
            ..Default::default()
        };
        let s = Settings::resolve(&env, Some(&section), dir).unwrap();
        assert!(
            matches!(&s.destination, Destination::Http { endpoint, api_key: Some(k), .. }
            if endpoint == "custom/path" && k == "k")
        );
        assert_eq!(s.namespace, "from-env");
        assert_eq!(
            s.root, s.parent,
            "the parent is its own root when none is given"
        );
        // Nothing configured: off; the namespace defaults to the project directory's name.
        assert_eq!(Settings::resolve(&off, None, dir), None);
        let s = Settings::resolve(
            &LineageEnv {
                url: Some("http://m".into()),
                ..off.clone()
            },
            None,
            dir,
        )
        .unwrap();
        assert_eq!(s.namespace, "my-project");
        let disabled = LineageEnv {
            disabled: true,
            ..env
        };
        assert_eq!(Settings::resolve(&disabled, Some(&section), dir), None);
    }
}
