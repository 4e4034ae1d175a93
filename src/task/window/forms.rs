//! The short forms a window is written in: which grain a form is, and a date written with
//! slashes (refused, with the form to write).

use super::{Grain, parse_offset};

/// Which grain a short window form is written in, by shape alone.
pub(super) fn short_form_grain(s: &str) -> Option<Grain> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    match b.len() {
        // An hour with its offset, as repeated hours are labelled: `2026-10-25T02+01:00`.
        19 if matches!(b[13], b'+' | b'-')
            && short_form_grain(&s[..13]) == Some(Grain::Hour)
            && parse_offset(&s[13..]).is_some() =>
        {
            Some(Grain::Hour)
        }
        7 if digits(0..4) && b[4] == b'-' && digits(5..7) => Some(Grain::Month),
        8 if digits(0..4) && &b[4..6] == b"-W" && digits(6..8) => Some(Grain::Week),
        10 if digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10) => {
            Some(Grain::Day)
        }
        13 if digits(0..4)
            && b[10] == b'T'
            && digits(11..13)
            && short_form_grain(&s[..10]) == Some(Grain::Day) =>
        {
            Some(Grain::Hour)
        }
        _ => None,
    }
}

/// `YYYY/MM/DD` (a date written with slashes) as `YYYY-MM-DD`.
pub(super) fn slashed_date(text: &str) -> Option<String> {
    let parts: Vec<&str> = text.split('/').collect();
    let [y, m, d] = parts.as_slice() else {
        return None;
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    (digits(y, 4) && digits(m, 2) && digits(d, 2)).then(|| format!("{y}-{m}-{d}"))
}
