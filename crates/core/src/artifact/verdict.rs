//! The review verdict: the first PASS or FAIL token on the first line of `## Review`
//! that holds one.

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
pub fn verdict(review_content: &str) -> Option<Verdict> {
    visible(review_content).find_map(first_token)
}

pub(crate) fn first_token(s: &str) -> Option<Verdict> {
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
                return found;
            }
        }
        i += 1;
    }
    None
}

pub(crate) fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}
