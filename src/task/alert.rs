//! The task's `[alert]` section: which events raise an alert and where it goes. Sending is
//! `report::alert`.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What raises an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// A window failed (exit 1, or 2 when the task could not be planned).
    Failure,
    /// Reconciliation diverged (`on_mismatch = "fail"` or `"warn"`).
    Mismatch,
    /// `audit`/`repair` found damaged windows.
    Damage,
    /// A `[checks]` data check failed (nothing published) or warned (published).
    Check,
}

/// The `[alert]` section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlert {
    command: Option<Vec<String>>,
    webhook: Option<String>,
    on: Option<Vec<Event>>,
    timeout_secs: Option<u64>,
}

/// A validated `[alert]` section.
#[derive(Debug, Clone)]
pub struct AlertSpec {
    /// argv; a relative program path containing `/` is taken relative to the project.
    pub command: Option<Vec<String>>,
    pub webhook: Option<url::Url>,
    pub on: Vec<Event>,
    pub timeout: Duration,
}

impl RawAlert {
    /// Validate; `fail(field, message)` builds the task file's error.
    pub fn validate(
        self,
        project_dir: &Path,
        fail: impl Fn(&str, String) -> Error,
    ) -> Result<AlertSpec> {
        let command = match self.command {
            Some(argv) if argv.is_empty() || argv[0].trim().is_empty() => {
                return Err(fail(
                    "[alert].command",
                    "must be a non-empty list: [\"program\", \"arg\", …]".into(),
                ));
            }
            Some(mut argv) => {
                if argv[0].contains('/') && !Path::new(&argv[0]).is_absolute() {
                    argv[0] = project_dir.join(&argv[0]).to_string_lossy().into_owned();
                }
                Some(argv)
            }
            None => None,
        };
        let webhook = match self.webhook {
            None => None,
            Some(u) => {
                let url = url::Url::parse(&u)
                    .map_err(|e| fail("[alert].webhook", format!("`{u}` is not a URL: {e}")))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(fail(
                        "[alert].webhook",
                        format!("must be an http:// or https:// URL, got `{u}`"),
                    ));
                }
                Some(url)
            }
        };
        if command.is_none() && webhook.is_none() {
            return Err(fail(
                "[alert]",
                "set `command`, `webhook` or both (or remove the section)".into(),
            ));
        }
        let on = self
            .on
            .unwrap_or_else(|| vec![Event::Failure, Event::Mismatch, Event::Damage, Event::Check]);
        if on.is_empty() {
            return Err(fail(
                "[alert].on",
                "is empty: list failure, mismatch, damage and/or check".into(),
            ));
        }
        let secs = self.timeout_secs.unwrap_or(10);
        if secs == 0 || secs > 600 {
            return Err(fail(
                "[alert].timeout_secs",
                format!("must be between 1 and 600, got {secs}"),
            ));
        }
        Ok(AlertSpec {
            command,
            webhook,
            on,
            timeout: Duration::from_secs(secs),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(field: &str, msg: String) -> Error {
        Error::input(format!("t.toml: {field}: {msg}"))
    }

    fn raw(text: &str) -> std::result::Result<RawAlert, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn validates_the_section() {
        let dir = Path::new("/proj");
        let a = raw("command = [\"scripts/notify\", \"-x\"]\non = [\"damage\"]")
            .unwrap()
            .validate(dir, fail)
            .unwrap();
        assert_eq!(a.command.unwrap()[0], "/proj/scripts/notify");
        assert_eq!(a.on, vec![Event::Damage]);
        let a = raw("webhook = \"http://127.0.0.1:9/x\"")
            .unwrap()
            .validate(dir, fail)
            .unwrap();
        assert_eq!(a.on.len(), 4);
        assert_eq!(a.timeout, Duration::from_secs(10));
        for (text, needle) in [
            ("", "set `command`, `webhook`"),
            ("command = []", "non-empty"),
            ("webhook = \"ftp://x/y\"", "http:// or https://"),
            ("webhook = \"not a url\"", "not a URL"),
            ("command = [\"x\"]\non = []", "is empty"),
            ("command = [\"x\"]\ntimeout_secs = 0", "between 1 and 600"),
        ] {
            let e = raw(text).unwrap().validate(dir, fail).unwrap_err();
            assert!(e.message().contains(needle), "{text}: {}", e.message());
        }
        assert!(raw("command = [\"x\"]\non = [\"sometimes\"]").is_err());
        assert!(raw("command = [\"x\"]\nretries = 3").is_err());
    }
}
