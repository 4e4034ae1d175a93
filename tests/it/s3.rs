//! S3: the same commands against a real S3 server on loopback (SeaweedFS, started by
//! scripts/s3-server; if it cannot start these tests fail). Covers run/re-run/ranges with
//! S3 sources, concurrent processes, faults injected by a TCP proxy, and secrets in output.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::*;

/// The running test server's environment (`scripts/s3-server env`).
pub(crate) fn s3_env() -> &'static HashMap<String, String> {
    static ENV: OnceLock<HashMap<String, String>> = OnceLock::new();
    ENV.get_or_init(|| server_env("s3-server"))
}

pub(crate) fn bucket() -> String {
    s3_env()["IDEMLAKE_S3_BUCKET"].clone()
}

pub(crate) fn store() -> Arc<dyn ObjectStore> {
    let e = s3_env();
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(&e["AWS_ENDPOINT_URL"])
            .with_access_key_id(&e["AWS_ACCESS_KEY_ID"])
            .with_secret_access_key(&e["AWS_SECRET_ACCESS_KEY"])
            .with_region(&e["AWS_REGION"])
            .with_allow_http(true)
            .with_bucket_name(bucket())
            .build()
            .unwrap(),
    )
}

/// A project whose lake and sources live under a fresh prefix of the bucket.
struct S3Project {
    p: TestProject,
    prefix: String,
}

impl S3Project {
    async fn new() -> S3Project {
        let prefix = format!("it-{}", uuid::Uuid::new_v4().simple());
        let p = TestProject::new();
        let s = store();
        for t in ["lineitem", "orders"] {
            let bytes = std::fs::read(tpch_dir().join(format!("{t}.parquet"))).unwrap();
            s.put(
                &ObjPath::from(format!("{prefix}/data/{t}.parquet")),
                PutPayload::from(bytes),
            )
            .await
            .unwrap();
        }
        // The sample tasks, reading their sources from S3.
        for name in ["lineitem_by_ship_day", "orders_by_day"] {
            let file = p.path().join("tables").join(format!("{name}.toml"));
            let text = std::fs::read_to_string(&file).unwrap().replace(
                "uri = \"data/",
                &format!("uri = \"s3://{}/{prefix}/data/", bucket()),
            );
            std::fs::write(file, text).unwrap();
        }
        S3Project { p, prefix }
    }

    fn lake(&self) -> String {
        format!("s3://{}/{}/lake", bucket(), self.prefix)
    }

    fn table_url(&self, name: &str) -> url::Url {
        url::Url::parse(&format!("{}/{name}/", self.lake())).unwrap()
    }

    fn cmd(&self, endpoint: Option<&str>) -> assert_cmd::Command {
        let mut c = self.p.cmd();
        c.envs(s3_env()).env("IDEMLAKE_LAKE", self.lake());
        if let Some(e) = endpoint {
            c.env("AWS_ENDPOINT_URL", e)
                .env("IDEMLAKE_S3_MAX_RETRIES", "1")
                .env("IDEMLAKE_S3_RETRY_TIMEOUT_SECS", "3");
        }
        c
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.cmd(None).args(args).output().unwrap()
    }

    fn run_ok(&self, task: &str, window: &str) {
        let out = self.run(&["run", task, "--window", window]);
        assert_eq!(code(&out), 0, "{}", text(&out));
    }

    /// Latest version, straight from the log listing on S3.
    async fn version(&self, name: &str) -> Option<u64> {
        use futures::TryStreamExt;
        let prefix = ObjPath::from(format!("{}/lake/{name}/_delta_log", self.prefix));
        let metas: Vec<_> = store().list(Some(&prefix)).try_collect().await.unwrap();
        metas
            .iter()
            .filter_map(|m| {
                m.location
                    .filename()?
                    .strip_suffix(".json")?
                    .parse::<u64>()
                    .ok()
            })
            .max()
    }

    /// The table `name`, loaded through a store of the test's own (not idemlake's).
    async fn table(&self, name: &str) -> deltalake::DeltaTable {
        let url = self.table_url(name);
        // idemlake's builder only for the s3:// log store it registers (deltalake's `s3`
        // feature is not built); the store is the test's own.
        let mut t = idemlake::delta::table::builder_for(&url)
            .unwrap()
            .with_storage_backend(store(), url)
            .build()
            .unwrap();
        t.load().await.unwrap();
        t
    }

    async fn rows(&self, name: &str, filter: &str) -> Vec<String> {
        let t = self.table(name).await;
        let ctx = datafusion::prelude::SessionContext::new();
        t.update_datafusion_session(&ctx.state()).unwrap();
        ctx.register_table("t", t.table_provider().await.unwrap())
            .unwrap();
        let sql = if filter.is_empty() {
            "SELECT * FROM t".to_string()
        } else {
            format!("SELECT * FROM t WHERE {filter}")
        };
        rows_of(&ctx.sql(&sql).await.unwrap().collect().await.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_run_rerun_and_range_equal_the_source() {
    let s = S3Project::new().await;
    let days = ["1995-06-01", "1995-06-02", "1995-06-03"];
    for d in days {
        s.run_ok("lineitem_by_ship_day", d);
    }
    s.run_ok("lineitem_by_ship_day", days[1]);
    s.run_ok("orders_by_day", days[0]);
    s.run_ok("orders_by_day", days[0]);
    assert_eq!(s.version("lineitem_by_ship_day").await, Some(4));
    let mut expected = Vec::new();
    for d in days {
        expected.extend(expected_lineitem_day(d).await);
    }
    expected.sort();
    assert_eq!(
        s.rows("lineitem_by_ship_day", "").await,
        expected,
        "no duplicates, no gaps"
    );
    let orders = source_rows(
        "SELECT o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderpriority, o_orderdate AS order_date FROM orders WHERE o_orderdate = DATE '1995-06-01'",
    )
    .await;
    assert_eq!(s.rows("orders_by_day", "").await, orders);
    // status reads the S3 log too.
    let out = s.run(&[
        "--output",
        "json",
        "status",
        "lineitem_by_ship_day",
        "--from",
        "1995-06-01",
        "--to",
        "1995-06-04",
    ]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let st = json_lines(&out);
    assert_eq!(st.iter().filter(|w| w["state"] == "published").count(), 3);
    assert_eq!(st[3]["state"], "missing");
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_concurrent_processes_lose_no_commit_and_duplicate_no_row() {
    let s = S3Project::new().await;
    // Create the table first with one window, then race: 4 different windows plus 3 more
    // runs of one of them, all at once, in separate processes.
    s.run_ok("lineitem_by_ship_day", "1995-06-10");
    let mut windows: Vec<&str> = vec!["1995-06-01", "1995-06-02", "1995-06-03", "1995-06-04"];
    windows.extend(["1995-06-02", "1995-06-02", "1995-06-10"]);
    let children: Vec<_> = windows
        .iter()
        .map(|w| {
            std::process::Command::new(assert_cmd::cargo::cargo_bin!("idemlake"))
                .arg("--project")
                .arg(s.p.path())
                .envs(s3_env())
                .env("IDEMLAKE_LAKE", s.lake())
                .args([
                    "--output",
                    "json",
                    "run",
                    "lineitem_by_ship_day",
                    "--window",
                    w,
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ok = 0;
    for (child, w) in children.into_iter().zip(&windows) {
        let out = child.wait_with_output().unwrap();
        match code(&out) {
            0 => ok += 1,
            1 => {} // a loser that could not re-apply: must have published nothing (checked below)
            other => panic!("{w}: unexpected exit {other}:\n{}", text(&out)),
        }
    }
    eprintln!("{ok}/7 concurrent runs committed");
    assert!(
        ok >= 5,
        "most runs commit (disjoint windows rebase, same-window runs re-apply on top): {ok}/7"
    );
    let mut expected = Vec::new();
    for d in [
        "1995-06-01",
        "1995-06-02",
        "1995-06-03",
        "1995-06-04",
        "1995-06-10",
    ] {
        expected.extend(expected_lineitem_day(d).await);
    }
    expected.sort();
    assert_eq!(
        s.rows("lineitem_by_ship_day", "").await,
        expected,
        "equals a serial run: no lost commit, no duplicate row"
    );
}

/// A loopback TCP proxy in front of the S3 server that injects faults.
pub(crate) struct Proxy {
    pub(crate) addr: SocketAddr,
    /// Requests whose first line contains this are cut after `keep` body bytes.
    pub(crate) cuts: Arc<AtomicUsize>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Fault {
    /// Cut every upload of a data file (`.parquet`) mid-body; everything else passes.
    CutParquetUploads,
    /// When the commit (`_delta_log/…json` PUT) starts, the server "dies": the connection is
    /// cut mid-body and every later connection is refused.
    DieAtCommit,
}

pub(crate) async fn proxy(fault: Fault) -> Proxy {
    let dead = Arc::new(AtomicBool::new(false));
    let cuts = Arc::new(AtomicUsize::new(0));
    let (dead2, cuts2) = (dead.clone(), cuts.clone());
    let addr = relay(
        move || dead2.load(Ordering::SeqCst),
        move |mut cr, mut sw| {
            let (dead, cuts) = (dead.clone(), cuts2.clone());
            async move {
                let mut buf = vec![0u8; 64 * 1024];
                // Bytes the client sent on this connection (bounded), as bytes: bodies are
                // binary, and on a kept-alive connection a request line follows the previous
                // body directly, without a line break.
                let mut seen: Vec<u8> = Vec::new();
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if dead.load(Ordering::SeqCst) {
                        break;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if let Some(start) = triggering_request(&seen, fault) {
                        // Forward the request head and a few body bytes, then cut.
                        let already = seen.len() - n;
                        let upto = match find(&seen[start..], b"\r\n\r\n") {
                            Some(i) => start + i + 4 + 16,
                            None => start,
                        };
                        let upto = upto.saturating_sub(already).min(n);
                        let _ = sw.write_all(&buf[..upto]).await;
                        cuts.fetch_add(1, Ordering::SeqCst);
                        if matches!(fault, Fault::DieAtCommit) {
                            dead.store(true, Ordering::SeqCst);
                        }
                        break;
                    }
                    if seen.len() > 8192 {
                        seen.drain(..seen.len() - 4096);
                    }
                    if sw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        },
    )
    .await;
    Proxy { addr, cuts }
}

/// A loopback proxy to the test S3 server. Per client connection (unless `refuse` says to
/// drop it), the server's responses are copied back as they come, and `up` forwards what the
/// client sends (returning when the connection ends).
async fn relay<R, F, Fut>(refuse: R, up: F) -> SocketAddr
where
    R: Fn() -> bool + Send + 'static,
    F: Fn(tokio::net::tcp::OwnedReadHalf, tokio::net::tcp::OwnedWriteHalf) -> Fut
        + Send
        + Sync
        + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let upstream: SocketAddr = s3_env()["AWS_ENDPOINT_URL"]
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let up = Arc::new(up);
    tokio::spawn(async move {
        // Bounded: the proxy lives as long as the test's runtime.
        while let Ok((client, _)) = listener.accept().await {
            if refuse() {
                drop(client);
                continue;
            }
            let Ok(server) = TcpStream::connect(upstream).await else {
                continue;
            };
            let up = up.clone();
            tokio::spawn(async move {
                let (cr, mut cw) = client.into_split();
                let (mut sr, sw) = server.into_split();
                let down = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                });
                up(cr, sw).await;
                down.abort();
            });
        }
    });
    addr
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Where in `seen` the first request that `fault` cuts begins (its `PUT ` request line).
fn triggering_request(seen: &[u8], fault: Fault) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = find(&seen[from..], b"PUT /") {
        let start = from + i;
        let line_end = find(&seen[start..], b"\r\n").map(|e| start + e)?;
        let line = String::from_utf8_lossy(&seen[start..line_end]);
        let hit = match fault {
            Fault::CutParquetUploads => line.contains(".parquet"),
            Fault::DieAtCommit => line.contains("_delta_log") && line.contains(".json"),
        };
        if hit {
            return Some(start);
        }
        from = line_end;
    }
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_faults_publish_nothing_and_a_rerun_succeeds() {
    let s = S3Project::new().await;
    s.run_ok("lineitem_by_ship_day", "1995-06-02");
    let v0 = s.version("lineitem_by_ship_day").await.unwrap();
    let day = "1995-06-01";
    for fault in [Fault::CutParquetUploads, Fault::DieAtCommit] {
        let px = proxy(fault).await;
        let endpoint = format!("http://{}", px.addr);
        let out = s
            .cmd(Some(&endpoint))
            .args(["run", "lineitem_by_ship_day", "--window", day])
            .output()
            .unwrap();
        assert_eq!(code(&out), 1, "{}", text(&out));
        assert!(
            px.cuts.load(Ordering::SeqCst) >= 1,
            "the fault was injected"
        );
        assert_eq!(
            s.version("lineitem_by_ship_day").await,
            Some(v0),
            "nothing committed"
        );
        assert!(
            s.rows("lineitem_by_ship_day", &format!("ship_date = DATE '{day}'"))
                .await
                .is_empty(),
            "nothing partial visible"
        );
    }
    s.run_ok("lineitem_by_ship_day", day);
    assert_eq!(
        s.rows("lineitem_by_ship_day", &format!("ship_date = DATE '{day}'"))
            .await,
        expected_lineitem_day(day).await
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_secrets_never_appear_in_output_logs_or_commits() {
    let s = S3Project::new().await;
    let secret = s3_env()["AWS_SECRET_ACCESS_KEY"].clone();
    let key_id = s3_env()["AWS_ACCESS_KEY_ID"].clone();
    let mut all = String::new();
    // A succeeding run, at the highest verbosity, and its JSON report.
    for args in [
        vec![
            "-vv",
            "run",
            "lineitem_by_ship_day",
            "--window",
            "1995-06-01",
        ],
        vec![
            "--output",
            "json",
            "run",
            "lineitem_by_ship_day",
            "--window",
            "1995-06-01",
        ],
        vec![
            "-vv",
            "explain",
            "lineitem_by_ship_day",
            "--window",
            "1995-06-01",
        ],
    ] {
        let out = s.run(&args);
        assert_eq!(code(&out), 0, "{}", text(&out));
        all.push_str(&text(&out));
    }
    // Failing runs: a wrong secret (403: a configuration error) and an unreachable endpoint.
    let out = s
        .cmd(None)
        .env("AWS_SECRET_ACCESS_KEY", format!("{secret}-wrong"))
        .args([
            "-vv",
            "run",
            "lineitem_by_ship_day",
            "--window",
            "1995-06-02",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", text(&out));
    all.push_str(&text(&out));
    let out = s
        .cmd(Some("http://127.0.0.1:9"))
        .args([
            "-vv",
            "run",
            "lineitem_by_ship_day",
            "--window",
            "1995-06-02",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", text(&out));
    all.push_str(&text(&out));
    assert!(
        all.contains("lineitem_by_ship_day"),
        "the output was captured"
    );
    assert!(!all.contains(&secret), "secret leaked:\n{all}");
    assert!(!all.contains(&key_id), "access key id leaked:\n{all}");
    // Nor in the Delta log.
    let bytes = store()
        .get(&ObjPath::from(format!(
            "{}/lake/lineitem_by_ship_day/_delta_log/{:020}.json",
            s.prefix, 1
        )))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let log = String::from_utf8_lossy(&bytes);
    assert!(log.contains("idemlake") && !log.contains(&secret) && !log.contains(&key_id));
}

/// Defect (issue 37): missing AWS credentials surfaced as the raw 403 of the instance
/// metadata service, and rejected ones as S3's XML, both exit 1 — retryable, so an
/// orchestrator retried a run that could never succeed. Both are configuration errors: exit
/// 2, `retryable: false`, one plain sentence naming the variables, for `validate` and `run`.
#[tokio::test(flavor = "multi_thread")]
async fn s3_missing_or_invalid_credentials_are_a_configuration_error() {
    let s = S3Project::new().await;
    let secret = s3_env()["AWS_SECRET_ACCESS_KEY"].clone();
    let key_id = s3_env()["AWS_ACCESS_KEY_ID"].clone();
    type Setup = fn(&mut assert_cmd::Command, &str, &str);
    let cases: [(&str, Setup); 3] = [
        ("missing", |c, _, _| {
            // No credentials in the environment: object_store asks the instance metadata
            // service, here an endpoint that refuses connections (deterministic off EC2).
            c.env_remove("AWS_ACCESS_KEY_ID")
                .env_remove("AWS_SECRET_ACCESS_KEY")
                .env("AWS_METADATA_ENDPOINT", "http://127.0.0.1:9")
                .env("IDEMLAKE_S3_MAX_RETRIES", "1")
                .env("IDEMLAKE_S3_RETRY_TIMEOUT_SECS", "3");
        }),
        ("wrong key id", |c, key_id, _| {
            c.env("AWS_ACCESS_KEY_ID", format!("{key_id}X"));
        }),
        ("wrong secret", |c, _, secret| {
            c.env("AWS_SECRET_ACCESS_KEY", format!("{secret}-wrong"));
        }),
    ];
    for (what, setup) in cases {
        for args in [
            vec!["--output", "json", "validate", "lineitem_by_ship_day"],
            vec![
                "--output",
                "json",
                "run",
                "lineitem_by_ship_day",
                "--window",
                "1995-06-02",
            ],
        ] {
            let mut c = s.cmd(None);
            setup(&mut c, &key_id, &secret);
            let out = c.args(&args).output().unwrap();
            assert_eq!(code(&out), 2, "{what} {args:?}: {}", text(&out));
            let all = text(&out);
            assert!(all.contains("AWS_ACCESS_KEY_ID"), "{what}: {all}");
            assert!(all.contains("AWS_SECRET_ACCESS_KEY"), "{what}: {all}");
            for raw in ["api/token", "<Error>", "403 Forbidden", "Generic S3 error"] {
                assert!(!all.contains(raw), "{what}: raw `{raw}` shown:\n{all}");
            }
            // Regression: said once, not a second time as a warning that the run log entry
            // could not be written (for the same reason).
            assert!(
                !all.contains("could not write the run log entry"),
                "{what}: {all}"
            );
            // `run`'s reports say `retryable: false`; `validate`'s lines have no such field.
            for line in json_lines(&out) {
                assert_ne!(line["retryable"], true, "{what}: {line}");
                if args.contains(&"run") {
                    assert_eq!(line["retryable"], false, "{what}: {line}");
                }
            }
        }
    }
    // Nothing was published by any of them.
    assert!(
        store()
            .head(&ObjPath::from(format!(
                "{}/lake/lineitem_by_ship_day/_delta_log/{:020}.json",
                s.prefix, 0
            )))
            .await
            .is_err()
    );
}

/// A proxy in front of the S3 server that counts the HTTP requests passing through it, by
/// kind (`GET`, `HEAD`, `PUT`, `LIST`, `POST`, `DELETE`), parsing each request's head and
/// skipping its body by `Content-Length`.
async fn counting_proxy() -> (SocketAddr, Arc<std::sync::Mutex<HashMap<String, u64>>>) {
    let counts: Arc<std::sync::Mutex<HashMap<String, u64>>> = Arc::default();
    let counts2 = counts.clone();
    let addr = relay(
        || false,
        move |mut cr, mut sw| {
            let counts = counts2.clone();
            async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut pending: Vec<u8> = Vec::new();
                let mut body_left = 0usize;
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if sw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    let mut chunk = &buf[..n];
                    loop {
                        if body_left > 0 {
                            let skip = body_left.min(chunk.len());
                            body_left -= skip;
                            chunk = &chunk[skip..];
                            if body_left > 0 {
                                break;
                            }
                        }
                        pending.extend_from_slice(chunk);
                        chunk = &[];
                        let Some(end) = find(&pending, b"\r\n\r\n") else {
                            break;
                        };
                        let head = String::from_utf8_lossy(&pending[..end]).to_string();
                        let rest = pending[end + 4..].to_vec();
                        pending.clear();
                        let line = head.lines().next().unwrap_or_default().to_string();
                        let mut parts = line.split(' ');
                        let (method, target) =
                            (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                        let kind = match method {
                            "GET" if target.contains("list-type=") => "LIST",
                            "PUT" if target.contains("partNumber=") => "PUT-PART",
                            m => m,
                        };
                        *counts.lock().unwrap().entry(kind.to_string()).or_default() += 1;
                        let lower = head.to_ascii_lowercase();
                        assert!(!lower.contains("transfer-encoding: chunked"), "{head}");
                        body_left = lower
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        // What followed the head: body bytes, then maybe the next request.
                        let skip = body_left.min(rest.len());
                        body_left -= skip;
                        pending.extend_from_slice(&rest[skip..]);
                        if body_left > 0 || pending.is_empty() {
                            break;
                        }
                    }
                }
            }
        },
    )
    .await;
    (addr, counts)
}

/// Issue 19: `-v` ends with the object-store requests the command made, counted inside
/// idemlake; a proxy counting the HTTP requests on the wire must agree.
#[tokio::test(flavor = "multi_thread")]
async fn s3_request_counts_in_the_summary_match_the_wire() {
    let s = S3Project::new().await;
    s.run_ok("lineitem_by_ship_day", "1995-06-01");
    let (addr, counts) = counting_proxy().await;
    let out = s
        .cmd(Some(&format!("http://{addr}")))
        .args([
            "-v",
            "run",
            "lineitem_by_ship_day",
            "--window",
            "1995-06-02",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let line = stderr
        .lines()
        .find_map(|l| {
            l.split_once("storage requests: ")
                .map(|(_, r)| r.to_string())
        })
        .unwrap_or_else(|| panic!("no request summary:\n{stderr}"));
    let ours = |kind: &str| -> u64 {
        line.split(['(', ','])
            .map(str::trim)
            .find_map(|p| p.strip_prefix(&format!("{kind} ")))
            .and_then(|n| n.split(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let wire = counts.lock().unwrap().clone();
    let on_wire = |kind: &str| wire.get(kind).copied().unwrap_or(0);
    eprintln!("idemlake: {line}\nwire: {wire:?}");
    for kind in ["GET", "HEAD", "PUT"] {
        assert_eq!(
            ours(kind),
            on_wire(kind),
            "{kind}: ours {line} vs wire {wire:?}"
        );
    }
    // A listing may take several pages on the wire; it counts once here.
    assert!(
        ours("LIST") >= 1 && ours("LIST") <= on_wire("LIST"),
        "{line} vs {wire:?}"
    );
    assert_eq!(on_wire("PUT-PART"), 0, "{wire:?}");
}

/// The requests one command's `-v` trace names (`IDEMLAKE_LOG=…count=trace`): kind and object.
pub(crate) fn traced_requests(stderr: &str) -> Vec<(String, String)> {
    stderr
        .lines()
        .filter(|l| l.contains("storage request "))
        .filter_map(|l| {
            let kind = l.split("kind=\"").nth(1)?.split('"').next()?;
            let location = l.split(" location=").nth(1)?.split(' ').next()?;
            Some((kind.to_string(), location.to_string()))
        })
        .collect()
}

/// Issue 19: a day window on a checkpointed S3 table reads each Delta log file at most once
/// by each route — the task's, and the read-back's own since issue 37 (delta-rs's load alone
/// read every commit after the checkpoint twice and the checkpoint in eleven ranged reads) —
/// does not probe conditional PUT again while the table's record of the last probe is fresh,
/// and stays within 20 requests plus two per commit file after the checkpoint (23 measured
/// with two); nothing of the checks is kept in the table (no memo). A probe runs again when
/// the record is too old or made on another endpoint.
#[tokio::test(flavor = "multi_thread")]
async fn s3_a_day_window_reads_each_log_file_once_and_remembers_the_probe() {
    let s = S3Project::new().await;
    let task = "lineitem_by_ship_day";
    s.run_ok(task, "1995-06-01");
    s.table(task)
        .await
        .set_tbl_properties()
        .with_properties(HashMap::from([(
            "delta.checkpointInterval".to_string(),
            "3".to_string(),
        )]))
        .await
        .unwrap();
    for day in 2..=6 {
        s.run_ok(task, &format!("1995-06-0{day}"));
    }
    let log = format!("{}/lake/{task}/_delta_log/", s.prefix);
    let traced = |extra: &[(&str, &str)], endpoint: Option<&str>| {
        let mut c = s.cmd(endpoint);
        c.env(
            "IDEMLAKE_LOG",
            "idemlake::storage::count=trace,idemlake=info",
        );
        for (k, v) in extra {
            c.env(k, v);
        }
        let out = c
            .args(["-v", "run", task, "--window", "1995-06-07"])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", text(&out));
        traced_requests(&String::from_utf8_lossy(&out.stderr))
    };
    let requests = traced(&[], None);
    let v = s.version(task).await.unwrap();
    let checkpoint = (0..v).rev().find(|c| (c + 1) % 3 == 0).unwrap();
    let mut gets: HashMap<&str, usize> = HashMap::new();
    for (kind, loc) in &requests {
        if kind == "GET" {
            *gets.entry(loc.as_str()).or_default() += 1;
        }
    }
    let log_gets: Vec<_> = gets
        .iter()
        .filter(|(l, _)| l.starts_with(&log) && !l.ends_with("_last_checkpoint"))
        .collect();
    assert!(
        log_gets.iter().all(|(_, n)| **n <= 2),
        "a log file read more than once by a route: {log_gets:?}"
    );
    let checkpoint_file = format!("{log}{checkpoint:020}.checkpoint.parquet");
    assert_eq!(gets.get(checkpoint_file.as_str()), Some(&2), "{requests:?}");
    assert!(
        !requests.iter().any(|(_, l)| l.contains("_idemlake_probe")),
        "probed again despite a fresh record: {requests:?}"
    );
    // The sources are on S3 here too: their reads are not the table's requests. No check
    // result is read or kept for a later run.
    assert!(
        !requests
            .iter()
            .any(|(_, l)| l.contains("/_idemlake/checks/")),
        "{requests:?}"
    );
    let table_requests = requests
        .iter()
        .filter(|(_, l)| !l.contains("/data/"))
        .count();
    let after_checkpoint = (v - 1 - checkpoint) as usize;
    assert!(
        table_requests <= 20 + 2 * after_checkpoint,
        "{table_requests} requests for {after_checkpoint} commit files after the checkpoint: {requests:?}"
    );

    // The record is too old to trust: probe again (and record it again).
    let requests = traced(&[("IDEMLAKE_S3_PROBE_MAX_AGE_SECS", "0")], None);
    let probes = |r: &[(String, String)]| {
        r.iter()
            .filter(|(k, l)| k == "PUT" && l.contains("_idemlake_probe"))
            .count()
    };
    assert_eq!(probes(&requests), 2, "{requests:?}");
    // Another endpoint (a proxy in front of the same server): the record does not hold there.
    let (addr, _) = counting_proxy().await;
    let requests = traced(&[], Some(&format!("http://{addr}")));
    assert_eq!(probes(&requests), 2, "{requests:?}");
}

/// Issue 37 ("the checker owns its route"): the independent check read a Delta source on S3
/// through the process's one store for the bucket, whose log cache the task's own load had
/// just filled, so the source's log reached the check by the task's path (one GET of each
/// commit file in the whole run). The checks now read through an S3 client of their own
/// (counted, no log cache): the source's commit files are read from storage by the check too.
#[tokio::test(flavor = "multi_thread")]
async fn s3_the_checks_read_a_delta_sources_log_from_storage_not_the_tasks_log_cache() {
    let s = S3Project::new().await;
    s.run_ok("lineitem_by_ship_day", "1995-06-01");
    s.p.task(
        "ship_days",
        r#"sql = """
SELECT l_orderkey, l_linenumber, ship_date FROM days
WHERE ship_date >= $window_start AND ship_date < $window_end
"""
[target]
partition_by = "ship_date"
[window]
grain = "day"
[sources.days]
task = "lineitem_by_ship_day"
[reconcile]
default = "content"
"#,
    );
    let mut c = s.cmd(None);
    c.env(
        "IDEMLAKE_LOG",
        "idemlake::storage::count=trace,idemlake=info",
    );
    let out = c
        .args(["-v", "run", "ship_days", "--window", "1995-06-01"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    // `source_content` reads the staged files back on S3 through the checks' own client.
    for check in ["source_rows", "source_content"] {
        assert!(text(&out).contains(check), "{check}: {}", text(&out));
    }
    let requests = traced_requests(&String::from_utf8_lossy(&out.stderr));
    let v = s.version("lineitem_by_ship_day").await.unwrap();
    let commit = format!(
        "{}/lake/lineitem_by_ship_day/_delta_log/{v:020}.json",
        s.prefix
    );
    let gets = requests
        .iter()
        .filter(|(k, l)| k == "GET" && *l == commit)
        .count();
    // The task's load: once through the log cache; the check's own load: from storage.
    assert!(gets >= 2, "{commit} read {gets} time(s): {requests:?}");
}

/// Issue 37 ("the checker owns its route"): the read-back started its own replay of the log
/// from the task's table state — loaded through the process's store, whose log cache the
/// task's own load had filled — so the commits before the run's own reached the read-back by
/// the task's path (each read once in the whole run). The read-back now loads its starting
/// snapshot through its own S3 client (no log cache): those commit files are read from
/// storage by the read-back too.
#[tokio::test(flavor = "multi_thread")]
async fn s3_the_read_back_reads_the_tables_log_from_storage_not_the_log_cache() {
    let s = S3Project::new().await;
    let task = "lineitem_by_ship_day";
    s.run_ok(task, "1995-06-01");
    let before = s.version(task).await.unwrap();
    let mut c = s.cmd(None);
    c.env(
        "IDEMLAKE_LOG",
        "idemlake::storage::count=trace,idemlake=info",
    );
    let out = c
        .args(["-v", "run", task, "--window", "1995-06-02"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    let requests = traced_requests(&String::from_utf8_lossy(&out.stderr));
    let gets = |v: u64| {
        let commit = format!("{}/lake/{task}/_delta_log/{v:020}.json", s.prefix);
        requests
            .iter()
            .filter(|(k, l)| k == "GET" && *l == commit)
            .count()
    };
    // The task's load: once through the log cache; the read-back's own snapshot: from storage.
    assert!(
        gets(before) >= 2,
        "{before} read {} time(s): {requests:?}",
        gets(before)
    );
    // The run's own commit is read back from storage.
    assert!(gets(before + 1) >= 1, "{requests:?}");
}

/// Regression: a run of local sources into an S3 lake without credentials said the
/// credentials sentence twice, the first time as a warning that the run log entry could not
/// be written (for the same reason). Said once now, exit 2.
#[test]
fn s3_missing_credentials_are_said_once_for_a_lake_on_s3() {
    let p = TestProject::new();
    let out = p
        .cmd()
        .envs(s3_env())
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("AWS_METADATA_ENDPOINT", "http://127.0.0.1:9")
        .env("IDEMLAKE_S3_MAX_RETRIES", "1")
        .env("IDEMLAKE_S3_RETRY_TIMEOUT_SECS", "3")
        .args(["--lake", &format!("s3://{}/no-credentials/lake", bucket())])
        .args(["run", "lineitem_by_ship_day", "--window", "1995-06-02"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", text(&out));
    let all = text(&out);
    assert_eq!(all.matches("AWS_SECRET_ACCESS_KEY").count(), 1, "{all}");
    assert!(!all.contains("could not write the run log entry"), "{all}");
}
