//! Determinism lint over the *unoptimised* logical plan.
//!
//! A task must compute the same rows for the same window and inputs, or it can neither be
//! retried nor backfilled. This pass walks every expression of the plan (subqueries included)
//! before the optimiser could constant-fold `now()` away, and rejects any function whose
//! DataFusion volatility is not `Immutable` (`now()`, `current_date`, `random()`, `uuid()`, …),
//! unless the task lists it under `[lint] allow`. Findings are located in the SQL text by
//! tokenising it (so comments and string literals never match), to name the line.
//! It also collects the `$parameters` the plan uses: unknown ones and SQL that never references
//! the window are rejected.

use std::collections::BTreeSet;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{Error, Result};

/// The parameters a task's SQL may use.
pub const WINDOW_PARAMS: [&str; 4] = [
    "window_start",
    "window_end",
    "window_start_ts",
    "window_end_ts",
];

/// A non-deterministic function found in a plan.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// The function's name in DataFusion.
    pub function: String,
    /// Other names it may be written as (e.g. `current_timestamp` for `now`).
    pub aliases: Vec<String>,
    pub volatility: String,
}

/// Collect the non-deterministic functions used anywhere in `plan`.
pub fn volatile_functions(plan: &LogicalPlan) -> Result<Vec<Finding>> {
    let mut found = BTreeSet::new();
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                let hit = match e {
                    Expr::ScalarFunction(f) => Some((
                        f.func.name().to_string(),
                        f.func.aliases().to_vec(),
                        f.func.signature().volatility,
                    )),
                    Expr::AggregateFunction(f) => Some((
                        f.func.name().to_string(),
                        f.func.aliases().to_vec(),
                        f.func.signature().volatility,
                    )),
                    _ => None,
                };
                if let Some((name, aliases, vol)) = hit
                    && vol != Volatility::Immutable
                {
                    found.insert(Finding {
                        function: name,
                        aliases,
                        volatility: format!("{vol:?}").to_lowercase(),
                    });
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(found.into_iter().collect())
}

/// Window functions whose result depends on row order.
const ORDER_SENSITIVE: [&str; 11] = [
    "row_number",
    "rank",
    "dense_rank",
    "percent_rank",
    "cume_dist",
    "ntile",
    "lag",
    "lead",
    "first_value",
    "last_value",
    "nth_value",
];

/// Unqualified names of the columns `exprs` reference.
fn column_names<'a>(exprs: impl IntoIterator<Item = &'a Expr>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in exprs {
        for c in e.column_refs() {
            out.insert(c.name.clone());
        }
    }
    out
}

/// Order-dependence findings: LIMIT/OFFSET without a total ORDER BY, and order-sensitive
/// window functions without ORDER BY. Each is `(rule, message)`; `rule` is what `[lint] allow`
/// names to accept it (`limit`, `window_order`).
pub fn order_dependence(plan: &LogicalPlan) -> Result<Vec<(String, String)>> {
    let mut found = Vec::new();
    plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::Limit(limit) => {
                // Walk down to the Sort the LIMIT applies to, noting what the rows consist of.
                let mut needed: Option<BTreeSet<String>> = None;
                let mut below = limit.input.as_ref();
                let sort = loop {
                    match below {
                        LogicalPlan::Projection(p) => {
                            needed.get_or_insert_with(|| column_names(&p.expr));
                            below = p.input.as_ref();
                        }
                        LogicalPlan::SubqueryAlias(a) => below = a.input.as_ref(),
                        LogicalPlan::Sort(s) => break Some(s),
                        _ => break None,
                    }
                };
                match sort {
                    None => found.push((
                        "limit".to_string(),
                        "LIMIT/OFFSET without ORDER BY picks arbitrary rows: which ones may change between runs".to_string(),
                    )),
                    Some(s) => {
                        let sorted = column_names(s.expr.iter().map(|e| &e.expr));
                        let needed = needed.unwrap_or_else(|| {
                            s.input.schema().fields().iter().map(|f| f.name().clone()).collect()
                        });
                        let missing: Vec<String> = needed.difference(&sorted).cloned().collect();
                        if !missing.is_empty() {
                            found.push((
                                "limit".to_string(),
                                format!(
                                    "LIMIT/OFFSET with an ORDER BY that is not total: rows tied on the sort keys may be picked differently between runs; add {} to the ORDER BY",
                                    missing.join(", ")
                                ),
                            ));
                        }
                    }
                }
            }
            LogicalPlan::Window(w) => {
                for e in &w.window_expr {
                    let mut inner = e;
                    while let Expr::Alias(a) = inner {
                        inner = a.expr.as_ref();
                    }
                    if let Expr::WindowFunction(wf) = inner {
                        let name = wf.fun.name().to_lowercase();
                        if ORDER_SENSITIVE.contains(&name.as_str()) && wf.params.order_by.is_empty() {
                            found.push((
                                "window_order".to_string(),
                                format!("{name}() OVER (…) without ORDER BY numbers rows in an arbitrary order that may change between runs"),
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// Reject order-dependent SQL unless its rule is in `allow`.
pub fn check_order_dependence(
    plan: &LogicalPlan,
    allow: &[String],
    origin: &SqlOrigin,
) -> Result<()> {
    for (rule, msg) in order_dependence(plan)? {
        if !allow.iter().any(|a| a.eq_ignore_ascii_case(&rule)) {
            return Err(Error::input(format!(
                "{}: {msg}. If you accept that, add \"{rule}\" to [lint] allow",
                origin.file_display()
            )));
        }
    }
    Ok(())
}

/// Reject non-deterministic functions not in `allow`. `sql` and `origin` locate the finding.
pub fn check_determinism(
    plan: &LogicalPlan,
    allow: &[String],
    sql: &str,
    origin: &SqlOrigin,
) -> Result<()> {
    let findings = volatile_functions(plan)?;
    let denied: Vec<&Finding> = findings
        .iter()
        .filter(|f| {
            !allow.iter().any(|a| {
                a.eq_ignore_ascii_case(&f.function)
                    || f.aliases.iter().any(|x| x.eq_ignore_ascii_case(a))
            })
        })
        .collect();
    let Some(first) = denied.first() else {
        return Ok(());
    };
    let names: Vec<String> = denied.iter().map(|f| format!("{}()", f.function)).collect();
    let mut candidates = vec![first.function.clone()];
    candidates.extend(first.aliases.iter().cloned());
    // SQL keywords that DataFusion plans as these functions.
    if first.function == "now" {
        candidates.extend(["current_timestamp", "localtimestamp"].map(String::from));
    }
    let at = locate_word(sql, &candidates)
        .map(|(line, word)| format!(" (written `{word}` at {})", origin.describe_line(line)))
        .unwrap_or_default();
    Err(Error::input(format!(
        "{}: non-deterministic function {}{at}: its result changes between runs, so the window could not be retried or backfilled. Derive times from $window_start/$window_end instead, or, if you accept that, add it to [lint] allow",
        origin.file_display(),
        names.join(", "),
    )))
}

/// Which placeholders `plan` references; errors on unknown ones, and when `require_window` is
/// set, on SQL that never references the window.
pub fn check_parameters(
    plan: &LogicalPlan,
    origin: &SqlOrigin,
    require_window: bool,
) -> Result<BTreeSet<String>> {
    let names = plan.get_parameter_names()?;
    let mut used = BTreeSet::new();
    for id in names {
        let name = id.trim_start_matches('$').to_string();
        if !WINDOW_PARAMS.contains(&name.as_str()) {
            return Err(Error::input(format!(
                "{}: unknown parameter `{id}`: the parameters are $window_start, $window_end, $window_start_ts and $window_end_ts",
                origin.file_display()
            )));
        }
        used.insert(name);
    }
    if require_window && used.is_empty() {
        return Err(Error::input(format!(
            "{}: the SQL never references the window ($window_start, $window_end, $window_start_ts or $window_end_ts), so every window would get the same rows; filter the sources by the window",
            origin.file_display()
        )));
    }
    Ok(used)
}

/// Where a piece of SQL text lives, to turn SQL line numbers into file line numbers.
#[derive(Debug, Clone)]
pub struct SqlOrigin {
    pub file: std::path::PathBuf,
    /// The file line the SQL text starts on (1-based).
    pub first_line: usize,
    /// A label such as `sql` or `[reconcile].source`.
    pub what: String,
}

impl SqlOrigin {
    /// Locate `sql` inside `file_text` (the text of `file`), falling back to line 1.
    pub fn find(file: &std::path::Path, file_text: &str, sql: &str, what: &str) -> SqlOrigin {
        let first_line = file_text
            .find(sql.trim())
            .map(|off| file_text[..off].matches('\n').count() + 1)
            .unwrap_or(1);
        SqlOrigin {
            file: file.to_path_buf(),
            first_line,
            what: what.to_string(),
        }
    }
    fn file_display(&self) -> String {
        format!("{} ({})", self.file.display(), self.what)
    }
    fn describe_line(&self, sql_line: u64) -> String {
        format!(
            "line {}",
            self.first_line as u64 + sql_line.saturating_sub(1)
        )
    }
}

/// The first line (1-based, within `sql`) where one of `words` appears as an identifier token.
fn locate_word(sql: &str, words: &[String]) -> Option<(u64, String)> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    tokens.iter().find_map(|t| match &t.token {
        Token::Word(w) if words.iter().any(|x| x.eq_ignore_ascii_case(&w.value)) => {
            Some((t.span.start.line, w.value.clone()))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn plan(sql: &str) -> LogicalPlan {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (d DATE, x INT) AS VALUES (DATE '2026-01-01', 1)")
            .await
            .unwrap();
        ctx.sql(sql).await.unwrap().logical_plan().clone()
    }

    fn origin() -> SqlOrigin {
        SqlOrigin {
            file: "tables/t.toml".into(),
            first_line: 10,
            what: "sql".into(),
        }
    }

    #[tokio::test]
    async fn volatile_functions_are_rejected_with_name_and_line() {
        for (sql, name, line) in [
            ("SELECT now() AS n FROM t", "now()", 10),
            (
                "SELECT x\nFROM t\nWHERE d = current_date",
                "current_date()",
                12,
            ),
            ("SELECT x FROM t WHERE x > random()", "random()", 10),
            ("SELECT uuid() AS u FROM t", "uuid()", 10),
            (
                "SELECT x FROM t WHERE d IN (SELECT d FROM t WHERE x < random())",
                "random()",
                10,
            ),
            (
                "-- now() in a comment does not count\nSELECT current_timestamp AS n FROM t",
                "now()",
                11,
            ),
        ] {
            let p = plan(sql).await;
            let e = check_determinism(&p, &[], sql, &origin()).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Input);
            assert!(e.message().contains(name), "{sql}: {e}");
            assert!(e.message().contains(&format!("line {line}")), "{sql}: {e}");
        }
    }

    #[tokio::test]
    async fn deterministic_sql_and_allowed_functions_pass() {
        let p = plan("SELECT date_trunc('month', d) AS m, abs(x) AS a FROM t").await;
        check_determinism(&p, &[], "", &origin()).unwrap();
        let p = plan("SELECT random() AS r FROM t").await;
        check_determinism(&p, &["random".to_string()], "", &origin()).unwrap();
    }

    #[tokio::test]
    async fn limit_needs_a_total_order_and_window_functions_an_order() {
        let rules = |sql: &'static str| async move {
            order_dependence(&plan(sql).await)
                .unwrap()
                .into_iter()
                .map(|(r, _)| r)
                .collect::<Vec<_>>()
        };
        // Positive cases: flagged.
        assert_eq!(rules("SELECT x FROM t LIMIT 5").await, ["limit"]);
        assert_eq!(
            rules("SELECT x, d FROM t ORDER BY d LIMIT 5").await,
            ["limit"]
        );
        assert_eq!(rules("SELECT x FROM t OFFSET 1").await, ["limit"]);
        assert_eq!(
            rules("SELECT row_number() OVER () AS n, x FROM t").await,
            ["window_order"]
        );
        assert_eq!(
            rules("SELECT rank() OVER (PARTITION BY d) AS r FROM t").await,
            ["window_order"]
        );
        // Negative cases: deterministic.
        assert!(
            rules("SELECT x, d FROM t ORDER BY d, x LIMIT 5")
                .await
                .is_empty()
        );
        assert!(rules("SELECT x FROM t ORDER BY x LIMIT 5").await.is_empty());
        assert!(
            rules("SELECT row_number() OVER (ORDER BY x, d) AS n, x FROM t")
                .await
                .is_empty()
        );
        assert!(
            rules("SELECT sum(x) OVER (PARTITION BY d) AS s FROM t")
                .await
                .is_empty()
        );
        // The escape hatch.
        let p = plan("SELECT x FROM t LIMIT 5").await;
        assert!(
            check_order_dependence(&p, &[], &origin())
                .unwrap_err()
                .message()
                .contains("[lint] allow")
        );
        check_order_dependence(&p, &["limit".to_string()], &origin()).unwrap();
    }

    #[tokio::test]
    async fn parameters_must_be_known_and_window_referenced() {
        let p = plan("SELECT x FROM t WHERE d >= $window_start AND d < $window_end").await;
        let used = check_parameters(&p, &origin(), true).unwrap();
        assert_eq!(used.len(), 2);
        let p = plan("SELECT x FROM t").await;
        assert!(
            check_parameters(&p, &origin(), true)
                .unwrap_err()
                .message()
                .contains("never references")
        );
        let p = plan("SELECT x FROM t WHERE d >= $window_begin").await;
        assert!(
            check_parameters(&p, &origin(), true)
                .unwrap_err()
                .message()
                .contains("$window_begin")
        );
    }
}
