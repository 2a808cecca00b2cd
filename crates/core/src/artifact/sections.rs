//! `## Name` sections of TASK.md with byte offsets: a line scan that follows top-level
//! fences and comments, pulldown-cmark where the block structure needs it, and "has
//! content" (a non-whitespace character outside HTML comments).

#[allow(unused_imports)]
use super::*;

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
pub(crate) struct AtxHeading {
    pub(crate) level: HeadingLevel,
    /// Line start to line end, without the terminator.
    pub(crate) line: Range<usize>,
    /// Where the first `#` is.
    pub(crate) hashes: usize,
    /// After the line terminator.
    pub(crate) next_line: usize,
    /// The heading text (collected only for level 2).
    pub(crate) name: String,
}

/// The top-level ATX headings of level 1 and 2 in `body`, in order.
///
/// Only ATX headings (`# `, `## `) matter: setext headings (a line underlined with `---` or
/// `===`) are ordinary text, because an agent's `---` rule under a line must not cut a
/// section short. Headings inside code blocks, HTML blocks, block quotes and lists are
/// content too: only a heading at the top level of the document structures it.
pub(crate) fn atx_headings(body: &str) -> Vec<AtxHeading> {
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
/// The byte searches of the line scan. The `memchr` crate's are the fastest on a big
/// document, but its first call detects the CPU's features, and each `cpuid` leaves a
/// virtual machine: about 40 µs per process, more than a whole TASK.md takes to scan
/// with the standard library's. So a document under 64 KiB uses those.
struct Finder {
    big: bool,
}

impl Finder {
    fn for_text(text: &str) -> Finder {
        Finder {
            big: text.len() >= 64 << 10,
        }
    }

    /// The position of the first `b` in `hay`.
    fn byte(&self, hay: &[u8], b: u8) -> Option<usize> {
        if self.big {
            memchr::memchr(b, hay)
        } else {
            hay.iter().position(|&c| c == b)
        }
    }

    /// Does `hay` contain `-->`?
    fn comment_end(&self, hay: &[u8]) -> bool {
        if self.big {
            memchr::memmem::find(hay, b"-->").is_some()
        } else {
            hay.windows(3).any(|w| w == b"-->")
        }
    }
}

pub(crate) fn atx_headings_by_lines(body: &str) -> Option<Vec<AtxHeading>> {
    /// What the scan is inside at the top level.
    enum Open {
        Nothing,
        /// A fenced code block: its character and length.
        Fence(u8, usize),
        /// An HTML comment block, until a line containing `-->`.
        Comment,
    }
    let find = Finder::for_text(body);
    let bytes = body.as_bytes();
    if find.byte(bytes, b'\r').is_some() {
        return None;
    }
    let mut out = Vec::new();
    let mut open = Open::Nothing;
    let mut start = 0;
    while start < bytes.len() {
        let end = find
            .byte(&bytes[start..], b'\n')
            .map_or(bytes.len(), |i| start + i);
        let line = &bytes[start..end];
        match open {
            Open::Fence(ch, len) => {
                if is_closing_fence(line, ch, len) {
                    open = Open::Nothing;
                }
            }
            Open::Comment => {
                if find.comment_end(line) {
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
                    if !find.comment_end(rest) {
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
pub(crate) fn opening_fence(line: &[u8], ch: u8) -> Option<usize> {
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
/// at least `len` of `ch`, then only spaces. (pulldown-cmark 0.13, the parser this scan
/// must agree with, does not close a fence on a line with a tab after it, though
/// CommonMark allows one; the `taskmd` fuzz target found the difference.)
pub(crate) fn is_closing_fence(line: &[u8], ch: u8, len: usize) -> bool {
    let indent = line.iter().take(4).take_while(|&&b| b == b' ').count();
    if indent > 3 {
        return false;
    }
    let rest = &line[indent..];
    let n = rest.iter().take_while(|&&b| b == ch).count();
    n >= len && rest[n..].iter().all(|&b| b == b' ')
}

/// The text of one ATX heading line, as the full parse collects it (text and code spans,
/// markup removed), trimmed.
pub(crate) fn heading_text(line: &str) -> String {
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
pub(crate) fn plain_heading_text(line: &str) -> Option<&str> {
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
#[cfg(any(test, feature = "testing"))]
pub(crate) fn check_line_scan(body: &str) {
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
pub(crate) fn atx_headings_by_parser(body: &str) -> Vec<AtxHeading> {
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
pub(crate) fn atx_line(body: &str, pos: usize, level: HeadingLevel) -> Option<AtxHeading> {
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
pub(crate) fn scan_sections(text: &str, body_offset: usize) -> Vec<Section> {
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
pub(crate) fn same_name(a: &str, b: &str) -> bool {
    a.trim()
        .chars()
        .flat_map(char::to_lowercase)
        .eq(b.trim().chars().flat_map(char::to_lowercase))
}

/// Does `s` have something a reader can read: a letter or digit (of any script; not an
/// invisible one such as the Hangul fillers), outside HTML comments and outside
/// code-fence marker lines? Punctuation, rules and symbols alone (`-`, `---`, `>`,
/// `***`, a control or bidirectional-text character, a blank Braille cell) say nothing:
/// before, a `## Handoff` of a lone `-` passed the gate.
///
/// A comment runs from `<!--` to the next `-->`; an unterminated one runs to the end. A
/// line that starts (after indentation) with ```` ``` ```` or `~~~` is a fence marker, info
/// string included: an empty code block is no content, a code block with code is.
pub fn has_content(s: &str) -> bool {
    visible(s).any(|part| {
        part.lines().any(|line| {
            let t = line.trim_start();
            !(t.starts_with("```") || t.starts_with("~~~"))
                && line.chars().any(|c| c.is_alphanumeric() && !invisible(c))
        })
    })
}

/// Characters that take no space on screen.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200B}'..='\u{200F}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{00AD}' | '\u{180E}' | '\u{034F}'
            // Hangul fillers: letters that draw nothing.
            | '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}'
    )
}

/// The parts of `s` outside HTML comments, in order.
pub(crate) fn visible(s: &str) -> impl Iterator<Item = &str> {
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
