//! Sending one event: HTTP (a Marquez-compatible `POST {url}/{endpoint}`), a file (one JSON
//! line per event) or the console (stderr: stdout holds the reports, `--output json` parses
//! them). Every send is bounded by the timeout; after a failure the transport rests for
//! [`REST`] and counts the events meanwhile as failed without trying, so an endpoint that is
//! down costs a backfill one timeout per [`REST`], not one per window.

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::lineage::settings::{Destination, Settings};

/// How long the transport rests after a failed send.
pub const REST: Duration = Duration::from_secs(30);

pub struct Transport {
    destination: Destination,
    timeout: Duration,
    client: Option<reqwest::Client>,
    /// Until when sending is not tried, and the error that started the rest.
    resting: Mutex<Option<(Instant, String)>>,
    /// Serialises the lines of the file transport within the process.
    file: Mutex<()>,
}

impl Transport {
    pub fn new(settings: &Settings) -> Transport {
        let client = match &settings.destination {
            Destination::Http { .. } => reqwest::Client::builder()
                .timeout(settings.timeout)
                .connect_timeout(settings.timeout)
                .build()
                .map_err(|e| tracing::warn!("OpenLineage HTTP client: {e}"))
                .ok(),
            _ => None,
        };
        Transport {
            destination: settings.destination.clone(),
            timeout: settings.timeout,
            client,
            resting: Mutex::new(None),
            file: Mutex::new(()),
        }
    }

    /// Where the events go, for messages (no credentials).
    pub fn describe(&self) -> String {
        match &self.destination {
            Destination::Http { url, endpoint, .. } => {
                let mut u = url.clone();
                u.set_query(None);
                let _ = u.set_password(None);
                let _ = u.set_username("");
                format!(
                    "{}/{}",
                    u.as_str().trim_end_matches('/'),
                    endpoint.trim_start_matches('/')
                )
            }
            Destination::File(p) => p.display().to_string(),
            Destination::Console => "stderr".to_string(),
        }
    }

    /// Send one event (its JSON text); the error says why it was not sent. Takes at most the
    /// timeout.
    pub async fn send(&self, body: &str) -> Result<(), String> {
        if let Some(why) = self.rest_reason() {
            return Err(why);
        }
        let sent = match tokio::time::timeout(self.timeout, self.send_now(body)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "no answer within {:.1} s",
                self.timeout.as_secs_f64()
            )),
        };
        if let Err(e) = &sent {
            *self.resting.lock().expect("not poisoned") = Some((Instant::now() + REST, e.clone()));
        }
        sent
    }

    /// Why sending is not tried now (`None`: not resting).
    fn rest_reason(&self) -> Option<String> {
        let mut resting = self.resting.lock().expect("not poisoned");
        match &*resting {
            Some((until, why)) if Instant::now() < *until => Some(format!(
                "not sent: an earlier event failed less than {} s ago ({why})",
                REST.as_secs()
            )),
            Some(_) => {
                *resting = None;
                None
            }
            None => None,
        }
    }

    async fn send_now(&self, body: &str) -> Result<(), String> {
        match &self.destination {
            Destination::Http {
                url,
                endpoint,
                api_key,
            } => {
                let client = self.client.as_ref().ok_or("no HTTP client")?;
                let target = format!(
                    "{}/{}",
                    url.as_str().trim_end_matches('/'),
                    endpoint.trim_start_matches('/')
                );
                let mut request = client
                    .post(target)
                    .header("content-type", "application/json")
                    .header(
                        "user-agent",
                        concat!("idemlake/", env!("CARGO_PKG_VERSION")),
                    )
                    .body(body.to_string());
                if let Some(key) = api_key {
                    request = request.bearer_auth(key);
                }
                let resp = request.send().await.map_err(|e| describe_http_error(&e))?;
                if resp.status().is_success() {
                    Ok(())
                } else {
                    Err(format!("the server answered HTTP {}", resp.status()))
                }
            }
            Destination::File(path) => {
                let _one = self.file.lock().expect("not poisoned");
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
                f.write_all(format!("{body}\n").as_bytes())
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))
            }
            Destination::Console => {
                let line = crate::config::get().redact(body);
                let mut err = std::io::stderr().lock();
                writeln!(err, "{line}").map_err(|e| format!("cannot write to stderr: {e}"))
            }
        }
    }
}

/// A reqwest error in one sentence, without the URL (it may carry credentials).
fn describe_http_error(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    let mut cause = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if cause.is_empty() {
        what.to_string()
    } else {
        format!("{what}: {cause}")
    }
}
