//! The status picture: a calendar strip per task, one cell per window, like an orchestrator's
//! partition bar.
//!
//! One line per calendar group — a month of days, a day of hours, a year of weeks or months —
//! with every window in its calendar position, so gaps line up by eye. Rendering is a pure
//! function of the status rows and a [`Style`]: on a terminal, coloured block glyphs; otherwise
//! (or with `NO_COLOR`) plain ASCII letters that survive logs and e-mail.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::report::states::WindowStatus;
use crate::task::window::Grain;

/// How to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// Unicode glyphs (terminal) or ASCII letters (plain text).
    pub unicode: bool,
    /// ANSI colours (terminal without `NO_COLOR`).
    pub color: bool,
}

impl Style {
    /// Plain ASCII, no colour: what pipes and log files get.
    pub const PLAIN: Style = Style {
        unicode: false,
        color: false,
    };

    /// The style for stdout: glyphs on a terminal, colour unless `NO_COLOR` is set (any value,
    /// see no-color.org) or `TERM=dumb`.
    pub fn for_stdout() -> Style {
        use std::io::IsTerminal;
        let tty = std::io::stdout().is_terminal();
        let no_color = crate::config::get().no_color;
        Style {
            unicode: tty,
            color: tty && !no_color,
        }
    }
}

/// The picture's cell kinds, in legend order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cell {
    Published,
    Stale,
    Failed,
    Empty,
    Untracked,
    Missing,
}

impl Cell {
    /// The cell of one window: the latest attempt decides, so a failure after a publish shows
    /// as failed (the data of the earlier publish is still there; `status` lists it).
    pub fn of(w: &WindowStatus) -> Cell {
        if w.failed_since > 0 {
            Cell::Failed
        } else if w.stale {
            Cell::Stale
        } else {
            match w.state.as_str() {
                "published" => Cell::Published,
                "published-untracked" => Cell::Untracked,
                "empty" => Cell::Empty,
                _ => Cell::Missing,
            }
        }
    }

    fn glyph(self, style: Style) -> &'static str {
        match (self, style.unicode) {
            (Cell::Published, true) => "■",
            (Cell::Stale, true) => "▣",
            (Cell::Failed, true) => "✗",
            (Cell::Empty, true) => "□",
            (Cell::Untracked, true) => "?",
            (Cell::Missing, true) => "·",
            (Cell::Published, false) => "#",
            (Cell::Stale, false) => "~",
            (Cell::Failed, false) => "x",
            (Cell::Empty, false) => "o",
            (Cell::Untracked, false) => "?",
            (Cell::Missing, false) => ".",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Cell::Published => "\x1b[32m",
            Cell::Stale => "\x1b[33m",
            Cell::Failed => "\x1b[31m",
            Cell::Empty => "\x1b[36m",
            Cell::Untracked => "\x1b[35m",
            Cell::Missing => "\x1b[90m",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Cell::Published => "published",
            Cell::Stale => "stale (other SQL or inputs)",
            Cell::Failed => "failed",
            Cell::Empty => "empty",
            Cell::Untracked => "not by idemlake",
            Cell::Missing => "missing",
        }
    }

    fn draw(self, style: Style) -> String {
        if style.color {
            format!("{}{}\x1b[0m", self.color(), self.glyph(style))
        } else {
            self.glyph(style).to_string()
        }
    }
}

/// Calendar group and position of a window label at `grain`; `None` for labels that are not
/// in the grain's short form.
fn place(grain: Grain, label: &str) -> Option<(String, usize, usize)> {
    let num = |s: &str| s.parse::<usize>().ok();
    match grain {
        // 1995-06-01 → ("1995-06", day - 1) of 31
        Grain::Day => Some((label.get(..7)?.into(), num(label.get(8..10)?)? - 1, 31)),
        // 1995-06-01T05 → ("1995-06-01", hour) of 24
        Grain::Hour => Some((label.get(..10)?.into(), num(label.get(11..13)?)?, 24)),
        // 2026-W48 → ("2026", week - 1) of 53
        Grain::Week => Some((label.get(..4)?.into(), num(label.get(6..8)?)? - 1, 53)),
        // 2026-11 → ("2026", month - 1) of 12
        Grain::Month => Some((label.get(..4)?.into(), num(label.get(5..7)?)? - 1, 12)),
    }
}

/// Draw the strip of one task.
pub fn render(task: &str, grain: Grain, windows: &[WindowStatus], style: Style) -> String {
    let mut out = String::new();
    let mut counts: BTreeMap<Cell, usize> = BTreeMap::new();
    let mut groups: BTreeMap<String, Vec<Option<Cell>>> = BTreeMap::new();
    for w in windows {
        let cell = Cell::of(w);
        *counts.entry(cell).or_default() += 1;
        if let Some((group, pos, width)) = place(grain, &w.window.label) {
            let row = groups.entry(group).or_insert_with(|| vec![None; width]);
            if let Some(slot) = row.get_mut(pos) {
                *slot = Some(cell);
            }
        }
    }
    let _ = writeln!(
        out,
        "{task} ({} windows, {})",
        windows.len(),
        grain.as_str()
    );
    let label_width = groups.keys().map(String::len).max().unwrap_or(0);
    for (group, cells) in &groups {
        let strip: String = cells
            .iter()
            .map(|c| c.map_or_else(|| " ".to_string(), |c| c.draw(style)))
            .collect();
        let _ = writeln!(out, "  {group:<label_width$}  {}", strip.trim_end());
    }
    let legend: Vec<String> = counts
        .iter()
        .map(|(c, n)| format!("{} {} {n}", c.draw(style), c.name()))
        .collect();
    let _ = writeln!(out, "  {}", legend.join("   "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(label: &str, state: &str, failed: usize, stale: bool) -> WindowStatus {
        WindowStatus {
            state: state.into(),
            failed_since: failed,
            stale,
            ..WindowStatus::missing(
                "t",
                crate::report::record::WindowRecord {
                    label: label.into(),
                    start: String::new(),
                    end: String::new(),
                },
            )
        }
    }

    fn june() -> Vec<WindowStatus> {
        (1..=30)
            .map(|d| {
                let label = format!("1995-06-{d:02}");
                match d {
                    3 => w(&label, "published", 2, false),
                    9..=11 => w(&label, "missing", 0, false),
                    14 => w(&label, "published", 0, true),
                    20 => w(&label, "empty", 0, false),
                    25 => w(&label, "published-untracked", 0, false),
                    _ => w(&label, "published", 0, false),
                }
            })
            .chain([w("1995-07-01", "published", 0, false)])
            .collect()
    }

    #[test]
    fn plain_day_strip() {
        insta::assert_snapshot!(render(
            "lineitem_by_ship_day",
            Grain::Day,
            &june(),
            Style::PLAIN
        ));
    }

    #[test]
    fn terminal_day_strip() {
        let style = Style {
            unicode: true,
            color: false,
        };
        insta::assert_snapshot!(render("lineitem_by_ship_day", Grain::Day, &june(), style));
    }

    #[test]
    fn coloured_cells_reset_after_each_glyph() {
        let style = Style {
            unicode: true,
            color: true,
        };
        let text = render("t", Grain::Day, &june()[..3], style);
        insta::assert_snapshot!(text.replace('\x1b', "<ESC>"));
    }

    #[test]
    fn hour_week_and_month_strips() {
        let hours: Vec<_> = (0..24)
            .map(|h| {
                let state = if h < 20 { "published" } else { "missing" };
                w(&format!("2026-03-29T{h:02}"), state, 0, false)
            })
            .collect();
        let weeks: Vec<_> = (45..=53)
            .map(|k| {
                w(
                    &format!("2026-W{k:02}"),
                    "published",
                    usize::from(k == 48),
                    false,
                )
            })
            .collect();
        let months: Vec<_> = (1..=12)
            .map(|m| {
                w(
                    &format!("2026-{m:02}"),
                    if m > 10 { "missing" } else { "published" },
                    0,
                    false,
                )
            })
            .collect();
        let text = [
            render("hourly", Grain::Hour, &hours, Style::PLAIN),
            render("weekly", Grain::Week, &weeks, Style::PLAIN),
            render("monthly", Grain::Month, &months, Style::PLAIN),
        ]
        .join("\n");
        insta::assert_snapshot!(text);
    }
}
