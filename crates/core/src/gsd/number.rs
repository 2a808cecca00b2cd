//! GSD phase numbers: parsing the token at the start of a phase directory or plan file
//! name (`04`, `4`, `04.1`, `8.1`, `2b`, `12A.1.2`, `CK-01`) and ordering them the way
//! GSD does.
//!
//! GSD inserts urgent work between two integer phases as a decimal phase (`06.1` after
//! `06`, then `06.2`, …) and some projects use a letter (`2b`). Directory names are
//! zero-padded by GSD's own tools but not always by hand, so `1-foundation` and
//! `01-foundation` are the same phase 1. Order is numeric: the integer, then no letter
//! before a letter (`12 < 12a < 12b`), then the decimal parts one by one as integers
//! (`12 < 12.1 < 12.2 < 12.10`), never the string order (where `10` sorts before `2`).

use serde::Serialize;
use std::cmp::Ordering;

/// A parsed phase number, e.g. `04.1` or `2b`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseNumber {
    /// The token exactly as written in the name (`04.1`, `8.1`, `2b`, `CK-01`).
    pub text: String,
    /// The integer part (`4` for `04.1`).
    pub integer: u64,
    /// A letter suffix, lower-cased (`b` for `2b`).
    pub letter: Option<char>,
    /// The decimal parts (`[1]` for `04.1`, `[1, 2]` for `3.1.2`).
    pub decimals: Vec<u64>,
    /// A project-code prefix GSD allows before the number (`CK` in `CK-01-name`).
    pub project_code: Option<String>,
}

impl PhaseNumber {
    /// Whether two numbers name the same phase, whatever the padding or letter case
    /// (`1.5` and `01.5` do; `04.1` and `04.10` do not).
    pub fn same_phase(&self, other: &PhaseNumber) -> bool {
        self.integer == other.integer
            && self.letter == other.letter
            && self.decimals == other.decimals
    }
}

impl Ord for PhaseNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        self.integer
            .cmp(&other.integer)
            // `None < Some(_)`: no letter sorts before a letter, as in GSD.
            .then_with(|| self.letter.cmp(&other.letter))
            // Lexicographic on integers: `[] < [1] < [1, 2] < [2] < [10]`.
            .then_with(|| self.decimals.cmp(&other.decimals))
            // The rest only makes the order total (and consistent with `Eq`) for names
            // that differ in padding or prefix alone.
            .then_with(|| self.project_code.cmp(&other.project_code))
            .then_with(|| self.text.cmp(&other.text))
    }
}

impl PartialOrd for PhaseNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The longest run of digits read as one number: longer ones are not phase numbers
/// (and would overflow `u64`).
const MAX_DIGITS: usize = 18;

/// Reads a run of ASCII digits at the start of `s`: its value and its byte length.
fn digits(s: &str) -> Option<(u64, usize)> {
    let len = s.bytes().take_while(u8::is_ascii_digit).count();
    if len == 0 || len > MAX_DIGITS {
        return None;
    }
    let value = s.get(..len)?.parse().ok()?;
    Some((value, len))
}

/// Parses a phase token at the start of `s` and returns it with the rest of the name
/// after the `-` that ends it (empty when the token is the whole name).
///
/// The token must end at a `-` or at the end of `s`, so `2b-obs` is phase `2b` while
/// `2bad-x` is not a phase at all. A project code (`[A-Z]{1,6}-` before a digit) is
/// accepted only in upper case, as GSD writes it, so a lower-case slug is never
/// mistaken for one.
pub fn parse_phase_token(s: &str) -> Option<(PhaseNumber, &str)> {
    let (project_code, numeric) = split_project_code(s);
    let (integer, mut pos) = digits(numeric)?;
    let mut letter = None;
    let mut decimals = Vec::new();
    let after = numeric.get(pos..).unwrap_or("");
    let mut chars = after.chars();
    if let Some(c) = chars.next()
        && c.is_ascii_alphabetic()
        && matches!(chars.next(), None | Some('-') | Some('.'))
    {
        letter = Some(c.to_ascii_lowercase());
        pos += 1;
    }
    while let Some(rest) = numeric.get(pos..).and_then(|r| r.strip_prefix('.')) {
        let (value, len) = digits(rest)?;
        decimals.push(value);
        pos += 1 + len;
    }
    let text = numeric.get(..pos)?;
    let rest = numeric.get(pos..)?;
    let rest = if rest.is_empty() {
        rest
    } else {
        rest.strip_prefix('-')?
    };
    let full_text = match &project_code {
        Some(code) => format!("{code}-{text}"),
        None => text.to_owned(),
    };
    Some((
        PhaseNumber {
            text: full_text,
            integer,
            letter,
            decimals,
            project_code,
        },
        rest,
    ))
}

/// Parses a whole string as a phase number (`"4.1"`, `"04"`), nothing after it.
pub fn parse_phase_number(s: &str) -> Option<PhaseNumber> {
    match parse_phase_token(s.trim()) {
        Some((n, "")) => Some(n),
        _ => None,
    }
}

fn split_project_code(s: &str) -> (Option<String>, &str) {
    let upper = s.bytes().take_while(u8::is_ascii_uppercase).count();
    if (1..=6).contains(&upper)
        && let Some(rest) = s.get(upper..).and_then(|r| r.strip_prefix('-'))
        && rest.starts_with(|c: char| c.is_ascii_digit())
    {
        return (s.get(..upper).map(str::to_owned), rest);
    }
    (None, s)
}

/// A key that sorts names "naturally": runs of digits compare as numbers, so
/// `quick/2-x` comes before `quick/10-y`. Used where GSD has no numbering of its own.
pub fn natural_key(s: &str) -> Vec<NaturalPart> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (part, tail) = if n > 0 {
            let (d, tail) = rest.split_at(n);
            let trimmed = d.trim_start_matches('0');
            // Compare by length first, then text: exact for any number of digits.
            (NaturalPart::Number(trimmed.len(), trimmed.to_owned()), tail)
        } else {
            let t = rest
                .bytes()
                .take_while(|b| !b.is_ascii_digit())
                .count()
                .max(1);
            let cut = ceil_char_boundary(rest, t);
            let (a, tail) = rest.split_at(cut);
            (NaturalPart::Text(a.to_lowercase()), tail)
        };
        out.push(part);
        rest = tail;
    }
    out
}

/// One piece of a [`natural_key`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum NaturalPart {
    /// Digits, without leading zeros: (length, text).
    Number(usize, String),
    /// Anything else, lower-cased.
    Text(String),
}

/// The smallest char boundary at or after `i` (or the length).
pub(crate) fn ceil_char_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> PhaseNumber {
        parse_phase_number(s).unwrap()
    }

    #[test]
    fn parses_every_form_gsd_writes() {
        let (p, rest) = parse_phase_token("04.1-skills-polish").unwrap();
        assert_eq!(
            (p.integer, p.letter, p.decimals.clone()),
            (4, None, vec![1])
        );
        assert_eq!((p.text.as_str(), rest), ("04.1", "skills-polish"));
        let (p, rest) = parse_phase_token("2b-observability").unwrap();
        assert_eq!((p.integer, p.letter, rest), (2, Some('b'), "observability"));
        let (p, rest) = parse_phase_token("1-foundation").unwrap();
        assert_eq!((p.integer, rest), (1, "foundation"));
        let (p, _) = parse_phase_token("CK-01-name").unwrap();
        assert_eq!((p.project_code.as_deref(), p.integer), (Some("CK"), 1));
        assert_eq!(p.text, "CK-01");
        let (p, rest) = parse_phase_token("12A.1.2").unwrap();
        assert_eq!(
            (p.letter, p.decimals.clone(), rest),
            (Some('a'), vec![1, 2], "")
        );
        // A plan stem: the phase token, then the plan part.
        let (p, rest) = parse_phase_token("1.5-01").unwrap();
        assert_eq!((p.text.as_str(), rest), ("1.5", "01"));
    }

    #[test]
    fn refuses_what_is_not_a_phase_number() {
        for s in [
            "",
            "foundation",
            "phase-8-plan.md",
            "2bad-x",
            "04.-x",
            "04.x",
            "-04",
            "1234567890123456789-x",
            "ab-01",
            "PLAN-INDEX.md",
        ] {
            assert!(parse_phase_token(s).is_none(), "{s:?}");
        }
    }

    #[test]
    fn orders_numerically_never_as_strings() {
        let mut v: Vec<PhaseNumber> = ["10", "4.1", "2b", "1", "4", "2", "04.10", "4.2", "2.1"]
            .iter()
            .map(|s| n(s))
            .collect();
        v.sort();
        let texts: Vec<&str> = v.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(
            texts,
            ["1", "2", "2.1", "2b", "4", "4.1", "4.2", "04.10", "10"]
        );
    }

    #[test]
    fn same_phase_ignores_padding_only() {
        assert!(n("01.5").same_phase(&n("1.5")));
        assert!(n("2B").same_phase(&n("2b")));
        assert!(!n("04.1").same_phase(&n("04.10")));
        assert!(!n("4").same_phase(&n("4.0")));
    }

    #[test]
    fn natural_key_orders_digit_runs_as_numbers() {
        let mut v = ["10-b", "2-a", "260418-fcb", "1-x"];
        v.sort_by_key(|s| natural_key(s));
        assert_eq!(v, ["1-x", "2-a", "10-b", "260418-fcb"]);
        // Non-ASCII text must not split inside a character.
        let _ = natural_key("é1ü22ñ");
    }
}
