//! `[alert]`: payloads delivered to a local command (stdin) and a loopback HTTP receiver, on
//! failure, reconciliation mismatch and audit damage, asserted field by field; nothing sent on
//! success; an unreachable webhook never changes the exit code.

use std::net::TcpListener;
use std::time::Duration;

use crate::common::*;

const TASK: &str = "lineitem_by_ship_day";

/// The webhook's receiving end (see [`HttpReceiver`]).
struct Receiver(HttpReceiver);

impl Receiver {
    fn start() -> Receiver {
        Receiver(HttpReceiver::start("200 OK"))
    }

    fn next(&self) -> (String, Vec<String>, serde_json::Value) {
        let (req, headers, body) = self
            .0
            .rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the webhook was called");
        (req, headers, serde_json::from_str(&body).unwrap())
    }

    fn none(&self) {
        assert!(
            self.0.rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "no alert expected"
        );
    }
}

/// The sample pass-through task with an `[alert]` section appended.
fn with_alert(p: &TestProject, alert: &str) {
    let base = std::fs::read_to_string(repo().join("tables").join(format!("{TASK}.toml"))).unwrap();
    p.task(TASK, &format!("{base}\n[alert]\n{alert}\n"));
}

/// Lines the alert command appended to `file`.
fn command_payloads(file: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn assert_common(p: &serde_json::Value, event: &str, command: &str, exit_code: i64) {
    assert_eq!(p["event"], event, "{p}");
    assert_eq!(p["task"], TASK);
    assert_eq!(p["command"], command);
    assert_eq!(p["exit_code"], exit_code);
    assert!(
        p["table"]
            .as_str()
            .unwrap()
            .trim_end_matches('/')
            .ends_with(&format!("lake/{TASK}")),
        "{p}"
    );
    assert!(!p["host"].as_str().unwrap().is_empty());
    assert!(
        p["at"].as_str().unwrap().parse::<jiff::Timestamp>().is_ok(),
        "{p}"
    );
    assert_eq!(p["idemlake_version"], env!("CARGO_PKG_VERSION"));
}

#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn failure_mismatch_and_damage_alert_the_command_and_the_webhook() {
    let p = TestProject::new();
    let hook = Receiver::start();
    let file = p.path().join("alerts.jsonl");
    with_alert(
        &p,
        &format!(
            "command = [\"/bin/sh\", \"-c\", \"printf '%s ' \\\"$IDEMLAKE_ALERT_EVENT\\\" >> {events}; cat >> {file}\"]\nwebhook = \"http://127.0.0.1:{}/hook?token=t0ps3cret\"",
            hook.0.port,
            events = p.path().join("events.txt").display(),
            file = file.display(),
        ),
    );

    // Success: nothing sent.
    p.run_ok(TASK, "1995-06-01");
    hook.none();
    assert!(command_payloads(&file).is_empty());

    // Failure.
    let out = p
        .cmd()
        .env("IDEMLAKE_TEST_FAULT", "before-commit")
        .args(["run", TASK, "--window", "1995-06-02"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", text(&out));
    let (req, headers, body) = hook.next();
    assert_eq!(req, "POST /hook?token=t0ps3cret HTTP/1.1");
    assert!(
        headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case("content-type: application/json")),
        "{headers:?}"
    );
    assert_common(&body, "failure", "run", 1);
    let w = &body["windows"][0];
    assert_eq!(body["windows"].as_array().unwrap().len(), 1);
    assert_eq!(w["window"], "1995-06-02");
    assert_eq!(w["start"], "1995-06-02T00:00:00+00:00");
    assert_eq!(w["end"], "1995-06-03T00:00:00+00:00");
    assert_eq!(w["status"], "failed");
    assert_eq!(w["exit_code"], 1);
    assert!(w["error"].as_str().unwrap().contains("injected"), "{w}");
    assert_eq!(w["run_id"].as_str().unwrap().len(), 36, "{w}");
    assert!(body["error"].is_null());
    let from_command = command_payloads(&file);
    assert_eq!(from_command.len(), 1);
    assert_eq!(
        from_command[0]["windows"], body["windows"],
        "same payload to both"
    );

    // Reconciliation mismatch (exit 3): the failing checks travel in `details`.
    let base =
        std::fs::read_to_string(p.path().join("tables").join(format!("{TASK}.toml"))).unwrap();
    p.task(
        TASK,
        &base.replace(
            "sum(l_extendedprice) AS extendedprice\nFROM lineitem",
            "sum(l_extendedprice) + 1 AS extendedprice\nFROM lineitem",
        ),
    );
    let out = p.run(&["run", TASK, "--window", "1995-06-03"]);
    assert_eq!(code(&out), 3, "{}", text(&out));
    let (_, _, body) = hook.next();
    assert_common(&body, "mismatch", "run", 3);
    let w = &body["windows"][0];
    assert_eq!(w["status"], "mismatch");
    assert_eq!(w["exit_code"], 3);
    let bad: Vec<_> = w["details"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .collect();
    assert_eq!(bad.len(), 1, "{w}");
    assert_eq!(bad[0]["check"], "extendedprice");
    p.task(TASK, &base);

    // Audit damage: 06-02 and 06-03 hold nothing where the source has rows.
    let out = p.run(&["audit", TASK, "--from", "1995-06-01", "--to", "1995-06-03"]);
    assert_eq!(code(&out), 4, "{}", text(&out));
    let (_, _, body) = hook.next();
    assert_common(&body, "damage", "audit", 4);
    let windows = body["windows"].as_array().unwrap();
    let names: Vec<_> = windows
        .iter()
        .map(|w| w["window"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["1995-06-02", "1995-06-03"]);
    for w in windows {
        assert_eq!(w["status"], "damaged");
        assert_eq!(w["details"]["rows"], 0);
        assert!(w["details"]["expected_rows"].as_u64().unwrap() > 0);
        assert!(!w["error"].as_str().unwrap().is_empty());
    }

    // A backfill whose two windows fail sends one alert naming both.
    let out = p
        .cmd()
        .env("IDEMLAKE_TEST_FAULT", "batch:1")
        .args([
            "backfill",
            TASK,
            "--from",
            "1995-06-04",
            "--to",
            "1995-06-05",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", text(&out));
    let (_, _, body) = hook.next();
    assert_common(&body, "failure", "backfill", 1);
    assert_eq!(body["windows"].as_array().unwrap().len(), 2);
    hook.none();

    let events = std::fs::read_to_string(p.path().join("events.txt")).unwrap();
    assert_eq!(events.trim(), "failure mismatch damage failure");
    assert_eq!(command_payloads(&file).len(), 4);
}

#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "needs the fault hooks: --features faults"
)]
fn undeliverable_alerts_warn_and_keep_the_exit_code() {
    let p = TestProject::new();
    // A port nothing listens on, a command that fails, and a filter that keeps failures only.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    with_alert(
        &p,
        &format!(
            "command = [\"/bin/false\"]\nwebhook = \"http://user:pw@127.0.0.1:{dead}/x?token=t0ps3cret\"\non = [\"failure\"]\ntimeout_secs = 2"
        ),
    );
    let out = p
        .cmd()
        .env("IDEMLAKE_TEST_FAULT", "before-commit")
        .args(["run", TASK, "--window", "1995-06-02"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("alert command `/bin/false` failed"),
        "{stderr}"
    );
    assert!(stderr.contains("alert webhook"), "{stderr}");
    assert!(
        !stderr.contains("t0ps3cret") && !stderr.contains("pw@"),
        "{stderr}"
    );
    // Success is still success when the webhook is down; damage is filtered out.
    p.run_ok(TASK, "1995-06-01");
    let out = p.run(&["audit", TASK, "--from", "1995-06-01", "--to", "1995-06-02"]);
    assert_eq!(code(&out), 4);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("alert"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_bad_alert_section_is_an_input_error() {
    let p = TestProject::new();
    with_alert(&p, "webhook = \"ftp://example.com/x\"");
    let out = p.run(&["validate", TASK]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("[alert].webhook"),
        "{}",
        text(&out)
    );
}
