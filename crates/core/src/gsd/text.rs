//! Reading what GSD writes inside a Markdown file: the YAML frontmatter, the XML-ish
//! sections of a PLAN.md (`<objective>`, `<tasks>`, `<verification>`, …), the
//! Markdown sections of older plans (`## Objective`, `## Tasks`), and the headings that
//! can serve as a title.
//!
//! A plan mixes several languages, and a naive "first line starting with `# `" picks up
//! the wrong thing: a shell comment inside a code block, a YAML comment in the
//! frontmatter, a comment in the `<context>` block of GSD's template, or the SUMMARY
//! template quoted inside `<output>`. So the body is scanned once, line by line, keeping
//! track of code fences, HTML comments and XML-ish blocks; only lines outside all of
//! them are Markdown proper. Everything here is linear in the size of the text, so a
//! hostile 1 MiB file costs no more than a normal one.

use serde::Deserialize;
use std::collections::HashMap;

/// The frontmatter keys the reader uses, each accepting any YAML shape (see [`Loose`]).
/// Unknown keys are ignored: GSD adds new ones often.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct FrontMatter {
    /// `title`: a plan's own title (rare; GSD's template has none).
    pub title: Option<Loose>,
    /// `phase`: the phase directory name or number.
    pub phase: Option<Loose>,
    /// `plan`: the plan number within the phase.
    pub plan: Option<Loose>,
    /// `wave`: the execution wave (GSD runs a phase wave by wave).
    pub wave: Option<Loose>,
    /// `depends_on`: plan ids (or plan numbers, or phases) this plan requires.
    pub depends_on: Option<Loose>,
    /// `depends-on`, as some hand-written plans spell it.
    #[serde(rename = "depends-on")]
    pub depends_on_dashed: Option<Loose>,
    /// `plan_name`: a slug some planners add (`linkedin-dm-executor`).
    pub plan_name: Option<Loose>,
    /// In a phase-level SUMMARY.md: the plans it reports on (`plans: [15-01, 15-02]`).
    pub plans: Option<Loose>,
}

/// A YAML value reduced to what the reader needs: scalars as text (a number keeps the
/// meaning of its digits; `01` and `1` are compared as numbers later anyway), lists of
/// such, and anything else as [`Loose::Other`]. Accepting every shape means one odd key
/// never makes the whole frontmatter unreadable.
#[derive(Debug, Clone, PartialEq)]
pub enum Loose {
    /// `~`, `null` or an empty value.
    Null,
    /// Any scalar, as text.
    Text(String),
    /// A sequence.
    List(Vec<Loose>),
    /// A mapping or anything else.
    Other,
}

impl Loose {
    /// The scalar's text, trimmed, if it is a non-empty scalar.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Loose::Text(s) if !s.trim().is_empty() => Some(s.trim()),
            _ => None,
        }
    }

    /// Every scalar in the value, in order: a scalar gives itself, a list its scalar
    /// items (nested lists flattened), null nothing. A scalar string that holds a
    /// comma-separated or flow list (`"01-01, 01-02"`, `"[01-01]"`) is split, since hand
    /// edits write depends_on that way.
    pub fn items(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_items(&mut out, 0);
        out
    }

    fn collect_items(&self, out: &mut Vec<String>, depth: usize) {
        match self {
            Loose::Text(s) => {
                let s = s.trim();
                let s = s
                    .strip_prefix('[')
                    .and_then(|x| x.strip_suffix(']'))
                    .unwrap_or(s);
                for part in s.split(',') {
                    let p = part.trim().trim_matches(|c| c == '"' || c == '\'').trim();
                    if !p.is_empty() {
                        out.push(p.to_owned());
                    }
                }
            }
            // Depth is bounded by the YAML budget already; this keeps it bounded here too.
            Loose::List(v) if depth < 8 => {
                for x in v {
                    x.collect_items(out, depth + 1);
                }
            }
            _ => {}
        }
    }
}

impl<'de> Deserialize<'de> for Loose {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LooseVisitor)
    }
}

struct LooseVisitor;

impl<'de> serde::de::Visitor<'de> for LooseVisitor {
    type Value = Loose;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Loose, E> {
        Ok(Loose::Text(v.to_string()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Loose, E> {
        Ok(Loose::Text(v.to_string()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Loose, E> {
        Ok(Loose::Text(v.to_string()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Loose, E> {
        Ok(Loose::Text(v.to_string()))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Loose, E> {
        Ok(Loose::Text(v.to_string()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Loose, E> {
        Ok(Loose::Text(v.to_string()))
    }
    fn visit_str<E>(self, v: &str) -> Result<Loose, E> {
        Ok(Loose::Text(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Loose, E> {
        Ok(Loose::Text(v))
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<Loose, E> {
        Ok(Loose::Other)
    }
    fn visit_unit<E>(self) -> Result<Loose, E> {
        Ok(Loose::Null)
    }
    fn visit_none<E>(self) -> Result<Loose, E> {
        Ok(Loose::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Loose, D::Error> {
        Loose::deserialize(d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Loose, A::Error> {
        let mut v = Vec::new();
        while let Some(x) = seq.next_element::<Loose>()? {
            v.push(x);
        }
        Ok(Loose::List(v))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Loose, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Loose::Other)
    }
}

/// A file split at its frontmatter.
#[derive(Debug, Default)]
pub struct Split<'a> {
    /// The YAML between the `---` lines, if the file starts with one.
    pub yaml: Option<&'a str>,
    /// Everything after the frontmatter (the whole text when there is none).
    pub body: &'a str,
    /// The file opens a frontmatter block that never closes; `body` is then empty,
    /// because the YAML comments in it must not be read as Markdown headings.
    pub unclosed: bool,
}

/// Splits off a YAML frontmatter: a first line `---` (after an optional BOM) up to the
/// next line that is `---` or `...`.
pub fn split_frontmatter(text: &str) -> Split<'_> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(after_open) = strip_delimiter_line(text) else {
        return Split {
            yaml: None,
            body: text,
            unclosed: false,
        };
    };
    let mut offset = 0;
    for line in after_open.split_inclusive('\n') {
        let bare = line.trim_end();
        if bare == "---" || bare == "..." {
            let yaml = after_open.get(..offset).unwrap_or("");
            let body = after_open.get(offset + line.len()..).unwrap_or("");
            return Split {
                yaml: Some(yaml),
                body,
                unclosed: false,
            };
        }
        offset += line.len();
    }
    Split {
        yaml: Some(after_open),
        body: "",
        unclosed: true,
    }
}

fn strip_delimiter_line(text: &str) -> Option<&str> {
    let first_len = text.find('\n').map_or(text.len(), |i| i + 1);
    let first = text.get(..first_len)?;
    (first.trim_end() == "---").then(|| text.get(first_len..).unwrap_or(""))
}

/// The outcome of reading a frontmatter.
#[derive(Debug, Default)]
pub struct ParsedFront {
    /// The keys read.
    pub front: FrontMatter,
    /// Why the YAML was not valid, when it was read line by line instead.
    pub lenient: Option<String>,
}

/// Reads a frontmatter with serde-saphyr; when that fails (hand-edited YAML is often
/// invalid somewhere in a key the reader does not even use), falls back to reading the
/// top-level `key: value` lines and `- item` lists of the keys it needs.
pub fn parse_frontmatter(yaml: &str) -> ParsedFront {
    let options = serde_saphyr::options! {
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::LastWins,
    };
    match serde_saphyr::from_str_with_options::<Option<FrontMatter>>(yaml, options) {
        Ok(front) => ParsedFront {
            front: front.unwrap_or_default(),
            lenient: None,
        },
        Err(e) => ParsedFront {
            front: frontmatter_by_lines(yaml),
            lenient: Some(first_line(&e.to_string())),
        },
    }
}

fn first_line(s: &str) -> String {
    let line = s.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    truncate_chars(line.trim(), 200)
}

/// The lenient reader behind [`parse_frontmatter`]: top-level `key: value` (value a
/// scalar or a flow list `[a, b]`) and `key:` followed by indented `- item` lines.
pub fn frontmatter_by_lines(yaml: &str) -> FrontMatter {
    let mut map: HashMap<String, Loose> = HashMap::new();
    let mut current_list: Option<(String, Vec<Loose>)> = None;
    for line in yaml.lines() {
        let starts_indented = line.starts_with(' ') || line.starts_with('\t');
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if starts_indented || t.starts_with("- ") || t == "-" {
            if let (Some((_, items)), Some(item)) = (current_list.as_mut(), t.strip_prefix('-')) {
                items.push(Loose::Text(unquote(strip_comment(item.trim())).to_owned()));
            }
            continue;
        }
        if let Some((key, items)) = current_list.take() {
            map.entry(key).or_insert(Loose::List(items));
        }
        let Some((key, value)) = t.split_once(':') else {
            continue;
        };
        let key = key.trim().to_owned();
        let value = strip_comment(value.trim());
        if value.is_empty() {
            current_list = Some((key, Vec::new()));
        } else if let Some(inner) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
            let items = inner
                .split(',')
                .map(|s| unquote(s.trim()))
                .filter(|s| !s.is_empty())
                .map(|s| Loose::Text(s.to_owned()))
                .collect();
            map.entry(key).or_insert(Loose::List(items));
        } else {
            map.entry(key)
                .or_insert(Loose::Text(unquote(value).to_owned()));
        }
    }
    if let Some((key, items)) = current_list.take() {
        map.entry(key).or_insert(Loose::List(items));
    }
    let mut take = |k: &str| map.remove(k);
    FrontMatter {
        title: take("title"),
        phase: take("phase"),
        plan: take("plan"),
        wave: take("wave"),
        depends_on: take("depends_on"),
        depends_on_dashed: take("depends-on"),
        plan_name: take("plan_name"),
        plans: take("plans"),
    }
}

/// `value` without a trailing ` # comment`.
fn strip_comment(value: &str) -> &str {
    match value.find(" #") {
        Some(i) => value.get(..i).unwrap_or(value).trim_end(),
        None => value,
    }
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|x| x.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

/// A Markdown heading outside code, comments and XML-ish blocks.
#[derive(Debug, Clone, PartialEq)]
pub struct Heading {
    /// 1 for `#`, 2 for `##`, ….
    pub level: usize,
    /// The heading text, closing `#`s removed.
    pub text: String,
    /// Its line index in the body.
    pub line: usize,
}

/// An XML-ish block at top level (`<objective> … </objective>`).
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// The tag name, lower-cased.
    pub tag: String,
    /// The line index (in the body) of its opening tag.
    pub line: usize,
    /// The text between the tags.
    pub content: String,
}

/// What one pass over a Markdown body finds.
#[derive(Debug, Default)]
pub struct Scan {
    /// Headings outside code fences, HTML comments and XML-ish blocks, in order.
    pub headings: Vec<Heading>,
    /// Top-level XML-ish blocks, in order.
    pub blocks: Vec<Block>,
    /// The body's lines, with a flag: true when the line is Markdown proper (outside
    /// fences, comments and blocks).
    pub lines: Vec<(String, bool)>,
}

/// An opening tag at the start of a (trimmed) line: `<objective>` or `<task type="x">`.
/// Returns the lower-cased name and what follows the `>` on that line.
fn opening_tag(t: &str) -> Option<(String, &str)> {
    let rest = t.strip_prefix('<')?;
    let name_len = rest
        .char_indices()
        .take_while(|(i, c)| {
            if *i == 0 {
                c.is_ascii_alphabetic()
            } else {
                c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || *c == ':'
            }
        })
        .count();
    if name_len == 0 {
        return None;
    }
    let name = rest.get(..name_len)?;
    let after = rest.get(name_len..)?;
    // `<tag>`, `<tag attr="…">`; not `<tag/>` (it holds nothing) nor `<a@b.c>`.
    if !(after.starts_with('>') || after.starts_with(' ') || after.starts_with('\t')) {
        return None;
    }
    let close = after.find('>')?;
    if after.get(..close)?.ends_with('/') {
        return None;
    }
    Some((name.to_ascii_lowercase(), after.get(close + 1..)?))
}

/// A fence opener or closer: the fence character and the run length.
fn fence(line: &str) -> Option<(char, usize)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let t = line.trim_start_matches(' ');
    let c = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = t.chars().take_while(|x| *x == c).count();
    (n >= 3).then_some((c, n))
}

/// An ATX heading (`## Text ##`): its level and text.
fn atx_heading(line: &str) -> Option<(usize, String)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let t = line.trim_start_matches(' ');
    let level = t.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = t.get(level..)?;
    if !(rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t')) {
        return None; // `#!/bin/sh`, `#tag`: not headings.
    }
    let text = rest.trim().trim_end_matches('#').trim_end();
    Some((level, text.to_owned()))
}

/// Scans a Markdown body once (see the module docs). `</tag>` positions are indexed
/// first so that finding a block's end is a lookup, not a rescan: an opening tag with
/// no closing one (`<br>`, a stray `<T>`) is plain text, not a block that swallows the
/// rest of the file.
pub fn scan(body: &str) -> Scan {
    let lines: Vec<&str> = body.lines().collect();
    let mut closings: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        let mut rest = *line;
        while let Some(p) = rest.find("</") {
            let after = rest.get(p + 2..).unwrap_or("");
            let n = after
                .find('>')
                .filter(|n| *n <= 64)
                .and_then(|n| after.get(..n));
            if let Some(name) = n {
                let name = name.trim().to_ascii_lowercase();
                let v = closings.entry(name).or_default();
                if v.last() != Some(&i) {
                    v.push(i);
                }
            }
            rest = after;
        }
    }
    let comment_ends: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("-->"))
        .map(|(i, _)| i)
        .collect();
    let next_closing = |tag: &str, from: usize| -> Option<usize> {
        let v = closings.get(tag)?;
        let idx = v.partition_point(|x| *x < from);
        v.get(idx).copied()
    };

    let mut out = Scan::default();
    let mut i = 0;
    let mut in_fence: Option<(char, usize)> = None;
    while let Some(line) = lines.get(i) {
        if let Some((c, n)) = in_fence {
            if fence(line).is_some_and(|(c2, n2)| c2 == c && n2 >= n)
                && line.trim().chars().all(|x| x == c)
            {
                in_fence = None;
            }
            out.lines.push(((*line).to_owned(), false));
            i += 1;
            continue;
        }
        if let Some(f) = fence(line) {
            in_fence = Some(f);
            out.lines.push(((*line).to_owned(), false));
            i += 1;
            continue;
        }
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("<!--") {
            // An HTML comment: this line when it closes here, else up to the line that
            // closes it; one that never closes hides only its own line.
            let end = if rest.contains("-->") {
                i
            } else {
                let idx = comment_ends.partition_point(|x| *x <= i);
                comment_ends.get(idx).copied().unwrap_or(i)
            };
            for l in lines.get(i..=end).unwrap_or(&[]) {
                out.lines.push(((*l).to_owned(), false));
            }
            i = end + 1;
            continue;
        }
        if let Some((tag, after_open)) = opening_tag(t) {
            let end = next_closing(&tag, i);
            if let Some(end) = end {
                let content = if end == i {
                    // `<objective>Text</objective>` on one line.
                    let close = format!("</{tag}");
                    let lower = after_open.to_ascii_lowercase();
                    let cut = lower.find(&close).unwrap_or(after_open.len());
                    after_open.get(..cut).unwrap_or("").to_owned()
                } else {
                    let mut parts: Vec<&str> = Vec::new();
                    if !after_open.trim().is_empty() {
                        parts.push(after_open);
                    }
                    for l in lines.get(i + 1..end).unwrap_or(&[]) {
                        parts.push(l);
                    }
                    if let Some(last) = lines.get(end) {
                        let lower = last.to_ascii_lowercase();
                        let close = format!("</{tag}");
                        if let Some(p) = lower.find(&close) {
                            let before = last.get(..p).unwrap_or("");
                            if !before.trim().is_empty() {
                                parts.push(before);
                            }
                        }
                    }
                    parts.join("\n")
                };
                let line = out.lines.len();
                for l in lines.get(i..=end).unwrap_or(&[]) {
                    out.lines.push(((*l).to_owned(), false));
                }
                out.blocks.push(Block {
                    tag,
                    line,
                    content: content.trim_matches('\n').to_owned(),
                });
                i = end + 1;
                continue;
            }
        }
        if let Some((level, text)) = atx_heading(line) {
            out.headings.push(Heading {
                level,
                text,
                line: out.lines.len(),
            });
        }
        out.lines.push(((*line).to_owned(), true));
        i += 1;
    }
    out
}

impl Scan {
    /// The content of the first top-level `<tag>` block, if non-blank.
    pub fn block(&self, tag: &str) -> Option<&str> {
        self.blocks
            .iter()
            .find(|b| b.tag == tag && !b.content.trim().is_empty())
            .map(|b| b.content.as_str())
    }

    /// The text of the first Markdown section whose heading, normalised, is one of
    /// `names`: its lines up to the next heading of the same or a higher level, or up to
    /// the next of GSD's own section blocks (`<output>`, `<verification>`, …), which a
    /// Markdown section never contains (unlike `<task>` blocks, which it may).
    pub fn section(&self, names: &[&str]) -> Option<String> {
        let (idx, h) = self
            .headings
            .iter()
            .enumerate()
            .find(|(_, h)| names.contains(&normalize_heading(&h.text).as_str()))?;
        let end = self
            .headings
            .get(idx + 1..)
            .unwrap_or(&[])
            .iter()
            .find(|n| n.level <= h.level)
            .map_or(self.lines.len(), |n| n.line);
        let end = self
            .blocks
            .iter()
            .filter(|b| b.line > h.line && GSD_SECTION_TAGS.contains(&b.tag.as_str()))
            .map(|b| b.line)
            .min()
            .map_or(end, |b| b.min(end));
        let text: Vec<&str> = self
            .lines
            .get(h.line + 1..end)
            .unwrap_or(&[])
            .iter()
            .map(|(l, _)| l.as_str())
            .collect();
        let text = text.join("\n");
        let text = text.trim_matches('\n');
        (!text.trim().is_empty()).then(|| text.to_owned())
    }
}

/// The XML-ish blocks GSD's plan template is made of.
const GSD_SECTION_TAGS: &[&str] = &[
    "objective",
    "execution_context",
    "context",
    "tasks",
    "verification",
    "success_criteria",
    "output",
];

/// A heading's text reduced for comparison: lower case, no Markdown emphasis, no
/// leading numbering (`1.`, `2)`), no trailing colon.
pub fn normalize_heading(text: &str) -> String {
    let t = strip_markdown(text).to_lowercase();
    let t = t.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ')');
    t.trim().trim_end_matches(':').trim().to_owned()
}

/// Headings that name a section of a plan rather than the plan itself.
const GENERIC_HEADINGS: &[&str] = &[
    "objective",
    "objectives",
    "goal",
    "goals",
    "tasks",
    "task",
    "execution tasks",
    "context",
    "verification",
    "success criteria",
    "acceptance criteria",
    "output",
    "overview",
    "summary",
    "plan",
    "execution plan",
    "notes",
    "background",
    "prerequisites",
    "pre-conditions",
    "preconditions",
    "requirements",
    "approach",
    "files",
    "steps",
    "implementation",
    "must haves",
    "must-haves",
    "purpose",
    "scope",
    "problem",
    "dependencies",
    "risks",
    "testing",
    "deliverables",
    "references",
    "checkpoint",
    "execution context",
    "current state analysis",
];

/// Whether a heading names a section (`## Tasks`, `### Task 2: …`) rather than the plan.
pub fn is_generic_heading(text: &str) -> bool {
    let n = normalize_heading(text);
    if GENERIC_HEADINGS.contains(&n.as_str()) {
        return true;
    }
    // `Task 1: …`, `Step 3 — …`, `Wave 2`: parts of a plan.
    for word in ["task", "step", "wave", "part"] {
        if let Some(rest) = n.strip_prefix(word)
            && rest.trim_start().starts_with(|c: char| c.is_ascii_digit())
        {
            return true;
        }
    }
    false
}

/// Removes the Markdown a title should not carry: emphasis, code ticks, link syntax,
/// a leading quote or list marker; collapses whitespace.
pub fn strip_markdown(s: &str) -> String {
    let mut t = s.trim();
    for prefix in ["> ", "- ", "* ", "+ "] {
        if let Some(r) = t.strip_prefix(prefix) {
            t = r.trim_start();
        }
    }
    let mut out = String::with_capacity(t.len());
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' | '`' => {}
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
            }
            '[' => {
                // `[text](url)` → `text`; a plain `[X]` stays.
                let mut inner = String::new();
                let mut closed = false;
                for d in chars.by_ref() {
                    if d == ']' {
                        closed = true;
                        break;
                    }
                    inner.push(d);
                }
                if closed && chars.peek() == Some(&'(') {
                    for d in chars.by_ref() {
                        if d == ')' {
                            break;
                        }
                    }
                    out.push_str(&inner);
                } else {
                    out.push('[');
                    out.push_str(&inner);
                    if closed {
                        out.push(']');
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The longest title kept, in characters.
pub const MAX_TITLE_CHARS: usize = 120;

/// `s` cut to `max` characters at a word boundary when possible, with `…` when cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let cut: String = s.chars().take(max.saturating_sub(1)).collect();
    let cut = match cut.rfind(' ') {
        Some(i) if i > cut.len() / 2 => cut.get(..i).unwrap_or(&cut).to_owned(),
        _ => cut,
    };
    format!("{}…", cut.trim_end_matches([' ', ',', ';', ':', '-', '—']))
}

/// The first sentence of a paragraph: up to the first `. `, `! ` or `? ` that ends a
/// sentence (not `e.g. `, not a decimal like `1.5`), or the whole line.
pub fn first_sentence(s: &str) -> &str {
    let bytes: Vec<(usize, char)> = s.char_indices().collect();
    for (k, (i, c)) in bytes.iter().enumerate() {
        if !matches!(c, '.' | '!' | '?') {
            continue;
        }
        let next = bytes.get(k + 1).map(|(_, c)| *c);
        if !matches!(next, Some(' ') | None) {
            continue;
        }
        let before = s.get(..*i).unwrap_or("");
        let word = before.rsplit(' ').next().unwrap_or("").to_lowercase();
        if matches!(
            word.as_str(),
            "e.g" | "i.e" | "etc" | "vs" | "approx" | "incl"
        ) {
            continue;
        }
        // A `.` after one capital letter is an initial, not a sentence end.
        if word.chars().count() == 1 && word.chars().all(char::is_alphabetic) {
            continue;
        }
        return s.get(..*i).unwrap_or(s);
    }
    s
}

/// The first meaningful paragraph of a section's text, as a title candidate: skips
/// blank lines, fences, tags, tables and label-only lines (`**Goal:**`), strips a
/// leading label (`Goal: …`), and joins the lines of a hard-wrapped paragraph (GSD's
/// planners often wrap at 80 columns, so the first line alone can stop mid-sentence).
pub fn first_meaningful_line(section: &str) -> Option<String> {
    let mut in_fence = false;
    let mut out: Option<String> = None;
    for line in section.lines() {
        let is_fence = fence(line).is_some();
        if let Some(acc) = out.as_mut() {
            // Continue the paragraph until a blank line or anything structural.
            let t = line.trim();
            let structural = t.is_empty()
                || is_fence
                || t.starts_with(['<', '|', '#', '-', '*', '+', '>'])
                || t.split_once(". ")
                    .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()));
            if structural {
                break;
            }
            acc.push(' ');
            acc.push_str(&strip_markdown(t));
            if acc.len() > 4 * MAX_TITLE_CHARS {
                break;
            }
            continue;
        }
        if is_fence {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let stripped = strip_markdown(line);
        let mut t = stripped.as_str();
        if t.is_empty() || t.starts_with('<') || t.starts_with('|') || t.starts_with("---") {
            continue;
        }
        if atx_heading(line).is_some() {
            continue;
        }
        for label in ["goal:", "objective:", "what:", "summary:", "overview:"] {
            if t.len() >= label.len()
                && t.get(..label.len())
                    .is_some_and(|p| p.eq_ignore_ascii_case(label))
            {
                t = t.get(label.len()..).unwrap_or("").trim();
            }
        }
        if t.is_empty() {
            continue;
        }
        out = Some(t.to_owned());
    }
    out
}

/// Placeholder text of GSD's templates: a title containing any of these is template,
/// not a plan's own words.
const TEMPLATE_MARKERS: &[&str] = &[
    "[what ",
    "[name]",
    "[x]",
    "[n]",
    "[brief",
    "[one-line",
    "[substantive",
    "[action-oriented",
    "[specific",
    "[phase",
    "xx-name",
    "{phase}",
    "{plan}",
    "[plan",
];

/// Whether a candidate title is usable: not empty, not markup (`#`, `<`, `[`, `{`,
/// `|`, `!`), not a YAML or shell line, not template text.
pub fn is_real_title(t: &str) -> bool {
    let t = t.trim();
    if t.is_empty() || t.chars().all(|c| !c.is_alphanumeric()) {
        return false;
    }
    if t.starts_with(['#', '<', '[', '{', '|', '!', '`', '>', '-', '@', '$']) {
        return false;
    }
    let lower = t.to_lowercase();
    !TEMPLATE_MARKERS.iter().any(|m| lower.contains(m))
}

/// Cleans a title found in a heading or a ROADMAP line: Markdown removed, GSD's
/// `(INSERTED)` marker and a `Plan 04-01:` / `Phase 23 Plan 01:` prefix dropped (the id
/// already says it), ` - Execution Plan` dropped, cut to [`MAX_TITLE_CHARS`].
pub fn clean_title(raw: &str) -> String {
    let raw = one_line(raw);
    let mut t = strip_markdown(&raw);
    for marker in ["(INSERTED)", "[INSERTED]", "(inserted)", "[inserted]"] {
        t = t.replace(marker, "");
    }
    let mut s = t.trim().to_owned();
    s = strip_number_prefix(&s);
    for suffix in [
        " - Execution Plan",
        " — Execution Plan",
        " – Execution Plan",
        " Execution Plan",
    ] {
        if let Some(r) = s.strip_suffix(suffix)
            && !r.trim().is_empty()
        {
            s = r.trim().to_owned();
        }
    }
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    // `Implement three modules for LNKD-03:` introduces a list; the colon is not title.
    let s = s.trim_end_matches([':', ';', ',']).trim_end();
    truncate_chars(s, MAX_TITLE_CHARS)
}

/// A name from the files as a task's title may hold it: one line of plain text
/// (`ops::validate_spec`), each control character (a line break, a DEL, an escape, a
/// bidirectional-text control) a space, and the spaces then collapsed. Unchanged when it holds none.
pub fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    use crate::model::unprintable;
    if !s.chars().any(unprintable) {
        return std::borrow::Cow::Borrowed(s);
    }
    let spaced = s.replace(unprintable, " ");
    std::borrow::Cow::Owned(spaced.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Drops a leading `Plan 04-01:`, `Plan 8.4 —`, `Phase 23 Plan 01:`, `Phase 27:`.
fn strip_number_prefix(s: &str) -> String {
    let mut rest = s;
    let mut stripped = false;
    for word in ["phase", "plan"] {
        let lower = rest.to_ascii_lowercase();
        if lower.starts_with(word)
            && let Some(after) = rest.get(word.len()..)
            && after.starts_with(' ')
        {
            let after = after.trim_start();
            let tok_len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
                .unwrap_or(after.len());
            let tok = after.get(..tok_len).unwrap_or("");
            if tok.starts_with(|c: char| c.is_ascii_digit()) {
                rest = after.get(tok_len..).unwrap_or("").trim_start();
                stripped = true;
            }
        }
    }
    if !stripped {
        return s.to_owned();
    }
    let rest = rest
        .trim_start_matches([':', '-', '—', '–', '.'])
        .trim_start();
    if rest.is_empty() || !rest.chars().any(char::is_alphanumeric) {
        s.to_owned()
    } else {
        rest.to_owned()
    }
}

/// A directory name made readable: `04.1-skills-polish` → `Skills polish`.
pub fn readable_name(slug: &str) -> String {
    let words: Vec<&str> = slug.split(['-', '_']).filter(|w| !w.is_empty()).collect();
    let s = words.join(" ");
    let mut chars = s.chars();
    let s = match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    };
    truncate_chars(&s, MAX_TITLE_CHARS)
}

/// A SUMMARY.md has content: a letter or digit in its body, outside HTML comments.
pub fn has_content(text: &str) -> bool {
    // The evidence rule of a `## Handoff` (a letter or digit outside comments): a
    // SUMMARY.md of NULs (a torn write; each read as U+FFFD) or of `...` marked its
    // plan done.
    crate::artifact::has_content(split_frontmatter(text).body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_is_split_and_read() {
        let t = "---\nphase: 04-x\nplan: 02\nwave: 2\ndepends_on: [\"04-01\", 03]\n# a YAML comment\n---\n# Title\n";
        let s = split_frontmatter(t);
        assert_eq!(s.body, "# Title\n");
        let p = parse_frontmatter(s.yaml.unwrap());
        assert!(p.lenient.is_none());
        // YAML reads `02` as the number 2; plan numbers are compared as numbers.
        assert_eq!(p.front.plan.unwrap().as_text(), Some("2"));
        assert_eq!(p.front.depends_on.unwrap().items(), ["04-01", "3"]);
        assert_eq!(p.front.wave.unwrap().as_text(), Some("2"));
    }

    #[test]
    fn frontmatter_accepts_every_depends_on_shape() {
        for (yaml, want) in [
            ("depends_on: []", vec![]),
            (
                "depends_on:\n  - 02-01\n  - \"Phase 20\"",
                vec!["02-01", "Phase 20"],
            ),
            ("depends_on: 04-01", vec!["04-01"]),
            ("depends_on: [1, 2]", vec!["1", "2"]),
            ("depends_on: \"01-01, 01-02\"", vec!["01-01", "01-02"]),
            ("depends_on: ~", vec![]),
            ("depends_on:\n  - phase: 3\n  - 03-01", vec!["03-01"]),
        ] {
            let p = parse_frontmatter(yaml);
            let items = p.front.depends_on.map(|d| d.items()).unwrap_or_default();
            assert_eq!(items, want, "{yaml}");
        }
    }

    #[test]
    fn invalid_yaml_is_read_line_by_line() {
        let yaml = "phase: 05\nplan: 01\nwave: 2\ndepends_on:\n  - 05-01 # first\nbad: [unclosed\nfiles: : :\n";
        let p = parse_frontmatter(yaml);
        assert!(p.lenient.is_some());
        assert_eq!(p.front.depends_on.unwrap().items(), ["05-01"]);
        assert_eq!(p.front.wave.unwrap().as_text(), Some("2"));
    }

    #[test]
    fn unclosed_frontmatter_hides_its_comments() {
        let s = split_frontmatter("---\n# not a title\nphase: 1\n");
        assert!(s.unclosed);
        assert_eq!(s.body, "");
        assert_eq!(
            split_frontmatter("# Just markdown\n").body,
            "# Just markdown\n"
        );
    }

    #[test]
    fn scan_skips_fences_comments_and_xml_blocks() {
        let body = "\
<objective>
Build the login page.
</objective>

<context>
# Only reference prior plan SUMMARYs if needed
@.planning/STATE.md
</context>

```bash
# install deps
npm i
```
<!--
# hidden
-->
<br>
# Real Heading
## Tasks
- one
<output>
# Phase [X]: [Name] Summary
</output>
";
        let s = scan(body);
        let texts: Vec<&str> = s.headings.iter().map(|h| h.text.as_str()).collect();
        assert_eq!(texts, ["Real Heading", "Tasks"]);
        assert_eq!(s.block("objective"), Some("Build the login page."));
        assert_eq!(s.section(&["tasks"]).as_deref(), Some("- one"));
    }

    #[test]
    fn a_title_from_the_files_is_one_line_of_plain_text() {
        assert_eq!(one_line("plain"), "plain");
        assert_eq!(one_line("a\nb\u{7}c"), "a b c");
        assert_eq!(
            one_line("safe \u{202e})lmth.exe(\u{202c}"),
            "safe )lmth.exe("
        );
    }

    #[test]
    fn one_line_blocks_and_attributes() {
        let s =
            scan("<objective>Do it.</objective>\n<task type=\"auto\">\n<name>x</name>\n</task>\n");
        assert_eq!(s.block("objective"), Some("Do it."));
        assert_eq!(s.blocks.len(), 2);
    }

    #[test]
    fn titles_are_cleaned() {
        assert_eq!(clean_title("Plan 04-01: Streamlit MVP"), "Streamlit MVP");
        // A title is one line of plain text (`ops::validate_spec` refuses the rest).
        assert_eq!(clean_title("Red \u{1b}[31mAlert\u{7}"), "Red [31mAlert");
        assert_eq!(
            clean_title("Phase 23 Plan 01: Confidence Calibration"),
            "Confidence Calibration"
        );
        assert_eq!(
            clean_title("Phase 27: Simplify Color System - Execution Plan"),
            "Simplify Color System"
        );
        assert_eq!(
            clean_title("Plan 8.4: Gap Closure — Architecture"),
            "Gap Closure — Architecture"
        );
        assert_eq!(clean_title("**Skills Polish** (INSERTED)"), "Skills Polish");
        assert_eq!(clean_title("Phase 1"), "Phase 1");
        assert_eq!(
            clean_title("Planning the `api` [docs](http://x)"),
            "Planning the api docs"
        );
    }

    #[test]
    fn real_titles_exclude_markup_and_templates() {
        assert!(is_real_title("Build the login page"));
        for bad in [
            "",
            "#!/bin/bash",
            "# comment",
            "<objective>",
            "[What this plan accomplishes]",
            "Phase [X]: [Name] Summary",
            "---",
            "...",
        ] {
            assert!(!is_real_title(bad), "{bad}");
        }
    }

    #[test]
    fn sentences_and_generic_headings() {
        assert_eq!(
            first_sentence("Set up .NET 10 app. Then more."),
            "Set up .NET 10 app"
        );
        assert_eq!(
            first_sentence("Use e.g. Foo and v1.5 here"),
            "Use e.g. Foo and v1.5 here"
        );
        assert!(is_generic_heading("Tasks:"));
        assert!(is_generic_heading("**Objective**"));
        assert!(is_generic_heading("Task 2: Wire it"));
        assert!(!is_generic_heading("Taskbar redesign"));
        assert_eq!(readable_name("skills-polish"), "Skills polish");
        assert_eq!(
            first_meaningful_line("\n**Goal:** Ship it\n").as_deref(),
            Some("Ship it")
        );
        assert_eq!(
            first_meaningful_line("Extend the files so that\nit works.\n\nPurpose: x").as_deref(),
            Some("Extend the files so that it works.")
        );
        assert_eq!(
            first_meaningful_line("Do A:\n- one\n- two").as_deref(),
            Some("Do A:")
        );
    }

    #[test]
    fn summary_content() {
        assert!(!has_content(""));
        assert!(!has_content("  \n\t\n"));
        assert!(!has_content("---\nphase: 1\n---\n\n  \n"));
        assert!(has_content("---\nphase: 1\n---\nDone.\n"));
        assert!(has_content("# Summary\n"));
        assert!(!has_content("...\n"));
        assert!(!has_content(&"\u{fffd}".repeat(4096)));
        assert!(!has_content("---\nphase: 1\n---\n<!-- to do -->\n"));
    }
}
