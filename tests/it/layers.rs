//! The source tree's layers (docs/src/internals/architecture.md): every `crate::` path in `src/` is read,
//! and each import must point to a layer the importing layer may use, and no files may
//! import each other in a circle. Comments and unit tests are skipped; `super::` paths stay
//! inside one folder (one layer) and are not followed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each layer (a folder of `src/`, or a file at its top) and the layers it may import.
const LAYERS: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("config", &["error"]),
    ("session", &["config", "error"]),
    ("storage", &["config", "error"]),
    ("fault", &["config", "error", "storage"]),
    ("task", &["config", "error"]),
    ("report", &["task", "config", "error"]),
    ("lineage", &["task", "report", "config", "error"]),
    (
        "delta",
        &["task", "storage", "report", "config", "error", "fault"],
    ),
    (
        "accel",
        &["session", "task", "storage", "config", "error", "fault"],
    ),
    (
        "engine",
        &["session", "accel", "task", "storage", "config", "error"],
    ),
    (
        "pipeline",
        &[
            "session", "engine", "accel", "delta", "lineage", "report", "storage", "task",
            "config", "error", "fault",
        ],
    ),
    (
        "commands",
        &[
            "pipeline", "session", "engine", "accel", "delta", "lineage", "report", "storage",
            "task", "config", "error", "fault",
        ],
    ),
    (
        "cli",
        &[
            "commands", "pipeline", "session", "engine", "accel", "delta", "lineage", "report",
            "storage", "task", "config", "error", "fault",
        ],
    ),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a source file: `src/pipeline/window.rs` → `pipeline::window`.
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// The `crate::a::b::…` paths a file names in code (not in comments), as segments.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let mut path = Vec::new();
            let mut tail = rest;
            loop {
                let end = tail
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                if end == 0 {
                    break;
                }
                path.push(tail[..end].to_string());
                tail = &tail[end..];
                if let Some(next) = tail.strip_prefix("::") {
                    tail = next;
                } else {
                    break;
                }
            }
            // `use crate::x::{a, b}`: the braces name items of `x` or its modules.
            if let Some(group) = tail.strip_prefix('{') {
                for item in group.split(['}', ',']).map(str::trim) {
                    let first = item.split("::").next().unwrap_or_default();
                    if !first.is_empty() {
                        let mut p = path.clone();
                        p.push(first.to_string());
                        out.push(p);
                    }
                }
            }
            if !path.is_empty() {
                out.push(path);
            }
        }
    }
    out
}

struct Tree {
    /// Module path → file.
    modules: BTreeMap<Vec<String>, PathBuf>,
    /// File → the files it imports (within the crate).
    imports: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

fn tree() -> Tree {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let modules: BTreeMap<Vec<String>, PathBuf> =
        all.iter().map(|f| (module_of(f), f.clone())).collect();
    let mut imports = BTreeMap::new();
    for f in &all {
        if f.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        // A file's unit tests (at its end) may use any layer to build their fixtures.
        let text = match text.find("\n#[cfg(test)]\nmod tests") {
            Some(at) => &text[..at],
            None => &text[..],
        };
        let mut to = BTreeSet::new();
        for path in crate_paths(text) {
            // The longest prefix of the path that is a module is the file imported.
            let target = (1..=path.len()).rev().find_map(|n| modules.get(&path[..n]));
            if let Some(t) = target
                && t != f
            {
                to.insert(t.clone());
            }
        }
        imports.insert(f.clone(), to);
    }
    Tree { modules, imports }
}

fn layer_of(file: &Path) -> String {
    module_of(file)
        .first()
        .cloned()
        .unwrap_or_else(|| "lib".to_string())
}

#[test]
fn every_import_points_to_a_layer_below() {
    let t = tree();
    assert!(
        t.modules.len() > 30,
        "the source tree was not read: {:?}",
        t.modules.keys().collect::<Vec<_>>()
    );
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (from, targets) in &t.imports {
        let a = layer_of(from);
        let Some(may) = allowed.get(a.as_str()) else {
            assert!(
                matches!(a.as_str(), "lib" | "main"),
                "{} is in no layer: add it to LAYERS and to docs/src/internals/architecture.md",
                from.display()
            );
            continue;
        };
        for to in targets {
            let b = layer_of(to);
            if b != a && !may.contains(&b.as_str()) {
                wrong.push(format!("{} -> {}", from.display(), to.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

/// Folders that must not import a layer their own layer may (docs/src/internals/architecture.md):
/// a check never shares the path it checks, so the independent checks build their session
/// and reach their sources without the accelerations' code.
const FORBIDDEN: &[(&str, &str)] = &[("pipeline/checks", "accel")];

#[test]
fn the_checks_import_nothing_of_the_accelerations() {
    let t = tree();
    let mut wrong = Vec::new();
    for (folder, layer) in FORBIDDEN {
        let dir = src().join(folder);
        let checked = t.imports.keys().filter(|f| f.starts_with(&dir)).count();
        assert!(checked > 3, "{} holds no sources", dir.display());
        for (from, targets) in t.imports.iter().filter(|(f, _)| f.starts_with(&dir)) {
            for to in targets.iter().filter(|to| layer_of(to) == *layer) {
                wrong.push(format!("{} -> {}", from.display(), to.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the independent checks import the accelerations:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let t = tree();
    // Tarjan's strongly connected components over the file graph.
    struct State<'a> {
        graph: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a Path, usize>,
        low: BTreeMap<&'a Path, usize>,
        stack: Vec<&'a Path>,
        on_stack: BTreeSet<&'a Path>,
        next: usize,
        circles: Vec<Vec<&'a Path>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Path) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_path();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.circles.push(component);
            }
        }
    }
    let mut s = State {
        graph: &t.imports,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        circles: Vec::new(),
    };
    for v in t.imports.keys() {
        if !s.index.contains_key(v.as_path()) {
            visit(&mut s, v.as_path());
        }
    }
    assert!(
        s.circles.is_empty(),
        "files importing each other in a circle: {:?}",
        s.circles
    );
}

#[test]
fn the_reader_sees_imports_and_skips_comments() {
    let text = "//! see crate::cli\nuse crate::task::{window::Window, Task};\nlet x = crate::delta::table::open(u);";
    let paths = crate_paths(text);
    assert!(paths.contains(&vec!["task".into(), "window".into()]));
    assert!(paths.contains(&vec!["task".into(), "Task".into()]));
    assert!(paths.contains(&vec!["delta".into(), "table".into(), "open".into()]));
    assert!(!paths.iter().any(|p| p[0] == "cli"));
}

/// How long a file or a function may be (docs/src/internals/architecture.md); a longer function says why
/// in a `// Long:` comment just above it.
const MAX_FILE_LINES: usize = 500;
const MAX_FN_LINES: usize = 80;

/// The functions of a file longer than `MAX_FN_LINES`, as `(first line, length, name)`, that
/// do not say why. A function runs from its `fn` line to the first line that closes it at the
/// same indent; declarations without a body and one-line functions are skipped.
fn long_functions(text: &str) -> Vec<(usize, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        let mut rest = code;
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        let Some(after) = rest.strip_prefix("fn ") else {
            continue;
        };
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // Where the signature ends: a body opens (`{`) or a declaration ends (`;`).
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
        }) else {
            continue;
        };
        let l = lines[open].trim_end();
        if l.ends_with(';') || (open == i && l.ends_with('}')) {
            continue;
        }
        let close = format!("{indent}}}");
        let Some(end) = (open + 1..lines.len()).find(|&j| lines[j].trim_end() == close) else {
            continue;
        };
        let len = end - i + 1;
        if len <= MAX_FN_LINES {
            continue;
        }
        // The comment block just above the function (attributes and doc comments included).
        let says_why = lines[..i]
            .iter()
            .rev()
            .take_while(|l| {
                let t = l.trim_start();
                t.starts_with("//") || t.starts_with("#[")
            })
            .any(|l| l.trim_start().starts_with("// Long:"));
        if !says_why {
            out.push((i + 1, len, name));
        }
    }
    out
}

#[test]
fn files_and_functions_stay_short() {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let mut wrong = Vec::new();
    for f in &all {
        let text = std::fs::read_to_string(f).unwrap();
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            wrong.push(format!("{}: {n} lines", f.display()));
        }
        for (at, len, name) in long_functions(&text) {
            wrong.push(format!("{}:{at}: fn {name} is {len} lines", f.display()));
        }
    }
    assert!(
        wrong.is_empty(),
        "over {MAX_FILE_LINES} lines a file or {MAX_FN_LINES} a function \
         (split it, or say why in a `// Long:` comment above the function):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_length_reader_finds_long_functions_and_their_reasons() {
    let body = "    let x = 1;\n".repeat(MAX_FN_LINES);
    let long = format!("pub async fn big() {{\n{body}}}\n");
    assert_eq!(
        long_functions(&long),
        vec![(1, MAX_FN_LINES + 2, "big".to_string())]
    );
    let explained = format!("// Long: one arm per case.\n#[allow(x)]\n{long}");
    assert!(long_functions(&explained).is_empty());
    let short = format!(
        "fn small(\n    a: u8,\n) -> u8 {{\n{}}}\n",
        "    a;\n".repeat(10)
    );
    assert!(long_functions(&short).is_empty());
    // A trait's declarations have no body; they are not measured up to the next method.
    let decl = format!(
        "trait T {{\n    fn a(&self);\n    fn b(&self) {{\n{}    }}\n}}\n",
        "        1;\n".repeat(5)
    );
    assert!(long_functions(&decl).is_empty());
}
