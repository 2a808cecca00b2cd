//! The review verdict: the first line of `## Review` whose PASS or FAIL tokens name
//! one verdict (not an alternative, not after a negation).

#[allow(unused_imports)]
use super::*;

/// A reviewer's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The review passed.
    Pass,
    /// The review failed.
    Fail,
}

impl Verdict {
    /// `"pass"` or `"fail"` (seed 001's `reviewVerdict`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Verdict {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Verdict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "pass" => Ok(Verdict::Pass),
            "fail" => Ok(Verdict::Fail),
            other => Err(de::Error::custom(format!(
                "unknown verdict {other:?}; use \"pass\" or \"fail\""
            ))),
        }
    }
}

/// The verdict of a `## Review` section's content: the first line that gives one.
///
/// A token is `pass` or `fail` in any ASCII case with no word character (alphanumeric or
/// `_`) on either side, like the seed's `/\b(PASS|FAIL)\b/i`: `**PASS**` and `FAIL:` count,
/// `PASSED`, `bypass`, `passes` and `FAIL_X` do not. Text inside HTML comments does not
/// count, so a template's `<!-- write PASS or FAIL -->` is no verdict; code blocks do count.
///
/// Beyond the seed's "first token on the first line that has one", which read "NOT PASS:
/// tests are missing" and "Verdict (PASS/FAIL): FAIL" as PASS: on a line, a token that is
/// one side of an alternative (`PASS/FAIL`, `PASS | FAIL`, `PASS or FAIL`) or follows a
/// negation (`not PASS`, `no FAIL`, `don't PASS`, `not a PASS`, `failed to PASS`) names no
/// verdict; the line's verdict is what its other tokens say, and a line whose tokens
/// disagree (`PASS criteria not met -> FAIL`) or that has none is no verdict line.
pub fn verdict(review_content: &str) -> Option<Verdict> {
    // The visible text, a comment standing for a space (as the parts were read apart).
    let mut text = String::with_capacity(review_content.len());
    for (k, part) in visible(review_content).enumerate() {
        if k > 0 {
            text.push(' ');
        }
        text.push_str(part);
    }
    text.lines().find_map(line_verdict)
}

/// The verdict one line gives (see [`verdict`]).
fn line_verdict(line: &str) -> Option<Verdict> {
    let tokens = tokens(line);
    if tokens.is_empty() {
        return None;
    }
    // Both sides of an alternative: only punctuation (`/`, `|`) or the word `or` between.
    let mut named = vec![true; tokens.len()];
    for k in 1..tokens.len() {
        let between = &line[tokens[k - 1].0 + 4..tokens[k].0];
        let words: Vec<&str> = words(between).collect();
        let alternative = match words.as_slice() {
            [] => between.contains(['/', '|']),
            [w] => w.eq_ignore_ascii_case("or"),
            _ => false,
        };
        if alternative {
            named[k - 1] = false;
            named[k] = false;
        }
    }
    let mut found = None;
    for (k, &(at, v)) in tokens.iter().enumerate() {
        if !named[k] || negated(&line[..at]) {
            continue;
        }
        match found {
            None => found = Some(v),
            Some(f) if f != v => return None,
            Some(_) => {}
        }
    }
    found
}

/// The words of `s`: runs of word characters and apostrophes (`don't` is one word).
fn words(s: &str) -> impl DoubleEndedIterator<Item = &str> {
    s.split(|c: char| !(is_word_char(c) || c == '\'' || c == '\u{2019}'))
        .filter(|w| !w.is_empty())
}

/// Does the text before a token end with a negation of it: `not`, `no`, `never`, `nor`,
/// `cannot`, `without`, `neither`, `none` or an `n't` word, an article between allowed
/// (`not a PASS`), or `fail(s|ed|ing) to`?
pub(crate) fn negated(before: &str) -> bool {
    let lower = before.to_lowercase().replace('\u{2019}', "'");
    let mut back = words(&lower).rev();
    let mut last = back.next();
    if matches!(last, Some("a" | "an" | "the")) {
        last = back.next();
    }
    let Some(w) = last else { return false };
    matches!(
        w,
        "not" | "no" | "never" | "nor" | "cannot" | "without" | "neither" | "none"
    ) || w.ends_with("n't")
        || matches!(w, "dont" | "doesnt" | "isnt" | "cant" | "wont" | "didnt")
        || (w == "to" && matches!(back.next(), Some("fail" | "fails" | "failed" | "failing")))
}

/// The PASS and FAIL tokens of `s` with their byte offsets.
pub(crate) fn tokens(s: &str) -> Vec<(usize, Verdict)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 4 <= b.len() {
        // Only 'P'/'p'/'F'/'f' map to 'p'/'f' here; non-ASCII bytes never do.
        let lead = b[i] | 0x20;
        if lead == b'p' || lead == b'f' {
            let word = &b[i..i + 4];
            let found = if word.eq_ignore_ascii_case(b"pass") {
                Some(Verdict::Pass)
            } else if word.eq_ignore_ascii_case(b"fail") {
                Some(Verdict::Fail)
            } else {
                None
            };
            // The four bytes are ASCII, so `i` and `i + 4` are character boundaries.
            if let Some(v) = found
                && !s[..i].chars().next_back().is_some_and(is_word_char)
                && !s[i + 4..].chars().next().is_some_and(is_word_char)
            {
                out.push((i, v));
                i += 4;
                continue;
            }
        }
        i += 1;
    }
    out
}

pub(crate) fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}
