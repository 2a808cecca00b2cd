//! Reads over the project: the history, STATE.md (render, write, verify), `warden check`
//! (the log replays to the rows), prompts, a task's TASK.md, its captured output and a
//! live session's screen.

use serde::Serialize;
use warden_core::failure::Failure;
use warden_core::model::TaskId;
use warden_core::{history, prompt, state_md};
use warden_store::files::{self, FileError};

use crate::view::EventView;
use crate::{App, Result};

/// One difference `state verify` found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// The line of STATE.md.
    pub line: usize,
    /// What the derived state says.
    pub expected: Option<String>,
    /// What the file says.
    pub found: Option<String>,
}

/// What `state verify` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verified {
    /// STATE.md as shown.
    pub path: String,
    /// No difference.
    pub ok: bool,
    /// Every difference.
    pub differences: Vec<Difference>,
}

/// What `warden check` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Checked {
    /// Nothing disagrees.
    pub ok: bool,
    /// Events replayed.
    pub events: usize,
    /// Tasks stored.
    pub tasks: usize,
    /// Every disagreement, one line each.
    pub problems: Vec<String>,
}

/// A task's prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PromptView {
    /// The task.
    pub id: TaskId,
    /// Which prompt (worker, worker-respawn, reviewer, clarification, stuck).
    pub kind: Option<&'static str>,
    /// The text.
    pub prompt: String,
}

/// A live session's last lines.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Peek {
    /// The task.
    pub id: TaskId,
    /// Its live session, if any.
    pub session: Option<String>,
    /// The lines.
    pub output: String,
}

impl App {
    /// The event history, oldest first: of one task, or all; only the last `last`.
    pub fn history(&self, id: Option<&TaskId>, last: Option<usize>) -> Result<Vec<EventView>> {
        self.history_since(id, last, None)
    }

    /// The event history, oldest first: of one task, or all; only events at or after
    /// `since`; of those only the last `last`.
    pub fn history_since(
        &self,
        id: Option<&TaskId>,
        last: Option<usize>,
        since: Option<jiff::Timestamp>,
    ) -> Result<Vec<EventView>> {
        if let Some(id) = id
            && self.eng.store.get(id)?.is_none()
            && self.eng.store.events(Some(id))?.is_empty()
        {
            return Err(Failure::not_found(format!(
                "no task {id}; list tasks with `warden task list`"
            )));
        }
        let mut events = self.eng.store.events(id)?;
        if let Some(t) = since {
            // Events are in commit order, which is time order: keep the tail from `t`.
            let from = events.partition_point(|e| e.at < t);
            events.drain(..from);
        }
        let skip = last.map_or(0, |n| events.len().saturating_sub(n));
        Ok(events[skip..].iter().map(EventView::from).collect())
    }

    /// STATE.md rendered from the store.
    pub fn state_md(&self) -> Result<String> {
        Ok(self.eng.render_state()?)
    }

    /// Writes `.warden/STATE.md` (kept up to date after every change from then on) and
    /// returns its text.
    pub fn write_state_md(&self) -> Result<String> {
        Ok(self.eng.write_state_md_text(true)?)
    }

    /// `state verify`: every difference between `.warden/STATE.md` and the derived
    /// state. A difference is a refusal (exit 1) after the report.
    pub fn verify_state(&self) -> Result<Verified> {
        let path = self.ws().state_md();
        let shown = self.ws().display(&path);
        let (tasks, events) = self.eng.state_sources()?;
        let input = self.eng.state_input(&tasks, &events);
        // STATE.md grows with the project: a file up to twice a fresh render's size is
        // read and compared (a few more lines is a difference to report, not a refusal).
        let fresh = state_md::render(&input);
        let max = files::MAX_FILE_BYTES.max(2 * fresh.len() as u64);
        let text = match files::read_text_up_to(&self.ws().dir, &path, max) {
            Ok(t) => t,
            Err(FileError::Missing(_)) => {
                return Err(Failure::not_found(format!(
                    "{shown} does not exist; write it with `warden state --write`"
                )));
            }
            Err(e) => return Err(e.into()),
        };
        let differences: Vec<Difference> = state_md::compare(&text, &fresh)
            .into_iter()
            .map(|d| Difference {
                line: d.line,
                expected: d.expected,
                found: d.found,
            })
            .collect();
        Ok(Verified {
            path: shown,
            ok: differences.is_empty(),
            differences,
        })
    }

    /// `warden check`: replays the event log and compares every task and memory row.
    pub fn check(&self) -> Result<Checked> {
        let events = self.eng.store.events(None)?;
        let stored = self.tasks()?;
        let mut problems = Vec::new();
        let rebuilt = match warden_core::event::replay(&events) {
            Ok(r) => r,
            Err(e) => {
                problems.push(e.to_string());
                Default::default()
            }
        };
        if problems.is_empty() {
            for t in &stored {
                match rebuilt.get(t.id()) {
                    None => {
                        problems.push(format!("task {} is stored but no event creates it", t.id()))
                    }
                    Some(r) if r != t => problems.push(format!(
                        "task {} differs from its replayed history (stored version {}, replayed version {})",
                        t.id(),
                        t.version(),
                        r.version()
                    )),
                    Some(_) => {}
                }
            }
            for id in rebuilt.keys() {
                if stored.binary_search_by(|t| t.id().cmp(id)).is_err() {
                    problems.push(format!(
                        "task {id} exists in the history but not in the store"
                    ));
                }
            }
        }
        // The columns kept beside each task, and the tally kept from them: the readers
        // of many tasks (status, lists, STATE.md) trust both.
        let heads = self.eng.store.all_heads()?;
        for (t, h) in stored.iter().zip(&heads) {
            if t.head() != *h {
                problems.push(format!(
                    "the head columns of task {} differ from the task; this is a Warden bug",
                    t.id()
                ));
            }
        }
        if heads.len() != stored.len() {
            problems.push("the head columns do not list every task; this is a Warden bug".into());
        }
        // The index of dependents, which `warden status` reads to find the tasks a
        // cancelled one holds back.
        let mut want: Vec<(String, String)> = stored
            .iter()
            .flat_map(|t| {
                t.spec
                    .depends_on
                    .iter()
                    .map(|d| (t.id().to_string(), d.to_string()))
            })
            .collect();
        want.sort();
        want.dedup();
        if self.eng.store.dependent_rows()? != want {
            problems.push(
                "the index of dependents differs from the tasks' depends_on; this is a Warden bug"
                    .into(),
            );
        }
        if self.eng.store.tally()? != self.eng.store.recount()? {
            problems.push(
                "the tally of children by status differs from the task rows; this is a Warden bug"
                    .into(),
            );
        }
        // The columns stored beside each body, which queries use, must say what the body
        // says; and each event's type column its kind.
        for row in self.eng.store.task_columns()? {
            match serde_json::from_str::<warden_core::model::Task>(&row.body) {
                Err(e) => problems.push(format!("task row {} does not decode: {e}", row.id)),
                Ok(t) => {
                    if t.id().as_str() != row.id {
                        problems.push(format!(
                            "task row {} holds the body of task {}",
                            row.id,
                            t.id()
                        ));
                    }
                    if t.status().as_str() != row.status {
                        problems.push(format!(
                            "task {}: the status column says {}, its body {}",
                            row.id,
                            row.status,
                            t.status()
                        ));
                    }
                    if i64::try_from(t.version()).ok() != Some(row.version) {
                        problems.push(format!(
                            "task {}: the version column says {}, its body {}",
                            row.id,
                            row.version,
                            t.version()
                        ));
                    }
                }
            }
        }
        let kinds: std::collections::HashMap<u64, &'static str> =
            events.iter().map(|e| (e.seq, e.kind.type_name())).collect();
        for (seq, ty) in self.eng.store.event_types()? {
            if kinds.get(&seq).is_some_and(|k| *k != ty) {
                problems.push(format!(
                    "event {seq}: the type column says {ty}, its body {}",
                    kinds[&seq]
                ));
            }
        }
        for l in self.eng.store.leases()? {
            if stored.binary_search_by(|t| t.id().cmp(&l.task)).is_err() {
                problems.push(format!(
                    "a lease held by {} names task {}, which does not exist",
                    l.owner, l.task
                ));
            }
        }
        // Memory: fold every merge with the caps it was made under.
        let caps = self.eng.memory_caps();
        let replayed = history::replay_memory(&events, &caps);
        let stored_mem = self.eng.store.all_memory()?;
        for (id, m) in &stored_mem {
            if replayed.get(id) != Some(m) {
                problems.push(format!(
                    "memory of {id} differs from its merges in the history"
                ));
            }
        }
        for id in replayed.keys() {
            if !stored_mem.iter().any(|(s, _)| s == id)
                && stored.binary_search_by(|t| t.id().cmp(id)).is_ok()
            {
                problems.push(format!("memory of {id} is missing from the store"));
            }
        }
        Ok(Checked {
            ok: problems.is_empty(),
            events: events.len(),
            tasks: stored.len(),
            problems,
        })
    }

    /// The prompt for a task's current status and role.
    pub fn prompt(&self, id: &TaskId) -> Result<PromptView> {
        let t = self.get(id)?;
        // A group's own row keeps the status it was created with; no agent works on a
        // group, so "g is pending" named a status no view shows.
        let children = self.eng.store.child_ids(id)?;
        if !children.is_empty() {
            return Err(Failure::refused(format!(
                "{id} is a group: agents work on the tasks in it ({}), and each has its own prompt: `warden prompt {}`",
                crate::task::first_of(&children),
                children[0]
            )));
        }
        let text = self.eng.prompt(&t, None)?;
        Ok(PromptView {
            id: id.clone(),
            kind: prompt::prompt_kind(&t).map(|k| k.as_str()),
            prompt: text,
        })
    }

    /// The text of a task's TASK.md.
    pub fn task_md(&self, id: &TaskId) -> Result<String> {
        self.get(id)?;
        match files::read_text(&self.ws().dir, &self.ws().task_file(id)) {
            Ok(text) => Ok(text),
            Err(FileError::Missing(_)) => Err(Failure::not_found(format!(
                "{} does not exist yet; it is written after the task's next change",
                self.task_file_shown(id)
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// The captured session output of a task: its last MiB when longer, from the first
    /// line that begins in it, with how many bytes before that are not shown. Bytes that
    /// are not UTF-8 (a binary dump, a Latin-1 program) are shown as U+FFFD: the log is
    /// what a program wrote, not a file for its reader to fix.
    pub fn output_log(&self, id: &TaskId) -> Result<OutputLog> {
        self.get(id)?;
        let path = self.ws().output_log(id);
        let (text, omitted_bytes) = match files::read_text(&self.ws().dir, &path) {
            Ok(text) => (text, 0),
            Err(FileError::Missing(_)) => {
                // A group never has a session: its tasks do.
                let children = self.eng.store.child_ids(id)?;
                if let Some(first) = children.first() {
                    return Err(Failure::not_found(format!(
                        "{id} is a group: sessions run for the tasks in it ({}); `warden task log {first}`",
                        crate::task::first_of(&children)
                    )));
                }
                return Err(Failure::not_found(format!(
                    "no output captured for {id} yet; output appears once `warden run` starts its session"
                )));
            }
            Err(FileError::TooLarge(..) | FileError::NotUtf8(..)) => {
                tail_lossy(&path, files::MAX_FILE_BYTES).map_err(|e| {
                    Failure::internal(format!("cannot read {}: {e}", path.display()))
                })?
            }
            Err(e) => return Err(e.into()),
        };
        Ok(OutputLog {
            id: id.clone(),
            output: warden_runner::session::without_end_markers(&text).into_owned(),
            omitted_bytes,
            file: path.display().to_string(),
        })
    }

    /// The last `lines` lines of a task's live session (its tmux pane, else its output
    /// log).
    pub fn peek(&self, id: &TaskId, lines: usize) -> Result<Peek> {
        let t = self.get(id)?;
        let socket = self.ws().dir.join("tmux.sock");
        let from_tmux = match t.live_session() {
            Some(s) if socket.exists() => warden_runner::session::tmux_capture(
                &socket,
                &warden_runner::session::tmux_session_name(s),
                lines,
            )
            .ok(),
            _ => None,
        };
        let output = match from_tmux {
            Some(text) => text,
            None => {
                let log = self.ws().output_log(id);
                // As `task log` and the console read it: a link planted in its place is
                // not followed (peek printed /etc/passwd through one).
                files::check_no_links(&self.ws().dir, &log)?;
                if !log.exists() {
                    return Err(Failure::not_found(format!(
                        "no output for {id} yet; sessions write it once `warden run` starts them"
                    )));
                }
                warden_runner::session::peek_log(&log, lines)
            }
        };
        Ok(Peek {
            id: id.clone(),
            session: t.live_session().map(str::to_owned),
            output,
        })
    }
}

/// `task log`: a task's captured output.
#[derive(Debug, Clone, Serialize)]
pub struct OutputLog {
    /// The task.
    pub id: TaskId,
    /// The output shown (see [`App::output_log`]).
    pub output: String,
    /// Bytes at the start of the log that are not shown (0: the whole log).
    pub omitted_bytes: u64,
    /// The log file.
    #[serde(skip)]
    pub file: String,
}

/// The last `max` bytes of `path`, from the first line that begins in them (unless the
/// file is no longer), as text with bad UTF-8 replaced, and the bytes before them.
fn tail_lossy(path: &std::path::Path, max: u64) -> std::io::Result<(String, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(max);
    // One byte before the tail, to know whether it begins a line.
    let from = start.saturating_sub(1);
    f.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    f.take(max + (start - from)).read_to_end(&mut bytes)?;
    let cut = if start > 0 {
        // From the first line that begins in the tail: just after the first line break
        // at or after the byte before it.
        bytes.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1)
    } else {
        0
    };
    Ok((
        String::from_utf8_lossy(&bytes[cut..]).into_owned(),
        from + cut as u64,
    ))
}
