//! One time zone database for windows and SQL, checked.
//!
//! A window's bounds are computed with jiff over `task::tzdb`, a copy of the IANA release
//! chrono-tz bundles; DataFusion's time zone functions (`AT TIME ZONE`, `date_trunc`/
//! `date_part`/`to_local_time` on timestamps with a zone, `from_unixtime(x, zone)`) go through
//! arrow, which uses chrono-tz. They are one release, held so by a test in `tzdb`. This lint
//! is the guard for a build where they differ: the named zones a task's SQL uses (casts,
//! literals and columns typed with a zone, the zone argument of `from_unixtime`) are
//! compared, and a zone whose UTC offsets differ between the two (from 1970, or a year before
//! the window's start if that is earlier, to 2100, at each transition and twice a day in
//! between) is refused, naming the zone, the first instant they disagree at, and its line.
//! `[lint] allow = ["timezone_database"]` accepts it. Fixed offsets and UTC are not
//! checked. Each zone is compared once per process.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};

use arrow::datatypes::DataType;
use chrono::{Offset, TimeZone as _};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan};

use super::{SqlOrigin, locate_word};
use crate::error::{Error, Result};

/// What `[lint] allow` names to accept a zone the databases disagree on.
const RULE: &str = "timezone_database";

/// Whether `zone` is a fixed offset (or UTC), which needs no database.
fn fixed(zone: &str) -> bool {
    let z = zone.trim();
    z.eq_ignore_ascii_case("utc") || z.eq_ignore_ascii_case("z") || z.starts_with(['+', '-'])
}

/// The zones `plan` uses, named or fixed: in the types of its nodes' columns, of casts
/// (`AT TIME ZONE` is one) and literals, of `arrow_cast`'s target type, and as
/// `from_unixtime`'s zone argument, when these are literals.
fn zones(plan: &LogicalPlan) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut note = |t: &DataType| {
        if let DataType::Timestamp(_, Some(z)) = t {
            out.insert(z.to_string());
        }
    };
    plan.apply_with_subqueries(|node| {
        for f in node.schema().fields() {
            note(f.data_type());
        }
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                match e {
                    Expr::Cast(c) => note(c.field.data_type()),
                    Expr::TryCast(c) => note(c.field.data_type()),
                    Expr::Literal(v, _) => note(&v.data_type()),
                    Expr::ScalarFunction(f) => match (f.func.name(), text(f.args.get(1))) {
                        ("from_unixtime", Some(z)) => note(&DataType::Timestamp(
                            arrow::datatypes::TimeUnit::Second,
                            Some(z.into()),
                        )),
                        ("arrow_cast" | "arrow_try_cast", Some(t)) => {
                            if let Ok(t) = t.parse::<DataType>() {
                                note(&t);
                            }
                        }
                        _ => {}
                    },
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(out)
}

/// `arg` if it is a string literal.
fn text(arg: Option<&Expr>) -> Option<&str> {
    match arg? {
        Expr::Literal(
            ScalarValue::Utf8(Some(z))
            | ScalarValue::Utf8View(Some(z))
            | ScalarValue::LargeUtf8(Some(z)),
            _,
        ) => Some(z),
        _ => None,
    }
}

/// Refuse a zone of `plan` (see `zones`) that arrow cannot read — a name its database does
/// not hold, such as `asia/kolkata` (names are case-sensitive) — which would otherwise fail
/// the window once its rows are read. Not a lint: `[lint] allow` does not accept it.
pub fn check_zone_names(plan: &LogicalPlan, sql: &str, origin: &SqlOrigin) -> Result<()> {
    for zone in zones(plan)? {
        if zone.parse::<arrow::array::timezone::Tz>().is_ok() {
            continue;
        }
        let line = locate_quoted(sql, &zone)
            .map(|l| format!(" (at {})", origin.describe_line(l)))
            .unwrap_or_default();
        let hint = chrono_tz::TZ_VARIANTS
            .iter()
            .find(|t| t.name().eq_ignore_ascii_case(&zone))
            .map(|t| format!("; names are case-sensitive: did you mean `{}`?", t.name()))
            .unwrap_or_else(|| {
                "; use an IANA name such as `Europe/Berlin` (case-sensitive) or an offset such as `+05:30`".into()
            });
        return Err(Error::input(format!(
            "{}: time zone `{zone}`{line} is not a time zone DataFusion knows{hint}",
            origin.file_display()
        )));
    }
    Ok(())
}

/// 1970-01-01, where the comparison starts unless a window starts earlier.
const EPOCH: i64 = 0;

/// Where the databases are compared from for a window starting at `since` (seconds; `None`
/// without a window): 1970, or a year before the window's start if that is earlier.
pub fn compared_from(since: Option<i64>) -> i64 {
    since.map_or(EPOCH, |s| s.saturating_sub(366 * 86_400).min(EPOCH))
}

/// The first instant (from `from`, in seconds, to 2100) at which idemlake's database
/// (`task::tzdb`) and chrono-tz's give `zone` different UTC offsets: `(instant, ours,
/// chrono-tz's)`. `None` if they agree, or if either does not know the zone (DataFusion
/// reports an unknown zone itself).
fn disagreement(zone: &str, from: i64) -> Option<(jiff::Timestamp, i32, i32)> {
    let j = crate::task::tzdb::get(zone)?;
    let c: chrono_tz::Tz = zone.parse().ok()?;
    first_difference(&j, c, from)
}

/// The first instant (from `from`, in seconds, to 2100) at which `j` and `c` give different
/// UTC offsets, at each of `j`'s transitions (and the second before) and twice a day.
pub(super) fn first_difference(
    j: &jiff::tz::TimeZone,
    c: chrono_tz::Tz,
    from: i64,
) -> Option<(jiff::Timestamp, i32, i32)> {
    let differs = |t: jiff::Timestamp| {
        let utc = chrono::DateTime::from_timestamp(t.as_second(), 0)?.naive_utc();
        let theirs = c.offset_from_utc_datetime(&utc).fix().local_minus_utc();
        let ours = j.to_offset(t).seconds();
        (ours != theirs).then_some((t, ours, theirs))
    };
    let start = jiff::Timestamp::from_second(from.max(-2_208_988_800)).ok()?; // 1900 at the earliest
    let end = jiff::Timestamp::from_second(4_102_444_800).ok()?; // 2100-01-01
    for tr in j.following(start) {
        let at = tr.timestamp();
        if at >= end {
            break;
        }
        for t in [at, at - jiff::SignedDuration::from_secs(1)] {
            if let Some(d) = differs(t) {
                return Some(d);
            }
        }
    }
    let step = jiff::SignedDuration::from_hours(12);
    let mut t = start;
    while t < end {
        if let Some(d) = differs(t) {
            return Some(d);
        }
        t = t.checked_add(step).ok()?;
    }
    None
}

/// [`disagreement`], computed once per zone and start per process.
fn cached_disagreement(zone: &str, from: i64) -> Option<(jiff::Timestamp, i32, i32)> {
    type Cache = Mutex<HashMap<(String, i64), Option<(jiff::Timestamp, i32, i32)>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (zone.to_string(), from);
    if let Some(d) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return *d;
    }
    let d = disagreement(zone, from);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, d);
    d
}

fn offset(seconds: i32) -> String {
    let sign = if seconds < 0 { '-' } else { '+' };
    let s = seconds.unsigned_abs();
    format!("UTC{sign}{:02}:{:02}", s / 3600, s % 3600 / 60)
}

/// Refuse the named zones of `plan` on which the two databases disagree, unless allowed;
/// `since`: the window's start (seconds), if planning for one (see `compared_from`).
pub fn check_time_zones(
    plan: &LogicalPlan,
    allow: &[String],
    sql: &str,
    origin: &SqlOrigin,
    since: Option<i64>,
) -> Result<()> {
    if allow.iter().any(|a| a.eq_ignore_ascii_case(RULE)) {
        return Ok(());
    }
    for zone in zones(plan)?.into_iter().filter(|z| !fixed(z)) {
        let Some((at, ours, theirs)) = cached_disagreement(&zone, compared_from(since)) else {
            continue;
        };
        let line = locate_quoted(sql, &zone)
            .map(|l| format!(" (at {})", origin.describe_line(l)))
            .unwrap_or_default();
        return Err(Error::input(format!(
            "{}: time zone `{zone}`{line}: DataFusion's time zone functions use chrono-tz's database ({}), the window bounds idemlake's ({}), and they disagree on this zone (at {at}: {} in idemlake's, {} in chrono-tz's), so local times in the SQL could disagree with the task's own window. Use a zone both agree on (its canonical name), or, if you accept that, add \"{RULE}\" to [lint] allow",
            origin.file_display(),
            chrono_tz::IANA_TZDB_VERSION,
            crate::task::tzdb::VERSION,
            offset(ours),
            offset(theirs),
        )));
    }
    Ok(())
}

/// The first line (1-based) of `sql` holding `zone` as a string literal, as a word, or
/// within a string literal (`arrow_cast`'s type).
fn locate_quoted(sql: &str, zone: &str) -> Option<u64> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    let literal = |whole: bool| {
        tokens.iter().find_map(|t| match &t.token {
            Token::SingleQuotedString(s) | Token::DoubleQuotedString(s)
                if s == zone || (!whole && s.contains(zone)) =>
            {
                Some(t.span.start.line)
            }
            _ => None,
        })
    };
    literal(true)
        .or_else(|| locate_word(sql, &[zone.to_string()]).map(|(l, _)| l))
        .or_else(|| literal(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `timezone_database` row of docs/src/concepts/tasks.md lists the zone names without
    /// a region (`CET`, `EST5EDT`, …) the rule refuses: all of them (it said "today `EET` and
    /// `WET`" while `CET`, `MET`, `EST5EDT`, … were refused too); the region names it gives
    /// before its advice ("; use …") are refused, the others it names after it accepted.
    #[test]
    fn the_docs_list_the_zone_names_the_timezone_database_rule_refuses() {
        let doc = include_str!("../../../docs/src/concepts/tasks.md");
        let row = doc
            .lines()
            .find(|l| l.starts_with("| `timezone_database`"))
            .expect("the rule's row");
        let (refused, advised) = row.split_once("; use ").expect("the advice");
        let names = |text: &str| -> BTreeSet<String> {
            text.split('`')
                .skip(1)
                .step_by(2)
                .filter(|w| w.starts_with(|c: char| c.is_ascii_uppercase()))
                .map(str::to_string)
                .collect()
        };
        let legacy: BTreeSet<String> = chrono_tz::TZ_VARIANTS
            .iter()
            .map(|t| t.name())
            .filter(|z| !z.contains('/') && !fixed(z) && disagreement(z, EPOCH).is_some())
            .map(str::to_string)
            .collect();
        let documented = names(refused);
        let doc_legacy: BTreeSet<String> = documented
            .iter()
            .filter(|z| !z.contains('/'))
            .cloned()
            .collect();
        assert_eq!(doc_legacy, legacy, "{row}");
        for z in documented.iter().filter(|z| z.contains('/')) {
            assert!(disagreement(z, EPOCH).is_some(), "{z} is listed as refused");
        }
        for z in names(advised).iter().filter(|z| !documented.contains(*z)) {
            assert!(
                disagreement(z, EPOCH).is_none(),
                "{z} is advised but refused"
            );
        }
    }
}
