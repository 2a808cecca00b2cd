//! Reading what the detail pane shows from the workspace: TASK.md sections, the last
//! events, the memory and the tail of `output.log`. Every failure becomes a line in the
//! pane instead of an error, so a broken file never stops the dashboard.

use std::io::{Read, Seek, SeekFrom};

use warden_core::artifact;
use warden_core::memory;
use warden_core::model::Task;
use warden_store::Engine;
use warden_store::files::{self, FileError};

use crate::app::{Detail, EVENTS_SHOWN, OUTPUT_LINES, SectionInfo};

/// How much of the end of `output.log` is read for its tail.
const TAIL_BYTES: u64 = 64 * 1024;

/// Loads the detail of one task.
pub fn detail(engine: &Engine, task: &Task) -> Detail {
    let id = task.id();
    let mut d = Detail {
        id: Some(id.clone()),
        ..Detail::default()
    };
    match files::read_text(&engine.ws.dir, &engine.ws.task_file(id)) {
        Ok(text) => {
            let (sections, problems) = sections_of(&text);
            d.sections = sections;
            d.problems = problems;
            d.texts = texts_of(&text);
        }
        Err(FileError::Missing(_)) => d
            .problems
            .push("no TASK.md yet: it is written at the task's first change".into()),
        Err(e) => d.problems.push(format!("TASK.md: {e}")),
    }
    match engine.store.events(Some(id)) {
        Ok(mut events) => {
            let skip = events.len().saturating_sub(EVENTS_SHOWN);
            d.events = events.split_off(skip);
        }
        Err(e) => d.problems.push(format!("events: {e}")),
    }
    match engine.store.memory(id) {
        Ok(m) => d.memory = m.map(|m| memory::render(&m)).unwrap_or_default(),
        Err(e) => d.problems.push(format!("memory: {e}")),
    }
    let log = engine.ws.output_log(id);
    let shown = engine.ws.display(&log);
    match files::check_no_links(&engine.ws.dir, &log).and_then(|()| {
        read_tail(&log).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => FileError::Missing(shown.clone()),
            _ => FileError::Io {
                path: shown.clone(),
                source: e,
            },
        })
    }) {
        Ok(bytes) => {
            d.output = tail_lines(&String::from_utf8_lossy(&bytes), OUTPUT_LINES);
            if d.output.is_empty() {
                d.output_note = Some("output.log is empty".into());
            }
        }
        Err(FileError::Missing(_)) => {
            d.output_note = Some(
                "no output captured yet (it appears once `warden run` starts a session)".into(),
            )
        }
        Err(e) => d.output_note = Some(e.to_string()),
    }
    d
}

/// The sections of a TASK.md (each name once, where it counts: the last occurrence)
/// and its parse problems.
pub fn sections_of(text: &str) -> (Vec<SectionInfo>, Vec<String>) {
    let doc = artifact::parse(text);
    let mut out: Vec<SectionInfo> = Vec::new();
    for s in &doc.sections {
        let content = doc.content(s);
        let info = SectionInfo {
            name: s.name.clone(),
            has_content: artifact::has_content(content),
            verdict: s
                .name
                .trim()
                .eq_ignore_ascii_case("review")
                .then(|| artifact::verdict(content))
                .flatten()
                .map(|v| match v {
                    artifact::Verdict::Pass => "PASS",
                    artifact::Verdict::Fail => "FAIL",
                }),
        };
        // A repeated name counts once, at its last occurrence.
        out.retain(|o| !o.name.trim().eq_ignore_ascii_case(info.name.trim()));
        out.push(info);
    }
    let problems = doc
        .errors
        .iter()
        .map(|e| format!("TASK.md line {}: {}", e.line, e.message))
        .collect();
    (out, problems)
}

/// The sections a person reads before deciding, where they count, at most this many
/// lines each.
const READ_SECTIONS: [&str; 3] = ["Handoff", "Review", "Questions"];
const SECTION_LINES: usize = 40;

/// The text of `## Handoff`, `## Review` and `## Questions`, each made safe to draw.
pub fn texts_of(text: &str) -> Vec<(String, Vec<String>)> {
    let doc = artifact::parse(text);
    READ_SECTIONS
        .iter()
        .filter_map(|name| {
            let s = doc.section(name)?;
            let content = doc.content(s);
            if !artifact::has_content(content) {
                return None;
            }
            let lines: Vec<String> = content
                .trim_matches('\n')
                .lines()
                .take(SECTION_LINES)
                .map(sanitize)
                .collect();
            Some((s.name.trim().to_owned(), lines))
        })
        .collect()
}

/// The last `TAIL_BYTES` of a file, refusing anything but a regular file.
fn read_tail(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut f = std::fs::File::open(path)?;
    let start = meta.len().saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    f.take(TAIL_BYTES).read_to_end(&mut bytes)?;
    if start > 0 {
        // The first line is probably cut in the middle: drop it.
        match bytes.iter().position(|b| *b == b'\n') {
            Some(nl) => {
                bytes.drain(..=nl);
            }
            None => bytes.clear(),
        }
    }
    Ok(bytes)
}

/// The last `n` lines of `text`, each made safe to draw: escape sequences removed, tabs
/// expanded, other control characters dropped, and a carriage return keeps only what
/// was written after it (a progress bar shows its last state).
pub fn tail_lines(text: &str, n: usize) -> Vec<String> {
    let mut lines: Vec<&str> = text.lines().collect();
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    let skip = lines.len().saturating_sub(n);
    lines[skip..].iter().map(|l| sanitize(l)).collect()
}

/// Makes one line safe for the terminal (see [`tail_lines`]).
pub fn sanitize(line: &str) -> String {
    let line = line.rsplit('\r').find(|s| !s.is_empty()).unwrap_or("");
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => match chars.peek() {
                // CSI: parameters and intermediates up to a final byte in @..~.
                Some('[') => {
                    chars.next();
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC: up to BEL or ST (ESC \).
                Some(']') => {
                    chars.next();
                    while let Some(c) = chars.next() {
                        if c == '\x07' {
                            break;
                        }
                        if c == '\x1b' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                // Any other escape: intermediates (space to '/') and one final character.
                Some(_) => while chars.next().is_some_and(|c| (' '..='/').contains(&c)) {},
                None => {}
            },
            '\t' => {
                let w = out.chars().count();
                out.push_str(&" ".repeat(8 - w % 8));
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: &str) {
        assert_eq!(sanitize(input), expected, "input {input:?}");
    }

    #[test]
    fn sanitize_cases() {
        check("plain", "plain");
        check("\x1b[31mred\x1b[0m text", "red text");
        check("\x1b[1;32;40mbold\x1b[m", "bold");
        check("a\tb", "a       b");
        check("12345678\tx", "12345678        x");
        check("bell\x07!", "bell!");
        check("\x1b]0;title\x07after", "after");
        check("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link");
        check("10%\r50%\r100%", "100%");
        check("done\r", "done");
        check("\x1b(Bcharset", "charset");
        check("trailing esc\x1b", "trailing esc");
        check("nul\0byte", "nulbyte");
        check("unicode ✓ ünï", "unicode ✓ ünï");
        check("\u{9b}c1 control", "c1 control");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_lines("a\nb\nc\n\n\n", 2), vec!["b", "c"]);
        assert_eq!(tail_lines("a\r\nb\r\n", 5), vec!["a", "b"]);
        assert!(tail_lines("", 3).is_empty());
        assert!(tail_lines("\n \n", 3).is_empty());
        assert_eq!(tail_lines("x", 0), Vec::<String>::new());
    }

    #[test]
    fn sections_count_once_and_show_the_verdict() {
        let text = "---\nid: a\n---\n## Context\nctx\n## Notes\n\n## Review\nfirst: FAIL\n## Handoff\ndone it\n## Review\nVerdict: PASS\n";
        let (s, problems) = sections_of(text);
        let shown: Vec<(&str, bool, Option<&str>)> = s
            .iter()
            .map(|s| (s.name.as_str(), s.has_content, s.verdict))
            .collect();
        assert_eq!(
            shown,
            vec![
                ("Context", true, None),
                ("Notes", false, None),
                ("Handoff", true, None),
                ("Review", true, Some("PASS")),
            ]
        );
        assert!(problems.is_empty());
        let (_, problems) = sections_of("---\nid: [unclosed\n---\n## A\n");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("TASK.md line "), "{problems:?}");
    }
}
