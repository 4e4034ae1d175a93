//! Docs that cannot drift: the generated CLI reference, the task-file keys, relative links and
//! anchors, and the example tasks of docs/ (each must pass `validate`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::*;

fn docs_src() -> PathBuf {
    repo().join("docs").join("src")
}

/// Every Markdown file of the guide, plus the top-level ones and bench/README.md.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&docs_src(), &mut out);
    for f in [
        "README.md",
        "CONTRIBUTING.md",
        "FAQ.md",
        "CHANGELOG.md",
        "bench/README.md",
    ] {
        out.push(repo().join(f));
    }
    out.sort();
    out
}

/// The lines of `text` outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push(line);
        }
    }
    out
}

/// The anchor mdBook (and GitHub) give a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose_lines(text)
        .iter()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// `[text](target)` link targets in the prose of `text` (not images' alt texts' URLs).
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn the_cli_reference_is_generated_from_clap() {
    let path = docs_src().join("reference").join("cli.md");
    let generated = idemlake::cli::reference::markdown();
    if std::env::var_os("IDEMLAKE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} differs from the clap definitions: regenerate it with\n  \
         IDEMLAKE_BLESS=1 cargo test --test it docs::the_cli_reference_is_generated_from_clap\n\
         and commit the result",
        path.display()
    );
    // Every command of the binary has its section (and so its flags).
    use clap::CommandFactory;
    for sub in idemlake::cli::Cli::command().get_subcommands() {
        let heading = format!("`idemlake {}`", sub.get_name());
        assert!(committed.contains(&heading), "no section {heading}");
    }
}

#[test]
fn links_and_anchors_in_the_docs_resolve() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (target, anchor) = match link.split_once('#') {
                Some((t, a)) => (t, Some(a)),
                None => (link.as_str(), None),
            };
            let path = if target.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(target)
            };
            if !path.exists() {
                broken.push(format!("{}: {link} (no such file)", file.display()));
                continue;
            }
            if let Some(a) = anchor
                && !anchors(&std::fs::read_to_string(&path).unwrap()).contains(a)
            {
                broken.push(format!("{}: {link} (no such heading)", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The keys a section of the task-file reference documents: the first column of its tables.
fn documented_keys() -> BTreeMap<String, BTreeSet<String>> {
    documented_keys_in("task-file.md")
}

/// The keys each section of the reference page `page` documents.
fn documented_keys_in(page: &str) -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(docs_src().join("reference").join(page)).unwrap();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut section = String::new();
    for line in prose_lines(&text) {
        if let Some(h) = line.strip_prefix("## ").or(line.strip_prefix("### ")) {
            section = h.trim().trim_matches('`').to_string();
        } else if let Some(row) = line.strip_prefix("| `")
            && let Some(end) = row.find('`')
        {
            out.entry(section.clone())
                .or_default()
                .insert(row[..end].to_string());
        }
    }
    out
}

/// The keys the task-file parser accepts in a section, from its own error for an unknown key
/// (serde's `unknown field ..., expected one of ...`).
fn accepted_keys(p: &TestProject, toml: &str) -> BTreeSet<String> {
    p.task("keys_probe", toml);
    let out = p.run(&["validate", "keys_probe"]);
    expected_keys(&out, toml)
}

/// The keys serde's error for the unknown key `zz_unknown` in `toml` says it expected.
fn expected_keys(out: &std::process::Output, toml: &str) -> BTreeSet<String> {
    assert_eq!(code(out), 2, "{}", text(out));
    let t = text(out);
    let Some(at) = t.find("unknown field `zz_unknown`, expected") else {
        panic!("no unknown-field error for\n{toml}\n{t}");
    };
    let rest = t[at..].lines().next().unwrap();
    let rest = &rest[rest.find("expected").unwrap()..];
    rest.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn every_task_file_key_is_documented_and_exists() {
    let p = TestProject::new();
    let base = |top: &str, extra: &str| {
        format!(
            "{top}sql = \"SELECT l_orderkey, l_shipdate AS d FROM li WHERE l_shipdate >= $window_start AND l_shipdate < $window_end\"\n\
             [target]\npartition_by = \"d\"\n[window]\ngrain = \"day\"\n\
             [sources.li]\nuri = \"data/lineitem.parquet\"\n{extra}"
        )
    };
    let z = "zz_unknown = 1\n";
    let sections: Vec<(&str, String)> = vec![
        ("Top level", base(z, "")),
        (
            "[target]",
            base("", "").replace("[window]", &format!("{z}[window]")),
        ),
        (
            "[window]",
            base("", "").replace("[sources.li]", &format!("{z}[sources.li]")),
        ),
        ("[sources.<alias>]", base("", z)),
        ("[write]", base("", &format!("[write]\n{z}"))),
        (
            "[reconcile]",
            base(
                "",
                &format!("[reconcile]\nsource = \"x\"\noutput = \"y\"\n{z}"),
            ),
        ),
        ("[checks]", base("", &format!("[checks]\n{z}"))),
        (
            "[checks.range.<column>]",
            base("", "[checks]\nrange = { x = { zz_unknown = 1 } }\n"),
        ),
        (
            "[checks.row_count]",
            base("", "[checks]\nrow_count = { zz_unknown = 1 }\n"),
        ),
        (
            "[[checks.sql]]",
            base(
                "",
                &format!("[[checks.sql]]\nname = \"n\"\nsql = \"s\"\n{z}"),
            ),
        ),
        ("[lint]", base("", &format!("[lint]\n{z}"))),
        ("[alert]", base("", &format!("[alert]\n{z}"))),
        ("[engine]", base("", &format!("[engine]\n{z}"))),
    ];
    let mut documented = documented_keys();
    // The top level also accepts the sections themselves: `[target]`, `[sources.<alias>]`, …
    let tables: Vec<String> = documented
        .keys()
        .filter_map(|h| h.strip_prefix('['))
        .map(|h| {
            h.trim_start_matches('[')
                .split(['.', ']'])
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    documented
        .entry("Top level".to_string())
        .or_default()
        .extend(tables);
    let mut problems = Vec::new();
    for (section, toml) in &sections {
        let accepted = accepted_keys(&p, toml);
        let doc = documented.get(*section).cloned().unwrap_or_default();
        for k in accepted.difference(&doc) {
            problems.push(format!("{section}: `{k}` is accepted but not documented"));
        }
        for k in doc.difference(&accepted) {
            problems.push(format!(
                "{section}: `{k}` is documented but the parser refuses it"
            ));
        }
    }
    let known: BTreeSet<&str> = sections.iter().map(|(s, _)| *s).collect();
    for s in documented.keys() {
        assert!(
            known.contains(s.as_str()),
            "reference section {s} is not checked by this test"
        );
    }
    assert!(
        problems.is_empty(),
        "docs/src/reference/task-file.md and the parser disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_project_file_key_is_documented_and_exists() {
    let p = TestProject::new();
    let documented = documented_keys_in("project-file.md");
    let probe = |toml: &str| {
        std::fs::write(p.path().join("idemlake.toml"), toml).unwrap();
        expected_keys(&p.run(&["validate"]), toml)
    };
    // The top level holds the sections.
    let sections: BTreeSet<String> = documented
        .keys()
        .map(|h| h.trim_matches(['[', ']']).to_string())
        .collect();
    assert_eq!(
        probe("zz_unknown = 1\n"),
        sections,
        "the project file's sections"
    );
    for (section, keys) in &documented {
        let accepted = probe(&format!("{section}\nzz_unknown = 1\n"));
        assert_eq!(
            &accepted, keys,
            "docs/src/reference/project-file.md {section}"
        );
    }
    std::fs::remove_file(p.path().join("idemlake.toml")).unwrap();
    let out = p.run(&["validate"]);
    assert_eq!(code(&out), 0, "{}", text(&out));
}

/// Example tasks in the docs: a ```toml block right after `<!-- validate: NAME -->`.
fn example_tasks() -> Vec<(PathBuf, String, String)> {
    let mut out = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let Some(name) = line
                .trim()
                .strip_prefix("<!-- validate:")
                .and_then(|r| r.strip_suffix("-->"))
            else {
                continue;
            };
            assert_eq!(
                lines.next().map(str::trim),
                Some("```toml"),
                "{}: `<!-- validate: {name}-->` must be followed by a ```toml block",
                file.display()
            );
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            out.push((file.clone(), name.trim().to_string(), body.join("\n")));
        }
    }
    out
}

#[test]
fn example_tasks_in_the_docs_pass_validate() {
    let examples = example_tasks();
    assert!(
        examples.len() >= 4,
        "too few marked examples: {}",
        examples.len()
    );
    let p = TestProject::new();
    // What the examples read besides the TPC-H files: a landing zone of two days.
    for n in 0..2 {
        crate::landing::write_file(&p.path().join("events"), crate::landing::day(n), 0);
    }
    // Tasks other examples read (`task = "…"`) publish a window once validated: a downstream
    // task's validation reads its upstream table.
    let upstream: BTreeSet<String> = examples
        .iter()
        .flat_map(|(_, _, toml)| toml.lines())
        .filter_map(|l| l.trim().strip_prefix("task = \""))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect();
    let publish = |name: &str| {
        let out = p.run(&["run", name, "--window", "1995-06-02"]);
        assert_eq!(code(&out), 0, "run {name}: {}", text(&out));
    };
    for name in &upstream {
        if !examples.iter().any(|(_, n, _)| n == name) {
            publish(name);
        }
    }
    for (file, name, toml) in &examples {
        p.task(name, toml);
        let out = p.run(&["validate", name]);
        assert_eq!(
            code(&out),
            0,
            "{}: example task `{name}` does not validate:\n{}",
            file.display(),
            text(&out)
        );
        if upstream.contains(name) {
            publish(name);
        }
    }
}

/// The `idemlake …` command lines in the docs (code blocks and inline code): the command and
/// its flags, up to the end of the command.
fn documented_commands() -> Vec<(PathBuf, Vec<String>)> {
    let mut out = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let mut rest = line;
            while let Some(at) = rest.find("idemlake ") {
                let before = rest[..at].chars().last();
                rest = &rest[at + "idemlake ".len()..];
                // A word ending in `idemlake` (a path, `$BIN`) is not the command.
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-') {
                    continue;
                }
                let words: Vec<String> = rest
                    .split('`')
                    .next()
                    .unwrap_or_default()
                    .split_whitespace()
                    .take_while(|w| !["#", "|", "&&", ";", ">", "\\", "||"].contains(w))
                    .take_while(|w| !w.starts_with('('))
                    .map(str::to_string)
                    .collect();
                out.push((file.clone(), words));
            }
        }
    }
    out
}

#[test]
fn flags_in_documented_commands_exist() {
    use clap::CommandFactory;
    let mut root = idemlake::cli::Cli::command();
    root.build();
    // The argument `--flag` of `cmd`, if it has one (`--help` and `--version` always exist).
    let arg = |cmd: &clap::Command, flag: &str| {
        cmd.get_arguments()
            .find(|a| a.get_long() == Some(flag))
            .map(|a| a.get_action().takes_values())
    };
    let mut checked = 0;
    let mut problems = Vec::new();
    for (file, words) in documented_commands() {
        let mut cmd = &root;
        let mut words = words.iter();
        while let Some(w) = words.next() {
            if let Some(flag) = w.strip_prefix("--") {
                let (flag, inline_value) = match flag.split_once('=') {
                    Some((f, _)) => (f, true),
                    None => (flag, false),
                };
                if flag.is_empty() || !flag.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                    break;
                }
                checked += 1;
                match arg(cmd, flag) {
                    Some(true) if !inline_value => {
                        words.next(); // its value
                    }
                    Some(_) => {}
                    None if flag == "help" || flag == "version" => {}
                    None => problems.push(format!(
                        "{}: `--{flag}` for `{}`",
                        file.display(),
                        cmd.get_name()
                    )),
                }
            } else if w.starts_with('-') {
                continue; // -v, -vv
            } else if let Some(sub) = cmd.find_subcommand(w) {
                cmd = sub;
            } else if std::ptr::eq(cmd, &root) {
                break; // prose ("idemlake runs it"), not a command line
            }
        }
    }
    assert!(checked > 50, "too few flags found in the docs: {checked}");
    assert!(
        problems.is_empty(),
        "flags the commands do not have:\n{}",
        problems.join("\n")
    );
}

/// Issue 38: the README is a short introduction; everything else lives in the guide.
#[test]
fn the_readme_stays_under_10000_characters() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let n = readme.chars().count();
    assert!(
        n <= 10_000,
        "README.md has {n} characters: move detail into docs/src"
    );
}

/// The report fields documented in docs/src/reference/reports.md ("The report of a window").
fn documented_report_fields() -> BTreeSet<String> {
    let text = std::fs::read_to_string(docs_src().join("reference").join("reports.md")).unwrap();
    let at = text
        .find("## The report of a window")
        .expect("reports.md has the section");
    text[at..]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn report_fields_are_documented() {
    let p = TestProject::new();
    let documented = documented_report_fields();
    // An ok window, a failed one with data checks (exit 6), and a command failing as a whole.
    let toml = std::fs::read_to_string(p.path().join("tables/daily_revenue.toml")).unwrap();
    p.task(
        "with_checks",
        &format!("{toml}\n[checks]\nrow_count = {{ max = 0 }}\n").replace(
            "description",
            "# daily_revenue with a failing check\ndescription",
        ),
    );
    std::fs::copy(
        p.path().join("tables/daily_revenue.sql"),
        p.path().join("tables/with_checks.sql"),
    )
    .unwrap();
    let runs: [&[&str]; 3] = [
        &[
            "--output",
            "json",
            "run",
            "daily_revenue",
            "--window",
            "1995-06-02",
        ],
        &[
            "--output",
            "json",
            "run",
            "with_checks",
            "--window",
            "1995-06-02",
        ],
        &[
            "--output",
            "json",
            "run",
            "no_such_task",
            "--window",
            "1995-06-02",
        ],
    ];
    let mut seen = BTreeSet::new();
    for args in runs {
        let out = p.run(args);
        for report in json_lines(&out) {
            for key in report.as_object().unwrap().keys() {
                seen.insert(key.clone());
            }
        }
    }
    assert!(seen.contains("data_checks"), "{seen:?}");
    let missing: Vec<&String> = seen.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "report fields missing from docs/src/reference/reports.md: {missing:?}"
    );
}

/// `IDEMLAKE_*` names in `text`: each run of `IDEMLAKE_` followed by capitals, digits and `_`.
fn idemlake_variables(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("IDEMLAKE_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].trim_end_matches('_').to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn every_environment_variable_is_documented() {
    fn walk(dir: &Path, out: &mut String) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                // String literals only: `"IDEMLAKE_…"` as the code reads them.
                for piece in std::fs::read_to_string(&p)
                    .unwrap()
                    .split('"')
                    .skip(1)
                    .step_by(2)
                {
                    out.push_str(piece);
                    out.push('\n');
                }
            }
        }
    }
    let mut literals = String::new();
    walk(&repo().join("src"), &mut literals);
    let read: BTreeSet<String> = idemlake_variables(&literals)
        .into_iter()
        .filter(|v| literals.lines().any(|l| l == v))
        .collect();
    let page =
        std::fs::read_to_string(docs_src().join("reference").join("environment.md")).unwrap();
    let documented = idemlake_variables(&page);
    assert!(read.len() >= 10, "{read:?}");
    let undocumented: Vec<&String> = read.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&read).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/src/reference/environment.md: undocumented {undocumented:?}, not read by src/ {unknown:?}"
    );
}

/// Issue 38: the examples named tasks that do not exist. Every task an example runs (a command
/// line with `run`/`backfill`, a `TASK = "…"`, a Dagster asset, a Kubernetes argument list) is
/// one of tables/.
#[test]
fn examples_name_tasks_that_exist() {
    let tasks: BTreeSet<String> = std::fs::read_dir(repo().join("tables"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "toml").then(|| p.file_stem().unwrap().to_string_lossy().into())
        })
        .collect();
    let quoted_after = |line: &str, prefix: &str| {
        line.find(prefix)
            .and_then(|at| line[at + prefix.len()..].split('"').next())
            .map(str::to_string)
    };
    let mut named = Vec::new();
    for dir in ["airflow", "dagster", "cron", "kubernetes"] {
        for e in std::fs::read_dir(repo().join("examples").join(dir)).unwrap() {
            let path = e.unwrap().path();
            if !["py", "yaml", ""].contains(&path.extension().map_or("", |x| x.to_str().unwrap())) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let mut found = Vec::new();
                found.extend(quoted_after(line, "TASK = \""));
                found.extend(quoted_after(line, "idemlake_asset(\""));
                // An idemlake command line: `… run X …` / `… backfill X …`.
                if line.to_lowercase().contains("idemlake") && line.contains(" --") {
                    let words: Vec<&str> = line.split_whitespace().collect();
                    // The command word comes after the program (`idemlake`, `$IDEMLAKE`,
                    // `"$bin"`) and its global flags, never in prose ("idemlake: backfill a …").
                    let program = words.iter().position(|w| {
                        let w = w.trim_matches(|c| c == '"' || c == '$' || c == '\'');
                        w.eq_ignore_ascii_case("idemlake") || w.ends_with("/idemlake") || w == "bin"
                    });
                    for (j, w) in words.windows(2).enumerate() {
                        let after_program = program.is_some_and(|p| j > p);
                        if after_program
                            && (w[0] == "run" || w[0] == "backfill")
                            && !w[1].starts_with('%')
                        {
                            found.push(w[1].to_string());
                        }
                    }
                }
                // A YAML argument list: `- backfill` then `- TASK`.
                if line.trim() == "- backfill" || line.trim() == "- run" {
                    found.extend(
                        lines
                            .get(i + 1)
                            .map(|l| l.trim().trim_start_matches("- ").to_string()),
                    );
                }
                for name in found {
                    named.push((path.display().to_string(), name));
                }
            }
        }
    }
    assert!(
        named.len() >= 6,
        "too few task names found in examples/: {named:?}"
    );
    let unknown: Vec<&(String, String)> = named
        .iter()
        .filter(|(_, n)| n != "TASK" && !tasks.contains(n))
        .collect();
    assert!(
        unknown.is_empty(),
        "examples name tasks that are not in tables/: {unknown:?}"
    );
}
