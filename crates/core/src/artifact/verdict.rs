//! The review verdict: the first PASS or FAIL token on the first line of `## Review`
//! that holds one, not after a negation.

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

/// The verdict of a `## Review` section's content: the first `PASS` or `FAIL` token on the
/// first line that has one, which is simply the first token in the text.
///
/// A token is `pass` or `fail` in any ASCII case with no word character (alphanumeric or
/// `_`) on either side, like the seed's `/\b(PASS|FAIL)\b/i`: `**PASS**` and `FAIL:` count,
/// `PASSED`, `bypass`, `passes` and `FAIL_X` do not. Text inside HTML comments does not
/// count, so a template's `<!-- write PASS or FAIL -->` is no verdict; code blocks do count.
///
/// Beyond the seed: a line whose first token follows a negation on that line ("NOT
/// PASS: tests are missing", "No FAIL found, PASS", "Don't PASS this") is no verdict
/// line, and the next line with a token decides. Before, those read as the token they
/// negate: a reviewer's "NOT PASS" passed the review.
pub fn verdict(review_content: &str) -> Option<Verdict> {
    // The visible text, a comment standing for a space (as the parts were read apart).
    let mut text = String::with_capacity(review_content.len());
    for (k, part) in visible(review_content).enumerate() {
        if k > 0 {
            text.push(' ');
        }
        text.push_str(part);
    }
    text.lines().find_map(|line| {
        let (at, v) = first_token(line)?;
        (!negated(&line[..at])).then_some(v)
    })
}

/// Does `before` (the text before a line's first token) hold a negation word?
pub(crate) fn negated(before: &str) -> bool {
    before
        .to_lowercase()
        .replace('\u{2019}', "'")
        .split(|c: char| !(is_word_char(c) || c == '\''))
        .any(|w| {
            matches!(
                w,
                "not" | "no" | "never" | "nor" | "cannot" | "without" | "neither" | "none"
            ) || w.ends_with("n't")
                || matches!(w, "dont" | "doesnt" | "isnt" | "cant" | "wont" | "didnt")
        })
}

/// The first PASS or FAIL token of `s` and its byte offset.
pub(crate) fn first_token(s: &str) -> Option<(usize, Verdict)> {
    let b = s.as_bytes();
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
            if found.is_some()
                && !s[..i].chars().next_back().is_some_and(is_word_char)
                && !s[i + 4..].chars().next().is_some_and(is_word_char)
            {
                return found.map(|v| (i, v));
            }
        }
        i += 1;
    }
    None
}

pub(crate) fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}
