//! The fuzz entry point of TASK.md parsing and the invariants it checks; built for tests
//! and for the `testing` feature (the fuzz targets), never into the binary.

#[allow(unused_imports)]
use super::*;

/// Fuzz entry point: parses arbitrary bytes (as lossy UTF-8) through every function of
/// this module and panics if an invariant breaks (offsets out of range or inside a
/// character, a body changed by a frontmatter rewrite, a frontmatter that does not
/// round-trip). Used by the property tests and by `cargo fuzz`.
#[doc(hidden)]
pub fn fuzz(data: &[u8]) {
    check_invariants(&String::from_utf8_lossy(data));
}

pub(crate) fn check_invariants(text: &str) {
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
