//! The detail pane of one task, read through warden-app: the task view, its TASK.md
//! sections rendered as safe HTML (each name once, where it counts: the last
//! occurrence), the last events and the memory. The output tail comes by its own stream.

use serde::Serialize;
use warden_app::App;
use warden_app::view::{EventView, TaskView};
use warden_core::artifact;
use warden_core::failure::{ExitCode, Failure};
use warden_core::memory::{self, Memory};
use warden_core::model::TaskId;

use crate::markdown;

/// How many of the task's events the pane shows.
pub const EVENTS_SHOWN: usize = 12;

/// A `## Name` section of TASK.md.
#[derive(Debug, Serialize)]
pub struct Section {
    /// The heading text.
    pub name: String,
    /// Has a non-whitespace character outside comments (what the gates ask).
    pub has_content: bool,
    /// For `## Review`: `PASS` or `FAIL`, when it has a verdict.
    pub verdict: Option<&'static str>,
    /// The content as HTML that runs nothing.
    pub html: String,
}

/// Everything the pane shows.
#[derive(Debug, Serialize)]
pub struct Detail {
    /// The task.
    pub task: TaskView,
    /// TASK.md's sections, in file order.
    pub sections: Vec<Section>,
    /// Why TASK.md could not be shown, or its parse problems, one line each.
    pub problems: Vec<String>,
    /// The last events, oldest first.
    pub events: Vec<EventView>,
    /// The memory.
    pub memory: Memory,
    /// The memory as prompts embed it.
    pub memory_text: String,
}

/// Reads the detail of `id` (not found: 404).
pub fn read(app: &App, id: &TaskId) -> Result<Detail, Failure> {
    let task = app.task(id)?;
    let mut problems = Vec::new();
    let sections = match app.task_md(id) {
        Ok(text) => sections(&text, &mut problems),
        Err(f) if f.code == ExitCode::NotFound => {
            problems.push(f.message);
            Vec::new()
        }
        Err(f) => {
            problems.push(f.headline());
            Vec::new()
        }
    };
    let events = app.history(Some(id), Some(EVENTS_SHOWN))?;
    let memory = app.memory(id)?;
    Ok(Detail {
        memory_text: memory::render(&memory),
        task,
        sections,
        problems,
        events,
        memory,
    })
}

/// The sections of a TASK.md, rendered.
pub fn sections(text: &str, problems: &mut Vec<String>) -> Vec<Section> {
    let doc = artifact::parse(text);
    let mut out: Vec<Section> = Vec::new();
    for s in &doc.sections {
        let content = doc.content(s);
        let review = s.name.trim().eq_ignore_ascii_case("review");
        let section = Section {
            name: s.name.clone(),
            has_content: artifact::has_content(content),
            verdict: review
                .then(|| artifact::verdict(content))
                .flatten()
                .map(|v| match v {
                    artifact::Verdict::Pass => "PASS",
                    artifact::Verdict::Fail => "FAIL",
                }),
            html: markdown::render(content),
        };
        // A repeated name counts once, at its last occurrence (agents append).
        out.retain(|o| !o.name.trim().eq_ignore_ascii_case(section.name.trim()));
        out.push(section);
    }
    problems.extend(
        doc.errors
            .iter()
            .map(|e| format!("TASK.md line {}: {}", e.line, e.message)),
    );
    out
}
