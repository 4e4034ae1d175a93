//! The Python wheel (`make wheel`): `scripts/wheel` builds it (maturin, `bindings = "bin"`),
//! `pip install` puts it into a fresh venv, the `idemlake` found on that venv's PATH validates
//! a project and publishes a window, and the `idemlake` package runs it.
//!
//! The wheel is built with the debug profile and the features this test binary's `idemlake`
//! was built with (`faults`, as `make test` builds), on the same target directory, so no
//! release build is needed and cargo finds the build fresh. `make test` builds it before the
//! tests start and names it in `IDEMLAKE_TEST_WHEEL`: even a fresh cargo build re-links
//! `target/debug/idemlake` (unlinks it, then links it again), which the other tests are
//! running. Without the variable (`cargo test --features faults --test it wheel`) the test
//! builds the wheel itself: alone, that is harmless.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// The variables `cargo test` sets for a test process, which a nested cargo must not see.
fn without_cargo_test_env(c: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        let set_by_cargo_test = k.starts_with("CARGO_PKG_")
            || k.starts_with("CARGO_BIN_EXE_")
            || matches!(
                k.as_str(),
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
            );
        if set_by_cargo_test {
            c.env_remove(&k);
        }
    }
    c
}

fn run(c: &mut Command, what: &str) -> std::process::Output {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(code(&out), 0, "{what} failed:\n{}", text(&out));
    out
}

/// The wheel `make test` built, or one built here with scripts/wheel (checked to reuse the
/// warm build: cargo compiles nothing).
fn the_wheel(dir: &Path) -> PathBuf {
    if let Some(w) = std::env::var_os("IDEMLAKE_TEST_WHEEL") {
        return PathBuf::from(w);
    }
    let out = run(
        without_cargo_test_env(
            Command::new(repo().join("scripts/wheel"))
                .args(["--profile", "dev", "--features", "faults", "--out"])
                .arg(dir),
        ),
        "scripts/wheel --profile dev",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Compiling idemlake"),
        "building the wheel rebuilt idemlake (the warm build was not reused):\n{stderr}"
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

#[test]
#[cfg_attr(
    not(feature = "faults"),
    ignore = "builds the wheel with the test build's features: --features faults"
)]
fn pip_install_of_the_wheel_gives_an_idemlake_that_runs_a_window() {
    let tmp = tempfile::Builder::new()
        .prefix("idemlake-wheel-")
        .tempdir()
        .unwrap();
    let wheel = the_wheel(&tmp.path().join("dist"));
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("idemlake-{}-py3-none-", env!("CARGO_PKG_VERSION")))
            && name.ends_with(".whl"),
        "{name}"
    );

    // Install into a fresh venv, offline: the wheel has no dependencies.
    let venv = tmp.path().join("venv");
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv",
    );
    run(
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--no-index", "--no-deps"])
            .args(["--disable-pip-version-check", "--quiet"])
            .arg(&wheel),
        "pip install the wheel",
    );
    let installed = venv.join("bin/idemlake");
    assert!(installed.is_file(), "no {}", installed.display());

    // `idemlake` by name, from the venv's PATH (as an activated venv or an Airflow worker
    // finds it), in a project with the sample tasks and TPC-H SF 0.01 data.
    let p = TestProject::new();
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let idemlake = |args: &[&str]| {
        let mut c = Command::new("idemlake");
        c.env("PATH", &path)
            .env_remove("IDEMLAKE_LAKE")
            .env_remove("IDEMLAKE_PROJECT")
            .env_remove("IDEMLAKE_TEST_FAULT")
            .arg("--project")
            .arg(p.path())
            .args(args);
        c
    };
    let version = run(&mut idemlake(&["--version"]), "idemlake --version");
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("idemlake {}", env!("CARGO_PKG_VERSION"))
    );
    run(&mut idemlake(&["validate"]), "idemlake validate");
    let day = "1995-06-17";
    run(
        &mut idemlake(&["run", "lineitem_by_ship_day", "--window", day]),
        "idemlake run",
    );

    // What it published: the source's rows of that ship day, read by delta-rs here.
    let table = p.table_dir("lineitem_by_ship_day");
    assert_eq!(log_version(&table), Some(1), "created, then one commit");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let got = rt.block_on(table_rows(&table, ""));
    let want = rt.block_on(expected_lineitem_day(day));
    assert!(!want.is_empty());
    assert_eq!(got, want, "the rows of {day}");

    // The `idemlake` package beside it finds the wheel's binary (not one on PATH) and reads
    // the reports: a re-run of the day, then a window that cannot be (exit 2, not retryable).
    let script = format!(
        r#"
import idemlake
assert idemlake.binary() == "{bin}", idemlake.binary()
ok = idemlake.run(["run", "lineitem_by_ship_day", "--window", "{day}"], project="{project}")
assert ok.ok and ok.reports[0]["status"] == "ok" and not ok.retryable, ok
bad = idemlake.run(["run", "lineitem_by_ship_day", "--window", "1995-06"], project="{project}")
assert bad.code == 2 and not bad.retryable and "idemlake exited 2" in bad.reason(), bad
print("ok")
"#,
        bin = installed.display(),
        project = p.path().display()
    );
    let out = run(
        Command::new(venv.join("bin/python"))
            .env_remove("IDEMLAKE_BIN")
            .env_remove("IDEMLAKE_LAKE")
            .env_remove("IDEMLAKE_TEST_FAULT")
            .args(["-c", &script]),
        "python -c 'import idemlake'",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}
