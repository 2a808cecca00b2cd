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

// ---------------------------------------------------------------------------------------
// Frontmatter split
// ---------------------------------------------------------------------------------------

/// A TASK.md cut into its frontmatter and its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split<'a> {
    /// The YAML between the `---` lines (without them), if the file has a closed block.
    pub frontmatter: Option<&'a str>,
    /// Where the body starts: after the closing `---` line, or 0 without a closed block.
    pub body_offset: usize,
    /// An opening `---` line that is never closed (the whole text is then the body).
    pub error: Option<ParseError>,
}

/// Cuts `text` into frontmatter and body.
///
/// The file must start with a line `---` (after an optional UTF-8 byte order mark; trailing
/// spaces allowed; `\n` or `\r\n`), and the block ends at the next line that is `---`.
/// The YAML always starts on line 2 of the file.
pub fn split(text: &str) -> Split<'_> {
    let start = if text.starts_with(BOM) { BOM.len() } else { 0 };
    let no_block = Split {
        frontmatter: None,
        body_offset: 0,
        error: None,
    };
    let Some(first_nl) = text[start..].find('\n') else {
        return no_block;
    };
    let yaml_start = start + first_nl + 1;
    if !is_fence_line(&text[start..yaml_start]) {
        return no_block;
    }
    let mut pos = yaml_start;
    while pos < text.len() {
        let line_end = text[pos..].find('\n').map_or(text.len(), |i| pos + i + 1);
        if is_fence_line(&text[pos..line_end]) {
            return Split {
                frontmatter: Some(&text[yaml_start..pos]),
                body_offset: line_end,
                error: None,
            };
        }
        pos = line_end;
    }
    Split {
        frontmatter: None,
        body_offset: 0,
        error: Some(ParseError {
            line: 1,
            column: 1,
            message: "the frontmatter opened by \"---\" is never closed; add a line \"---\" \
                      after the YAML (the whole file is read as body until then)"
                .to_owned(),
        }),
    }
}

/// Is this line (with its terminator, if any) a `---` fence?
fn is_fence_line(line: &str) -> bool {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    line.strip_prefix("---")
        .is_some_and(|rest| rest.bytes().all(|b| b == b' ' || b == b'\t'))
}

// ---------------------------------------------------------------------------------------
// Frontmatter mirror
// ---------------------------------------------------------------------------------------

/// The TASK.md frontmatter: a mirror of the task for people and agents to read (DESIGN 4).
///
/// Agents may write anything there, so every value is kept as its display string
/// (`attempts: 5` and `attempts: "5"` both give `"5"`). A YAML null (`attempts:`) counts as
/// absent for the named fields and as `""` for unknown keys. Nested lists and maps are
/// flattened to their flow text (`[a, b]`), which [`Frontmatter::render`] writes back as a
/// quoted string: the mirror is flat.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frontmatter {
    /// The task id.
    pub id: Option<String>,
    /// The title (the person's; editing it is not tampering).
    pub title: Option<String>,
    /// The lifecycle status.
    pub status: Option<String>,
    /// Failed attempts.
    pub attempts: Option<String>,
    /// Attempts allowed.
    pub max_attempts: Option<String>,
    /// Crashes since the last transition.
    pub crash_count: Option<String>,
    /// Entries into `agent-review`.
    pub review_round: Option<String>,
    /// The task's git branch.
    pub branch: Option<String>,
    /// Every other key, kept so that rewriting the block preserves it. Keys named like a
    /// field above are ignored by [`Frontmatter::render`].
    pub extra: BTreeMap<String, String>,
}

impl Frontmatter {
    /// The value of a named field (one of [`FIELDS`]); `None` for other names.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.slot(field).and_then(|v| v.as_deref())
    }

    fn slot(&self, field: &str) -> Option<&Option<String>> {
        Some(match field {
            "id" => &self.id,
            "title" => &self.title,
            "status" => &self.status,
            "attempts" => &self.attempts,
            "max_attempts" => &self.max_attempts,
            "crash_count" => &self.crash_count,
            "review_round" => &self.review_round,
            "branch" => &self.branch,
            _ => return None,
        })
    }

    fn slot_mut(&mut self, field: &str) -> Option<&mut Option<String>> {
        Some(match field {
            "id" => &mut self.id,
            "title" => &mut self.title,
            "status" => &mut self.status,
            "attempts" => &mut self.attempts,
            "max_attempts" => &mut self.max_attempts,
            "crash_count" => &mut self.crash_count,
            "review_round" => &mut self.review_round,
            "branch" => &mut self.branch,
            _ => return None,
        })
    }

    /// The canonical block, fences included: `---\n`, the fields present in [`FIELDS`]
    /// order, then the unknown keys sorted, then `---\n`. Values are written plain when YAML
    /// reads them back as the same string, double-quoted (with escapes) otherwise, so every
    /// value round-trips through [`parse`].
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(256);
        out.push_str("---\n");
        for name in FIELDS {
            if let Some(value) = self.get(name) {
                push_entry(&mut out, name, value);
            }
        }
        for (key, value) in &self.extra {
            if !FIELDS.contains(&key.as_str()) {
                push_entry(&mut out, key, value);
            }
        }
        out.push_str("---\n");
        out
    }
}

fn push_entry(out: &mut String, key: &str, value: &str) {
    push_scalar(out, key);
    out.push_str(": ");
    push_scalar(out, value);
    out.push('\n');
}

/// Words YAML (1.1 or 1.2) may read as something other than a string.
const RESERVED_WORDS: [&str; 13] = [
    "null", "true", "false", "yes", "no", "on", "off", "y", "n", "nan", "inf", "infinity", "~",
];

/// Can `s` be written as a plain scalar and still read back as exactly `s`?
fn is_plain_safe(s: &str) -> bool {
    let b = s.as_bytes();
    // Decimal integers without sign or leading zero, small enough for any integer type.
    if !b.is_empty() && b.len() <= 18 && b.iter().all(u8::is_ascii_digit) {
        return b[0] != b'0' || b.len() == 1;
    }
    // Lower-case words such as statuses, ids and branches.
    matches!(b.first(), Some(b'a'..=b'z'))
        && b.iter()
            .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'/' | b'-'))
        && !RESERVED_WORDS.contains(&s)
}

fn push_scalar(out: &mut String, s: &str) {
    if is_plain_safe(s) {
        out.push_str(s);
        return;
    }
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                use fmt::Write;
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Characters YAML does not allow raw in a double-quoted scalar (or that readers treat as
/// line breaks or byte order marks). All of them are in the Basic Multilingual Plane.
fn needs_escape(c: char) -> bool {
    let u = u32::from(c);
    u < 0x20
        || (0x7F..=0x9F).contains(&u)
        || matches!(u, 0x2028 | 0x2029 | 0xFEFF | 0xFFFE | 0xFFFF)
}

/// The true frontmatter of a task: what TASK.md must say.
pub fn mirror(task: &Task) -> Frontmatter {
    Frontmatter {
        id: Some(task.id().to_string()),
        title: Some(task.spec.title.clone()),
        status: Some(task.status().as_str().to_owned()),
        attempts: Some(task.attempts().to_string()),
        max_attempts: Some(task.spec.max_attempts.to_string()),
        crash_count: Some(task.crash_count().to_string()),
        review_round: Some(task.review_round().to_string()),
        branch: Some(task.branch()),
        extra: BTreeMap::new(),
    }
}

/// A runner-owned field whose value in TASK.md differs from the truth.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Tamper {
    /// The field name (one of [`RUNNER_OWNED`]).
    pub field: String,
    /// What the file says.
    pub agent_value: Option<String>,
    /// What the store says (and what the file gets back).
    pub true_value: String,
}

/// The runner-owned fields of `found` (read from TASK.md) that differ from `truth`, in
/// [`RUNNER_OWNED`] order. A field missing from either side is not a tamper: a missing
/// field is simply restored by the next write. `title` is the person's and never counts.
pub fn tampered(found: &Frontmatter, truth: &Frontmatter) -> Vec<Tamper> {
    RUNNER_OWNED
        .iter()
        .filter_map(|field| {
            let agent = found.get(field)?;
            let true_value = truth.get(field)?;
            (agent != true_value).then(|| Tamper {
                field: (*field).to_owned(),
                agent_value: Some(agent.to_owned()),
                true_value: true_value.to_owned(),
            })
        })
        .collect()
}

/// `text` with its frontmatter block replaced by `fm` (or `fm` inserted at the top when
/// there is no closed block). The body bytes are kept exactly; a leading byte order mark
/// stays first; the block uses `\r\n` when the file's first line ends with one.
pub fn with_frontmatter(text: &str, fm: &Frontmatter) -> String {
    let sp = split(text);
    let bom = text.starts_with(BOM);
    let body = if sp.frontmatter.is_some() {
        &text[sp.body_offset..]
    } else if bom {
        &text[BOM.len()..]
    } else {
        text
    };
    let crlf = text.find('\n').is_some_and(|i| text[..i].ends_with('\r'));
    let mut block = fm.render();
    if crlf {
        // Values never contain a raw line break (they are escaped), so every '\n' in the
        // block is a line end.
        block = block.replace('\n', "\r\n");
    }
    let mut out = String::with_capacity(BOM.len() + block.len() + body.len());
    if bom {
        out.push_str(BOM);
    }
    out.push_str(&block);
    out.push_str(body);
    out
}

/// Parses the YAML of a frontmatter block that starts on line 2 of the file.
fn parse_frontmatter(yaml: &str, errors: &mut Vec<ParseError>) -> Option<Frontmatter> {
    if let Some(fm) = frontmatter_by_lines(yaml) {
        return Some(fm);
    }
    frontmatter_by_yaml(yaml, errors)
}

/// The most keys [`frontmatter_by_lines`] reads (it looks for duplicates one by one).
const LINE_KEYS_MAX: usize = 32;

/// The frontmatter as [`Frontmatter::render`] writes it, read without a YAML parser:
/// `key: value` lines whose key is plain-safe ([`is_plain_safe`]) and whose value is
/// plain-safe, double-quoted text without escapes, or absent (null). Anything else,
/// duplicate keys included, is `None`, and serde-saphyr reads the block; both give the
/// same result wherever this one answers (`check_frontmatter_lines`, fuzzed).
fn frontmatter_by_lines(yaml: &str) -> Option<Frontmatter> {
    let mut fm = Frontmatter::default();
    let mut keys: Vec<&str> = Vec::new();
    for line in yaml.split_inclusive('\n') {
        let line = line.strip_suffix('\n')?;
        let (key, value) = match line.split_once(": ") {
            Some((k, v)) => (k, Some(v)),
            None => (line.strip_suffix(':')?, None),
        };
        if !is_plain_safe(key) || keys.contains(&key) || keys.len() == LINE_KEYS_MAX {
            return None;
        }
        keys.push(key);
        let value = match value {
            None => None,
            Some(v) if is_plain_safe(v) => Some(v.to_owned()),
            Some(v) => Some(quoted_plain_text(v)?.to_owned()),
        };
        match fm.slot_mut(key) {
            Some(slot) => *slot = value,
            None => {
                fm.extra.insert(key.to_owned(), value.unwrap_or_default());
            }
        }
    }
    Some(fm)
}

/// The text inside `"…"` when it needs no escape and holds only printable ASCII and
/// letters or digits of other scripts (nothing YAML could read as a break or escape).
fn quoted_plain_text(v: &str) -> Option<&str> {
    let inner = v.strip_prefix('"')?.strip_suffix('"')?;
    inner
        .chars()
        .all(|c| {
            (c.is_ascii() && (' '..='~').contains(&c) && c != '"' && c != '\\')
                || (!c.is_ascii() && c.is_alphanumeric())
        })
        .then_some(inner)
}

/// Panics if [`frontmatter_by_lines`] answers differently from serde-saphyr.
fn check_frontmatter_lines(yaml: &str) {
    if let Some(fast) = frontmatter_by_lines(yaml) {
        let mut errors = Vec::new();
        let full = frontmatter_by_yaml(yaml, &mut errors);
        assert_eq!(errors, [], "the line read accepted invalid YAML {yaml:?}");
        assert_eq!(
            Some(fast),
            full,
            "the line read and serde-saphyr disagree on {yaml:?}"
        );
    }
}

/// [`parse_frontmatter`] by serde-saphyr.
fn frontmatter_by_yaml(yaml: &str, errors: &mut Vec<ParseError>) -> Option<Frontmatter> {
    const FIRST_LINE: usize = 2;
    let read = |duplicate_keys| {
        let options = serde_saphyr::options! {
            with_snippet: false,
            duplicate_keys: duplicate_keys,
            // `.inf` and `.nan` are values like any other here, not errors.
            reject_non_finite_typeless_float: false,
            // What an agent wrote as `yes` or `n` stays that word, not a boolean.
            strict_booleans: true,
        };
        serde_saphyr::from_str_with_options::<Top>(yaml, options).map(|Top(entries)| {
            let mut fm = Frontmatter::default();
            for (key, value) in entries {
                match fm.slot_mut(&key) {
                    Some(slot) => *slot = value,
                    None => {
                        fm.extra.insert(key, value.unwrap_or_default());
                    }
                }
            }
            fm
        })
    };
    match read(serde_saphyr::DuplicateKeyPolicy::Error) {
        Ok(fm) => Some(fm),
        Err(err) => {
            let (line, column) = match err.location() {
                Some(loc) if loc.line() > 0 => (
                    usize::try_from(loc.line())
                        .unwrap_or(usize::MAX - FIRST_LINE)
                        .saturating_add(FIRST_LINE - 1),
                    usize::try_from(loc.column()).unwrap_or(1).max(1),
                ),
                _ => (FIRST_LINE, 1),
            };
            let raw = serde_saphyr::MessageFormatter::format_message(
                &serde_saphyr::UserMessageFormatter,
                err.without_snippet(),
            );
            errors.push(ParseError {
                line,
                column,
                message: format!(
                    "the frontmatter is not valid YAML ({}); fix it or delete the block \
                     (Warden writes it back)",
                    one_line(&raw)
                ),
            });
            // The only difference between the two reads is duplicate keys: when that was
            // the problem, the values are still readable (the last one wins).
            read(serde_saphyr::DuplicateKeyPolicy::LastWins).ok()
        }
    }
}

/// Escapes control characters so a message stays on one line.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// The top level of the frontmatter: a mapping (an empty document counts as an empty one).
struct Top(Vec<(String, Option<String>)>);

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TopVisitor;
        impl<'de> Visitor<'de> for TopVisitor {
            type Value = Top;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of `key: value` lines")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Top, E> {
                Ok(Top(Vec::new()))
            }
            fn visit_none<E: de::Error>(self) -> Result<Top, E> {
                Ok(Top(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
                let mut entries = Vec::new();
                while let Some((Flat(key), Flat(value))) = map.next_entry::<Flat, Flat>()? {
                    entries.push((key.unwrap_or_default(), value));
                }
                Ok(Top(entries))
            }
        }
        d.deserialize_any(TopVisitor)
    }
}

/// Any YAML value as its display string; `None` for null.
struct Flat(Option<String>);

impl Flat {
    fn text(self) -> String {
        self.0.unwrap_or_else(|| "null".to_owned())
    }
}

impl<'de> Deserialize<'de> for Flat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FlatVisitor)
    }
}

struct FlatVisitor;

impl<'de> Visitor<'de> for FlatVisitor {
    type Value = Flat;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Flat, E> {
        Ok(Flat(Some(v.to_string())))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Flat, E> {
        Ok(Flat(Some(v.to_string())))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Flat, E> {
        Ok(Flat(Some(v.to_string())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Flat, E> {
        Ok(Flat(Some(v.to_string())))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Flat, E> {
        Ok(Flat(Some(v.to_string())))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Flat, E> {
        Ok(Flat(Some(v.to_string())))
    }
    fn visit_char<E: de::Error>(self, v: char) -> Result<Flat, E> {
        Ok(Flat(Some(v.to_string())))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Flat, E> {
        Ok(Flat(Some(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Flat, E> {
        Ok(Flat(Some(v)))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Flat, E> {
        Ok(Flat(Some(String::from_utf8_lossy(v).into_owned())))
    }
    fn visit_none<E: de::Error>(self) -> Result<Flat, E> {
        Ok(Flat(None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Flat, E> {
        Ok(Flat(None))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Flat, D::Error> {
        Flat::deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Flat, D::Error> {
        Flat::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Flat, A::Error> {
        let mut out = String::from("[");
        let mut first = true;
        while let Some(item) = seq.next_element::<Flat>()? {
            if !first {
                out.push_str(", ");
            }
            first = false;
            out.push_str(&item.text());
        }
        out.push(']');
        Ok(Flat(Some(out)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Flat, A::Error> {
        let mut out = String::from("{");
        let mut first = true;
        while let Some((key, value)) = map.next_entry::<Flat, Flat>()? {
            if !first {
                out.push_str(", ");
            }
            first = false;
            out.push_str(&key.text());
            out.push_str(": ");
            out.push_str(&value.text());
        }
        out.push('}');
        Ok(Flat(Some(out)))
    }
}

// ---------------------------------------------------------------------------------------
// Sections
// ---------------------------------------------------------------------------------------

/// A `## Name` section. Offsets are bytes into the whole file text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Section {
    /// The heading text, trimmed (inline markup removed: `## **Review**` is `Review`).
    pub name: String,
    /// The heading line, without its line terminator (`\n`, `\r\n` or a lone `\r`).
    pub heading: Range<usize>,
    /// From after the heading line to the start of the next level-1 or level-2 heading
    /// line (or the end of the file).
    pub content: Range<usize>,
}

/// A top-level ATX heading of level 1 or 2 in a body (offsets into the body).
struct AtxHeading {
    level: HeadingLevel,
    /// Line start to line end, without the terminator.
    line: Range<usize>,
    /// Where the first `#` is.
    hashes: usize,
    /// After the line terminator.
    next_line: usize,
    /// The heading text (collected only for level 2).
    name: String,
}

/// The top-level ATX headings of level 1 and 2 in `body`, in order.
///
/// Only ATX headings (`# `, `## `) matter: setext headings (a line underlined with `---` or
/// `===`) are ordinary text, because an agent's `---` rule under a line must not cut a
/// section short. Headings inside code blocks, HTML blocks, block quotes and lists are
/// content too: only a heading at the top level of the document structures it.
fn atx_headings(body: &str) -> Vec<AtxHeading> {
    atx_headings_by_lines(body).unwrap_or_else(|| atx_headings_by_parser(body))
}

/// [`atx_headings`] by a scan of the lines, for the bodies whose block structure the scan
/// can decide alone; `None` hands the body to pulldown-cmark ([`atx_headings_by_parser`]).
/// Both give the same answer on every body the scan accepts: the property tests and the
/// `taskmd` fuzz target compare them.
///
/// Why a line scan is enough: a line that starts in column 0 with `#` or `##` and a
/// space, a tab or the line end is a top-level ATX heading in CommonMark, unless it is
/// inside a fenced code block or an HTML block opened at the top level. Whatever else
/// is open (a list item, a block quote, a paragraph, an indented code block) ends
/// there, because a heading line is never a lazy continuation and is not indented
/// enough to continue a container. So the scan follows only top-level fences and HTML
/// comments (`<!--` … `-->`), and gives up where the answer depends on structure it
/// does not model:
/// - a heading, fence or `<` line indented by 1–3 spaces (inside a list item or not);
/// - a line starting with `<` other than a plain `<!--` comment (the other HTML blocks);
/// - a `\r` (other line endings);
/// - a level-1/2 heading containing `[` or `]` (its text depends on link reference
///   definitions anywhere in the document).
///
/// The heading's name is then read by pulldown-cmark from the heading line alone: an ATX
/// heading's inline content is parsed on its own, so the name is the one the full parse
/// gives.
fn atx_headings_by_lines(body: &str) -> Option<Vec<AtxHeading>> {
    /// What the scan is inside at the top level.
    enum Open {
        Nothing,
        /// A fenced code block: its character and length.
        Fence(u8, usize),
        /// An HTML comment block, until a line containing `-->`.
        Comment,
    }
    let bytes = body.as_bytes();
    if memchr::memchr(b'\r', bytes).is_some() {
        return None;
    }
    let mut out = Vec::new();
    let mut open = Open::Nothing;
    let mut start = 0;
    while start < bytes.len() {
        let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |i| start + i);
        let line = &bytes[start..end];
        match open {
            Open::Fence(ch, len) => {
                if is_closing_fence(line, ch, len) {
                    open = Open::Nothing;
                }
            }
            Open::Comment => {
                if memchr::memmem::find(line, b"-->").is_some() {
                    open = Open::Nothing;
                }
            }
            Open::Nothing => match line.first() {
                Some(b'#') => {
                    let hashes = line.iter().take_while(|&&b| b == b'#').count();
                    if hashes <= 2 && matches!(line.get(hashes), None | Some(b' ' | b'\t')) {
                        if line.contains(&b'[') || line.contains(&b']') {
                            return None;
                        }
                        let level = if hashes == 1 {
                            HeadingLevel::H1
                        } else {
                            HeadingLevel::H2
                        };
                        let mut h = atx_line(body, start, level)?;
                        if level == HeadingLevel::H2 {
                            h.name = heading_text(&body[start..end]);
                        }
                        out.push(h);
                    }
                }
                Some(&ch @ (b'`' | b'~')) => {
                    if let Some(len) = opening_fence(line, ch) {
                        open = Open::Fence(ch, len);
                    }
                }
                Some(b'<') => {
                    let rest = line.strip_prefix(b"<!--")?;
                    // `<!-->` and `<!--->` are whole comments in CommonMark 0.31; leave
                    // such edge cases to the parser.
                    if rest.starts_with(b">") || rest.starts_with(b"->") {
                        return None;
                    }
                    if memchr::memmem::find(rest, b"-->").is_none() {
                        open = Open::Comment;
                    }
                }
                Some(b' ') => {
                    let indent = line.iter().take(4).take_while(|&&b| b == b' ').count();
                    if indent < 4 && matches!(line.get(indent), Some(b'#' | b'`' | b'~' | b'<')) {
                        let rest = &line[indent..];
                        let heading = {
                            let hashes = rest.iter().take_while(|&&b| b == b'#').count();
                            (1..=2).contains(&hashes)
                                && matches!(rest.get(hashes), None | Some(b' ' | b'\t'))
                        };
                        let fence = rest.first().is_some_and(|&c| {
                            c != b'#' && c != b'<' && opening_fence(rest, c).is_some()
                        });
                        if heading || fence || rest[0] == b'<' {
                            return None;
                        }
                    }
                }
                _ => {}
            },
        }
        start = end + 1;
    }
    Some(out)
}

/// The length of the fence if `line` (no indent) opens a fenced code block of `ch`.
fn opening_fence(line: &[u8], ch: u8) -> Option<usize> {
    let len = line.iter().take_while(|&&b| b == ch).count();
    if len < 3 {
        return None;
    }
    // A backtick fence's info string cannot contain a backtick (it would be inline code).
    if ch == b'`' && line[len..].contains(&b'`') {
        return None;
    }
    Some(len)
}

/// Does `line` close a fence of `ch` opened with `len` characters? Up to three spaces,
/// at least `len` of `ch`, then only spaces and tabs.
fn is_closing_fence(line: &[u8], ch: u8, len: usize) -> bool {
    let indent = line.iter().take(4).take_while(|&&b| b == b' ').count();
    if indent > 3 {
        return false;
    }
    let rest = &line[indent..];
    let n = rest.iter().take_while(|&&b| b == ch).count();
    n >= len && rest[n..].iter().all(|&b| b == b' ' || b == b'\t')
}

/// The text of one ATX heading line, as the full parse collects it (text and code spans,
/// markup removed), trimmed.
fn heading_text(line: &str) -> String {
    if let Some(name) = plain_heading_text(line) {
        return name.to_owned();
    }
    let mut name = String::new();
    for event in Parser::new_ext(line, Options::empty()) {
        if let Event::Text(t) | Event::Code(t) = event {
            name.push_str(&t);
        }
    }
    let trimmed = name.trim();
    if trimmed.len() == name.len() {
        name
    } else {
        trimmed.to_owned()
    }
}

/// The text of an ATX heading line whose text holds only characters that are never
/// inline markup without a CommonMark extension (letters, digits, spaces and plain
/// punctuation: no backslash, backtick, `*`, `_`, `[`, `]`, `<`, `>`, `!`, `&`, `~`, `#`
/// or tab), so pulldown-cmark would return it as one text, trimmed; `None` otherwise.
fn plain_heading_text(line: &str) -> Option<&str> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let rest = line.trim_start_matches('#');
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    let text = rest.trim_matches(' ');
    let plain = |b: u8| b.is_ascii_alphanumeric() || b" ,.:;'\"?/()+=-%@$^{}|".contains(&b);
    text.bytes().all(plain).then_some(text)
}

/// Panics if the line scan accepts `body` but finds other headings than the parser.
fn check_line_scan(body: &str) {
    fn key(hs: Vec<AtxHeading>) -> Vec<(HeadingLevel, Range<usize>, usize, usize, String)> {
        hs.into_iter()
            .map(|h| (h.level, h.line, h.hashes, h.next_line, h.name))
            .collect()
    }
    if let Some(fast) = atx_headings_by_lines(body) {
        assert_eq!(
            key(fast),
            key(atx_headings_by_parser(body)),
            "the line scan and pulldown-cmark disagree on {body:?}"
        );
    }
}

/// [`atx_headings`] by pulldown-cmark's event stream over the whole body.
fn atx_headings_by_parser(body: &str) -> Vec<AtxHeading> {
    let mut out: Vec<AtxHeading> = Vec::new();
    let mut depth = 0usize;
    let mut collecting = false;
    for (event, range) in Parser::new_ext(body, Options::empty()).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                let top = depth == 0;
                depth += 1;
                if top
                    && level <= HeadingLevel::H2
                    && let Some(h) = atx_line(body, range.start, level)
                {
                    collecting = level == HeadingLevel::H2;
                    out.push(h);
                }
            }
            Event::Start(_) => depth += 1,
            Event::End(end) => {
                depth = depth.saturating_sub(1);
                if matches!(end, TagEnd::Heading(_)) {
                    collecting = false;
                }
            }
            Event::Text(t) | Event::Code(t) if collecting => {
                if let Some(h) = out.last_mut() {
                    h.name.push_str(&t);
                }
            }
            _ => {}
        }
    }
    for h in &mut out {
        let trimmed = h.name.trim();
        if trimmed.len() != h.name.len() {
            h.name = trimmed.to_owned();
        }
    }
    out
}

/// The heading line around `pos` if it is an ATX heading (1-6 `#` then a space, a tab or
/// the end of the line, after at most three spaces).
fn atx_line(body: &str, pos: usize, level: HeadingLevel) -> Option<AtxHeading> {
    // CommonMark ends lines at "\n", "\r\n" or a lone "\r".
    let line_start = body[..pos].rfind(['\n', '\r']).map_or(0, |i| i + 1);
    let (line_end, next_line) = match body[pos..].find(['\n', '\r']) {
        Some(i) if body[pos + i..].starts_with("\r\n") => (pos + i, pos + i + 2),
        Some(i) => (pos + i, pos + i + 1),
        None => (body.len(), body.len()),
    };
    let line = &body[line_start..line_end];
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let after_indent = &line[indent..];
    let hashes = after_indent.len() - after_indent.trim_start_matches('#').len();
    if hashes == 0 || hashes > 6 {
        return None;
    }
    if !matches!(
        after_indent.as_bytes().get(hashes),
        None | Some(b' ' | b'\t')
    ) {
        return None;
    }
    Some(AtxHeading {
        level,
        line: line_start..line_end,
        hashes: line_start + indent,
        next_line,
        name: String::new(),
    })
}

/// The `## Name` sections of the body starting at `body_offset` of `text`.
fn scan_sections(text: &str, body_offset: usize) -> Vec<Section> {
    let body = &text[body_offset..];
    let mut headings = atx_headings(body).into_iter().peekable();
    let mut sections = Vec::new();
    while let Some(h) = headings.next() {
        if h.level != HeadingLevel::H2 {
            continue;
        }
        let end = headings.peek().map_or(body.len(), |next| next.line.start);
        sections.push(Section {
            name: h.name,
            heading: body_offset + h.line.start..body_offset + h.line.end,
            content: body_offset + h.next_line..body_offset + end,
        });
    }
    sections
}

/// Compares section names: trimmed, case-insensitive (Unicode lower case).
fn same_name(a: &str, b: &str) -> bool {
    a.trim()
        .chars()
        .flat_map(char::to_lowercase)
        .eq(b.trim().chars().flat_map(char::to_lowercase))
}

/// Does `s` have a non-whitespace character outside HTML comments?
///
/// A comment runs from `<!--` to the next `-->`; an unterminated one runs to the end.
pub fn has_content(s: &str) -> bool {
    visible(s).any(|part| part.chars().any(|c| !c.is_whitespace()))
}

/// The parts of `s` outside HTML comments, in order.
fn visible(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.find("<!--") {
            None => {
                rest = None;
                Some(r)
            }
            Some(open) => {
                let after = &r[open + 4..];
                rest = after.find("-->").map(|close| &after[close + 3..]);
                Some(&r[..open])
            }
        }
    })
}

// ---------------------------------------------------------------------------------------
// Verdict
// ---------------------------------------------------------------------------------------

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

fn first_token(s: &str) -> Option<Verdict> {
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

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

// ---------------------------------------------------------------------------------------
// The document and its artifacts
// ---------------------------------------------------------------------------------------

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
        Artifacts {
            handoff: self.evidence(HANDOFF),
            review: self.evidence(REVIEW),
            verdict: review.and_then(|s| verdict(self.content(s))),
            errors: self.errors.clone(),
        }
    }

    fn evidence(&self, name: &str) -> Option<Evidence> {
        let s = self.section(name)?;
        let content = self.content(s);
        has_content(content).then(|| Evidence {
            section: s.name.clone(),
            digest: sha256_hex(content.as_bytes()),
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
}

/// Parses `text` and extracts the gate evidence.
pub fn artifacts(text: &str) -> Artifacts {
    parse(text).artifacts()
}

fn sha256_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xF)]));
    }
    out
}

// ---------------------------------------------------------------------------------------
// Skeleton
// ---------------------------------------------------------------------------------------

const CONTEXT: &str = "Context";
const NOTES: &str = "Notes";
const CONTEXT_PLACEHOLDER: &str =
    "<!-- No context given: describe the goal, the constraints and how to check the result. -->";
const NOTES_PLACEHOLDER: &str =
    "<!-- Notes: decisions, findings and open questions, added as the work goes on. -->";

/// The TASK.md of a new task: the frontmatter mirror, `# {title}`, `## Context` with the
/// task body, and `## Notes`.
///
/// The body must stay inside `## Context`: its own level-1 and level-2 headings are
/// demoted to level 3 (so a body cannot pre-write a `## Handoff`), and a body that would
/// still swallow the following headings (an unclosed code fence or HTML block) is put in
/// a code fence longer than any backtick run inside it.
pub fn skeleton(task: &Task) -> String {
    let fm = mirror(task);
    let title: String = task
        .spec
        .title
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let title = match title.trim() {
        "" => task.id().as_str(),
        t => t,
    };
    let body = task.spec.body.trim_end();
    let body = body.trim_start_matches(['\n', '\r']);
    if body.trim().is_empty() {
        return skeleton_text(&fm, title, CONTEXT_PLACEHOLDER);
    }
    let demoted = demote_headings(body);
    let text = skeleton_text(&fm, title, &demoted);
    if has_only_skeleton_sections(&text) {
        return text;
    }
    skeleton_text(&fm, title, &fenced(body))
}

fn skeleton_text(fm: &Frontmatter, title: &str, context: &str) -> String {
    let mut out = fm.render();
    out.push_str("\n# ");
    out.push_str(title);
    out.push_str("\n\n## ");
    out.push_str(CONTEXT);
    out.push_str("\n\n");
    out.push_str(context);
    out.push_str("\n\n## ");
    out.push_str(NOTES);
    out.push_str("\n\n");
    out.push_str(NOTES_PLACEHOLDER);
    out.push('\n');
    out
}

fn has_only_skeleton_sections(text: &str) -> bool {
    let doc = parse(text);
    let names: Vec<&str> = doc.sections.iter().map(|s| s.name.as_str()).collect();
    names == [CONTEXT, NOTES]
        && doc
            .sections
            .last()
            .is_some_and(|notes| notes.content.end == text.len())
}

/// Turns top-level `#`/`##` ATX headings into `###` ones.
fn demote_headings(body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 16);
    let mut last = 0;
    for h in atx_headings(body) {
        out.push_str(&body[last..h.hashes]);
        out.push_str(if h.level == HeadingLevel::H1 {
            "##"
        } else {
            "#"
        });
        last = h.hashes;
    }
    out.push_str(&body[last..]);
    out
}

fn fenced(body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for b in body.bytes() {
        run = if b == b'`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}\n{body}\n{fence}")
}

// ---------------------------------------------------------------------------------------
// Fuzzing
// ---------------------------------------------------------------------------------------

/// Fuzz entry point: parses arbitrary bytes (as lossy UTF-8) through every function of
/// this module and panics if an invariant breaks (offsets out of range or inside a
/// character, a body changed by a frontmatter rewrite, a frontmatter that does not
/// round-trip). Used by the property tests and by `cargo fuzz`.
#[doc(hidden)]
pub fn fuzz(data: &[u8]) {
    check_invariants(&String::from_utf8_lossy(data));
}

fn check_invariants(text: &str) {
    let doc = parse(text);
    let len = text.len();
    check_line_scan(&text[doc.body_offset..]);
    if let Some(yaml) = split(text).frontmatter {
        check_frontmatter_lines(yaml);
    }
    assert!(doc.body_offset <= len && text.is_char_boundary(doc.body_offset));
    let mut previous_end = doc.body_offset;
    for s in &doc.sections {
        for offset in [
            s.heading.start,
            s.heading.end,
            s.content.start,
            s.content.end,
        ] {
            assert!(offset <= len, "offset {offset} beyond {len}");
            assert!(
                text.is_char_boundary(offset),
                "offset {offset} inside a character"
            );
        }
        assert!(previous_end <= s.heading.start, "sections overlap: {s:?}");
        assert!(s.heading.start <= s.heading.end && s.heading.end <= s.content.start);
        assert!(s.content.start <= s.content.end);
        assert!(text[s.heading.clone()].trim_start().starts_with("##"));
        previous_end = s.content.end;
    }
    for e in &doc.errors {
        assert!(e.line >= 1 && e.column >= 1);
        assert!(!e.to_string().contains('\n'));
    }
    let found = doc.artifacts();
    assert_eq!(found, artifacts(text));
    if let Some(review) = doc.section(REVIEW) {
        assert_eq!(found.verdict, verdict(doc.content(review)));
    }
    let _ = has_content(text);
    let _ = verdict(text);

    // Rewriting the frontmatter keeps the body and round-trips the values.
    let fm = doc.frontmatter.clone().unwrap_or_default();
    let rewritten = with_frontmatter(text, &fm);
    let sp = split(text);
    let body = match sp.frontmatter {
        Some(_) => &text[sp.body_offset..],
        None => text.strip_prefix(BOM).unwrap_or(text),
    };
    let again = parse(&rewritten);
    assert_eq!(&rewritten[again.body_offset..], body);
    assert_eq!(
        again.frontmatter.as_ref(),
        Some(&fm),
        "render did not round-trip"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RunnerState, Status, TaskId, TaskSpec, WorkflowKind};
    use jiff::Timestamp;
    use proptest::prelude::*;

    fn task(id: &str, title: &str, body: &str) -> Task {
        let mut spec = TaskSpec::new(TaskId::new(id).unwrap(), WorkflowKind::Review, 3);
        spec.title = title.to_owned();
        spec.body = body.to_owned();
        let mut runner = RunnerState::new(Status::AgentReview, false, 1, Timestamp::UNIX_EPOCH);
        runner.crash_count = 1;
        runner.review_round = 2;
        Task { spec, runner }
    }

    /// A task as `task create` makes it.
    fn new_task(id: &str, title: &str, body: &str) -> Task {
        let mut t = task(id, title, body);
        t.runner = RunnerState::new(Status::Pending, false, 0, Timestamp::UNIX_EPOCH);
        t
    }

    // ----- sections -------------------------------------------------------------------

    /// `expected`: (name, content) of every section, in order.
    fn check_sections(text: &str, expected: &[(&str, &str)]) {
        let doc = parse(text);
        let got: Vec<(&str, &str)> = doc
            .sections
            .iter()
            .map(|s| (s.name.as_str(), &text[s.content.clone()]))
            .collect();
        assert_eq!(got, expected, "sections of {text:?}");
        fuzz(text.as_bytes());
    }

    #[test]
    fn sections() {
        check_sections("## Handoff\ndone\n", &[("Handoff", "done\n")]);
        check_sections("intro\n\n## Handoff\ndone", &[("Handoff", "done")]);
        check_sections("## Handoff", &[("Handoff", "")]);
        check_sections("## Handoff\n", &[("Handoff", "")]);
        check_sections("   ## Handoff\nx\n", &[("Handoff", "x\n")]);
        check_sections(
            "## A\nx\n### B\ny\n#### C\n## D\nz",
            &[("A", "x\n### B\ny\n#### C\n"), ("D", "z")],
        );
        check_sections("## A\nx\n# Title\ny\n## B\n", &[("A", "x\n"), ("B", "")]);
        check_sections("## A\n1\n## A\n2\n", &[("A", "1\n"), ("A", "2\n")]);
        check_sections("## Handoff ##\nx\n", &[("Handoff", "x\n")]);
        check_sections("## Handoff #\nx\n", &[("Handoff", "x\n")]);
        check_sections("## Handoff #x\n", &[("Handoff #x", "")]);
        check_sections("##  Spaced Out  \nx\n", &[("Spaced Out", "x\n")]);
        check_sections("## **Review**\nPASS\n", &[("Review", "PASS\n")]);
        check_sections("## The `Review`\n", &[("The Review", "")]);
        check_sections("##\nx\n", &[("", "x\n")]);
        check_sections("##\tTabbed\nx\n", &[("Tabbed", "x\n")]);
        // CRLF line ends.
        check_sections(
            "## Handoff\r\ndone\r\n## Review\r\nPASS\r\n",
            &[("Handoff", "done\r\n"), ("Review", "PASS\r\n")],
        );
        // Not headings: no space, too deep, indented code, fences, quotes, lists, HTML.
        check_sections("##Handoff\nx\n", &[]);
        check_sections("####### Seven\n", &[]);
        check_sections("### Handoff\nx\n", &[]);
        check_sections("    ## Handoff\nx\n", &[]);
        check_sections("\t## Handoff\nx\n", &[]);
        check_sections("```\n## Handoff\n```\n", &[]);
        check_sections("~~~md\n## Handoff\n~~~\n", &[]);
        check_sections("```\n## Handoff\n", &[]);
        check_sections("> ## Handoff\n> x\n", &[]);
        check_sections("- ## Handoff\n  x\n", &[]);
        check_sections("<!--\n## Handoff\n-->\n", &[]);
        check_sections("\\## Handoff\n", &[]);
        // A fence inside a section keeps its headings; the section goes on after it.
        check_sections(
            "## Review\n```\n## Handoff\n```\nFAIL\n",
            &[("Review", "```\n## Handoff\n```\nFAIL\n")],
        );
        // Setext headings neither start nor end sections.
        check_sections("Handoff\n---\nx\n", &[]);
        check_sections("Handoff\n===\nx\n", &[]);
        check_sections("## A\nx\nFAIL\n---\ny\n", &[("A", "x\nFAIL\n---\ny\n")]);
        check_sections("## A\nx\nTitle\n===\ny\n", &[("A", "x\nTitle\n===\ny\n")]);
        // A level-1 or level-2 heading inside a quote or list does not end a section.
        check_sections("## A\n> ## B\nx\n", &[("A", "> ## B\nx\n")]);
        check_sections("## A\n- # B\nx\n", &[("A", "- # B\nx\n")]);
        // Unicode names and content.
        check_sections("## Übergabe ✓\nfertig é\n", &[("Übergabe ✓", "fertig é\n")]);
        // A lone "\r" ends a line too.
        check_sections("## A\rx\r## B\ry", &[("A", "x\r"), ("B", "y")]);
        check_sections("## \rHandoff\n", &[("", "Handoff\n")]);
    }

    #[test]
    fn section_offsets_are_into_the_whole_file() {
        let text = "---\nid: a\n---\n## Handoff\r\ndone\n";
        let doc = parse(text);
        let s = doc.section("handoff").unwrap();
        assert_eq!(s.heading, 14..24);
        assert_eq!(&text[s.heading.clone()], "## Handoff");
        assert_eq!(doc.content(s), "done\n");
        assert_eq!(s.content, 26..31);
        // Headings inside the frontmatter are YAML comments, not sections.
        check_sections("---\n## Handoff\n---\nbody\n", &[]);
        check_sections("---\nid: a\n---\n## Handoff\nx", &[("Handoff", "x")]);
    }

    #[test]
    fn the_last_section_of_a_name_counts() {
        let doc = parse("## Review\nFAIL\n## Handoff\nfixed\n##  REVIEW \nPASS\n");
        let review = section(&doc, " review ").unwrap();
        assert_eq!(review.name, "REVIEW");
        assert_eq!(doc.content(review), "PASS\n");
        assert_eq!(doc.artifacts().verdict, Some(Verdict::Pass));
        assert!(doc.section("Questions").is_none());
        assert!(same_name("ÜBERGABE", "übergabe"));
        assert!(!same_name("Review", "Reviews"));
    }

    // ----- has_content ----------------------------------------------------------------

    fn check_content(s: &str, expected: bool) {
        assert_eq!(has_content(s), expected, "{s:?}");
    }

    #[test]
    fn content() {
        check_content("", false);
        check_content(" \n\t\r\n \u{a0}\u{2003}", false);
        check_content("x", true);
        check_content("\n\n  done\n", true);
        check_content("<!-- nothing yet -->", false);
        check_content("<!-- a -->\n  <!-- b\nmore -->\n", false);
        check_content("<!-- a --> x", true);
        check_content("x <!-- a -->", true);
        check_content("<!-- unterminated\nx\n", false);
        check_content("<!-- a --><!-- b", false);
        check_content("<!---->", false);
        check_content("<!-- a -->-->", true);
        check_content("<!- not a comment -->", true);
        check_content("-->", true);
        check_content("<!--> x -->", false);
    }

    // ----- verdict --------------------------------------------------------------------

    fn check_verdict(s: &str, expected: Option<Verdict>) {
        assert_eq!(verdict(s), expected, "{s:?}");
    }

    #[test]
    fn verdicts() {
        use Verdict::{Fail, Pass};
        check_verdict("PASS", Some(Pass));
        check_verdict("FAIL", Some(Fail));
        check_verdict("pass", Some(Pass));
        check_verdict("Pass", Some(Pass));
        check_verdict("fAiL", Some(Fail));
        check_verdict("Verdict: **PASS**", Some(Pass));
        check_verdict("FAIL: tests broken", Some(Fail));
        check_verdict("(PASS)", Some(Pass));
        check_verdict("-PASS-", Some(Pass));
        check_verdict("PASS.", Some(Pass));
        check_verdict("é PASS é", Some(Pass));
        check_verdict("passes", None);
        check_verdict("PASSED", None);
        check_verdict("bypass", None);
        check_verdict("FAIL_X", None);
        check_verdict("_FAIL", None);
        check_verdict("FAIL2", None);
        check_verdict("éPASS", None);
        check_verdict("PASSé", None);
        check_verdict("P A S S", None);
        check_verdict("", None);
        check_verdict("Looks good overall.\n", None);
        // The first line with a token decides, and its first token.
        check_verdict("Summary\n\nFAIL, not a PASS\nPASS\n", Some(Fail));
        check_verdict("pass/fail\n", Some(Pass));
        check_verdict("bypassed\nFAIL\n", Some(Fail));
        check_verdict("Verdict:\r\nPASS\r\n", Some(Pass));
        // Comments are not verdict lines.
        check_verdict("<!-- write PASS or FAIL -->", None);
        check_verdict("<!-- write PASS or FAIL -->\nFAIL\n", Some(Fail));
        check_verdict("<!--\nPASS\n-->\nFAIL", Some(Fail));
        check_verdict("FAIL <!-- not PASS -->", Some(Fail));
        check_verdict("<!-- PASS --> FAIL", Some(Fail));
        check_verdict("<!-- unterminated PASS", None);
        check_verdict("x<!-- -->PASS", Some(Pass));
        // Code counts (the seed's rule reads every line).
        check_verdict("```\nFAIL\n```\nPASS", Some(Fail));
    }

    #[test]
    fn verdict_wire_names() {
        for v in [Verdict::Pass, Verdict::Fail] {
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(json, format!("\"{v}\""));
            assert_eq!(serde_json::from_str::<Verdict>(&json).unwrap(), v);
        }
        assert!(serde_json::from_str::<Verdict>("\"PASS\"").is_err());
    }

    /// An independent reading of the rule for text without comments: split into words.
    fn oracle(s: &str) -> Option<Verdict> {
        s.split(|c: char| !is_word_char(c))
            .find_map(|w| match w.to_ascii_lowercase().as_str() {
                "pass" => Some(Verdict::Pass),
                "fail" => Some(Verdict::Fail),
                _ => None,
            })
    }

    // ----- artifacts ------------------------------------------------------------------

    #[test]
    fn artifacts_need_content() {
        let a =
            artifacts("# T\n## Handoff\n<!-- write here -->\n\n## Review\n<!-- PASS or FAIL -->\n");
        assert_eq!(a.handoff, None);
        assert_eq!(a.review, None);
        assert_eq!(a.verdict, None);
        assert!(a.errors.is_empty());

        let a = artifacts("## handoff\ndone\n## Review\nLooks fine, no verdict.\n");
        assert_eq!(
            a.handoff,
            Some(Evidence {
                section: "handoff".into(),
                digest: "d117fa006ba9208500b2930ce69cbde436c647afa917cb7396a9bc9111a46dd2".into(),
            })
        );
        assert!(a.review.is_some());
        assert_eq!(a.verdict, None);

        let a = artifacts("---\nid: [\n---\n## Review\nVerdict: FAIL\n");
        assert_eq!(a.verdict, Some(Verdict::Fail));
        assert_eq!(a.handoff, None);
        assert_eq!(a.errors.len(), 1);
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    // ----- frontmatter ----------------------------------------------------------------

    #[test]
    fn split_finds_the_block() {
        let check = |text: &str, fm: Option<&str>, body: &str, error: bool| {
            let sp = split(text);
            assert_eq!(sp.frontmatter, fm, "{text:?}");
            assert_eq!(&text[sp.body_offset..], body, "{text:?}");
            assert_eq!(sp.error.is_some(), error, "{text:?}");
        };
        check("---\nid: a\n---\nbody", Some("id: a\n"), "body", false);
        check(
            "---\r\nid: a\r\n---\r\nbody",
            Some("id: a\r\n"),
            "body",
            false,
        );
        check("---\n---\n", Some(""), "", false);
        check("---\nid: a\n---", Some("id: a\n"), "", false);
        check(
            "---  \nid: a\n--- \t\n\n# T",
            Some("id: a\n"),
            "\n# T",
            false,
        );
        check("\u{feff}---\nid: a\n---\nb", Some("id: a\n"), "b", false);
        check("---\nid: a\n", None, "---\nid: a\n", true);
        check("---\n", None, "---\n", true);
        check("---", None, "---", false);
        check("----\nid: a\n---\n", None, "----\nid: a\n---\n", false);
        check("--- x\n---\n", None, "--- x\n---\n", false);
        check(" ---\n---\n", None, " ---\n---\n", false);
        check(
            "# T\n---\nid: a\n---\n",
            None,
            "# T\n---\nid: a\n---\n",
            false,
        );
        check("", None, "", false);
    }

    fn fm_of(text: &str) -> (Option<Frontmatter>, Vec<ParseError>) {
        let doc = parse(text);
        (doc.frontmatter, doc.errors)
    }

    #[test]
    fn frontmatter_values() {
        let (fm, errors) = fm_of(
            "---\nid: login\ntitle: \"Log: in\"\nstatus: working\nattempts: 5\nmax_attempts: \"3\"\n\
             crash_count: 0x1\nreview_round:\nbranch: warden/login\nowner: ana\nflag: yes\n\
             tags: [a, {b: 1}]\nratio: 1.50\n'quoted key': ~\n---\nbody\n",
        );
        assert_eq!(errors, []);
        let fm = fm.unwrap();
        assert_eq!(fm.id.as_deref(), Some("login"));
        assert_eq!(fm.title.as_deref(), Some("Log: in"));
        assert_eq!(fm.status.as_deref(), Some("working"));
        assert_eq!(fm.attempts.as_deref(), Some("5"));
        assert_eq!(fm.max_attempts.as_deref(), Some("3"));
        assert_eq!(fm.crash_count.as_deref(), Some("1"));
        assert_eq!(fm.review_round, None);
        assert_eq!(fm.branch.as_deref(), Some("warden/login"));
        let extra: Vec<(&str, &str)> = fm
            .extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            extra,
            [
                ("flag", "yes"),
                ("owner", "ana"),
                ("quoted key", ""),
                ("ratio", "1.5"),
                ("tags", "[a, {b: 1}]")
            ]
        );
        // Unknown keys survive a rewrite.
        let rewritten = with_frontmatter("---\nowner: ana\nstatus: done\n---\n", &fm);
        assert_eq!(parse(&rewritten).frontmatter.unwrap().extra, fm.extra);
    }

    #[test]
    fn frontmatter_errors() {
        let check = |text: &str, line: usize, column: usize, needle: &str, readable: bool| {
            let (fm, errors) = fm_of(text);
            assert_eq!(errors.len(), 1, "{text:?}: {errors:?}");
            let e = &errors[0];
            assert_eq!((e.line, e.column), (line, column), "{text:?}: {e}");
            assert!(e.message.contains(needle), "{text:?}: {e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("line {line}, column {column}: "))
            );
            assert_eq!(fm.is_some(), readable, "{text:?}");
        };
        check("---\nid: a\n", 1, 1, "never closed", false);
        check("---\nid: a\n## Handoff\nx\n", 1, 1, "never closed", false);
        check("---\nid: a\ntitle: [\n---\n", 3, 8, "not valid YAML", false);
        check(
            "---\nid: a\n  status: x\n---\n",
            3,
            9,
            "not valid YAML",
            false,
        );
    }

    #[test]
    fn frontmatter_problems_are_listed() {
        let (fm, errors) = fm_of("---\nid: a\ntitle: [\n---\n");
        assert_eq!(fm, None);
        assert_eq!(errors[0].to_string().lines().count(), 1);
        assert_eq!((errors[0].line, errors[0].column), (3, 8));

        // A duplicate key is reported, and the last value is still read.
        let (fm, errors) = fm_of("---\nstatus: working\nstatus: done\n---\n");
        assert_eq!(fm.unwrap().status.as_deref(), Some("done"));
        assert_eq!((errors[0].line, errors[0].column), (3, 1));
        assert!(errors[0].message.contains("duplicate"), "{}", errors[0]);

        // Not a mapping.
        let (fm, errors) = fm_of("---\n- a\n---\n");
        assert_eq!(fm, None);
        assert!(errors[0].message.contains("mapping"), "{}", errors[0]);

        // Empty and comment-only blocks are empty mappings.
        assert_eq!(fm_of("---\n---\n"), (Some(Frontmatter::default()), vec![]));
        assert_eq!(
            fm_of("---\n# just a comment\n---\n"),
            (Some(Frontmatter::default()), vec![])
        );
        // An unclosed block: the whole text is the body, sections included.
        let doc = parse("---\nid: a\n## Handoff\ndone\n");
        assert_eq!(doc.body_offset, 0);
        assert_eq!(doc.section(HANDOFF).map(|s| doc.content(s)), Some("done\n"));
    }

    #[test]
    fn render_is_canonical() {
        let t = task("login", "Log in: \"fast\" #1", "");
        let mut fm = mirror(&t);
        fm.extra.insert("owner".into(), "ana".into());
        fm.extra.insert("status".into(), "ignored".into());
        fm.extra.insert("multi line".into(), "a\nb\u{7}".into());
        assert_eq!(
            fm.render(),
            "---\nid: login\ntitle: \"Log in: \\\"fast\\\" #1\"\nstatus: agent-review\nattempts: 1\n\
             max_attempts: 3\ncrash_count: 1\nreview_round: 2\nbranch: warden/login\n\
             \"multi line\": \"a\\nb\\u0007\"\nowner: ana\n---\n"
        );
        fm.extra.remove("status");
        assert_eq!(parse(&fm.render()).frontmatter, Some(fm));
    }

    #[test]
    fn plain_scalars_are_only_the_safe_ones() {
        for s in [
            "0",
            "7",
            "123456789012345678",
            "working",
            "agent-review",
            "warden/a.b_c-1",
            "n1",
        ] {
            assert!(is_plain_safe(s), "{s}");
        }
        for s in [
            "",
            "007",
            "-1",
            "1.5",
            "1e3",
            "0x1f",
            "1234567890123456789",
            "true",
            "null",
            "yes",
            "n",
            "nan",
            "inf",
            "Working",
            "a b",
            "a:b",
            "a#",
            ".x",
            "~",
            "é",
        ] {
            assert!(!is_plain_safe(s), "{s}");
        }
    }

    // ----- tamper ---------------------------------------------------------------------

    fn check_tamper(found: &str, expected: &[(&str, &str, &str)]) {
        let truth = mirror(&task("login", "Log in", ""));
        let found = parse(found).frontmatter.unwrap();
        let got: Vec<(String, String, String)> = tampered(&found, &truth)
            .into_iter()
            .map(|t| (t.field, t.agent_value.unwrap_or_default(), t.true_value))
            .collect();
        let expected: Vec<(String, String, String)> = expected
            .iter()
            .map(|(f, a, t)| ((*f).to_owned(), (*a).to_owned(), (*t).to_owned()))
            .collect();
        assert_eq!(got, expected, "{found:?}");
    }

    #[test]
    fn tamper() {
        let truth = mirror(&task("login", "Log in", ""));
        assert_eq!(tampered(&truth, &truth), []);
        check_tamper("---\n---\n", &[]);
        check_tamper("---\nstatus: agent-review\nattempts: \"1\"\n---\n", &[]);
        check_tamper("---\ntitle: Something else\nowner: me\n---\n", &[]);
        check_tamper(
            "---\nstatus: done\n---\n",
            &[("status", "done", "agent-review")],
        );
        check_tamper("---\nattempts: 0\n---\n", &[("attempts", "0", "1")]);
        check_tamper(
            "---\nmax_attempts: 99\n---\n",
            &[("max_attempts", "99", "3")],
        );
        check_tamper("---\ncrash_count: 0\n---\n", &[("crash_count", "0", "1")]);
        check_tamper("---\nreview_round: 0\n---\n", &[("review_round", "0", "2")]);
        check_tamper("---\nid: other\n---\n", &[("id", "other", "login")]);
        check_tamper(
            "---\nbranch: main\n---\n",
            &[("branch", "main", "warden/login")],
        );
        check_tamper(
            "---\nstatus: Agent-Review\n---\n",
            &[("status", "Agent-Review", "agent-review")],
        );
        check_tamper("---\nstatus:\nattempts: ~\n---\n", &[]);
        check_tamper(
            "---\nbranch: x\nstatus: done\nid: x\n---\n",
            &[
                ("id", "x", "login"),
                ("status", "done", "agent-review"),
                ("branch", "x", "warden/login"),
            ],
        );
        // Nothing to compare against: no tamper.
        let found = parse("---\nstatus: done\n---\n").frontmatter.unwrap();
        assert_eq!(tampered(&found, &Frontmatter::default()), []);
    }

    // ----- with_frontmatter -----------------------------------------------------------

    #[test]
    fn rewriting_keeps_the_body() {
        let fm = Frontmatter {
            id: Some("a".into()),
            ..Frontmatter::default()
        };
        let check = |text: &str, expected: &str| {
            assert_eq!(with_frontmatter(text, &fm), expected, "{text:?}");
        };
        check(
            "---\nid: b\nstatus: done\n---\n\n# T\n",
            "---\nid: a\n---\n\n# T\n",
        );
        check("# T\n", "---\nid: a\n---\n# T\n");
        check("", "---\nid: a\n---\n");
        check(
            "---\r\nid: b\r\n---\r\n# T\r\n",
            "---\r\nid: a\r\n---\r\n# T\r\n",
        );
        check("# T\r\nx", "---\r\nid: a\r\n---\r\n# T\r\nx");
        check("\u{feff}---\nid: b\n---\nx", "\u{feff}---\nid: a\n---\nx");
        check("\u{feff}x", "\u{feff}---\nid: a\n---\nx");
        check("---\nid: b\n", "---\nid: a\n---\n---\nid: b\n");
        check("---\nid: [\n---\nx", "---\nid: a\n---\nx");
    }

    // ----- skeleton -------------------------------------------------------------------

    fn check_skeleton(t: &Task) -> String {
        let text = skeleton(t);
        let doc = parse(&text);
        assert_eq!(doc.errors, []);
        assert_eq!(doc.frontmatter, Some(mirror(t)));
        let names: Vec<&str> = doc.sections.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [CONTEXT, NOTES], "{text}");
        let a = doc.artifacts();
        assert_eq!((a.handoff, a.review, a.verdict), (None, None, None));
        assert!(!has_content(doc.content(doc.section(NOTES).unwrap())));
        text
    }

    #[test]
    fn skeleton_with_body() {
        let t = new_task(
            "login",
            "Log in page",
            "Add a login form.\n\n- email\n- password\n\n",
        );
        insta::assert_snapshot!(check_skeleton(&t));
    }

    #[test]
    fn skeleton_without_body() {
        let t = new_task("login", "login", " \n");
        let text = check_skeleton(&t);
        assert!(!has_content(
            parse(&text)
                .section(CONTEXT)
                .map_or("x", |s| &text[s.content.clone()])
        ));
        insta::assert_snapshot!(text);
    }

    #[test]
    fn skeleton_demotes_body_headings() {
        let t = new_task(
            "x",
            "A\nmulti-line title",
            "# Goal\nWork.\n## Handoff\ndone\n### Detail\n```\n## Review\n```\n",
        );
        insta::assert_snapshot!(check_skeleton(&t));
    }

    #[test]
    fn skeleton_fences_a_body_that_would_swallow_the_rest() {
        let t = new_task("x", "", "Try this:\n```sh\nmake ``` test\n");
        let text = check_skeleton(&t);
        assert!(text.contains("````\nTry this:"), "{text}");
        insta::assert_snapshot!(text);
        check_skeleton(&new_task("x", "x", "<!-- open comment\n## Handoff\n"));
        check_skeleton(&new_task("x", "x", "<pre>\nno end\n"));
    }

    /// The line scan takes the usual TASK.md shapes itself, hands the rest to the parser,
    /// and agrees with it on both.
    #[test]
    fn line_scan_cases() {
        let accepted = [
            "# T\n\n## Context\ntext\n\n## Notes\n<!-- placeholder -->\n",
            "## A\n```\n## not\n```\n## B\n",
            "## A\n~~~~\n~~~\n## not\n ~~~~~  \n## B\n",
            "## A\n```rust\n## not\n",
            "## A\n<!-- open\n## not\n-->\n## B\n",
            "- item\n## after a list\n> quote\n## after a quote\n    ## code\n## **Bold** `code`\n",
            "text\n## interrupts a paragraph\nline\n===\n## Handoff ##\n",
            "```` a`b\n## a backtick in the info: no fence\n",
            "- ```\n## ends the list item and its fence\n",
            "\t## tab: not a heading\n#no space\n### deeper\n",
        ];
        for doc in accepted {
            assert!(atx_headings_by_lines(doc).is_some(), "{doc:?}");
            check_line_scan(doc);
        }
        let handed_over = [
            "- a\n  ## inside the item\n",
            " ```\n## in a fence, or not\n",
            "<div>\n## in HTML\n",
            "<!-->\n## after a whole comment\n",
            "## [x]\n\n[x]: /url\n",
            "## A\r\n## B\r\n",
        ];
        for doc in handed_over {
            assert!(atx_headings_by_lines(doc).is_none(), "{doc:?}");
        }
        // The link definition is why: the full parse reads `[x]` as a link named `x`.
        let doc = "## [x]\n\n[x]: /url\n";
        assert_eq!(atx_headings_by_parser(doc)[0].name, "x");
        assert_eq!(heading_text("## [x]"), "[x]");
    }

    #[test]
    fn plain_heading_names_skip_the_parser() {
        for (line, name) in [
            ("## Notes", Some("Notes")),
            ("## Notes\n", Some("Notes")),
            ("##   Two  words  ", Some("Two  words")),
            ("##", Some("")),
            ("## ", Some("")),
            (
                "## Step 1: (a/b) - \"x\" + y = 50% @ $5 {ok} | ^",
                Some("Step 1: (a/b) - \"x\" + y = 50% @ $5 {ok} | ^"),
            ),
            ("## *Notes*", None),
            ("## Notes ##", None),
            ("## a_b", None),
            ("## `x`", None),
            ("## a\tb", None),
            ("## caf\u{e9}", None),
            ("## a &amp; b", None),
            ("## <b>", None),
            ("## a\\b", None),
            ("##x", None),
        ] {
            assert_eq!(plain_heading_text(line), name, "{line:?}");
            // Whatever the path, the name is the parser's.
            let parsed: String = Parser::new_ext(line, Options::empty())
                .filter_map(|e| match e {
                    Event::Text(t) | Event::Code(t) => Some(t.into_string()),
                    _ => None,
                })
                .collect();
            assert_eq!(heading_text(line), parsed.trim(), "{line:?}");
        }
    }

    // ----- properties -----------------------------------------------------------------

    /// One frontmatter line, weighted toward what the line read accepts: keys and values
    /// that YAML reads as strings, numbers, booleans, nulls or other types, quoted or not.
    fn frontmatter_line() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            4 => prop::sample::select(vec!["id", "title", "status", "attempts", "max_attempts",
                "crash_count", "review_round", "branch", "owner", "x"]).prop_map(str::to_owned),
            1 => prop::sample::select(vec!["null", "true", "Key", "a b", "1", "01", "~", "'q'",
                "-", "a:b", "y", "é"]).prop_map(str::to_owned),
        ];
        let value = prop_oneof![
            4 => "[a-z][a-z0-9./_-]{0,8}",
            2 => "[0-9]{1,3}",
            2 => "\"[ -~é€🦀]{0,8}\"",
            3 => prop::sample::select(vec!["", "0x1", "1.50", "1e3", "+5", "007", "-1", "~",
                "null", "Null", "NULL", "true", "True", "FALSE", "yes", "no", "on", "off",
                "y", "n", "inf", ".inf", "nan", ".NaN", "Infinity", "'q'", "\"a\\\"b\"",
                "\"\\n\"", "a #c", "a: b", "[a]", "{b: 1}", "- x", "a ", " a", "Log in",
                "\"\u{2028}\"", "\"\u{85}\"", "\"\"", "&a x", "*a", "!tag x", "|", ">", "%x",
                "@x", "`x`", "\"a\tb\""]).prop_map(str::to_owned),
        ];
        prop_oneof![
            8 => (key, value).prop_map(|(k, v)| if v.is_empty() {
                format!("{k}:\n")
            } else {
                format!("{k}: {v}\n")
            }),
            1 => prop::sample::select(vec!["\n", "# c\n", "  x: 1\n", "k:v\n", "k: 1\r\n",
                "- a\n", "k:  2\n", "k: 1 # c\n"]).prop_map(str::to_owned),
        ]
    }

    /// One line of the block constructs the line scan must get right (or give up on):
    /// headings, fences, HTML comments and blocks, lists, quotes, indented code, link
    /// definitions, setext underlines, with and without indentation.
    fn block_line() -> impl Strategy<Value = String> {
        // Weighted toward what the scan accepts, so most documents are checked rather
        // than handed to the parser.
        let start = prop_oneof![
            12 => Just(""),
            1 => Just(" "), 1 => Just("   "), 1 => Just("    "), 1 => Just("\t"),
            1 => Just("- "), 1 => Just("* "), 1 => Just("1. "), 1 => Just("10.  "),
            1 => Just("> "), 1 => Just(">"), 1 => Just("  - "),
        ];
        let lead = prop_oneof![
            4 => Just("# "), 4 => Just("## "), 1 => Just("##"), 1 => Just("### "),
            1 => Just("#"), 1 => Just("##\t"), 1 => Just("#######"),
            3 => Just("```"), 1 => Just("````"), 2 => Just("~~~"), 1 => Just("~~~~"),
            1 => Just("``"), 3 => Just("<!--"), 1 => Just("<!-->"), 1 => Just("<!--->"),
            2 => Just("-->"), 1 => Just("<div>"), 1 => Just("</div>"), 1 => Just("<pre>"),
            1 => Just("[x]: /url"), 1 => Just("---"), 1 => Just("==="),
            2 => Just("text"), 2 => Just(""),
        ];
        let tail = prop_oneof![
            4 => Just(""), 2 => Just(" Handoff"), 1 => Just(" Review ##"),
            1 => Just(" **Rev**`iew`"), 1 => Just(" [x]"), 1 => Just("rust"),
            1 => Just(" a`b"), 1 => Just(" -->"), 1 => Just("x -->"), 1 => Just(" ~~~"),
            1 => Just("```"), 1 => Just("  "), 1 => Just(" &amp; \\#"),
        ];
        (start, lead, tail).prop_map(|(s, l, t)| format!("{s}{l}{t}\n"))
    }

    fn markdownish() -> impl Strategy<Value = String> {
        let fragment = prop_oneof![
            Just("## "),
            Just("# "),
            Just("### "),
            Just("```"),
            Just("~~~"),
            Just("<!--"),
            Just("-->"),
            Just("---\n"),
            Just("---"),
            Just("===\n"),
            Just("\n"),
            Just("\r\n"),
            Just("\r"),
            Just("    "),
            Just("\t"),
            Just("> "),
            Just("- "),
            Just("1. "),
            Just("Handoff"),
            Just("Review"),
            Just("PASS"),
            Just("fail"),
            Just("id: "),
            Just("status: "),
            Just(": "),
            Just("["),
            Just("{"),
            Just("\""),
            Just("'"),
            Just("\\"),
            Just("&"),
            Just("*"),
            Just("\u{feff}"),
            Just("é"),
            Just("🦀"),
            Just("\u{0}"),
        ]
        .prop_map(str::to_owned);
        prop::collection::vec(prop_oneof![fragment, "\\PC{0,6}"], 0..48).prop_map(|v| v.concat())
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[a-z][a-z0-9._/-]{0,8}",
            "[0-9]{1,20}",
            "[ -~]{0,12}",
            Just(String::new()),
        ]
    }

    fn frontmatter() -> impl Strategy<Value = Frontmatter> {
        let field = || prop::option::of(value());
        (
            (field(), field(), field(), field()),
            (field(), field(), field(), field()),
            prop::collection::btree_map(value(), value(), 0..4),
        )
            .prop_map(
                |(
                    (id, title, status, attempts),
                    (max_attempts, crash_count, review_round, branch),
                    mut extra,
                )| {
                    extra.retain(|k, _| !FIELDS.contains(&k.as_str()));
                    Frontmatter {
                        id,
                        title,
                        status,
                        attempts,
                        max_attempts,
                        crash_count,
                        review_round,
                        branch,
                        extra,
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn never_panics_on_any_string(s in any::<String>()) {
            fuzz(s.as_bytes());
        }

        #[test]
        fn never_panics_on_markdownish_text(s in markdownish()) {
            fuzz(s.as_bytes());
        }

        #[test]
        fn never_panics_on_frontmatter_like_text(body in markdownish(), yaml in markdownish()) {
            fuzz(format!("---\n{yaml}\n---\n{body}").as_bytes());
        }

        #[test]
        fn never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            fuzz(&bytes);
        }

        #[test]
        fn render_round_trips(fm in frontmatter(), body in markdownish()) {
            let rendered = fm.render();
            prop_assert_eq!(parse(&rendered).frontmatter, Some(fm.clone()));
            let text = with_frontmatter(&body, &fm);
            let doc = parse(&text);
            prop_assert_eq!(doc.frontmatter, Some(fm));
            // The old block (if `body` has one) is replaced; everything after it is kept.
            let old = split(&body);
            let kept = match old.frontmatter {
                Some(_) => &body[old.body_offset..],
                None => body.strip_prefix(BOM).unwrap_or(&body),
            };
            prop_assert_eq!(&text[doc.body_offset..], kept);
        }

        #[test]
        fn verdict_matches_the_word_rule(s in "[ a-zA-Z_éP*:\n-]{0,40}|(PASS|FAIL|pass|fail|x|_| |\n|é)*") {
            prop_assert_eq!(verdict(&s), oracle(&s));
        }

        #[test]
        fn frontmatter_lines_agree_with_serde_saphyr(lines in prop::collection::vec(frontmatter_line(), 0..10)) {
            check_frontmatter_lines(&lines.concat());
        }

        #[test]
        fn line_scan_agrees_with_the_parser(s in markdownish()) {
            check_line_scan(&s);
        }

        #[test]
        fn line_scan_agrees_with_the_parser_on_block_structure(lines in prop::collection::vec(block_line(), 0..12)) {
            check_line_scan(&lines.concat());
        }

        #[test]
        fn sections_partition_the_body(s in markdownish()) {
            let doc = parse(&s);
            // Each section's content ends where the next level-1/2 heading starts, so
            // consecutive sections with nothing in between touch.
            for pair in doc.sections.windows(2) {
                prop_assert!(pair[0].content.end <= pair[1].heading.start);
            }
            if let Some(last) = doc.sections.last() {
                prop_assert!(last.content.end == s.len() || s[last.content.end..].trim_start_matches(' ').starts_with('#'));
            }
        }
    }
}
