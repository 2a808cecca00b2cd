//! TASK.md parsing: the frontmatter mirror, `## Name` sections, the review verdict and the
//! evidence digests that gate transitions (DESIGN 2.1, seed 001 "Artifact Parsing").
//! Pure and total: every input parses to something, every problem is listed, nothing panics.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::model::Task;

mod frontmatter;
#[cfg(any(test, feature = "testing"))]
mod fuzz;
mod sections;
mod skeleton;
#[cfg(test)]
mod tests;
mod verdict;

pub use frontmatter::*;
#[cfg(any(test, feature = "testing"))]
pub use fuzz::fuzz;
pub use sections::*;
pub use skeleton::*;
pub use verdict::*;

/// The name of the section a worker writes before `working → agent-review`.
pub const HANDOFF: &str = "Handoff";
/// The name of the section a reviewer writes, holding the verdict.
pub const REVIEW: &str = "Review";

/// The frontmatter fields, in the order [`Frontmatter::render`] writes them.
pub const FIELDS: [&str; 8] = [
    "id",
    "title",
    "status",
    "attempts",
    "max_attempts",
    "crash_count",
    "review_round",
    "branch",
];

/// The mirror fields an agent may not change; `title` is the person's (DESIGN 1, 4).
pub const RUNNER_OWNED: [&str; 7] = [
    "id",
    "status",
    "attempts",
    "max_attempts",
    "crash_count",
    "review_round",
    "branch",
];

const BOM: &str = "\u{feff}";

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// A problem found in TASK.md, at a 1-based line and column of the whole file. Columns count
/// Unicode scalar values, not bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    /// 1-based line in the file.
    pub line: usize,
    /// 1-based column (characters) in the line.
    pub column: usize,
    /// One line: what is wrong and what to do.
    pub message: String,
}

/// The largest TASK.md Warden reads (and so the largest it may write).
pub const MAX_TASK_FILE_BYTES: usize = 1024 * 1024;

/// A parsed TASK.md.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskDoc<'a> {
    /// The whole file text.
    pub text: &'a str,
    /// The frontmatter, if the file has a closed block of valid YAML.
    pub frontmatter: Option<Frontmatter>,
    /// Where the body starts.
    pub body_offset: usize,
    /// Every `## Name` section, in file order (duplicates included).
    pub sections: Vec<Section>,
    /// Every problem found.
    pub errors: Vec<ParseError>,
}

impl<'a> TaskDoc<'a> {
    /// The section that counts for `name` (the last one of that name).
    pub fn section(&self, name: &str) -> Option<&Section> {
        section(self, name)
    }

    /// The content text of a section of this document.
    pub fn content(&self, s: &Section) -> &'a str {
        self.text.get(s.content.clone()).unwrap_or("")
    }

    /// The gate evidence of this document.
    pub fn artifacts(&self) -> Artifacts {
        let review = self.section(REVIEW);
        let mut out = Artifacts {
            handoff: self.evidence(HANDOFF),
            review: self.evidence(REVIEW),
            verdict: review.and_then(|s| verdict(self.content(s))),
            errors: self.errors.clone(),
            hidden: None,
        };
        if let Some((line, name, opened, what)) = swallowed_heading(self.text, self.body_offset) {
            if same_name(&name, REVIEW) {
                out.review = None;
                out.verdict = None;
            } else {
                out.handoff = None;
            }
            out.hidden = Some(format!(
                "line {line} \"## {name}\" is not a section: the {what} opened on line {opened} is never closed, so everything after it is its text; close it"
            ));
        }
        out
    }

    fn evidence(&self, name: &str) -> Option<Evidence> {
        let s = self.section(name)?;
        let content = self.content(s);
        let nth = self
            .sections
            .iter()
            .filter(|x| same_name(&x.name, name))
            .count() as u32;
        // Of the content without the blank lines around it: a section appended after
        // this one does not make it new.
        has_content(content).then(|| Evidence {
            section: s.name.clone(),
            digest: sha256_hex(content.trim().as_bytes()),
            nth,
        })
    }
}

/// The section named `name` (trimmed, case-insensitive); when the name appears more than
/// once the last one counts, because agents append.
pub fn section<'d>(doc: &'d TaskDoc<'_>, name: &str) -> Option<&'d Section> {
    doc.sections.iter().rev().find(|s| same_name(&s.name, name))
}

/// Parses a TASK.md: frontmatter, sections and every problem found. Never panics.
pub fn parse(text: &str) -> TaskDoc<'_> {
    let sp = split(text);
    let mut errors = Vec::new();
    if let Some(e) = sp.error {
        errors.push(e);
    }
    let frontmatter = sp
        .frontmatter
        .and_then(|yaml| parse_frontmatter(yaml, &mut errors));
    TaskDoc {
        text,
        frontmatter,
        body_offset: sp.body_offset,
        sections: scan_sections(text, sp.body_offset),
        errors,
    }
}

/// A gated section that exists and has content.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Evidence {
    /// The section name as written in the file.
    pub section: String,
    /// Lower-hex SHA-256 of the section content bytes.
    pub digest: String,
    /// Which section of that name it is, from 1 (agents append: the last counts); 0 for
    /// an evidence file. With the digest it tells a section a round wrote from the one
    /// an earlier round left ([`crate::model::Task::fresh`]).
    pub nth: u32,
}

/// What the gates need from a TASK.md (seed 001's `TaskArtifacts`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Artifacts {
    /// `## Handoff`, when present with content.
    pub handoff: Option<Evidence>,
    /// `## Review`, when present with content.
    pub review: Option<Evidence>,
    /// The verdict of `## Review`, if it has one.
    pub verdict: Option<Verdict>,
    /// Problems found while parsing (they do not hide the sections).
    pub errors: Vec<ParseError>,
    /// A `## Handoff` or `## Review` line that a code fence or an HTML comment left open
    /// above it makes text: what to close. The gates refuse while it is there (the
    /// section that would count is not the one its writer meant), and its section's
    /// evidence is none.
    pub hidden: Option<String>,
}

/// A `## Handoff` or `## Review` line at the start of a line after a code fence or an
/// HTML comment that is still open at the end of the document (a top-level scan, as
/// [`atx_headings_by_lines`] does): its line, its name, the opening line, and what is
/// open. An agent that leaves one open would otherwise have the next round's section
/// read as the text of its own: a worker's "PASS" swallowing the reviewer's "FAIL".
fn swallowed_heading(
    text: &str,
    body_offset: usize,
) -> Option<(usize, String, usize, &'static str)> {
    let body = text.get(body_offset..)?;
    let first_line = text[..body_offset].matches('\n').count() + 1;
    let mut open: Option<(usize, &'static str, u8, usize)> = None;
    let mut found = None;
    for (i, line) in body.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let bytes = line.as_bytes();
        match open {
            Some((_, "code fence", ch, len)) => {
                if is_closing_fence(bytes, ch, len) {
                    open = None;
                    found = None;
                } else if found.is_none()
                    && let Some(name) = gated_heading(line)
                {
                    found = Some((i, name));
                }
            }
            Some(_) => {
                if line.contains("-->") {
                    open = None;
                    found = None;
                } else if found.is_none()
                    && let Some(name) = gated_heading(line)
                {
                    found = Some((i, name));
                }
            }
            None => match bytes.first() {
                Some(&ch @ (b'`' | b'~')) => {
                    if let Some(len) = opening_fence(bytes, ch) {
                        open = Some((i, "code fence", ch, len));
                    }
                }
                Some(b'<') if line.starts_with("<!--") && !line[4..].contains("-->") => {
                    open = Some((i, "HTML comment", 0, 0));
                }
                _ => {}
            },
        }
    }
    let (opened, what, _, _) = open?;
    let (at, name) = found?;
    Some((first_line + at, name, first_line + opened, what))
}

/// The name of a `## Handoff` or `## Review` heading line at column 0.
fn gated_heading(line: &str) -> Option<String> {
    let rest = line.strip_prefix("##")?;
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let name = heading_text(line);
    [HANDOFF, REVIEW]
        .iter()
        .any(|n| same_name(&name, n))
        .then_some(name)
}

/// Parses `text` and extracts the gate evidence.
pub fn artifacts(text: &str) -> Artifacts {
    parse(text).artifacts()
}

/// The evidence a task's evidence file gives (`TaskSpec::evidence`, which counts as its
/// `## Handoff`): present when the file has content outside its frontmatter and HTML
/// comments. `name` is the file as messages show it; the digest is of the whole file.
pub fn file_evidence(name: &str, text: &str) -> Option<Evidence> {
    let body = text.get(split(text).body_offset..).unwrap_or("");
    has_content(body).then(|| Evidence {
        section: name.to_owned(),
        digest: sha256_hex(text.as_bytes()),
        nth: 0,
    })
}

/// Lower-hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xF)]));
    }
    out
}
