//! Derivations from the event log: STATE.md's activity and velocity inputs, and the
//! replay of memory merges (for `warden check`).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use crate::event::{Event, EventKind, GuardResult};
use crate::memory::{self, Memory, MemoryCaps};
use crate::model::{Status, Task, TaskId};
use crate::state_md::{Activity, ActivityKind, StateInput};

/// Activity entries of the log, oldest first: `done` is Completed; a failed guard, a
/// failed attempt, a crash or `stuck` is Failed; `clarification` is Blocked.
pub fn activity(events: &[Event]) -> Vec<Activity> {
    let mut out = Vec::new();
    for e in events {
        let (kind, detail) = match &e.kind {
            k if k.transition().map(|(_, to)| to) == Some(Status::Done) => {
                (ActivityKind::Completed, None)
            }
            k if k.transition().map(|(_, to)| to) == Some(Status::Stuck) => {
                (ActivityKind::Failed, k.reason())
            }
            k if k.transition().map(|(_, to)| to) == Some(Status::Clarification) => {
                (ActivityKind::Blocked, k.reason())
            }
            EventKind::GuardRan {
                result: GuardResult::Fail,
                ..
            } => (ActivityKind::Failed, Some("postchecks failed".to_owned())),
            EventKind::AttemptFailed { reason, .. } | EventKind::AgentCrashed { reason, .. } => {
                (ActivityKind::Failed, Some(reason.clone()))
            }
            _ => continue,
        };
        out.push(Activity {
            at: e.at,
            kind,
            task: e.task.clone(),
            detail,
        });
    }
    out
}

/// The types of the events [`activity`] can make an entry of.
pub const ACTIVITY_TYPES: &[&str] = &[
    "status.changed",
    "auto.advanced",
    "guard.ran",
    "attempt.failed",
    "agent.crashed",
];

/// Is this event an activity entry (see [`activity`])?
pub fn is_activity(e: &Event) -> bool {
    !activity(std::slice::from_ref(e)).is_empty()
}

/// For every task now done: the time from its first entry into `working` (or its
/// creation) to its entry into `done`.
pub fn durations(events: &[Event], tasks: &[Task]) -> Vec<(TaskId, SignedDuration)> {
    let mut started: BTreeMap<&TaskId, Timestamp> = BTreeMap::new();
    let mut finished: BTreeMap<&TaskId, Timestamp> = BTreeMap::new();
    for e in events {
        match &e.kind {
            EventKind::TaskCreated { .. } => {
                started.insert(&e.task, e.at);
            }
            k => match k.transition() {
                Some((Status::Pending, Status::Working)) => {
                    started.insert(&e.task, e.at);
                }
                Some((_, Status::Done)) => {
                    finished.insert(&e.task, e.at);
                }
                _ => {}
            },
        }
    }
    tasks
        .iter()
        .filter(|t| t.status() == Status::Done)
        .filter_map(|t| {
            let s = started.get(t.id())?;
            let f = finished.get(t.id())?;
            Some((t.id().clone(), f.duration_since(*s)))
        })
        .collect()
}

/// Everything STATE.md needs, derived from the tasks and their history.
pub fn state_input<'a>(
    project: String,
    tasks: &'a [Task],
    events: &[Event],
    resume_file: Option<String>,
) -> StateInput<'a> {
    StateInput {
        project,
        tasks,
        activity: activity(events),
        durations: durations(events, tasks),
        resume_file,
    }
}

/// Folds every `memory.merged` event with the given caps (tasks removed later drop out).
pub fn replay_memory(events: &[Event], caps: &MemoryCaps) -> BTreeMap<TaskId, Memory> {
    let mut out: BTreeMap<TaskId, Memory> = BTreeMap::new();
    for e in events {
        match &e.kind {
            EventKind::MemoryMerged { delta, caps: then } => {
                // Each merge with the caps it was made under: a later change of the caps
                // does not rewrite what was stored.
                let cur = out.remove(&e.task).unwrap_or_default();
                out.insert(
                    e.task.clone(),
                    memory::merge_into(cur, delta, then.as_ref().unwrap_or(caps)),
                );
            }
            EventKind::TaskRemoved => {
                out.remove(&e.task);
            }
            _ => {}
        }
    }
    out
}
