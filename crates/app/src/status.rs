//! `warden status`: the one screen a person opens first. What needs them (reviews to
//! approve, questions, stuck tasks, dead sessions), what is running, whether a supervisor
//! is alive and where, and the progress — each item with the command that acts on it.
//!
//! Supervisors are seen two ways: each `warden run` announces itself in
//! `.warden/runners/` while it lives (so an idle one on this machine is seen too), and
//! every lease names its holder (so a runner on another machine sharing a PostgreSQL
//! store is seen while it holds a task).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use warden_core::artifact;
use warden_core::model::{Phase, Role, Status, Task, TaskId};
use warden_store::Workspace;

use crate::supervisor::StepFailure;
use crate::{App, Result};

/// Why a task waits for a person.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Need {
    /// A review to approve or reject.
    Review,
    /// An agent asked questions (`clarification`).
    Question,
    /// Stuck: out of attempts, crashes or review rounds.
    Stuck,
    /// Its session died without its artifact; nothing restarts it by itself.
    Dead,
    /// It depends on a cancelled task, which can never be done: only a person's edit
    /// of its dependencies moves it on.
    Blocked,
}

impl Need {
    /// A short word for the screen.
    pub fn as_str(self) -> &'static str {
        match self {
            Need::Review => "review",
            Need::Question => "question",
            Need::Stuck => "stuck",
            Need::Dead => "dead",
            Need::Blocked => "blocked",
        }
    }
}

/// One task that waits for a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NeedsYou {
    /// The task.
    pub id: TaskId,
    /// Its title.
    pub title: String,
    /// Its status.
    pub status: Status,
    /// Why it waits.
    pub need: Need,
    /// The review's verdict (`pass`/`fail`), for a review.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// What to read first: the review's findings, the questions, the last failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The commands that act on it.
    pub commands: Vec<String>,
}

/// One task being worked on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Running {
    /// The task.
    pub id: TaskId,
    /// Its title.
    pub title: String,
    /// Its status.
    pub status: Status,
    /// The phase running, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The live session, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Its role.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// When the session started, else when the task entered its status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// Sessions of an earlier step still running: a worker in its `handoff_grace_s`
    /// after its hand-off, or one being stopped (a cancel, a move by a person).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub finishing: Vec<String>,
}

/// A supervisor (`warden run`) seen from here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SupervisorView {
    /// Its lease owner id (`host:pid:start`).
    pub owner: String,
    /// Its host.
    pub host: String,
    /// Its process id on that host.
    pub pid: u32,
    /// On this machine: whether the process is alive. `None` on another host (its
    /// leases' expiry says it renews).
    pub alive: Option<bool>,
    /// When it started, if it announced itself here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// The tasks whose lease it holds.
    pub tasks: Vec<TaskId>,
    /// Tasks whose steps failed on its side, in a row, as it last announced them (it
    /// tries each again after a wait of at most a minute).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<StepFailure>,
}

/// The progress over the leaves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProgressView {
    /// Leaves that pass.
    pub complete: usize,
    /// Leaves that count (not cancelled).
    pub total: usize,
    /// `floor(complete / total * 100)`.
    pub percentage: u32,
    /// The 20-cell bar of STATE.md.
    pub bar: String,
    /// `Ready to plan`, `Planning`, `In progress`, `Verifying` or `Complete`.
    pub status: String,
    /// Leaves per status, statuses with none left out, in lifecycle order.
    pub counts: Vec<(Status, usize)>,
}

/// What `warden status` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StatusView {
    /// The project root.
    pub root: String,
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// Progress.
    pub progress: ProgressView,
    /// What waits for a person, most urgent first (reviews, questions, stuck, dead,
    /// blocked for ever).
    pub needs_you: Vec<NeedsYou>,
    /// What runs now.
    pub running: Vec<Running>,
    /// The supervisors seen: none means nothing moves until someone runs `warden run`.
    pub supervisors: Vec<SupervisorView>,
    /// At least one supervisor is alive (or, on another host, holds an unexpired lease).
    pub supervisor_alive: bool,
    /// With no supervisor alive: the tasks whose steps kept failing when the last one
    /// stopped (`run --until-idle` gives up on them after three tries), so the cause is
    /// still shown after the run's own output is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
}

/// What the last supervisor left failing when it stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastRun {
    /// When it stopped.
    pub stopped_at: Timestamp,
    /// Its tasks whose steps failed in a row.
    pub failing: Vec<StepFailure>,
}

impl LastRun {
    fn path(ws: &Workspace) -> PathBuf {
        Presence::dir(ws).join("last-run-failing")
    }

    /// The record, if the last supervisor left one.
    fn read(ws: &Workspace) -> Option<LastRun> {
        let path = LastRun::path(ws);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() || meta.len() > PRESENCE_MAX_BYTES {
            return None;
        }
        serde_json::from_slice(&std::fs::read(&path).ok()?).ok()
    }
}

/// The longest detail line shown per item, in characters.
const DETAIL_CHARS: usize = 300;

impl App {
    /// The progress over the leaves (STATE.md's), from the store's tally: cheap enough
    /// for a display redrawn at every step.
    pub fn progress(&self) -> Result<warden_core::progress::Progress> {
        Ok(warden_core::head::progress_of_counts(&self.leaf_counts()?))
    }

    /// Every leaf counted by stored `(status, passes)`, from the store (no group read:
    /// at 100,000 tasks in 1,000 groups, reading their heads was a quarter of
    /// `warden status`).
    fn leaf_counts(&self) -> Result<Vec<(Status, bool, u64)>> {
        Ok(self
            .eng
            .store
            .leaf_tally()?
            .into_iter()
            .map(|r| (r.status, r.passes, r.n))
            .collect())
    }

    /// `warden status`. Counts come from the store's tally and only tasks that are not
    /// at rest are read, so it costs the same with 100,000 tasks as with ten.
    pub fn status(&self) -> Result<StatusView> {
        let leaves = self.leaf_counts()?;
        let progress = warden_core::head::progress_of_counts(&leaves);
        let mut counts: BTreeMap<Status, usize> = BTreeMap::new();
        for (status, _, n) in &leaves {
            *counts.entry(*status).or_default() += *n as usize;
        }
        let mut active = self.eng.store.active()?;
        let ids: Vec<TaskId> = active.iter().map(|t| t.id().clone()).collect();
        let groups = self.eng.store.groups_among(&ids)?;
        active.retain(|t| groups.binary_search(t.id()).is_err());
        let mut needs_you = Vec::new();
        let mut running = Vec::new();
        for t in &self.in_tree_order(active)? {
            if let Some(n) = self.needs_you(t) {
                needs_you.push(n);
            }
            if let Some(r) = running_of(t, &self.ws().check_note(t.id())) {
                running.push(r);
            }
        }
        needs_you.extend(self.blocked_for_ever()?);
        needs_you.sort_by_key(|n| n.need);
        let supervisors = self.supervisors()?;
        let supervisor_alive = any_alive(&supervisors);
        let last_run = if supervisor_alive {
            None
        } else {
            LastRun::read(self.ws()).filter(|l| !l.failing.is_empty())
        };
        Ok(StatusView {
            root: self.ws().root.display().to_string(),
            backend: self.eng.store.backend().to_owned(),
            progress: ProgressView {
                complete: progress.complete,
                total: progress.total,
                percentage: progress.percentage(),
                bar: progress.bar(),
                status: progress.status.as_str().to_owned(),
                counts: Status::ALL
                    .iter()
                    .filter_map(|s| counts.get(s).map(|n| (*s, *n)))
                    .collect(),
            },
            needs_you,
            running,
            supervisors,
            supervisor_alive,
            last_run,
        })
    }

    /// The tasks that wait for a cancelled task, which can never be done: each with the
    /// edit that drops it. Found from the cancelled tasks (an index range) and the
    /// store's index of dependents, so it costs nothing while nothing is cancelled. A
    /// task that is done or cancelled itself, or a group whose every task is, waits for
    /// nothing.
    pub fn blocked_for_ever(&self) -> Result<Vec<NeedsYou>> {
        let cancelled: Vec<TaskId> = self
            .eng
            .store
            .with_status(Status::Cancelled)?
            .iter()
            .map(|t| t.id().clone())
            .collect();
        if cancelled.is_empty() {
            return Ok(Vec::new());
        }
        let waiting = self.eng.store.dependents(&cancelled)?;
        if waiting.is_empty() {
            return Ok(Vec::new());
        }
        let groups = self.groups()?;
        // A task `plan sync` keeps gets its dependencies from its PLAN.md at every sync:
        // an edit in Warden would be undone, so the file is where to drop one.
        let synced: std::collections::BTreeMap<TaskId, String> = {
            let ids: Vec<TaskId> = waiting.iter().map(|h| h.id.clone()).collect();
            self.eng
                .store
                .get_many(&ids)?
                .into_iter()
                .filter_map(|t| {
                    let o = t.spec.origin.as_ref()?;
                    (o.tool == warden_core::gsd::sync::TOOL)
                        .then(|| (t.id().clone(), format!("{}/{}", o.root, o.path)))
                })
                .collect()
        };
        let mut out = Vec::new();
        for h in waiting {
            let status = groups.derived.get(&h.id).map_or(h.status, |d| d.0);
            if matches!(status, Status::Done | Status::Cancelled) {
                continue;
            }
            let on: Vec<&TaskId> = h
                .depends_on
                .iter()
                .filter(|d| cancelled.binary_search(d).is_ok())
                .collect();
            let names: Vec<String> = on.iter().map(|d| format!("{d} (cancelled)")).collect();
            out.push(NeedsYou {
                id: h.id.clone(),
                title: h.title.clone(),
                status,
                need: Need::Blocked,
                verdict: None,
                detail: Some(cut(&format!(
                    "waits for {}, which can never be done",
                    names.join(", ")
                ))),
                commands: vec![match synced.get(&h.id) {
                    Some(file) => format!(
                        "remove {} from depends_on in {file}, then warden plan sync",
                        on.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                    None => crate::edit::drop_command(&h.id, &on),
                }],
            });
        }
        Ok(out)
    }

    /// Does `t` wait for a person, and why?
    pub fn needs_you(&self, t: &Task) -> Option<NeedsYou> {
        let id = t.id();
        let (need, commands) = match t.status() {
            Status::Reviewing => (
                Need::Review,
                vec![
                    format!("warden task approve {id}"),
                    format!("warden task reject {id} --reason \"what to change\""),
                ],
            ),
            Status::Clarification => (
                Need::Question,
                vec![
                    format!("answer in {}", self.task_file_shown(id)),
                    format!("warden task update {id} --status working"),
                ],
            ),
            Status::Stuck => (Need::Stuck, vec![format!("warden task retry {id}")]),
            Status::Working | Status::AgentReview if t.is_dead() && !t.respawn_requested() => {
                (Need::Dead, vec![format!("warden task respawn {id}")])
            }
            _ => return None,
        };
        let (verdict, detail) = match need {
            Need::Review => {
                let text = self.task_md(id).unwrap_or_default();
                let doc = artifact::parse(&text);
                match doc.section("Review") {
                    Some(s) => {
                        let content = doc.content(s);
                        (
                            artifact::verdict(content).map(|v| v.as_str().to_owned()),
                            findings(content),
                        )
                    }
                    None => (None, None),
                }
            }
            Need::Question => {
                let text = self.task_md(id).unwrap_or_default();
                let doc = artifact::parse(&text);
                (
                    None,
                    doc.section("Questions")
                        .and_then(|s| findings(doc.content(s))),
                )
            }
            Need::Stuck | Need::Dead => (None, t.last_failure().map(|f| cut(f.trim()))),
            Need::Blocked => (None, None),
        };
        Some(NeedsYou {
            id: id.clone(),
            title: t.spec.title.clone(),
            status: t.status(),
            need,
            verdict,
            detail,
            commands,
        })
    }
}

/// Is any of these supervisors alive: here, its process; elsewhere, an unexpired lease
/// it holds (only those are listed)?
pub fn any_alive(supervisors: &[SupervisorView]) -> bool {
    supervisors
        .iter()
        .any(|s| s.alive.unwrap_or(!s.tasks.is_empty()))
}

/// Is `t` being worked on, and how?
fn running_of(t: &Task, check_note: &Path) -> Option<Running> {
    // A check (prechecks, or the guard of a hand-off) runs under the task's lock and is
    // recorded when it ends; its note says it runs now.
    let phase = t.running_phase().or_else(|| {
        if t.status() != Status::Working {
            return None;
        }
        // The note says what runs; an older one does not, and then a task whose
        // prechecks have not run is taken to run them.
        match warden_runner::check::noted_check_what(check_note).as_deref() {
            Some("postchecks") => Some(Phase::Postchecks),
            Some("prechecks") => Some(Phase::Prechecks),
            _ => warden_runner::check::noted_check_running(check_note).then(|| {
                match t.phases().get(Phase::Prechecks) {
                    warden_core::model::PhaseStatus::Pending => Phase::Prechecks,
                    _ => Phase::Postchecks,
                }
            }),
        }
    });
    let session = t.live_session().map(str::to_owned).filter(|_| !t.is_dead());
    // The work phase is a session: without one nothing runs (a worker that asked a
    // question and was answered waits for the supervisor to start it again; the phase
    // stays `running` in the record until then).
    let phase = phase.filter(|p| *p != Phase::Work || session.is_some());
    let finishing: Vec<String> = t
        .open_sessions()
        .filter(|r| Some(r.id.as_str()) != t.live_session())
        .map(|r| r.id.clone())
        .collect();
    if phase.is_none() && session.is_none() && finishing.is_empty() {
        return None;
    }
    let record = session
        .as_deref()
        .and_then(|s| t.sessions().iter().rev().find(|r| r.id == s));
    Some(Running {
        id: t.id().clone(),
        title: t.spec.title.clone(),
        status: t.status(),
        phase,
        role: record.map(|r| r.role),
        since: record.and_then(|r| r.started_at).or(Some(t.entered_at())),
        session,
        finishing,
    })
}

/// The first lines of a section, without its verdict line's noise: what a person reads
/// before deciding.
/// The first lines of a section; what does not fit is said, never dropped without a
/// word (a review's third finding, the serious one, was gone with no mark, and a person
/// could approve without seeing it).
fn findings(content: &str) -> Option<String> {
    let lines: Vec<&str> = content
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("<!--"))
        .collect();
    let shown = &lines[..lines.len().min(FINDING_LINES)];
    if shown.is_empty() {
        return None;
    }
    let text = cut(&shown.join(" · "));
    let more = lines.len() - shown.len();
    Some(if more > 0 {
        format!("{text} · (+{more} more line(s): read all of it in the task's TASK.md)")
    } else if text.ends_with('…') {
        format!("{text} (read all of it in the task's TASK.md)")
    } else {
        text
    })
}

/// The lines of a review or a question shown in `warden status`.
const FINDING_LINES: usize = 6;

fn cut(s: &str) -> String {
    if s.chars().count() <= DETAIL_CHARS {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(DETAIL_CHARS - 1).collect();
    out.push('…');
    out
}

impl App {
    /// Every supervisor seen: announced on this machine, or holding an unexpired lease.
    /// Cheap (a directory and the leases), for a dashboard header refreshed each second.
    pub fn supervisors(&self) -> Result<Vec<SupervisorView>> {
        supervisors(self)
    }
}

fn supervisors(app: &App) -> Result<Vec<SupervisorView>> {
    let here = crate::supervisor::this_host();
    let mut by_owner: BTreeMap<String, SupervisorView> = BTreeMap::new();
    for p in Presence::read_all(app.ws()) {
        let Some((host, pid)) = owner_host_pid(&p.owner) else {
            continue;
        };
        let alive = (host == here).then(|| crate::supervisor::pid_alive(pid));
        if alive == Some(false) {
            // Killed without a chance to withdraw: not a supervisor any more.
            continue;
        }
        by_owner.insert(
            p.owner.clone(),
            SupervisorView {
                owner: p.owner.clone(),
                host: host.to_owned(),
                pid,
                alive,
                started_at: Some(p.started_at),
                tasks: Vec::new(),
                failing: p.failing,
            },
        );
    }
    let now = app.eng.now();
    for l in app.eng.store.leases()? {
        if l.expires_at <= now {
            continue;
        }
        let Some((host, pid)) = owner_host_pid(&l.owner) else {
            continue;
        };
        let alive = (host == here).then(|| crate::supervisor::pid_alive(pid));
        if alive == Some(false) {
            continue;
        }
        by_owner
            .entry(l.owner.clone())
            .or_insert_with(|| SupervisorView {
                owner: l.owner.clone(),
                host: host.to_owned(),
                pid,
                alive,
                started_at: None,
                tasks: Vec::new(),
                failing: Vec::new(),
            })
            .tasks
            .push(l.task.clone());
    }
    Ok(by_owner.into_values().collect())
}

/// The host and pid of a lease owner (`host:pid:start`, or the older `host:pid`).
pub(crate) fn owner_host_pid(owner: &str) -> Option<(&str, u32)> {
    let parts: Vec<&str> = owner.split(':').collect();
    match parts[..] {
        [h, p] | [h, p, _] => Some((h, p.parse().ok()?)),
        _ => None,
    }
}

/// The processes of this host's supervisors of the project, from their announcements
/// (what stopping a session's remains spares).
pub(crate) fn local_supervisor_pids(ws: &Workspace) -> Vec<u32> {
    let here = crate::supervisor::this_host();
    Presence::read_all(ws)
        .iter()
        .filter_map(|p| owner_host_pid(&p.owner))
        .filter(|(host, _)| *host == here)
        .map(|(_, pid)| pid)
        .collect()
}

/// A supervisor's announcement of itself, `.warden/runners/<pid>.json`, as read back.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Presence {
    owner: String,
    started_at: Timestamp,
    /// Its tasks whose steps keep failing (at most [`FAILING_SHOWN`], each error cut to
    /// `DETAIL_CHARS`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    failing: Vec<StepFailure>,
    #[serde(skip)]
    path: PathBuf,
}

/// The failing tasks an announcement lists.
const FAILING_SHOWN: usize = 20;

/// The longest announcement read back.
const PRESENCE_MAX_BYTES: u64 = 64 * 1024;

/// The announcement a running supervisor owns: its file is removed when this is dropped,
/// as the supervisor ends (a killed one leaves it behind; its dead pid tells readers, and
/// the next run removes it). Only the announcer holds one: readers get plain `Presence`
/// values, so reading never withdraws anyone.
#[derive(Debug)]
pub(crate) struct Announced {
    path: PathBuf,
    owner: String,
    started_at: Timestamp,
    failing: Vec<StepFailure>,
}

impl Announced {
    /// Says which tasks' steps keep failing (best effort, rewritten only on a change).
    pub(crate) fn set_failing(&mut self, failing: impl IntoIterator<Item = StepFailure>) {
        let failing: Vec<StepFailure> = failing
            .into_iter()
            .take(FAILING_SHOWN)
            .map(|f| StepFailure {
                error: cut(&f.error),
                ..f
            })
            .collect();
        if failing == self.failing {
            return;
        }
        self.failing = failing;
        let p = Presence {
            owner: self.owner.clone(),
            started_at: self.started_at,
            failing: self.failing.clone(),
            path: self.path.clone(),
        };
        if let Ok(text) = serde_json::to_vec(&p) {
            let _ = warden_store::files::write_atomic(&p.path, &text);
        }
    }
}

impl Drop for Announced {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        // What still failed is said after the run is gone (`warden status`); a run that
        // ends with nothing failing clears what an earlier one left.
        let last = LastRun::path_of(&self.path);
        if self.failing.is_empty() {
            let _ = std::fs::remove_file(&last);
        } else if let Ok(text) = serde_json::to_vec(&LastRun {
            stopped_at: Timestamp::now(),
            failing: self.failing.clone(),
        }) {
            let _ = warden_store::files::write_atomic(&last, &text);
        }
    }
}

impl LastRun {
    /// The record beside an announcement.
    fn path_of(announcement: &Path) -> PathBuf {
        announcement.with_file_name("last-run-failing")
    }
}

impl Presence {
    fn dir(ws: &Workspace) -> PathBuf {
        ws.dir.join("runners")
    }

    /// Announces the supervisor `owner` (best effort: status is a view, not a lock).
    pub(crate) fn announce(ws: &Workspace, owner: &str, now: Timestamp) -> Announced {
        let dir = Presence::dir(ws);
        // Announcements of runners of this host that are gone.
        let here = crate::supervisor::this_host();
        for p in Presence::read_all(ws) {
            if let Some((h, pid)) = owner_host_pid(&p.owner)
                && h == here
                && !crate::supervisor::pid_alive(pid)
            {
                let _ = std::fs::remove_file(&p.path);
            }
        }
        let path = dir.join(format!("{}.json", std::process::id()));
        let p = Presence {
            owner: owner.to_owned(),
            started_at: now,
            failing: Vec::new(),
            path,
        };
        if std::fs::create_dir_all(&dir).is_ok()
            && let Ok(text) = serde_json::to_vec(&p)
        {
            let _ = warden_store::files::write_atomic(&p.path, &text);
        }
        Announced {
            path: p.path,
            owner: p.owner,
            started_at: p.started_at,
            failing: Vec::new(),
        }
    }

    fn read_all(ws: &Workspace) -> Vec<Presence> {
        let Ok(entries) = std::fs::read_dir(Presence::dir(ws)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            if let Some(mut p) = read_presence(&path) {
                p.path = path;
                out.push(p);
            }
        }
        out
    }
}

fn read_presence(path: &Path) -> Option<Presence> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > PRESENCE_MAX_BYTES {
        return None;
    }
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}
