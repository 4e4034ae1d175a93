//! Deploying to workers: the project directory is all a worker needs, the lake included.

use crate::common::*;

/// `[lake] uri` in `idemlake.toml` places the tables (relative to the project directory);
/// `--lake` and `IDEMLAKE_LAKE` still win; an empty one is refused by name.
#[test]
fn the_project_file_names_the_lake() {
    let p = TestProject::new();
    std::fs::write(
        p.path().join("idemlake.toml"),
        "[lake]\nuri = \"shared/lake\"\n",
    )
    .unwrap();
    let out = p.run(&["run", "lineitem_by_ship_day", "--window", "1995-06-01"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
    let table = p.path().join("shared/lake/lineitem_by_ship_day");
    assert!(
        log_version(&table).is_some(),
        "no table at {}",
        table.display()
    );
    assert!(!p.path().join("lake").exists());

    let elsewhere = p.path().join("flag-lake");
    let out = p
        .cmd()
        .env("IDEMLAKE_LAKE", &elsewhere)
        .args(["run", "lineitem_by_ship_day", "--window", "1995-06-01"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", text(&out));
    assert!(log_version(&elsewhere.join("lineitem_by_ship_day")).is_some());

    std::fs::write(p.path().join("idemlake.toml"), "[lake]\nuri = \" \"\n").unwrap();
    let out = p.run(&["validate"]);
    assert_eq!(code(&out), 2, "{}", text(&out));
    assert!(text(&out).contains("[lake].uri is empty"), "{}", text(&out));
}
