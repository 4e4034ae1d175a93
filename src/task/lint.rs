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

mod float;
mod order;
mod tz;

pub use order::{OrderFinding, order_dependence};
pub use tz::{check_time_zones, check_zone_names};

/// Reject order-dependent SQL (see `order`) unless its rule is in `allow`, naming the
/// function and its line (`sql` and `origin` locate it).
pub fn check_order_dependence(
    plan: &LogicalPlan,
    allow: &[String],
    sql: &str,
    origin: &SqlOrigin,
) -> Result<()> {
    for f in order_dependence(plan)? {
        if allow.iter().any(|a| a.eq_ignore_ascii_case(f.rule)) {
            continue;
        }
        let mut words = vec![f.word.clone()];
        if f.rule == "limit" {
            words.push("offset".to_string());
        }
        let at = locate_word(sql, &words)
            .map(|(line, word)| format!(" (`{word}` at {})", origin.describe_line(line)))
            .unwrap_or_default();
        return Err(Error::input(format!(
            "{}: order-dependent SQL{at}: {}. If you accept that, add \"{}\" to [lint] allow",
            origin.file_display(),
            f.message,
            f.rule
        )));
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
mod tests;
