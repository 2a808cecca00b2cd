//! The dashboard's state, free of I/O: the tasks in tree order, the filter, the selection,
//! the detail of the selected task and the mode (filter, confirmation, peek). Keys turn
//! into [`Command`]s that the terminal loop carries out against the store.

use std::cell::Cell;
use std::collections::HashMap;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use warden_core::event::Event;
use warden_core::model::{Status, Task, TaskId};
use warden_core::progress::{GateStatus, Progress, gate_status};
use warden_core::tree::TreeIndex;

/// How many of the selected task's events the detail pane keeps.
pub const EVENTS_SHOWN: usize = 8;
/// How many lines of `output.log` the detail keeps for the pane and the peek popup.
pub const OUTPUT_LINES: usize = 200;

/// One line of the task table: a task in tree order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Index into [`App::tasks`].
    pub task: usize,
    /// Depth in the tree (0 for a root).
    pub depth: usize,
    /// The derived gate status (`None` for a pending task ready to start).
    pub gate: Option<GateStatus>,
    /// The status every view shows: a leaf's own, a group's derived from its children.
    pub status: Status,
    /// What holds a `BLOCKED` leaf back: the first dependency not done (its own, then
    /// its groups') and the status views show (`None`: no such task).
    pub blocked_by: Option<(TaskId, Option<Status>)>,
}

/// A `## Name` section found in TASK.md.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SectionInfo {
    /// The heading text.
    pub name: String,
    /// Has a non-whitespace character outside comments.
    pub has_content: bool,
    /// For `## Review`: the verdict (`PASS`/`FAIL`), if there is one.
    pub verdict: Option<&'static str>,
}

/// What the detail pane shows about the selected task, gathered by the terminal loop.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Detail {
    /// The task it belongs to.
    pub id: Option<TaskId>,
    /// Sections present in TASK.md, in file order (a repeated name once, as it counts).
    pub sections: Vec<SectionInfo>,
    /// Problems reading or parsing TASK.md, one line each.
    pub problems: Vec<String>,
    /// The last [`EVENTS_SHOWN`] events, oldest first.
    pub events: Vec<Event>,
    /// The memory, rendered (`warden_core::memory::render`); empty when there is none.
    pub memory: String,
    /// The last [`OUTPUT_LINES`] lines of `output.log`, made safe for the terminal.
    pub output: Vec<String>,
    /// Why there is no output (not captured yet, unreadable).
    pub output_note: Option<String>,
    /// What a person reads before deciding: the text of `## Handoff`, `## Review` and
    /// `## Questions` (where they count), each made safe for the terminal.
    pub texts: Vec<(String, Vec<String>)>,
}

/// What the keys are doing now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Moving around.
    Normal,
    /// Typing a filter after `/`.
    Filter,
    /// Waiting for `y`/`n` before carrying out this command.
    Confirm(Command),
    /// Typing the reason of a rejection of this task.
    Reason {
        /// The task in review, as the screen showed it.
        id: Seen,
        /// The reason so far.
        text: String,
    },
    /// The output popup is open.
    Peek,
    /// The selected task's detail, full screen.
    Detail,
}

/// A task as the screen showed it when its key was pressed: the action is refused (a
/// conflict) when the task changed before the answer (another review round, someone
/// else's retry), instead of acting on a task the person did not see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The task.
    pub id: TaskId,
    /// Its version on the screen.
    pub version: u64,
}

impl Seen {
    /// `t` as it is shown now.
    pub fn of(t: &Task) -> Seen {
        Seen {
            id: t.id().clone(),
            version: t.version(),
        }
    }
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.id.fmt(f)
    }
}

/// An action for the terminal loop to carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Leave the dashboard.
    Quit,
    /// `task respawn ID` (confirmed).
    Respawn(Seen),
    /// `task retry ID` with no changes (confirmed).
    Retry(Seen),
    /// `task cancel ID` (confirmed).
    Cancel(Seen),
    /// `task approve ID` (confirmed).
    Approve(Seen),
    /// `task reject ID --reason TEXT`.
    Reject(Seen, String),
}

impl Command {
    /// The question asked before it is carried out.
    pub fn question(&self) -> String {
        match self {
            Command::Quit => "Quit? y/n".into(),
            Command::Respawn(id) => {
                format!("Respawn {id}? The supervisor starts a new session for it. y/n")
            }
            Command::Retry(id) => {
                format!("Retry {id}? Its attempts reset and it runs again. y/n")
            }
            Command::Cancel(id) => format!("Cancel {id}? It becomes cancelled for good. y/n"),
            Command::Approve(id) => {
                format!("Approve {id}? It becomes done and its branch is merged into the base. y/n")
            }
            Command::Reject(id, _) => format!("Reject {id}? y/n"),
        }
    }

    /// What the status line says when the question is declined.
    fn declined(&self) -> String {
        match self {
            Command::Quit => "still here".into(),
            Command::Respawn(id) => format!("{id}: not respawned"),
            Command::Retry(id) => format!("{id}: not retried"),
            Command::Cancel(id) => format!("{id}: not cancelled"),
            Command::Approve(id) => format!("{id}: not approved"),
            Command::Reject(id, _) => format!("{id}: not rejected"),
        }
    }
}

/// A one-line message in the status line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Shown as an error (red) rather than a confirmation.
    pub error: bool,
    /// The text, as the CLI would print it.
    pub text: String,
}

/// The whole dashboard state. Rendering reads it; keys and reloads change it.
#[derive(Debug)]
pub struct App {
    project: String,
    tasks: Vec<Task>,
    rows: Vec<Row>,
    visible: Vec<usize>,
    selected: usize,
    /// The first visible table row, kept between frames so scrolling is smooth.
    pub(crate) offset: Cell<usize>,
    filter: String,
    mode: Mode,
    message: Option<Message>,
    detail: Option<Detail>,
    progress: Progress,
    counts: Vec<(Status, usize)>,
    dead: usize,
    /// The supervisors seen (`None` until the terminal loop first looked).
    supervisors: Option<Vec<warden_app::status::SupervisorView>>,
}

impl App {
    /// An empty dashboard for the project named `project`.
    pub fn new(project: impl Into<String>) -> App {
        App {
            project: project.into(),
            tasks: Vec::new(),
            rows: Vec::new(),
            visible: Vec::new(),
            selected: 0,
            offset: Cell::new(0),
            filter: String::new(),
            mode: Mode::Normal,
            message: None,
            detail: None,
            progress: Progress::of(std::iter::empty()),
            counts: Vec::new(),
            dead: 0,
            supervisors: None,
        }
    }

    /// Takes in what changed since the last look — `changed`, the tasks as stored now,
    /// and `gone`, the ids no longer stored — without reading the others again: with
    /// 100,000 tasks a reload of every task took 0.4 s and held two copies of them.
    pub fn update_tasks(&mut self, changed: Vec<Task>, gone: &[TaskId]) {
        let keep = self.selected_id().cloned();
        let mut tasks = std::mem::take(&mut self.tasks);
        if !gone.is_empty() {
            tasks.retain(|t| !gone.contains(t.id()));
        }
        for t in changed {
            match tasks.binary_search_by(|x| x.id().cmp(t.id())) {
                Ok(i) => tasks[i] = t,
                Err(i) => tasks.insert(i, t),
            }
        }
        self.install(tasks, keep);
    }

    /// Replaces the tasks (after a reload), keeping the selection on the same task when
    /// it is still shown. The detail is kept until the loop loads a fresh one.
    pub fn set_tasks(&mut self, tasks: Vec<Task>) {
        let keep = self.selected_id().cloned();
        self.install(tasks, keep);
    }

    fn install(&mut self, mut tasks: Vec<Task>, keep: Option<TaskId>) {
        // Kept in id order, so an update finds a task by binary search.
        if !tasks.is_sorted_by(|a, b| a.id() <= b.id()) {
            tasks.sort_by(|a, b| a.id().cmp(b.id()));
        }
        self.tasks = tasks;
        let (rows, progress, counts) = build_rows(&self.tasks);
        self.rows = rows;
        self.progress = progress;
        self.counts = Status::ALL
            .iter()
            .zip(counts)
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| (*s, n))
            .collect();
        self.dead = self.tasks.iter().filter(|t| t.is_dead()).count();
        self.refilter(keep.as_ref());
    }

    fn refilter(&mut self, keep: Option<&TaskId>) {
        let needle = self.filter.to_lowercase();
        self.visible = (0..self.rows.len())
            .filter(|&i| {
                needle.is_empty() || {
                    let t = &self.tasks[self.rows[i].task];
                    t.id().as_str().contains(&needle)
                        || t.spec.title.to_lowercase().contains(&needle)
                }
            })
            .collect();
        self.selected = keep
            .and_then(|id| {
                self.visible
                    .iter()
                    .position(|&r| self.tasks[self.rows[r].task].id() == id)
            })
            .unwrap_or(0)
            .min(self.visible.len().saturating_sub(1));
        if self.mode == Mode::Peek && self.selected_task().is_none() {
            self.mode = Mode::Normal;
        }
    }

    /// Handles one key press; returns what the terminal loop must do, if anything.
    pub fn on_key(&mut self, key: KeyEvent) -> Option<Command> {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Some(Command::Quit);
        }
        match self.mode.clone() {
            Mode::Filter => {
                match key.code {
                    KeyCode::Enter => self.mode = Mode::Normal,
                    KeyCode::Esc => {
                        self.mode = Mode::Normal;
                        self.set_filter(String::new());
                    }
                    KeyCode::Backspace => {
                        let mut f = self.filter.clone();
                        f.pop();
                        self.set_filter(f);
                    }
                    KeyCode::Char(c) if !c.is_control() => {
                        let f = format!("{}{c}", self.filter);
                        self.set_filter(f);
                    }
                    KeyCode::Up => self.move_by(-1),
                    KeyCode::Down => self.move_by(1),
                    _ => {}
                }
                None
            }
            Mode::Confirm(cmd) => {
                self.mode = Mode::Normal;
                if matches!(key.code, KeyCode::Char('y') | KeyCode::Char('Y')) {
                    self.message = None;
                    Some(cmd)
                } else {
                    self.message = Some(Message {
                        error: false,
                        text: cmd.declined(),
                    });
                    None
                }
            }
            Mode::Reason { id, mut text } => {
                match key.code {
                    KeyCode::Esc => {
                        self.mode = Mode::Normal;
                        self.message = Some(Message {
                            error: false,
                            text: format!("{id}: not rejected"),
                        });
                    }
                    KeyCode::Enter if text.trim().is_empty() => {
                        self.message = Some(Message {
                            error: true,
                            text: "a rejection needs a reason: say what the worker must change"
                                .into(),
                        });
                        self.mode = Mode::Reason { id, text };
                    }
                    KeyCode::Enter => {
                        self.mode = Mode::Normal;
                        self.message = None;
                        return Some(Command::Reject(id, text.trim().to_owned()));
                    }
                    KeyCode::Backspace => {
                        text.pop();
                        self.mode = Mode::Reason { id, text };
                    }
                    KeyCode::Char(c) if !c.is_control() => {
                        if text.chars().count() < warden_app::person::MAX_REASON_CHARS {
                            text.push(c);
                        }
                        self.mode = Mode::Reason { id, text };
                    }
                    _ => self.mode = Mode::Reason { id, text },
                }
                None
            }
            Mode::Detail => match key.code {
                KeyCode::Enter | KeyCode::Esc | KeyCode::Char('q') => {
                    self.mode = Mode::Normal;
                    None
                }
                _ => self.on_normal_key(key),
            },
            Mode::Peek => {
                match key.code {
                    KeyCode::Char('p') | KeyCode::Char('q') | KeyCode::Esc | KeyCode::Enter => {
                        self.mode = Mode::Normal
                    }
                    KeyCode::Up | KeyCode::Char('k') => self.move_by(-1),
                    KeyCode::Down | KeyCode::Char('j') => self.move_by(1),
                    _ => {}
                }
                None
            }
            Mode::Normal => self.on_normal_key(key),
        }
    }

    fn on_normal_key(&mut self, key: KeyEvent) -> Option<Command> {
        let seen = self.selected_task().map(Seen::of);
        let id = seen.as_ref().map(|s| &s.id);
        match key.code {
            KeyCode::Char('q') => return Some(Command::Quit),
            KeyCode::Esc if !self.filter.is_empty() => self.set_filter(String::new()),
            KeyCode::Esc => self.message = None,
            KeyCode::Up | KeyCode::Char('k') => self.move_by(-1),
            KeyCode::Down | KeyCode::Char('j') => self.move_by(1),
            KeyCode::PageUp => self.move_by(-10),
            KeyCode::PageDown => self.move_by(10),
            KeyCode::Home | KeyCode::Char('g') => self.selected = 0,
            KeyCode::End | KeyCode::Char('G') => {
                self.selected = self.visible.len().saturating_sub(1)
            }
            KeyCode::Char('/') => {
                self.mode = Mode::Filter;
                self.message = None;
            }
            KeyCode::Enter if id.is_some() => self.mode = Mode::Detail,
            KeyCode::Char('p') if id.is_some() => self.mode = Mode::Peek,
            KeyCode::Char('s') => self.ask(seen.map(Command::Respawn)),
            KeyCode::Char('r') => self.ask(seen.map(Command::Retry)),
            KeyCode::Char('c') => self.ask(seen.map(Command::Cancel)),
            KeyCode::Char('a') if self.in_review("approved") => {
                self.ask(seen.map(Command::Approve));
            }
            KeyCode::Char('x') => {
                if let Some(id) = seen
                    && self.in_review("rejected")
                {
                    self.message = None;
                    self.mode = Mode::Reason {
                        id,
                        text: String::new(),
                    };
                }
            }
            _ => {}
        }
        None
    }

    /// Asks before `cmd`.
    fn ask(&mut self, cmd: Option<Command>) {
        if let Some(cmd) = cmd {
            self.mode = Mode::Confirm(cmd);
            self.message = None;
        }
    }

    /// Is the selected task in review? Otherwise says so (the store decides again when
    /// the command runs).
    fn in_review(&mut self, verb: &str) -> bool {
        let Some(t) = self.selected_task() else {
            return false;
        };
        if t.status() == Status::Reviewing {
            return true;
        }
        let text = format!(
            "{} is {}; only a task in reviewing can be {verb}",
            t.id(),
            t.status()
        );
        self.message = Some(Message { error: true, text });
        false
    }

    /// Replaces the supervisors the header shows.
    pub fn set_supervisors(&mut self, sups: Vec<warden_app::status::SupervisorView>) {
        self.supervisors = Some(sups);
    }

    /// The supervisors seen, once looked for.
    pub fn supervisors(&self) -> Option<&[warden_app::status::SupervisorView]> {
        self.supervisors.as_deref()
    }

    fn move_by(&mut self, delta: isize) {
        let last = self.visible.len().saturating_sub(1);
        self.selected = self.selected.saturating_add_signed(delta).min(last);
    }

    /// Sets the filter (a case-insensitive substring of the id or the title).
    pub fn set_filter(&mut self, filter: String) {
        let keep = self.selected_id().cloned();
        self.filter = filter;
        self.refilter(keep.as_ref());
    }

    /// Selects the task with this id if it is shown.
    pub fn select(&mut self, id: &TaskId) {
        if let Some(p) = self
            .visible
            .iter()
            .position(|&r| self.tasks[self.rows[r].task].id() == id)
        {
            self.selected = p;
        }
    }

    /// Shows a message in the status line.
    pub fn set_message(&mut self, message: Message) {
        self.message = Some(message);
    }

    /// Replaces the detail of the selected task.
    pub fn set_detail(&mut self, detail: Detail) {
        self.detail = Some(detail);
    }

    /// The id whose detail must be loaded: the selected task, when the detail shown is
    /// of another task (or there is none yet).
    pub fn wants_detail(&self) -> Option<&TaskId> {
        let id = self.selected_id()?;
        match &self.detail {
            Some(d) if d.id.as_ref() == Some(id) => None,
            _ => Some(id),
        }
    }

    /// The project's name.
    pub fn project(&self) -> &str {
        &self.project
    }
    /// Every task, sorted by id.
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }
    /// The table rows in tree order (before the filter).
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }
    /// Indices into [`App::rows`] of the rows the filter lets through.
    pub fn visible(&self) -> &[usize] {
        &self.visible
    }
    /// The selected position in [`App::visible`].
    pub fn selected(&self) -> usize {
        self.selected
    }
    /// The selected task.
    pub fn selected_task(&self) -> Option<&Task> {
        let r = self.visible.get(self.selected)?;
        Some(&self.tasks[self.rows[*r].task])
    }
    /// The selected task's id.
    pub fn selected_id(&self) -> Option<&TaskId> {
        self.selected_task().map(|t| t.id())
    }
    /// The selected row.
    pub fn selected_row(&self) -> Option<&Row> {
        self.visible.get(self.selected).map(|&r| &self.rows[r])
    }
    /// The filter text.
    pub fn filter(&self) -> &str {
        &self.filter
    }
    /// The mode.
    pub fn mode(&self) -> &Mode {
        &self.mode
    }
    /// The status-line message.
    pub fn message(&self) -> Option<&Message> {
        self.message.as_ref()
    }
    /// The detail of the selected task, when it is loaded.
    pub fn detail(&self) -> Option<&Detail> {
        let d = self.detail.as_ref()?;
        (d.id.as_ref() == self.selected_id()).then_some(d)
    }
    /// Project progress over the leaves.
    pub fn progress(&self) -> Progress {
        self.progress
    }
    /// Tasks per status, statuses with none left out, in lifecycle order.
    pub fn counts(&self) -> &[(Status, usize)] {
        &self.counts
    }
    /// How many tasks have a dead session.
    pub fn dead(&self) -> usize {
        self.dead
    }
}

/// The table rows: every task depth-first in `(order, id)` order, with its depth and
/// gate status.
pub fn tree_rows(tasks: &[Task]) -> Vec<Row> {
    build_rows(tasks).0
}

/// The rows in tree order and the progress over the leaves, from one index of the tree.
/// The rows in tree order, the progress over leaves, and how many leaves are in each
/// status (in [`Status::ALL`]'s order): the header counts tasks as `warden status` and
/// the web console do, groups left out (their status is their tasks').
fn build_rows(tasks: &[Task]) -> (Vec<Row>, Progress, [usize; Status::ALL.len()]) {
    let sorted = tasks.is_sorted_by(|a, b| a.id() <= b.id());
    let index_of: HashMap<&TaskId, usize> = if sorted {
        HashMap::new()
    } else {
        tasks.iter().enumerate().map(|(i, t)| (t.id(), i)).collect()
    };
    let position = |id: &TaskId| -> usize {
        if sorted {
            tasks.binary_search_by(|t| t.id().cmp(id)).unwrap_or(0)
        } else {
            index_of[id]
        }
    };
    let idx = TreeIndex::new(tasks);
    // Depth by position: parents come before their children in tree order.
    let mut depth = vec![0usize; tasks.len()];
    let order = idx.depth_first();
    let mut rows = Vec::with_capacity(order.len());
    let mut leaves = Vec::new();
    for t in order {
        let at = position(t.id());
        let d = t
            .spec
            .parent
            .as_ref()
            .filter(|p| *p != t.id() && idx.get(p).is_some())
            .map_or(0, |p| depth[position(p)] + 1);
        depth[at] = d;
        if idx.is_leaf(t.id()) {
            leaves.push(t);
        }
        let unmet = idx.unmet(t);
        let gate = gate_status(t, unmet.is_none());
        rows.push(Row {
            task: at,
            depth: d,
            gate,
            status: idx.status(t),
            blocked_by: unmet
                .filter(|_| gate == Some(GateStatus::Blocked))
                .map(|(d, s)| (d.clone(), s)),
        });
    }
    let progress = Progress::of(leaves.iter().copied());
    let mut counts = [0usize; Status::ALL.len()];
    for t in &leaves {
        if let Some(k) = Status::ALL.iter().position(|s| *s == t.status()) {
            counts[k] += 1;
        }
    }
    (rows, progress, counts)
}
