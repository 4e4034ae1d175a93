//! Where a task's queries execute (`[engine]` in the task file, or `--engine`): in this
//! process (the default), or on a DataFusion Ballista cluster. Only the choice and its
//! validation live here; the sessions are made by `engine`.

use serde::Deserialize;

use crate::error::{Error, Result};

/// The scheduler port when a `df://` URL names none (Ballista's default).
pub const DEFAULT_SCHEDULER_PORT: u16 = 50050;

/// Where a task's queries execute.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Engine {
    /// DataFusion embedded in this process.
    #[default]
    Local,
    /// A Ballista cluster: the window's query and `[reconcile].source` run there; idemlake
    /// keeps the window binding, lint, staging, the checks over its own output, the commit
    /// and the record. `scheduler` is `host:port`.
    Ballista { scheduler: String },
}

/// `[engine]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEngine {
    kind: Option<String>,
    scheduler: Option<String>,
}

impl RawEngine {
    /// Validate `[engine]`; errors name the field (`fail`).
    pub fn resolve(self, fail: &dyn Fn(&str, String) -> Error) -> Result<Engine> {
        match self.kind.as_deref().map(str::trim) {
            None | Some("local") => match self.scheduler {
                None => Ok(Engine::Local),
                Some(_) => Err(fail(
                    "[engine].scheduler",
                    "only with kind = \"ballista\"".into(),
                )),
            },
            Some("ballista") => {
                let Some(url) = self.scheduler else {
                    return Err(fail(
                        "[engine].scheduler",
                        "required with kind = \"ballista\": the scheduler, as df://host:port"
                            .into(),
                    ));
                };
                let scheduler = scheduler_address(&url)
                    .map_err(|e| fail("[engine].scheduler", e.message().to_string()))?;
                available().map_err(|e| fail("[engine].kind", e.message().to_string()))?;
                Ok(Engine::Ballista { scheduler })
            }
            Some(other) => Err(fail(
                "[engine].kind",
                format!("unknown engine `{other}`: expected \"local\" or \"ballista\""),
            )),
        }
    }
}

impl Engine {
    /// `--engine`/`IDEMLAKE_ENGINE`: `local`, or a Ballista scheduler as `df://host[:port]`.
    pub fn parse(text: &str) -> Result<Engine> {
        let text = text.trim();
        if text == "local" {
            return Ok(Engine::Local);
        }
        let scheduler = scheduler_address(text).map_err(|e| {
            Error::input(format!(
                "--engine: {} (or `local`, this process)",
                e.message()
            ))
        })?;
        available()?;
        Ok(Engine::Ballista { scheduler })
    }

    /// `local`, or `ballista (df://host:port)`.
    pub fn describe(&self) -> String {
        match self {
            Engine::Local => "local".to_string(),
            Engine::Ballista { scheduler } => format!("ballista (df://{scheduler})"),
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self, Engine::Local)
    }
}

/// `host:port` from `df://host[:port]`.
pub fn scheduler_address(url: &str) -> Result<String> {
    let bad = |why: &str| {
        Error::input(format!(
            "`{url}` is not a Ballista scheduler URL ({why}); expected df://host:port, e.g. df://localhost:{DEFAULT_SCHEDULER_PORT}"
        ))
    };
    let Some(rest) = url.trim().strip_prefix("df://") else {
        return Err(bad("it must start with df://"));
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') || rest.contains('@') {
        return Err(bad("host and port only"));
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("the port must be a number from 1 to 65535"))?,
        ),
        None => (rest, DEFAULT_SCHEDULER_PORT),
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    Ok(format!("{host}:{port}"))
}

/// Whether this build has the Ballista engine (`--features ballista`).
pub fn available() -> Result<()> {
    if cfg!(feature = "ballista") {
        Ok(())
    } else {
        Err(Error::input(
            "this idemlake was built without the Ballista engine; build it with `cargo build --release --features ballista`",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_urls_are_checked() {
        assert_eq!(scheduler_address("df://h:1234").unwrap(), "h:1234");
        assert_eq!(
            scheduler_address("df://localhost").unwrap(),
            format!("localhost:{DEFAULT_SCHEDULER_PORT}")
        );
        for bad in [
            "http://h:1",
            "df://",
            "df://h:0",
            "df://h:x",
            "df://h:1/path",
            "df://:1",
        ] {
            let e = scheduler_address(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(e.message().contains("df://host:port"), "{bad}: {e}");
        }
    }

    #[test]
    fn local_takes_no_scheduler() {
        let fail = |f: &str, m: String| Error::input(format!("{f}: {m}"));
        let raw = RawEngine {
            kind: Some("local".into()),
            scheduler: Some("df://h:1".into()),
        };
        let e = raw.resolve(&fail).unwrap_err();
        assert!(e.message().contains("[engine].scheduler"), "{e}");
        let raw = RawEngine {
            kind: Some("spark".into()),
            scheduler: None,
        };
        assert!(
            raw.resolve(&fail)
                .unwrap_err()
                .message()
                .contains("unknown engine `spark`")
        );
    }

    #[test]
    fn ballista_needs_the_feature_or_says_how_to_get_it() {
        let fail = |f: &str, m: String| Error::input(format!("{f}: {m}"));
        let raw = RawEngine {
            kind: Some("ballista".into()),
            scheduler: Some("df://127.0.0.1:50050".into()),
        };
        let built_with_it = cfg!(feature = "ballista");
        match raw.resolve(&fail) {
            Ok(e) => {
                assert!(built_with_it, "resolved without the feature");
                assert_eq!(
                    e,
                    Engine::Ballista {
                        scheduler: "127.0.0.1:50050".into()
                    }
                );
            }
            Err(e) => {
                assert!(!built_with_it, "{e}");
                assert!(e.message().contains("--features ballista"), "{e}");
                assert_eq!(e.exit_code(), 2);
            }
        }
    }
}
