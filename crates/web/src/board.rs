//! What the page shows of the whole project, and how one state differs from the next:
//! the [`Board`] (progress, counts, every task as a [`Row`] in tree order) built from
//! warden-app's task views, and the [`Update`] that carries only the rows that changed.
//! The page is sent a board once and updates after that, so it never re-reads every task.

use std::collections::HashMap;

use serde::Serialize;
use warden_app::App;
use warden_app::supervisor::StepFailure;
use warden_app::view::TaskView;
use warden_core::failure::Failure;
use warden_core::model::{Status, TaskId};
use warden_core::progress::{GateStatus, Progress, TreeView};
use warden_core::tree::TreeIndex;

/// The longest title or failure line a row carries; the detail pane has the rest.
const ROW_TEXT_CHARS: usize = 200;

/// One task as the table and the graph show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Row {
    /// The id.
    pub id: TaskId,
    /// The title (cut to 200 characters).
    pub title: String,
    /// The parent, if any.
    pub parent: Option<TaskId>,
    /// Depth in the tree (0 for a root).
    pub depth: usize,
    /// Has children.
    pub group: bool,
    /// Tasks that must be done first.
    pub depends_on: Vec<TaskId>,
    /// Lifecycle status.
    pub status: Status,
    /// The derived gate status.
    pub gate: Option<GateStatus>,
    /// Passes.
    pub passes: bool,
    /// Failed attempts.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Sessions that ended without their artifact.
    pub crash_count: u32,
    /// Entries into agent-review.
    pub review_round: u32,
    /// The last session ended without advancing the task.
    pub dead: bool,
    /// A session is believed alive.
    pub live: bool,
    /// A new session is wanted (a person asked, or the last one never started).
    pub respawn_requested: bool,
    /// The first line of the last failure (cut to 200 characters).
    pub failure: Option<String>,
    /// Time of the last change, in seconds since the epoch.
    pub updated: i64,
    /// Incremented by every write.
    pub version: u64,
}

fn cut(s: &str) -> String {
    match s.char_indices().nth(ROW_TEXT_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

impl Row {
    /// The row of a task view at `depth`.
    pub fn of(v: &TaskView, depth: usize) -> Row {
        Row {
            id: v.id.clone(),
            title: cut(&v.title),
            parent: v.parent.clone(),
            depth,
            group: !v.children.is_empty(),
            depends_on: v.depends_on.clone(),
            status: v.status,
            gate: v.gate,
            passes: v.passes,
            attempts: v.attempts,
            max_attempts: v.max_attempts,
            crash_count: v.crash_count,
            review_round: v.review_round,
            dead: v.dead,
            live: v.session.is_some(),
            respawn_requested: v.respawn_requested,
            failure: v
                .last_failure
                .as_deref()
                .map(|f| cut(f.lines().next().unwrap_or(""))),
            updated: v.updated_at.as_second(),
            version: v.version,
        }
    }
}

/// Project progress over the leaves, as the header shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Leaves that pass.
    pub complete: usize,
    /// Leaves that count (not cancelled).
    pub total: usize,
    /// `floor(complete / total * 100)`.
    pub percentage: u32,
    /// The 20-cell bar of STATE.md.
    pub bar: String,
    /// `Ready to plan`, `Planning`, `In progress`, `Verifying` or `Complete`.
    pub status: &'static str,
    /// Tasks per status, in lifecycle order, statuses with none left out.
    pub counts: Vec<(Status, usize)>,
    /// Tasks whose session is dead.
    pub dead: usize,
    /// Every task.
    pub tasks: usize,
    /// Whether anything will move.
    pub supervisors: Supervisors,
}

/// The supervisors (`warden run`) seen, as the header's badge shows them: nothing starts
/// or moves on without one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Supervisors {
    /// Each one alive: `pid N` on this machine, `HOST pid N` elsewhere.
    pub alive: Vec<String>,
    /// Tasks whose steps keep failing in them, each with its last error.
    pub failing: Vec<StepFailure>,
}

/// The supervisors seen now (none when they cannot be read: the badge is a view).
pub fn supervisors(app: &App) -> Supervisors {
    let sups = app.supervisors().unwrap_or_default();
    let alive: Vec<_> = sups.iter().filter(|s| s.alive != Some(false)).collect();
    Supervisors {
        alive: alive
            .iter()
            .map(|s| match s.alive {
                Some(_) => format!("pid {}", s.pid),
                None => format!("{} pid {}", s.host, s.pid),
            })
            .collect(),
        failing: alive.iter().flat_map(|s| s.failing.clone()).collect(),
    }
}

/// Everything the page shows of the project.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Board {
    /// Which state of the project this is: increases with every change the console sees.
    pub generation: u64,
    /// The project's directory name.
    pub project: String,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// Progress and counts.
    pub summary: Summary,
    /// Every task, depth-first in `(order, id)` order.
    pub rows: Vec<Row>,
}

/// What changed between two boards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Update {
    /// The generation of the board this update leads to.
    pub generation: u64,
    /// Progress and counts now.
    pub summary: Summary,
    /// Rows that are new or changed.
    pub rows: Vec<Row>,
    /// Ids of tasks that no longer exist.
    pub removed: Vec<TaskId>,
    /// The new tree order of every id, when it changed (a task was created, removed or
    /// moved); `None` when it is the same.
    pub order: Option<Vec<TaskId>>,
}

/// Reads every task through the application layer and builds the board.
pub fn build(app: &App, generation: u64) -> Result<Board, Failure> {
    let tasks = app.tasks()?;
    let idx = TreeIndex::new(&tasks);
    let mut depth: HashMap<&TaskId, usize> = HashMap::with_capacity(tasks.len());
    let mut rows = Vec::with_capacity(tasks.len());
    for t in idx.depth_first() {
        let d = t
            .spec
            .parent
            .as_ref()
            .and_then(|p| depth.get(p))
            .map_or(0, |d| d + 1);
        depth.insert(t.id(), d);
        rows.push(Row::of(&TaskView::of(t, &idx), d));
    }
    let leaves: Vec<&warden_core::model::Task> = TreeView::new(&tasks).leaves().collect();
    let progress = Progress::of(leaves.iter().copied());
    let summary = Summary {
        complete: progress.complete,
        total: progress.total,
        percentage: progress.percentage(),
        bar: progress.bar(),
        status: progress.status.as_str(),
        // Tasks, as `warden status` and the dashboard count them: groups left out.
        counts: Status::ALL
            .iter()
            .map(|s| (*s, leaves.iter().filter(|t| t.status() == *s).count()))
            .filter(|(_, n)| *n > 0)
            .collect(),
        dead: tasks.iter().filter(|t| t.is_dead()).count(),
        tasks: tasks.len(),
        supervisors: supervisors(app),
    };
    let project = app
        .ws()
        .root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "project".into());
    Ok(Board {
        generation,
        project,
        backend: app.eng.store.backend(),
        summary,
        rows,
    })
}

/// The update from `old` to `new`, or `None` when the page would show the same thing.
pub fn diff(old: &Board, new: &Board) -> Option<Update> {
    let before: HashMap<&TaskId, &Row> = old.rows.iter().map(|r| (&r.id, r)).collect();
    let rows: Vec<Row> = new
        .rows
        .iter()
        .filter(|r| before.get(&r.id) != Some(r))
        .cloned()
        .collect();
    let now: HashMap<&TaskId, ()> = new.rows.iter().map(|r| (&r.id, ())).collect();
    let removed: Vec<TaskId> = old
        .rows
        .iter()
        .filter(|r| !now.contains_key(&r.id))
        .map(|r| r.id.clone())
        .collect();
    let same_order = old.rows.len() == new.rows.len()
        && old.rows.iter().zip(&new.rows).all(|(a, b)| a.id == b.id);
    if rows.is_empty() && removed.is_empty() && same_order && old.summary == new.summary {
        return None;
    }
    Some(Update {
        generation: new.generation,
        summary: new.summary.clone(),
        rows,
        removed,
        order: (!same_order).then(|| new.rows.iter().map(|r| r.id.clone()).collect()),
    })
}
