//! TASK.md as the CLI meets it: read safely, parse the artifacts, notice runner-owned
//! fields an agent edited in the frontmatter, and rewrite the frontmatter mirror after a
//! commit without losing an agent's concurrent edit of the body.

use warden_core::artifact::{self, Artifacts};
use warden_core::event::EventKind;
use warden_core::model::Task;

use crate::Workspace;
use crate::files::{self, FileError};

/// What a write learns from TASK.md.
#[derive(Debug, Default)]
pub struct Doc {
    /// The artifacts (sections and verdict) at this moment.
    pub artifacts: Artifacts,
    /// `tamper.ignored` events for runner-owned frontmatter fields an agent changed.
    pub tamper: Vec<EventKind>,
    /// The text read (`None` when TASK.md was missing or could not be read).
    pub text: Option<String>,
    /// Why TASK.md could not be read (a link, a FIFO, over the size limit, not UTF-8):
    /// the write goes on without its evidence, and a gate that needed it refuses with this.
    pub unreadable: Option<String>,
}

/// Reads and parses a task's TASK.md. A missing file has no artifacts (it is recreated
/// after the next commit); a symlinked, oversized or non-UTF-8 file is refused.
///
/// A task with an evidence file (`TaskSpec::evidence`) has its `## Handoff` from that
/// file when TASK.md has none (see [`evidence`]).
pub fn read(ws: &Workspace, task: &Task) -> Result<Doc, FileError> {
    let path = ws.task_file(task.id());
    let mut doc = match files::read_text(&ws.dir, &path) {
        Ok(text) => {
            let mut doc = doc_of(&text, task);
            doc.text = Some(text);
            doc
        }
        Err(FileError::Missing(_)) => Doc::default(),
        Err(e) => return Err(e),
    };
    if doc.artifacts.handoff.is_none() {
        doc.artifacts.handoff = evidence(ws, task);
    }
    Ok(doc)
}

/// [`read`] for the write path: a TASK.md whose content cannot be read (a link, a
/// device or FIFO, over the size limit, not UTF-8) gives a document without artifacts
/// that says why, so that what does not need its evidence (a session's end, a cancel, the
/// supervisor's bookkeeping) is still recorded. Only an I/O error fails.
pub fn read_for_write(ws: &Workspace, task: &Task) -> Result<Doc, FileError> {
    match read(ws, task) {
        Err(
            e @ (FileError::Symlink(_)
            | FileError::NotRegular(_)
            | FileError::TooLarge(..)
            | FileError::NotUtf8(..)),
        ) => Ok(Doc {
            artifacts: Artifacts {
                handoff: evidence(ws, task),
                ..Artifacts::default()
            },
            unreadable: Some(e.to_string()),
            ..Doc::default()
        }),
        other => other,
    }
}

/// The evidence a task's evidence file gives now, if it names one: the file (relative
/// to the project root) is read in the task's worktree, where its agent works, then in
/// the project root, where a person (or another tool) works; each read is Warden's safe
/// read (no symlink on the way or at the end, a regular UTF-8 file of at most 1 MiB).
/// A file that cannot be read gives no evidence, with a warning on stderr.
pub fn evidence(ws: &Workspace, task: &Task) -> Option<artifact::Evidence> {
    let rel = task.spec.evidence.as_deref()?;
    if !warden_core::model::is_inside_path(rel) {
        return None;
    }
    for base in [ws.worktree_project(task.id()), ws.root.clone()] {
        if !base.is_dir() {
            continue;
        }
        match files::read_text(&base, &base.join(rel)) {
            Ok(text) => {
                if let Some(e) = artifact::file_evidence(rel, &text) {
                    return Some(e);
                }
            }
            Err(FileError::Missing(_)) => {}
            Err(e) => crate::say!(
                "warning: the evidence file of {} is not used: {e}",
                task.id()
            ),
        }
    }
    None
}

/// Parses TASK.md text against the true task.
pub fn doc_of(text: &str, task: &Task) -> Doc {
    let parsed = artifact::parse(text);
    let artifacts = parsed.artifacts();
    let tamper = match parsed.frontmatter {
        Some(found) => artifact::tampered(&found, &artifact::mirror(task))
            .into_iter()
            .chain(artifact::tampered_unmirrored(&found, task))
            .map(|t| EventKind::TamperIgnored {
                field: t.field,
                agent_value: t.agent_value,
                true_value: t.true_value,
            })
            .collect(),
        None => Vec::new(),
    };
    Doc {
        artifacts,
        tamper,
        text: None,
        unreadable: None,
    }
}

/// Creates TASK.md (skeleton) if missing, else restores the frontmatter mirror to the
/// stored truth, keeping the body byte for byte. `read` is TASK.md's text as the caller
/// read it moments ago (under the task's lock), if it has: the file is then read again
/// only before it is replaced, and not at all when the mirror is already true.
pub fn sync(ws: &Workspace, task: &Task, read: Option<String>) -> Result<(), FileError> {
    let dir = ws.task_dir(task.id());
    if read.is_none() {
        files::create_dir(&ws.dir, &dir)?;
    }
    let path = ws.task_file(task.id());
    let fm = artifact::mirror(task);
    match files::update_text(&ws.dir, &path, read, |cur| {
        artifact::with_frontmatter(cur, &fm)
    }) {
        Ok(_) => Ok(()),
        Err(FileError::Missing(_)) => {
            files::create_dir(&ws.dir, &dir)?;
            files::remove_stale_temps(&path);
            files::write_view(&path, artifact::skeleton(task).as_bytes())
        }
        Err(e) => Err(e),
    }
}
