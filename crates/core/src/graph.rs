//! A picture of the plan: the task tree as nested boxes (a group is a box around its
//! children) and the dependencies as arrows, coloured by status, in Mermaid (renders on
//! GitHub, so STATE.md embeds it) or Graphviz DOT (`dot -Tsvg`).
//!
//! Both writers walk the tree iteratively (a 100,000-deep chain of parents is a long
//! loop, not a deep recursion), name nodes by their position (task ids may hold `.` and
//! `-`, which neither language takes bare), and escape every label, so no title can
//! break out of its quotes.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::model::{Status, Task, TaskId};
use crate::tree::TreeIndex;

/// The graph languages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Mermaid `flowchart`.
    Mermaid,
    /// Graphviz DOT.
    Dot,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "mermaid" => Ok(Format::Mermaid),
            "dot" => Ok(Format::Dot),
            other => Err(format!(
                "unknown graph format {other:?}; use mermaid or dot"
            )),
        }
    }
}

/// Fill, stroke and text colour of a status.
fn colours(s: Status) -> (&'static str, &'static str, &'static str) {
    match s {
        Status::Pending => ("#f1f3f5", "#868e96", "#212529"),
        Status::Working => ("#d0ebff", "#1c7ed6", "#0b3d66"),
        Status::AgentReview => ("#e5dbff", "#7048e8", "#2b1a66"),
        Status::Reviewing => ("#fff3bf", "#f08c00", "#5c3c00"),
        Status::Clarification => ("#ffe8cc", "#e8590c", "#5c2300"),
        Status::Stuck => ("#ffe3e3", "#e03131", "#5c0f0f"),
        Status::Done => ("#d3f9d8", "#2f9e44", "#0f3d19"),
        Status::Cancelled => ("#f8f9fa", "#adb5bd", "#868e96"),
    }
}

/// The class name of a status (Mermaid classes take no `-`).
fn class(s: Status) -> String {
    s.as_str().replace('-', "_")
}

/// The longest title shown in a box, in characters.
const TITLE_CHARS: usize = 60;

fn short_title(t: &Task) -> String {
    let title = t
        .spec
        .title
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if title.chars().count() <= TITLE_CHARS {
        return title;
    }
    let mut s: String = title.chars().take(TITLE_CHARS - 1).collect();
    s.push('…');
    s
}

/// Indentation for a nesting depth, capped so a deep tree stays linear in size.
fn indent(depth: usize) -> String {
    "  ".repeat(depth.min(12))
}

/// Renders every task of `idx` in `format`.
pub fn render(idx: &TreeIndex<'_>, format: Format) -> String {
    let order = idx.depth_first();
    let name: HashMap<&TaskId, String> = order
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id(), format!("t{i}")))
        .collect();
    match format {
        Format::Mermaid => mermaid(idx, &order, &name),
        Format::Dot => dot(idx, &order, &name),
    }
}

/// Escapes text for a quoted Mermaid label: Mermaid's own entity codes for everything
/// that could end the label, start markup, or be taken for an entity.
fn mermaid_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '#' => out.push_str("#35;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '&' => out.push_str("#amp;"),
            '`' => out.push_str("#96;"),
            '[' => out.push_str("#91;"),
            ']' => out.push_str("#93;"),
            '{' => out.push_str("#123;"),
            '}' => out.push_str("#125;"),
            '|' => out.push_str("#124;"),
            ';' => out.push_str("#59;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn mermaid(idx: &TreeIndex<'_>, order: &[&Task], name: &HashMap<&TaskId, String>) -> String {
    let mut s = String::from("flowchart TD\n");
    for st in Status::ALL {
        let (fill, stroke, text) = colours(*st);
        let dash = if *st == Status::Cancelled {
            ",stroke-dasharray:4 3"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  classDef {} fill:{fill},stroke:{stroke},color:{text}{dash}",
            class(*st)
        );
    }
    // The open groups, innermost last: a task closes every group it is not inside.
    let mut open: Vec<&TaskId> = Vec::new();
    let mut classes: Vec<(String, Status)> = Vec::new();
    for t in order {
        while let Some(top) = open.last() {
            if t.spec.parent.as_ref() == Some(*top) {
                break;
            }
            open.pop();
            let _ = writeln!(s, "{}end", indent(open.len() + 1));
        }
        let pad = indent(open.len() + 1);
        let status = idx.status(t);
        let label = match short_title(t) {
            title if title == t.id().as_str() || title.is_empty() => {
                format!("{}<br/>{}", mermaid_text(t.id().as_str()), status.as_str())
            }
            title => format!(
                "{} · {}<br/>{}",
                mermaid_text(t.id().as_str()),
                mermaid_text(&title),
                status.as_str()
            ),
        };
        let n = &name[t.id()];
        if idx.is_leaf(t.id()) {
            let dead = if t.is_dead() { " ✗" } else { "" };
            let _ = writeln!(s, "{pad}{n}[\"{label}{dead}\"]");
        } else {
            let _ = writeln!(s, "{pad}subgraph {n} [\"{label}\"]");
            open.push(t.id());
        }
        classes.push((n.clone(), status));
    }
    while open.pop().is_some() {
        let _ = writeln!(s, "{}end", indent(open.len() + 1));
    }
    for t in order {
        for d in &t.spec.depends_on {
            if let Some(from) = name.get(d) {
                let _ = writeln!(s, "  {from} --> {}", name[t.id()]);
            }
        }
    }
    // One `class` line per status, naming its nodes.
    for st in Status::ALL {
        let ids: Vec<&str> = classes
            .iter()
            .filter(|(_, s)| s == st)
            .map(|(n, _)| n.as_str())
            .collect();
        if !ids.is_empty() {
            let _ = writeln!(s, "  class {} {}", ids.join(","), class(*st));
        }
    }
    s
}

/// Escapes text for a quoted DOT string.
fn dot_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn dot(idx: &TreeIndex<'_>, order: &[&Task], name: &HashMap<&TaskId, String>) -> String {
    let mut s = String::from(
        "digraph plan {\n  compound=true;\n  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fontname=\"sans-serif\", fontsize=11];\n  edge [color=\"#495057\"];\n",
    );
    // A group is a cluster; arrows to or from it attach to its first leaf (DOT draws
    // edges between nodes only) and are clipped at the cluster's border.
    let mut anchor: HashMap<&TaskId, &str> = HashMap::new();
    for t in order.iter().rev() {
        if idx.is_leaf(t.id()) {
            anchor.insert(t.id(), name[t.id()].as_str());
        }
        if let Some(p) = &t.spec.parent
            && let Some(a) = anchor.get(t.id()).copied()
        {
            // Walking backwards, the parent's first leaf is the last one seen.
            anchor.insert(p, a);
        }
    }
    let mut open: Vec<&TaskId> = Vec::new();
    for t in order {
        while let Some(top) = open.last() {
            if t.spec.parent.as_ref() == Some(*top) {
                break;
            }
            open.pop();
            let _ = writeln!(s, "{}}}", indent(open.len() + 1));
        }
        let pad = indent(open.len() + 1);
        let status = idx.status(t);
        let (fill, stroke, text) = colours(status);
        let label = match short_title(t) {
            title if title == t.id().as_str() || title.is_empty() => {
                format!("{}\\n{}", dot_text(t.id().as_str()), status.as_str())
            }
            title => format!(
                "{} · {}\\n{}",
                dot_text(t.id().as_str()),
                dot_text(&title),
                status.as_str()
            ),
        };
        let n = &name[t.id()];
        if idx.is_leaf(t.id()) {
            let dead = if t.is_dead() { " ✗" } else { "" };
            let style = if status == Status::Cancelled {
                ", style=\"rounded,filled,dashed\""
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "{pad}{n} [label=\"{label}{dead}\", fillcolor=\"{fill}\", color=\"{stroke}\", fontcolor=\"{text}\"{style}];"
            );
        } else {
            let _ = writeln!(
                s,
                "{pad}subgraph cluster_{n} {{\n{pad}  label=\"{label}\";\n{pad}  style=\"rounded,filled\";\n{pad}  fillcolor=\"{fill}\";\n{pad}  color=\"{stroke}\";\n{pad}  fontcolor=\"{text}\";"
            );
            open.push(t.id());
        }
    }
    while open.pop().is_some() {
        let _ = writeln!(s, "{}}}", indent(open.len() + 1));
    }
    for t in order {
        let Some(to) = anchor.get(t.id()) else {
            continue;
        };
        for d in &t.spec.depends_on {
            let Some(from) = anchor.get(d) else { continue };
            let mut attrs = Vec::new();
            if !idx.is_leaf(d) {
                attrs.push(format!("ltail=cluster_{}", name[d]));
            }
            if !idx.is_leaf(t.id()) {
                attrs.push(format!("lhead=cluster_{}", name[t.id()]));
            }
            let attrs = if attrs.is_empty() {
                String::new()
            } else {
                format!(" [{}]", attrs.join(", "))
            };
            let _ = writeln!(s, "  {from} -> {to}{attrs};");
        }
    }
    s.push_str("}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RunnerState, TaskSpec, WorkflowKind};

    fn task(id: &str, parent: Option<&str>, deps: &[&str], title: &str) -> Task {
        let mut spec = TaskSpec::new(TaskId::new(id).unwrap(), WorkflowKind::Review, 3);
        spec.parent = parent.map(|p| TaskId::new(p).unwrap());
        spec.depends_on = deps.iter().map(|d| TaskId::new(d).unwrap()).collect();
        spec.title = title.into();
        Task {
            spec,
            runner: RunnerState::new(Status::Pending, false, 0, jiff::Timestamp::UNIX_EPOCH),
        }
    }

    fn plan() -> Vec<Task> {
        vec![
            task("app", None, &[], "The app"),
            task(
                "api",
                Some("app"),
                &[],
                "REST \"API\" <v1> # 1; [x] {y} |z| `q` & co",
            ),
            task("ui.shell", Some("app"), &["api"], "Shell"),
            task("docs", None, &["app"], "Docs"),
        ]
    }

    #[test]
    fn mermaid_nests_groups_escapes_labels_and_draws_dependencies() {
        let tasks = plan();
        let idx = TreeIndex::new(&tasks);
        let m = render(&idx, Format::Mermaid);
        assert!(m.starts_with("flowchart TD\n"), "{m}");
        assert!(
            m.contains("  subgraph t0 [\"app · The app<br/>pending\"]\n"),
            "{m}"
        );
        assert!(m.contains("    t1[\"api · REST #quot;API#quot; #lt;v1#gt; #35; 1#59; #91;x#93; #123;y#125; #124;z#124; #96;q#96; #amp; co<br/>pending\"]\n"), "{m}");
        assert!(m.contains("  end\n"), "{m}");
        assert!(m.contains("  t1 --> t2\n"), "{m}");
        assert!(m.contains("  t0 --> t3\n"), "a group as a dependency: {m}");
        assert!(m.contains("  class t0,t1,t2,t3 pending\n"), "{m}");
        // Every label's quotes balance: nothing a title holds ends one early.
        for line in m.lines() {
            assert_eq!(line.matches('"').count() % 2, 0, "{line}");
        }
    }

    #[test]
    fn dot_clusters_groups_and_attaches_group_edges_to_a_leaf() {
        let tasks = plan();
        let idx = TreeIndex::new(&tasks);
        let d = render(&idx, Format::Dot);
        assert!(d.starts_with("digraph plan {\n"), "{d}");
        assert!(d.contains("  subgraph cluster_t0 {\n"), "{d}");
        assert!(
            d.contains("label=\"api · REST \\\"API\\\" <v1> # 1; [x] {y} |z| `q` & co\\npending\""),
            "{d}"
        );
        assert!(d.contains("  t1 -> t2;\n"), "{d}");
        assert!(d.contains("  t1 -> t3 [ltail=cluster_t0];\n"), "{d}");
        assert!(d.trim_end().ends_with('}'));
    }

    #[test]
    fn a_deep_chain_renders_without_recursion() {
        let n = 50_000;
        let mut tasks = vec![task("n0", None, &[], "root")];
        for i in 1..n {
            tasks.push(task(
                &format!("n{i}"),
                Some(&format!("n{}", i - 1)),
                &[],
                "x",
            ));
        }
        let idx = TreeIndex::new(&tasks);
        for f in [Format::Mermaid, Format::Dot] {
            let g = render(&idx, f);
            assert_eq!(
                g.matches(&format!("t{}", n - 1)).count(),
                1 + usize::from(f == Format::Mermaid)
            );
        }
    }
}
