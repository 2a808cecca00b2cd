//! The frontmatter of TASK.md: splitting it from the body, reading it (a line scan of
//! the scalars Warden writes, serde-saphyr for anything else), writing the mirror of the
//! runner-owned fields, and noticing an agent's edits of them.

#[allow(unused_imports)]
use super::*;

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
pub(crate) fn is_fence_line(line: &str) -> bool {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    line.strip_prefix("---")
        .is_some_and(|rest| rest.bytes().all(|b| b == b' ' || b == b'\t'))
}

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
                if name == "status" && crate::model::Status::parse(value).is_some() {
                    pad_status(&mut out, value);
                }
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

/// The widest status name (`clarification`).
pub const STATUS_WIDTH: usize = 13;

/// Pads the status line just written to [`STATUS_WIDTH`] with trailing spaces (which
/// YAML drops): every status then takes the same bytes, and a status change rewrites
/// TASK.md in place instead of replacing the file (see the store's `files::update_text`).
fn pad_status(out: &mut String, value: &str) {
    let line_end = out.pop();
    out.extend(std::iter::repeat_n(
        ' ',
        STATUS_WIDTH.saturating_sub(value.len()),
    ));
    out.extend(line_end);
}

pub(crate) fn push_entry(out: &mut String, key: &str, value: &str) {
    push_scalar(out, key);
    out.push_str(": ");
    push_scalar(out, value);
    out.push('\n');
}

/// Words YAML (1.1 or 1.2) may read as something other than a string.
pub(crate) const RESERVED_WORDS: [&str; 13] = [
    "null", "true", "false", "yes", "no", "on", "off", "y", "n", "nan", "inf", "infinity", "~",
];

/// Can `s` be written as a plain scalar and still read back as exactly `s`?
pub(crate) fn is_plain_safe(s: &str) -> bool {
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

pub(crate) fn push_scalar(out: &mut String, s: &str) {
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
pub(crate) fn needs_escape(c: char) -> bool {
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

/// Runner-owned fields Warden does not mirror into TASK.md (DESIGN 1 names them): one an
/// agent writes there is a tamper too, with the stored value as the truth (they were
/// dropped from the file without a record).
pub const RUNNER_OWNED_UNMIRRORED: [&str; 2] = ["passes", "version"];

/// The keys of [`RUNNER_OWNED_UNMIRRORED`] that `found` (read from TASK.md) holds.
pub fn tampered_unmirrored(found: &Frontmatter, task: &Task) -> Vec<Tamper> {
    RUNNER_OWNED_UNMIRRORED
        .iter()
        .filter_map(|field| {
            let agent = found.extra.get(*field)?;
            let true_value = match *field {
                "passes" => task.passes().to_string(),
                _ => task.version().to_string(),
            };
            Some(Tamper {
                field: (*field).to_owned(),
                agent_value: Some(agent.clone()),
                true_value,
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
pub(crate) fn parse_frontmatter(yaml: &str, errors: &mut Vec<ParseError>) -> Option<Frontmatter> {
    if let Some(fm) = frontmatter_by_lines(yaml) {
        return Some(fm);
    }
    frontmatter_by_yaml(yaml, errors)
}

/// The most keys [`frontmatter_by_lines`] reads (it looks for duplicates one by one).
pub(crate) const LINE_KEYS_MAX: usize = 32;

/// The frontmatter as [`Frontmatter::render`] writes it, read without a YAML parser:
/// `key: value` lines whose key is plain-safe ([`is_plain_safe`]) and whose value is
/// plain-safe, double-quoted text without escapes, or absent (null). Anything else,
/// duplicate keys included, is `None`, and serde-saphyr reads the block; both give the
/// same result wherever this one answers (`check_frontmatter_lines`, fuzzed).
pub(crate) fn frontmatter_by_lines(yaml: &str) -> Option<Frontmatter> {
    let mut fm = Frontmatter::default();
    let mut keys: Vec<&str> = Vec::new();
    for line in yaml.split_inclusive('\n') {
        let line = line.strip_suffix('\n')?;
        // Trailing spaces end no value in YAML (the status line is padded with them).
        let (key, value) = match line.split_once(": ") {
            Some((k, v)) => (k, Some(v.trim_end_matches(' '))),
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
pub(crate) fn quoted_plain_text(v: &str) -> Option<&str> {
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
#[cfg(any(test, feature = "testing"))]
pub(crate) fn check_frontmatter_lines(yaml: &str) {
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
pub(crate) fn frontmatter_by_yaml(yaml: &str, errors: &mut Vec<ParseError>) -> Option<Frontmatter> {
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
pub(crate) fn one_line(s: &str) -> String {
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
pub(crate) struct Top(Vec<(String, Option<String>)>);

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
pub(crate) struct Flat(Option<String>);

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

pub(crate) struct FlatVisitor;

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
