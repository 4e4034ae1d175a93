use super::*;

fn parse(text: &str) -> Result<Vec<DataCheck>> {
    let raw: RawChecks = toml::from_str(text).map_err(|e| Error::input(e.to_string()))?;
    resolve(raw, &|f, m| Error::input(format!("{f}: {m}")))
}

#[test]
fn built_ins_become_queries_for_offending_rows() {
    let c = parse(
        r#"
not_null = ["a"]
unique = [["a", "b"]]
accepted_values = { m = ["AIR", "it's"] }
range = { q = { min = 1, max = 50.5 }, d = { min = 1995-01-01 } }
row_count = { min = 1 }
relationships = { k = "orders.o_orderkey" }
warn = ["range(q)", "row_count"]
"#,
    )
    .unwrap();
    let by = |n: &str| c.iter().find(|c| c.name == n).unwrap();
    assert_eq!(
        by("not_null(a)").sql(0),
        r#"SELECT * FROM output WHERE "a" IS NULL"#
    );
    assert!(
        by("unique(a,b)")
            .sql(0)
            .contains(r#"GROUP BY "a", "b" HAVING count(*) > 1"#)
    );
    assert!(
        by("accepted_values(m)")
            .sql(0)
            .ends_with("NOT IN ('AIR', 'it''s')")
    );
    assert_eq!(
        by("range(q)").sql(0),
        r#"SELECT * FROM output WHERE "q" < 1 OR "q" > 50.5"#
    );
    assert!(
        by("range(d)")
            .sql(0)
            .ends_with(r#""d" < DATE '1995-01-01'"#)
    );
    assert_eq!(by("range(q)").severity, Severity::Warn);
    assert_eq!(by("range(d)").severity, Severity::Error);
    assert_eq!(by("row_count").severity, Severity::Warn);
    assert!(by("relationships(k)").sql(0).contains("NOT EXISTS"));
}

#[test]
fn mistakes_name_the_field() {
    for (text, want) in [
        (
            "range = { q = {} }",
            "[checks].range.q: needs min, max or both",
        ),
        (
            "row_count = { min = 5, max = 1 }",
            "min (5) is greater than max (1)",
        ),
        (
            "relationships = { k = \"orders\" }",
            "must be \"other_task.column\"",
        ),
        (
            "warn = [\"unique\"]\nnot_null = [\"a\"]",
            "names no built-in check",
        ),
        ("accepted_values = { m = [[1]] }", "is not a single value"),
        (
            "[[sql]]\nname = \"x y\"\nsql = \"SELECT 1\"",
            "must be letters",
        ),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(want), "{text}: {e}");
    }
}
