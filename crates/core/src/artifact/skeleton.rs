//! The TASK.md a new task starts with: the frontmatter mirror, the title, `## Context`
//! with the task's body and `## Notes`.

#[allow(unused_imports)]
use super::*;

pub(crate) const CONTEXT: &str = "Context";
pub(crate) const NOTES: &str = "Notes";
pub(crate) const CONTEXT_PLACEHOLDER: &str =
    "<!-- No context given: describe the goal, the constraints and how to check the result. -->";
pub(crate) const NOTES_PLACEHOLDER: &str =
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

pub(crate) fn skeleton_text(fm: &Frontmatter, title: &str, context: &str) -> String {
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

pub(crate) fn has_only_skeleton_sections(text: &str) -> bool {
    let doc = parse(text);
    let names: Vec<&str> = doc.sections.iter().map(|s| s.name.as_str()).collect();
    names == [CONTEXT, NOTES]
        && doc
            .sections
            .last()
            .is_some_and(|notes| notes.content.end == text.len())
}

/// Turns top-level `#`/`##` ATX headings into `###` ones.
pub(crate) fn demote_headings(body: &str) -> String {
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

pub(crate) fn fenced(body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for b in body.bytes() {
        run = if b == b'`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}\n{body}\n{fence}")
}
