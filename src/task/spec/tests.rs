use super::*;
use crate::error::ErrorKind;

const GOOD: &str = r#"
sql = "SELECT * FROM src WHERE d >= $window_start AND d < $window_end"
[target]
partition_by = "d"
[window]
grain = "day"
timezone = "Europe/Berlin"
[sources.src]
uri = "data/x.parquet"
[write]
mode = "merge"
key = ["id"]
[reconcile]
source = "SELECT count(*) AS n FROM src"
output = "SELECT count(*) AS n FROM output"
tolerance = { n = 0.0 }
"#;

fn parse(text: &str) -> Result<Task> {
    Task::parse("t", Path::new("tables/t.toml"), text, Path::new("/proj"))
}

#[test]
fn a_complete_task_parses() {
    let t = parse(GOOD).unwrap();
    assert_eq!(t.grain, Grain::Day);
    assert_eq!(t.timezone_name, "Europe/Berlin");
    assert_eq!(t.sources[0].uri, "/proj/data/x.parquet");
    assert_eq!(t.sources[0].format, Format::Parquet);
    assert_eq!(t.mode, Mode::Merge);
    assert_eq!(t.on_empty, OnEmpty::Clear);
    assert_eq!(t.reconcile.unwrap().on_mismatch, OnMismatch::Fail);
}

fn assert_input_err(text: &str, needle: &str) {
    let e = parse(text).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Input);
    assert!(e.message().contains("tables/t.toml"), "{e}");
    assert!(e.message().contains(needle), "expected `{needle}` in: {e}");
}

#[test]
fn bad_task_files_name_file_and_field() {
    assert_input_err(&GOOD.replace("partition_by", "partiton_by"), "partiton_by");
    assert_input_err(
        &GOOD.replace("grain = \"day\"", "grain = \"fortnight\""),
        "fortnight",
    );
    assert_input_err(
        &GOOD.replace("Europe/Berlin", "Mars/Olympus"),
        "[window].timezone",
    );
    assert_input_err(&GOOD.replace("key = [\"id\"]", ""), "[write].key");
    assert_input_err(&GOOD.replace("n = 0.0", "n = -1.0"), "tolerance.n");
    assert_input_err(&GOOD.replace("data/x.parquet", "data/x.bin"), "format");
    assert_input_err(&format!("{GOOD}\n[extra]\nx = 1\n"), "extra");
    assert_input_err(&GOOD.replace("sql = ", "# sql = "), "sql");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// A valid task file with one random edit: a line dropped or duplicated, a span of
    /// text replaced by random text, or random bytes inserted.
    fn mutated() -> impl Strategy<Value = String> {
        let lines: Vec<String> = GOOD.lines().map(str::to_string).collect();
        let n = lines.len();
        (0..4u8, 0..n, any::<String>(), 0..GOOD.len(), 0usize..20).prop_map(
            move |(how, line, junk, at, len)| match how {
                0 => {
                    let mut l = lines.clone();
                    l.remove(line);
                    l.join("\n")
                }
                1 => {
                    let mut l = lines.clone();
                    l.insert(line, lines[line].clone());
                    l.join("\n")
                }
                2 => {
                    let mut s = GOOD.to_string();
                    let at = (0..=at).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
                    let end = (at + len).min(s.len());
                    let end = (end..=s.len()).find(|i| s.is_char_boundary(*i)).unwrap();
                    s.replace_range(at..end, &junk);
                    s
                }
                _ => {
                    let mut l = lines.clone();
                    l[line] = junk;
                    l.join("\n")
                }
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The task-file parser never panics and every rejection is an input error
        /// (exit 2) that names the file.
        #[test]
        fn task_files_never_panic_and_rejections_name_the_file(text in mutated()) {
            if let Err(e) = parse(&text) {
                prop_assert_eq!(e.kind(), ErrorKind::Input);
                prop_assert!(e.message().contains("tables/t.toml"), "{}", e.message());
            }
        }

        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            if let Err(e) = parse(&text) {
                prop_assert_eq!(e.kind(), ErrorKind::Input);
            }
        }
    }
}

#[test]
fn lookback_defaults_to_zero_and_is_bounded() {
    assert_eq!(parse(GOOD).unwrap().lookback, 0);
    let with = |n: &str| {
        GOOD.replace(
            "grain = \"day\"",
            &format!("grain = \"day\"\nlookback = {n}"),
        )
    };
    assert_eq!(parse(&with("3")).unwrap().lookback, 3);
    assert_input_err(&with("-1"), "[window].lookback: must be between 0 and 100");
    assert_input_err(&with("101"), "[window].lookback: must be between 0 and 100");
}
