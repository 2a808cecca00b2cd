//! The task model: ids, statuses, work specs, phases, and the task itself.
//!
//! A [`Task`] is split by ownership: [`TaskSpec`] holds what people (and agents, through
//! the tree protocol) may write; [`RunnerState`] holds what only Warden writes. Runner
//! fields are readable everywhere but can be changed only by the event fold in
//! [`crate::event`], so code that handles agent input cannot set them.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// A task id: `^[a-z0-9][a-z0-9._-]{0,63}$`. Never a path: no `/`, no leading dot, no `..`.
#[derive(Clone, Debug, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct TaskId(String);

/// Whether `c` may not appear in one line of plain text Warden shows a person (a title):
/// a control character or a line or paragraph separator (U+2028, U+2029: a line break
/// would split a table row, an escape drive the terminal), or a bidirectional-text
/// control (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), which reorders what a
/// reader sees after it (`exe.txt` shown for `txt.exe`).
pub fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{061c}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

/// Byte equality as `==` on slices, without the call to `memcmp` for strings of up to
/// 16 bytes (every id a plan uses, most titles): a tree reconcile compares several per
/// node, and the call costs more than the comparison.
#[inline]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    // Two overlapping fixed-size loads cover any length between the size and twice it.
    fn word8(s: &[u8], at: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[at..at + 8]);
        u64::from_ne_bytes(w)
    }
    fn word4(s: &[u8], at: usize) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&s[at..at + 4]);
        u32::from_ne_bytes(w)
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}

impl PartialEq for TaskId {
    #[inline]
    fn eq(&self, other: &TaskId) -> bool {
        same_bytes(self.0.as_bytes(), other.0.as_bytes())
    }
}

// By hand beside `PartialEq`, as the derive would: equal ids hash alike.
impl std::hash::Hash for TaskId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// Why a string is not a valid [`TaskId`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The id is empty.
    #[error("task id is empty; use 1-64 characters from a-z, 0-9, '.', '_' and '-'")]
    Empty,
    /// The id is longer than 64 characters.
    #[error("task id {0:?} is longer than 64 characters; shorten it")]
    TooLong(String),
    /// The id has a character outside the allowed set, or starts with one that may not lead.
    #[error(
        "task id {0:?} is invalid; use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"
    )]
    BadChar(String),
    /// The id cannot be part of a git branch name (`warden/<id>`).
    #[error("task id {id} cannot name a git branch ({why}); choose another id")]
    NotABranch {
        /// The id.
        id: String,
        /// What git refuses.
        why: &'static str,
    },
}

impl TaskId {
    /// Validates and wraps an id.
    pub fn new(s: &str) -> Result<TaskId, IdError> {
        let [first, rest @ ..] = s.as_bytes() else {
            return Err(IdError::Empty);
        };
        // Every allowed character is one byte: a valid id's length in characters is its
        // length in bytes, and only an invalid one needs its characters counted (a store
        // checks every id it reads, tens of thousands for one `task list`).
        let lead_ok = first.is_ascii_lowercase() || first.is_ascii_digit();
        let valid = lead_ok
            && rest.iter().all(|&c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
            });
        let too_long = if valid {
            s.len() > 64
        } else {
            s.chars().count() > 64
        };
        if too_long {
            return Err(IdError::TooLong(truncate_for_message(s)));
        }
        if !valid {
            return Err(IdError::BadChar(truncate_for_message(s)));
        }
        Ok(TaskId(s.to_owned()))
    }

    /// Validates an id for a new task: [`TaskId::new`]'s rules, and it must also be a
    /// valid git ref component, since its branch is `warden/<id>`. (Reading keeps
    /// accepting ids stored before this rule, so an old store still opens.)
    pub fn new_task(s: &str) -> Result<TaskId, IdError> {
        let id = TaskId::new(s)?;
        match id.branch_problem() {
            Some(why) => Err(IdError::NotABranch { id: id.0, why }),
            None => Ok(id),
        }
    }

    /// Why git would refuse `warden/<id>` as a branch name, if it would.
    pub fn branch_problem(&self) -> Option<&'static str> {
        // A byte scan: `str::contains` searches with a `memcmp` per candidate.
        if self
            .0
            .as_bytes()
            .windows(2)
            .any(|w| w[0] == b'.' && w[1] == b'.')
        {
            Some("it contains \"..\"")
        } else if self.0.ends_with(".lock") {
            Some("it ends with \".lock\"")
        } else if self.0.ends_with('.') {
            Some("it ends with \".\"")
        } else {
            None
        }
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn truncate_for_message(s: &str) -> String {
    s.chars().take(80).collect()
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TaskId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskId::new(s)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TaskId::new(&s).map_err(serde::de::Error::custom)
    }
}

/// Defines a string-named enum with `as_str`, `ALL`, `Display`, `FromStr` and serde.
macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident, $what:literal { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($(#[$vm])* $v),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v),+];
            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
            /// Parses a wire name.
            pub fn parse(s: &str) -> Option<$name> {
                match s { $($s => Some($name::$v),)+ _ => None }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::parse(s.trim()).ok_or_else(|| {
                    let all: Vec<&str> = $name::ALL.iter().map(|v| v.as_str()).collect();
                    format!("unknown {} {:?}; use one of: {}", $what, s, all.join(", "))
                })
            }
        }
        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use named_enum;

named_enum!(
    /// A task's lifecycle state (seed 001's names).
    Status, "status" {
        /// Created, not started.
        Pending = "pending",
        /// Waiting for a person's answer.
        Clarification = "clarification",
        /// A worker is implementing.
        Working = "working",
        /// A review agent is reviewing.
        AgentReview = "agent-review",
        /// The agent review passed; a person reviews.
        Reviewing = "reviewing",
        /// Needs a person: attempts exhausted, reviews failed, or crashes.
        Stuck = "stuck",
        /// Accepted. Terminal.
        Done = "done",
        /// Abandoned. Terminal.
        Cancelled = "cancelled",
    }
);

impl Status {
    /// `done` and `cancelled` never change.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Done | Status::Cancelled)
    }
}

named_enum!(
    /// Which transition map governs a task.
    WorkflowKind, "workflow" {
        /// Seed 001's map with artifact gates (default for agent work).
        Review = "review",
        /// Guard only (seed 000): `pending → working → done | stuck`.
        Direct = "direct",
    }
);

named_enum!(
    /// The role of an agent session.
    Role, "role" {
        /// Implements the task.
        Worker = "worker",
        /// Reviews the worker's result.
        Reviewer = "reviewer",
    }
);

named_enum!(
    /// How an agent harness is started, given its prompt, named, resumed and hooked
    /// (`[agent] preset` in warden.toml, or a task's own `preset`).
    AgentPreset, "agent preset" {
        /// Claude Code (`claude -p`).
        Claude = "claude",
        /// Codex (`codex exec`).
        Codex = "codex",
        /// aider (`aider --message-file`).
        Aider = "aider",
        /// The argv template of `[agent] command`.
        Custom = "custom",
    }
);

named_enum!(
    /// One step of the phase pipeline (seed 004), in execution order.
    Phase, "phase" {
        /// Merge the branches of done dependencies into the worktree.
        MergeFi = "merge-fi",
        /// Checks before the work.
        Prechecks = "prechecks",
        /// The work itself (shell, process or agent session).
        Work = "work",
        /// Commit the worktree if it changed.
        Commit = "commit",
        /// Checks after the work: the guard.
        Postchecks = "postchecks",
        /// Merge the task branch back into the base branch.
        MergeRi = "merge-ri",
    }
);

named_enum!(
    /// The status of one phase.
    PhaseStatus, "phase status" {
        /// Not run yet (or reset by a retry).
        Pending = "pending",
        /// Running now.
        Running = "running",
        /// Ran and succeeded; never run again unless a retry resets it.
        Success = "success",
        /// Ran and failed.
        Failed = "failed",
        /// Nothing to do (no spec, no git, nothing to commit).
        Skipped = "skipped",
    }
);

impl Phase {
    /// The index of the phase in execution order.
    pub fn index(self) -> usize {
        Phase::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }
}

/// What a phase runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum WorkSpec {
    /// Run by `sh -c` (a person's own shell line).
    Shell(String),
    /// Run by argv, never through a shell.
    Process(Vec<String>),
    /// An agent session with these instructions.
    Agent(String),
}

impl WorkSpec {
    /// Is this an agent session?
    pub fn is_agent(&self) -> bool {
        matches!(self, WorkSpec::Agent(_))
    }
}

/// The three user-owned specs of a task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Specs {
    /// The work; `None` in the review workflow means "the configured agent, with the
    /// title and body as instructions".
    pub work: Option<WorkSpec>,
    /// Checks run before the work.
    pub prechecks: Option<WorkSpec>,
    /// Checks run after the work: the guard.
    pub postchecks: Option<WorkSpec>,
}

/// Fields a person owns (agents may edit title, body, order and parent through the tree
/// protocol). Nothing here is runner state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// The id.
    pub id: TaskId,
    /// A one-line title; defaults to the id.
    pub title: String,
    /// Free text: instructions and context.
    #[serde(default)]
    pub body: String,
    /// The parent in the tree, if any.
    #[serde(default)]
    pub parent: Option<TaskId>,
    /// Sort key among siblings (ties broken by id).
    #[serde(default)]
    pub order: i64,
    /// Tasks that must be `done` before this one is scheduled.
    #[serde(default)]
    pub depends_on: Vec<TaskId>,
    /// The workflow.
    pub workflow: WorkflowKind,
    /// Work, prechecks, postchecks.
    #[serde(default)]
    pub spec: Specs,
    /// Failed attempts allowed before the task is stuck.
    pub max_attempts: u32,
    /// A file, relative to the project root, whose content counts as this task's
    /// `## Handoff` (DESIGN 2.1's gate at `working → agent-review`, and exit monitoring):
    /// a get-shit-done plan's `NN-MM-SUMMARY.md`. Read at the moment of the transition,
    /// in the task's worktree first, then in the project root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// What made the task when a tool did: `plan sync` changes only the tasks it made.
    /// Boxed: most tasks have none, and a smaller spec keeps a 100k-node `plan apply`
    /// writing its output over the file's own nodes (see `tree::ReconciledNode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Box<Origin>>,
    /// The agent preset this task's sessions use instead of the configured default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<AgentPreset>,
}

/// The tool that made a task and what the task stands for in that tool's files.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    /// The tool: `gsd` (`plan sync` of a get-shit-done `.planning/` directory).
    pub tool: String,
    /// The directory the tool read: relative to the project root when inside it (then
    /// Warden also writes back there), else absolute.
    pub root: String,
    /// The file or directory the task stands for, relative to `root`.
    pub path: String,
}

/// Whether `path` is a relative path that stays inside the directory it is relative to:
/// not empty, not absolute, no `..`, no NUL, `/`-separated. (Symlinks are the reader's
/// concern: Warden's safe reads refuse them.)
pub fn is_inside_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 4096
        && !path.starts_with('/')
        && !path.contains(['\\', '\0'])
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

impl TaskSpec {
    /// A spec with defaults: title = id, no specs, `workflow` as given.
    pub fn new(id: TaskId, workflow: WorkflowKind, max_attempts: u32) -> TaskSpec {
        TaskSpec {
            title: id.as_str().to_owned(),
            id,
            body: String::new(),
            parent: None,
            order: 0,
            depends_on: Vec::new(),
            workflow,
            spec: Specs::default(),
            max_attempts,
            evidence: None,
            origin: None,
            preset: None,
        }
    }

    /// Is the work of this task an agent session? (No work spec in the review workflow
    /// means the configured agent.)
    pub fn work_is_agent(&self) -> bool {
        match &self.spec.work {
            Some(w) => w.is_agent(),
            None => self.workflow == WorkflowKind::Review,
        }
    }
}

/// The status of every phase, keyed by phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phases {
    #[serde(rename = "merge-fi")]
    merge_fi: PhaseStatus,
    prechecks: PhaseStatus,
    work: PhaseStatus,
    commit: PhaseStatus,
    postchecks: PhaseStatus,
    #[serde(rename = "merge-ri")]
    merge_ri: PhaseStatus,
}

impl Default for Phases {
    fn default() -> Self {
        Phases {
            merge_fi: PhaseStatus::Pending,
            prechecks: PhaseStatus::Pending,
            work: PhaseStatus::Pending,
            commit: PhaseStatus::Pending,
            postchecks: PhaseStatus::Pending,
            merge_ri: PhaseStatus::Pending,
        }
    }
}

impl Phases {
    /// Is every phase pending (a task whose pipeline has not run)?
    pub fn all_pending(&self) -> bool {
        *self == Phases::default()
    }

    /// The status of one phase.
    pub fn get(&self, p: Phase) -> PhaseStatus {
        match p {
            Phase::MergeFi => self.merge_fi,
            Phase::Prechecks => self.prechecks,
            Phase::Work => self.work,
            Phase::Commit => self.commit,
            Phase::Postchecks => self.postchecks,
            Phase::MergeRi => self.merge_ri,
        }
    }

    pub(crate) fn set(&mut self, p: Phase, s: PhaseStatus) {
        let slot = match p {
            Phase::MergeFi => &mut self.merge_fi,
            Phase::Prechecks => &mut self.prechecks,
            Phase::Work => &mut self.work,
            Phase::Commit => &mut self.commit,
            Phase::Postchecks => &mut self.postchecks,
            Phase::MergeRi => &mut self.merge_ri,
        };
        *slot = s;
    }

    /// `(phase, status)` pairs in execution order.
    pub fn iter(&self) -> impl Iterator<Item = (Phase, PhaseStatus)> + '_ {
        Phase::ALL.iter().map(|p| (*p, self.get(*p)))
    }

    /// The earliest failed phase, if any.
    pub fn first_failed(&self) -> Option<Phase> {
        self.iter()
            .find(|(_, s)| *s == PhaseStatus::Failed)
            .map(|(p, _)| p)
    }
}

/// A session Warden started for a task. Its record stays until its end is reported,
/// whatever happens to the task meanwhile: a session that outlives the status it was
/// started for is still Warden's to stop (DESIGN 6, "at most one live session").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session id Warden gave it.
    pub id: String,
    /// Worker or reviewer.
    pub role: Role,
    /// Which status entry it was started for (see [`RunnerState::entry`]).
    pub entry: u32,
    /// When it was recorded (just before it started).
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    /// Its end was reported (once; later reports of it are duplicates).
    #[serde(default)]
    pub ended: bool,
    /// It never started: its runner stopped between recording it and starting it (see
    /// [`crate::event::Disposition::Unstarted`]). Ended, and not the agent's crash.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unstarted: bool,
    /// Warden asked it to stop (`session.stopped`), when and why.
    #[serde(default)]
    pub stop: Option<SessionStop>,
    /// A heal session: started to fix a failed phase, not to do the work; its end is not
    /// a crash, and the phase runs again after it.
    #[serde(default)]
    pub heal: Option<Phase>,
    /// The agent harness's own conversation id (Claude Code's session id, Codex's thread
    /// id), as its session-start hook reported it: a later session of the same role
    /// resumes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
}

/// How many ids of sessions Warden did not start are remembered as reported.
pub const REPORTED_SESSIONS_KEPT: usize = 32;

/// Warden's request that a session stop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStop {
    /// When the stop was sent.
    pub at: Timestamp,
    /// Why.
    pub reason: String,
}

/// Fields only Warden writes. Read them through the getters; they change only through
/// the event fold (`crate::event::apply`).
///
/// Stored as JSON with every field at its default left out (a fresh task's runner state
/// is 170 bytes instead of 600): a store of 100,000 tasks reads and decodes that much
/// less for every view of all of them, and every field left out reads back as its
/// default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerState {
    pub(crate) status: Status,
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) passes: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) attempts: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) crash_count: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) review_round: u32,
    /// `review_round` when a person last retried the task: the rounds it has left are
    /// counted from there.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) review_base: u32,
    #[serde(default, skip_serializing_if = "Phases::all_pending")]
    pub(crate) phases: Phases,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resume_from_phase: Option<Phase>,
    /// Phases whose one automatic heal has been used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) auto_heal: Vec<Phase>,
    pub(crate) version: u64,
    pub(crate) created_at: Timestamp,
    pub(crate) updated_at: Timestamp,
    /// Counts entries into a status; a session belongs to the entry it was started for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) entry: u32,
    /// Every session Warden started for this task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) sessions: Vec<SessionRecord>,
    /// The session believed alive, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) live_session: Option<String>,
    /// Ids of sessions Warden did not start (an agent harness's own) whose end was
    /// reported, so a second report of one is a duplicate (the last 32 are kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) reported: Vec<String>,
    /// The current session ended without advancing: shown as ✗ until something happens.
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) dead: bool,
    /// A new session is wanted: a person asked (`task respawn`), or the one the runner
    /// meant to start never started.
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) respawn_requested: bool,
    /// Why the task last failed or got stuck, for STATE.md and prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_failure: Option<String>,
    /// When the current status was entered, and by whom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) entered_at: Option<Timestamp>,
    #[serde(default = "default_actor")]
    pub(crate) entered_by: crate::event::Actor,
    /// When the last failed attempt was charged (the retry backoff counts from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_failure_at: Option<Timestamp>,
    /// A retry asked for the worktree to be reset to its base before the next run.
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) clear_worktree: bool,
    /// A phase whose automatic heal was granted and whose heal session has not started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) healing: Option<Phase>,
    /// A person's reason for sending the work back (`task reject`), for the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) feedback: Option<String>,
    /// Evidence already judged (a hand-off or review that moved the task), newest last, the last [`JUDGED_KEPT`]: what an earlier round
    /// left in TASK.md never counts for a later one (DESIGN 6: `passes` describes the
    /// current attempt's evidence, never a past one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) judged: Vec<crate::event::EvidenceRef>,
    /// The hand-off whose guard failed in the current status entry: its attempt is
    /// spent, so a session that ends with it is not judged (nor charged) again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) refused: Option<crate::event::EvidenceRef>,
}

/// How many judged pieces of evidence a task remembers.
pub const JUDGED_KEPT: usize = 8;

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn default_actor() -> crate::event::Actor {
    crate::event::Actor::Runner
}

impl RunnerState {
    pub(crate) fn new(status: Status, passes: bool, attempts: u32, at: Timestamp) -> Self {
        RunnerState {
            status,
            passes,
            attempts,
            crash_count: 0,
            review_round: 0,
            review_base: 0,
            phases: Phases::default(),
            resume_from_phase: None,
            auto_heal: Vec::new(),
            version: 0,
            created_at: at,
            updated_at: at,
            entry: 0,
            sessions: Vec::new(),
            live_session: None,
            reported: Vec::new(),
            dead: false,
            respawn_requested: false,
            last_failure: None,
            entered_at: Some(at),
            entered_by: crate::event::Actor::Person,
            last_failure_at: None,
            clear_worktree: false,
            healing: None,
            feedback: None,
            judged: Vec::new(),
            refused: None,
        }
    }
}

/// A task: the user-owned spec plus the runner-owned state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// User-owned fields.
    pub spec: TaskSpec,
    /// Runner-owned fields (read-only outside the core).
    pub(crate) runner: RunnerState,
}

impl Task {
    /// The id.
    pub fn id(&self) -> &TaskId {
        &self.spec.id
    }
    /// Runner-owned fields.
    pub fn runner(&self) -> &RunnerState {
        &self.runner
    }
    /// Lifecycle status.
    pub fn status(&self) -> Status {
        self.runner.status
    }
    /// Accepted (leaf) or all children pass (group).
    pub fn passes(&self) -> bool {
        self.runner.passes
    }
    /// Failed attempts so far.
    pub fn attempts(&self) -> u32 {
        self.runner.attempts
    }
    /// Sessions that ended without the required artifact since the last transition.
    pub fn crash_count(&self) -> u32 {
        self.runner.crash_count
    }
    /// The evidence of `artifacts` this task has not judged yet: a `## Handoff` or
    /// `## Review` an earlier round left (the same content in the same place) counts as
    /// none, so a round moves the task only on what it wrote itself.
    pub fn fresh(&self, artifacts: &crate::artifact::Artifacts) -> crate::artifact::Artifacts {
        let judged = |e: &Option<crate::artifact::Evidence>| {
            e.as_ref()
                .is_some_and(|e| self.runner.judged.iter().any(|j| j.is(e)))
        };
        let mut out = artifacts.clone();
        if judged(&out.handoff) {
            out.handoff = None;
        }
        if judged(&out.review) {
            out.review = None;
            out.verdict = None;
        }
        out
    }
    /// The phase that runs now, if one does: one marked `running` while the task is
    /// under way (working or in review) with no dead session. A phase left `running` by a
    /// task that was cancelled, got stuck or waits for an answer runs no more: its
    /// sessions were stopped or are gone.
    pub fn running_phase(&self) -> Option<Phase> {
        let under_way = matches!(
            self.status(),
            Status::Working | Status::AgentReview | Status::Reviewing
        ) && !self.is_dead();
        Phase::ALL
            .iter()
            .copied()
            .filter(|_| under_way)
            .find(|p| self.phases().get(*p) == PhaseStatus::Running)
    }
    /// Is `e` the hand-off whose guard failed in the current status entry?
    pub fn refused_handoff(&self, e: &crate::artifact::Evidence) -> bool {
        self.runner.refused.as_ref().is_some_and(|r| r.is(e))
    }
    /// Entries into `agent-review` since a person last retried the task (all of them
    /// when never retried): the round `max_review_rounds` is counted against.
    pub fn review_round(&self) -> u32 {
        self.runner.review_round - self.runner.review_base
    }
    /// Has any review of this task been done (before a retry too)? A worker after one
    /// is fixing what it found.
    pub fn was_reviewed(&self) -> bool {
        self.runner.review_round > 0
    }
    /// Phase statuses.
    pub fn phases(&self) -> &Phases {
        &self.runner.phases
    }
    /// Where the next run of the pipeline starts, after a retry.
    pub fn resume_from_phase(&self) -> Option<Phase> {
        self.runner.resume_from_phase
    }
    /// Phases whose automatic heal was used.
    pub fn auto_heal(&self) -> &[Phase] {
        &self.runner.auto_heal
    }
    /// Incremented by every write.
    pub fn version(&self) -> u64 {
        self.runner.version
    }
    /// When the task was created.
    pub fn created_at(&self) -> Timestamp {
        self.runner.created_at
    }
    /// When the task last changed.
    pub fn updated_at(&self) -> Timestamp {
        self.runner.updated_at
    }
    /// The session believed alive.
    pub fn live_session(&self) -> Option<&str> {
        self.runner.live_session.as_deref()
    }
    /// Sessions Warden started for this task.
    pub fn sessions(&self) -> &[SessionRecord] {
        &self.runner.sessions
    }
    /// The status-entry counter.
    pub fn entry(&self) -> u32 {
        self.runner.entry
    }
    /// The last session ended without advancing the task.
    pub fn is_dead(&self) -> bool {
        self.runner.dead
    }
    /// A new session is wanted (a person asked, or the last one never started).
    pub fn respawn_requested(&self) -> bool {
        self.runner.respawn_requested
    }
    /// Why the task last failed, if known.
    pub fn last_failure(&self) -> Option<&str> {
        self.runner.last_failure.as_deref()
    }
    /// When the current status was entered (the creation time for an old record).
    pub fn entered_at(&self) -> Timestamp {
        self.runner.entered_at.unwrap_or(self.runner.updated_at)
    }
    /// Who moved the task into its current status.
    pub fn entered_by(&self) -> crate::event::Actor {
        self.runner.entered_by
    }
    /// When the last failed attempt was charged.
    pub fn last_failure_at(&self) -> Option<Timestamp> {
        self.runner.last_failure_at
    }
    /// A retry asked for the worktree to be reset before the next run.
    pub fn clear_worktree_pending(&self) -> bool {
        self.runner.clear_worktree
    }
    /// A phase whose heal session is due.
    pub fn healing(&self) -> Option<Phase> {
        self.runner.healing
    }
    /// A person's reason for sending the work back.
    pub fn feedback(&self) -> Option<&str> {
        self.runner.feedback.as_deref()
    }
    /// Sessions whose end has not been reported: believed to be running.
    pub fn open_sessions(&self) -> impl Iterator<Item = &SessionRecord> {
        self.runner.sessions.iter().filter(|s| !s.ended)
    }
    /// The conversation of the last session in `role` whose harness reported one: what a
    /// new session of that role resumes.
    pub fn last_conversation(&self, role: Role) -> Option<&str> {
        self.runner
            .sessions
            .iter()
            .rev()
            .filter(|s| s.role == role)
            .find_map(|s| s.conversation.as_deref())
    }
    /// Has the current status entry had a work session (heal sessions aside)?
    pub fn had_session(&self) -> bool {
        self.runner
            .sessions
            .iter()
            .any(|s| s.entry == self.runner.entry && s.heal.is_none())
    }
    /// The git branch of the task.
    pub fn branch(&self) -> String {
        format!("warden/{}", self.spec.id)
    }
    /// Is the work an agent session?
    pub fn work_is_agent(&self) -> bool {
        self.spec.work_is_agent()
    }
}

/// Limits from configuration, passed into every rule that needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Default `max_attempts` for new tasks.
    pub max_attempts: u32,
    /// Crashes in one status before the task is stuck.
    pub crash_threshold: u32,
    /// Review rounds before a FAIL makes the task stuck.
    pub max_review_rounds: u32,
    /// Seconds a phase may run.
    pub phase_timeout_s: u64,
    /// Seconds a worker may go on after its hand-off (entering agent-review) before it
    /// is stopped; the reviewer starts only after it has ended.
    pub handoff_grace_s: u64,
    /// Seconds between a stop's TERM and its KILL.
    pub kill_after_s: u64,
    /// Seconds before the second attempt of shell or process work; doubled for every
    /// attempt after it.
    pub retry_backoff_s: u64,
    /// The longest wait between attempts, in seconds.
    pub retry_backoff_max_s: u64,
    /// MiB of output a session may write to its `output.log` before its process group
    /// is killed (a runaway program would otherwise fill the disk); 0: no limit.
    pub session_log_mib: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_attempts: 3,
            crash_threshold: 2,
            max_review_rounds: 2,
            phase_timeout_s: 3600,
            handoff_grace_s: 30,
            kill_after_s: 5,
            retry_backoff_s: 2,
            retry_backoff_max_s: 300,
            session_log_mib: 1024,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `same_bytes` is `==`: for every length up to past its fast paths, equal strings
    /// and strings that differ in any one byte (or only in length).
    #[test]
    fn same_bytes_is_slice_equality() {
        for n in 0..40usize {
            let a: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(same_bytes(&a, &a.clone()), "{n}");
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_bytes(&a, &b), "{n} at {at}");
                assert!(!same_bytes(&b, &a), "{n} at {at}");
            }
            let mut longer = a.clone();
            longer.push(b'z');
            assert!(!same_bytes(&a, &longer), "{n}");
        }
        let (x, y) = (TaskId::new("t10").unwrap(), TaskId::new("t10").unwrap());
        assert_eq!(x, y);
        assert_ne!(x, TaskId::new("t11").unwrap());
        assert_ne!(x, TaskId::new("t1").unwrap());
    }

    proptest::proptest! {
        #[test]
        fn same_bytes_agrees_with_eq(
            a in proptest::collection::vec(0u8..4, 0..24),
            b in proptest::collection::vec(0u8..4, 0..24),
        ) {
            proptest::prop_assert_eq!(same_bytes(&a, &b), a == b);
        }
    }

    /// [`TaskId::new`]'s rules as they read: too long in characters first, then any
    /// character outside the set.
    fn id_by_the_rules(s: &str) -> Result<(), &'static str> {
        let mut chars = s.chars();
        let Some(first) = chars.next() else {
            return Err("empty");
        };
        if s.chars().count() > 64 {
            return Err("too long");
        }
        let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        if allowed(first) && chars.all(|c| allowed(c) || ".-_".contains(c)) {
            Ok(())
        } else {
            Err("bad char")
        }
    }

    proptest::proptest! {
        #[test]
        fn an_id_is_checked_by_the_rules(s in "[a9._\\-Aé/ ]{0,70}") {
            let got = match TaskId::new(&s) {
                Ok(_) => Ok(()),
                Err(IdError::Empty) => Err("empty"),
                Err(IdError::TooLong(_)) => Err("too long"),
                Err(IdError::BadChar(_)) => Err("bad char"),
                Err(e) => panic!("{e}"),
            };
            proptest::prop_assert_eq!(got, id_by_the_rules(&s));
        }
    }

    #[test]
    fn an_id_is_measured_in_characters() {
        // 33 characters in 66 bytes: within the length, outside the character set.
        assert!(matches!(
            TaskId::new(&"é".repeat(33)),
            Err(IdError::BadChar(_))
        ));
        assert!(matches!(
            TaskId::new(&"é".repeat(65)),
            Err(IdError::TooLong(_))
        ));
        assert!(matches!(
            TaskId::new(&"a".repeat(65)),
            Err(IdError::TooLong(_))
        ));
    }

    fn check_id(s: &str, ok: bool) {
        assert_eq!(TaskId::new(s).is_ok(), ok, "{s:?}");
    }

    #[test]
    fn ids() {
        check_id("a", true);
        check_id("login-page", true);
        check_id("01-setup.v2_x", true);
        check_id(&"a".repeat(64), true);
        check_id(&"a".repeat(65), false);
        check_id("", false);
        check_id("../x", false);
        check_id("a/b", false);
        check_id(".hidden", false);
        check_id("-x", false);
        check_id("Upper", false);
        check_id("a b", false);
        check_id("é", false);
    }

    #[test]
    fn names_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(*s));
        }
        for p in Phase::ALL {
            assert_eq!(Phase::ALL[p.index()], *p);
        }
        assert!(
            "bogus"
                .parse::<Status>()
                .unwrap_err()
                .contains("agent-review")
        );
    }

    #[test]
    fn workspec_wire_shape() {
        let w: WorkSpec = serde_json::from_str(r#"{"shell": "make test"}"#).unwrap();
        assert_eq!(w, WorkSpec::Shell("make test".into()));
        let w: WorkSpec = serde_json::from_str(r#"{"process": ["cargo", "test"]}"#).unwrap();
        assert_eq!(w, WorkSpec::Process(vec!["cargo".into(), "test".into()]));
        assert_eq!(
            serde_json::to_string(&WorkSpec::Agent("do it".into())).unwrap(),
            r#"{"agent":"do it"}"#
        );
    }
}
