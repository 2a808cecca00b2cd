//! A task's head: the few fields the stores keep in columns beside each task, so that a
//! question about many tasks (a status count, a list, STATE.md, the tree around one task)
//! is answered from indexes instead of decoding every task. Also the tally rule: a
//! group's status and `passes` from the counts of its children's, the one rule every
//! view derives groups with.

use crate::model::{PhaseStatus, RunnerState, Status, Task, TaskId, TaskSpec, WorkflowKind};

/// The columns a store keeps beside each task, computed from the task by [`Task::head`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskHead {
    /// The id.
    pub id: TaskId,
    /// The parent, if any.
    pub parent: Option<TaskId>,
    /// Sort key among siblings.
    pub order: i64,
    /// The stored status (a group's own, not its derived one).
    pub status: Status,
    /// The stored `passes`.
    pub passes: bool,
    /// Failed attempts.
    pub attempts: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// The title.
    pub title: String,
    /// Tasks that must be done first.
    pub depends_on: Vec<TaskId>,
    /// Not at rest (see [`Task::at_rest`]): the supervisor and `warden status` read
    /// every such task in full.
    pub active: bool,
}

impl Task {
    /// Is the task at rest: pending, done or cancelled, with no session open or believed
    /// alive (nor one shown dead), no phase running, and nothing asked of the supervisor
    /// (a respawn, a heal, a worktree reset)? Everything a view shows of a task at rest is in its
    /// [`TaskHead`].
    pub fn at_rest(&self) -> bool {
        matches!(
            self.runner.status,
            Status::Pending | Status::Done | Status::Cancelled
        ) && self.nothing_under_way()
    }

    /// Does the supervisor have nothing to do for the task until it changes: at rest, or
    /// waiting for a person (under review, with a question, or stuck) with nothing under
    /// way? The scheduler's answer for a task waiting so is always to wait
    /// ([`crate::schedule::next`]; a test holds them together), so a supervisor keeps
    /// no more of it than what it was.
    pub fn waits_for_change(&self) -> bool {
        matches!(
            self.runner.status,
            Status::Pending
                | Status::Done
                | Status::Cancelled
                | Status::Reviewing
                | Status::Clarification
                | Status::Stuck
        ) && self.nothing_under_way()
    }

    /// No session open or believed alive (nor one shown dead), no phase running, and
    /// nothing asked of the supervisor (a respawn, a heal, a worktree reset).
    fn nothing_under_way(&self) -> bool {
        let r = &self.runner;
        r.live_session.is_none()
            && r.sessions.iter().all(|s| s.ended)
            && !r.respawn_requested
            && r.healing.is_none()
            && !r.clear_worktree
            && r.phases.iter().all(|(_, s)| s != PhaseStatus::Running)
            && !r.dead
    }

    /// The head of this task.
    pub fn head(&self) -> TaskHead {
        TaskHead {
            id: self.spec.id.clone(),
            parent: self.spec.parent.clone(),
            order: self.spec.order,
            status: self.runner.status,
            passes: self.runner.passes,
            attempts: self.runner.attempts,
            max_attempts: self.spec.max_attempts,
            title: self.spec.title.clone(),
            depends_on: self.spec.depends_on.clone(),
            active: !self.at_rest(),
        }
    }

    /// A task as its head shows it, for views of many tasks: what is not in the head
    /// (the body, the specs, the workflow, sessions, phases, times) has its default.
    /// Only a task at rest is shown faithfully this way; views read active tasks in full.
    pub fn from_head(head: TaskHead) -> Task {
        let mut spec = TaskSpec::new(head.id, WorkflowKind::Review, head.max_attempts);
        spec.title = head.title;
        spec.parent = head.parent;
        spec.order = head.order;
        spec.depends_on = head.depends_on;
        Task {
            spec,
            runner: RunnerState::new(
                head.status,
                head.passes,
                head.attempts,
                jiff::Timestamp::UNIX_EPOCH,
            ),
        }
    }
}

/// Counts over the children of one group: how the group's status and `passes` are
/// derived (DESIGN 6: the same in every view). Add each child with its own derived
/// status and `passes` (a leaf's stored ones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChildTally {
    /// Children that are not cancelled.
    pub counted: u64,
    /// … of them done.
    pub done: u64,
    /// … of them passing.
    pub passing: u64,
    /// … of them stuck.
    pub stuck: u64,
    /// … of them started (not pending).
    pub started: u64,
}

impl ChildTally {
    /// Counts `n` children in `status` with `passes` (a negative `n` takes them away).
    pub fn add(&mut self, status: Status, passes: bool, n: i64) {
        if status == Status::Cancelled {
            return;
        }
        let add = |x: &mut u64| *x = x.saturating_add_signed(n);
        add(&mut self.counted);
        if status == Status::Done {
            add(&mut self.done);
        }
        if passes {
            add(&mut self.passing);
        }
        if status == Status::Stuck {
            add(&mut self.stuck);
        }
        if status != Status::Pending {
            add(&mut self.started);
        }
    }

    /// The status and `passes` of a group whose own stored status is `own`: cancelled
    /// when a person cancelled the group itself (whatever its tasks reached: the
    /// decision was to stop it), else done when every counted child is done, stuck when
    /// one is stuck, working once one has started, pending before; cancelled when no
    /// child counts. It passes when it is not cancelled, has a counted child and every
    /// one passes.
    pub fn derived(&self, own: Status) -> (Status, bool) {
        if own == Status::Cancelled {
            return (Status::Cancelled, false);
        }
        let status = if self.counted == 0 {
            Status::Cancelled
        } else if self.done == self.counted {
            Status::Done
        } else if self.stuck > 0 {
            Status::Stuck
        } else if self.started > 0 {
            Status::Working
        } else {
            Status::Pending
        };
        (status, self.counted > 0 && self.passing == self.counted)
    }
}

/// The progress over leaves given as counts by stored `(status, passes)`: the same
/// answer as [`crate::progress::Progress::of`] over those leaves (a test checks it).
pub fn progress_of_counts(counts: &[(Status, bool, u64)]) -> crate::progress::Progress {
    use crate::progress::{Progress, ProgressStatus};
    let counted = |f: &dyn Fn(Status, bool) -> bool| -> u64 {
        counts
            .iter()
            .filter(|(s, p, _)| *s != Status::Cancelled && f(*s, *p))
            .map(|c| c.2)
            .sum()
    };
    let total = counted(&|_, _| true);
    let complete = counted(&|_, p| p);
    let status = if total == 0 {
        ProgressStatus::ReadyToPlan
    } else if complete == total {
        ProgressStatus::Complete
    } else if counted(&|s, _| matches!(s, Status::Working | Status::Clarification)) > 0 {
        ProgressStatus::InProgress
    } else if counted(&|s, _| matches!(s, Status::AgentReview | Status::Reviewing)) > 0 {
        ProgressStatus::Verifying
    } else if counted(&|s, p| s == Status::Pending && !p) == total {
        ProgressStatus::Planning
    } else {
        ProgressStatus::InProgress
    };
    Progress {
        complete: complete as usize,
        total: total as usize,
        status,
    }
}

/// The derived status and `passes` of every group, from the stores' tally: for each
/// parent id, how many children it has in each stored `(status, passes)`. `groups` are
/// the tasks with children, with their parent and stored `(status, passes)`; a child
/// group is counted by its derived values instead of its stored ones, so groups are
/// settled children first (parent chains are walked without recursion). A tally row of
/// a parent that is not among `groups` (no such task) is ignored.
pub fn derive_groups(
    groups: &[(TaskId, Option<TaskId>, Status, bool)],
    tally: &[(TaskId, Status, bool, u64)],
) -> std::collections::BTreeMap<TaskId, (Status, bool)> {
    use std::collections::BTreeMap;
    let index: BTreeMap<&TaskId, usize> =
        groups.iter().enumerate().map(|(i, g)| (&g.0, i)).collect();
    let mut counts = vec![ChildTally::default(); groups.len()];
    for (parent, status, passes, n) in tally {
        if let Some(&i) = index.get(parent) {
            counts[i].add(*status, *passes, *n as i64);
        }
    }
    // The group each group is a child of, and how many child groups each waits for.
    let up: Vec<Option<usize>> = groups
        .iter()
        .map(|g| {
            g.1.as_ref()
                .and_then(|p| index.get(p).copied())
                .filter(|&p| p != index[&g.0])
        })
        .collect();
    let mut waiting = vec![0usize; groups.len()];
    for p in up.iter().flatten() {
        waiting[*p] += 1;
    }
    let mut ready: Vec<usize> = (0..groups.len()).filter(|&i| waiting[i] == 0).collect();
    let mut out = BTreeMap::new();
    while let Some(i) = ready.pop() {
        let derived = counts[i].derived(groups[i].2);
        out.insert(groups[i].0.clone(), derived);
        if let Some(p) = up[i] {
            let (_, _, status, passes) = groups[i];
            counts[p].add(status, passes, -1);
            counts[p].add(derived.0, derived.1, 1);
            waiting[p] -= 1;
            if waiting[p] == 0 {
                ready.push(p);
            }
        }
    }
    // Groups on a parent cycle (which the store never holds) keep their own counts.
    for (i, g) in groups.iter().enumerate() {
        out.entry(g.0.clone())
            .or_insert_with(|| counts[i].derived(g.2));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::TreeIndex;
    use proptest::prelude::*;

    fn task(id: usize, parent: Option<usize>, status: Status, passes: bool) -> Task {
        let mut t = Task::from_head(TaskHead {
            id: TaskId::new(&format!("t{id}")).unwrap(),
            parent: parent.map(|p| TaskId::new(&format!("t{p}")).unwrap()),
            order: 0,
            status,
            passes,
            attempts: 0,
            max_attempts: 3,
            title: format!("t{id}"),
            depends_on: Vec::new(),
            active: false,
        });
        t.runner.passes = passes;
        t
    }

    /// Groups derived from the tally alone agree with `TreeIndex`, which derives them
    /// from every task, on random forests (parents always earlier, so no cycles).
    #[test]
    fn tally_derivation_agrees_with_the_tree_index() {
        let status = prop::sample::select(Status::ALL.to_vec());
        let forest = prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                any::<bool>(),
                status,
                any::<bool>(),
            ),
            1..60,
        );
        proptest!(|(nodes in forest)| {
            let tasks: Vec<Task> = nodes
                .iter()
                .enumerate()
                .map(|(i, (p, root, st, passes))| {
                    let parent = (i > 0 && !root).then(|| p.index(i));
                    task(i, parent, *st, *passes)
                })
                .collect();
            let idx = TreeIndex::new(&tasks);
            let mut tally: std::collections::BTreeMap<(TaskId, Status, bool), u64> =
                Default::default();
            for t in &tasks {
                if let Some(p) = &t.spec.parent {
                    *tally.entry((p.clone(), t.status(), t.passes())).or_default() += 1;
                }
            }
            let groups: Vec<(TaskId, Option<TaskId>, Status, bool)> = tasks
                .iter()
                .filter(|t| !idx.is_leaf(t.id()))
                .map(|t| (t.id().clone(), t.spec.parent.clone(), t.status(), t.passes()))
                .collect();
            let rows: Vec<(TaskId, Status, bool, u64)> =
                tally.into_iter().map(|((p, s, b), n)| (p, s, b, n)).collect();
            let derived = derive_groups(&groups, &rows);
            for t in &tasks {
                let want = (idx.status(t), idx.passes(t));
                match derived.get(t.id()) {
                    Some(got) => prop_assert_eq!(*got, want, "{}", t.id()),
                    None => prop_assert!(idx.is_leaf(t.id())),
                }
            }
        });
    }

    /// Progress from counts is progress over the leaves.
    #[test]
    fn progress_of_counts_agrees_with_progress_of_leaves() {
        let status = prop::sample::select(Status::ALL.to_vec());
        proptest!(|(leaves in prop::collection::vec((status, any::<bool>()), 0..12))| {
            let tasks: Vec<Task> = leaves
                .iter()
                .enumerate()
                .map(|(i, (s, p))| task(i, None, *s, *p))
                .collect();
            let mut counts: std::collections::BTreeMap<(Status, bool), u64> = Default::default();
            for (s, p) in &leaves {
                *counts.entry((*s, *p)).or_default() += 1;
            }
            let counts: Vec<(Status, bool, u64)> =
                counts.into_iter().map(|((s, p), n)| (s, p, n)).collect();
            prop_assert_eq!(
                progress_of_counts(&counts),
                crate::progress::Progress::of(tasks.iter())
            );
        });
    }

    /// STATE.md rendered from heads of the tasks at rest and the events the stores
    /// read for it (lifecycle events of done tasks, the newest activity) is the same as
    /// from every task and every event, over histories made of real operations.
    #[test]
    fn state_md_from_heads_is_state_md_from_everything() {
        use crate::artifact::{Artifacts, Evidence};
        use crate::event::{Actor, Event};
        use crate::model::{Role, WorkSpec};
        use crate::ops::{self, Ctx, Initial, TransitionInput};
        let mut ctx = Ctx::fixed(Actor::Person);
        let mut tasks: std::collections::BTreeMap<TaskId, Task> = Default::default();
        let mut log: Vec<Event> = Vec::new();
        let mut apply = |ch: ops::Change,
                         tasks: &mut std::collections::BTreeMap<TaskId, Task>,
                         ctx: &mut Ctx<'static>| {
            for mut e in ch.events {
                e.seq = log.len() as u64 + 1;
                log.push(e);
            }
            let t = ch.after.unwrap();
            tasks.insert(t.id().clone(), t);
            ctx.now += jiff::SignedDuration::from_secs(61);
        };
        let id = |s: &str| TaskId::new(s).unwrap();
        for (name, parent, shell, deps) in [
            ("p1", None, false, vec![]),
            ("a", Some("p1"), true, vec![]),
            ("b", Some("p1"), true, vec!["a"]),
            ("c", Some("p1"), false, vec![]),
            ("p2", None, false, vec![]),
            ("d", Some("p2"), false, vec!["b", "solo"]),
            ("e", Some("p2"), false, vec![]),
            ("f", Some("p2"), true, vec![]),
            ("solo", None, true, vec![]),
        ] {
            let wf = if shell {
                WorkflowKind::Direct
            } else {
                WorkflowKind::Review
            };
            let mut spec = TaskSpec::new(id(name), wf, 3);
            spec.parent = parent.map(id);
            spec.depends_on = deps.into_iter().map(id).collect();
            spec.title = format!("Title of {name}");
            if shell {
                spec.spec.work = Some(WorkSpec::Shell("true".into()));
            }
            apply(
                ops::create(spec, Initial::NEW, &ctx).unwrap(),
                &mut tasks,
                &mut ctx,
            );
        }
        let go = |tasks: &std::collections::BTreeMap<TaskId, Task>,
                  name: &str,
                  to: Status,
                  ctx: &Ctx<'_>| {
            let handoff = Artifacts {
                handoff: Some(Evidence {
                    nth: 1,
                    section: "Handoff".into(),
                    digest: "d".into(),
                }),
                ..Default::default()
            };
            let input = TransitionInput {
                artifacts: handoff,
                guard: Some(crate::ops::GuardOutcome::Pass),
                ..Default::default()
            };
            ops::transition(&tasks[&id(name)], to, &input, ctx).unwrap()
        };
        // a: done; b, solo: working then done / stuck; c: working with a live session;
        // e: cancelled; d: pending on b (blocked); f: pending.
        for (name, to) in [
            ("a", Status::Working),
            ("a", Status::Done),
            ("b", Status::Working),
            ("b", Status::Done),
            ("solo", Status::Working),
            ("solo", Status::Stuck),
            ("c", Status::Working),
            ("e", Status::Cancelled),
        ] {
            let ch = go(&tasks, name, to, &ctx);
            apply(ch, &mut tasks, &mut ctx);
        }
        let ch = ops::spawned(&tasks[&id("c")], "s1", Role::Worker, None, &ctx).unwrap();
        apply(ch, &mut tasks, &mut ctx);
        let all: Vec<Task> = tasks.values().cloned().collect();
        assert!(all.iter().any(|t| t.at_rest()) && all.iter().any(|t| !t.at_rest()));
        let full =
            crate::state_md::render(&crate::history::state_input("p".into(), &all, &log, None));
        let heads: Vec<Task> = all
            .iter()
            .map(|t| {
                if t.at_rest() {
                    Task::from_head(t.head())
                } else {
                    t.clone()
                }
            })
            .collect();
        let done: Vec<&TaskId> = all
            .iter()
            .filter(|t| t.status() == Status::Done)
            .map(|t| t.id())
            .collect();
        let mut events: Vec<Event> = log
            .iter()
            .filter(|e| {
                done.contains(&&e.task)
                    && ["task.created", "status.changed", "auto.advanced"]
                        .contains(&e.kind.type_name())
            })
            .cloned()
            .collect();
        let last = log
            .iter()
            .rev()
            .find(|e| crate::history::is_activity(e))
            .unwrap();
        if !events.iter().any(|e| e.seq == last.seq) {
            events.push(last.clone());
            events.sort_by_key(|e| e.seq);
        }
        let cheap = crate::state_md::render(&crate::history::state_input(
            "p".into(),
            &heads,
            &events,
            None,
        ));
        assert_eq!(cheap, full);
        for part in [
            "Mean duration: 1m 01s",
            "blocked by solo (stuck)",
            "Failed: solo",
        ] {
            assert!(full.contains(part), "{part} in\n{full}");
        }
    }

    /// A task at rest comes back from its head as views show it.
    #[test]
    fn a_resting_task_survives_its_head() {
        let t = task(1, Some(0), Status::Done, true);
        assert!(t.at_rest());
        let back = Task::from_head(t.head());
        assert_eq!(back.head(), t.head());
        let mut busy = task(2, None, Status::Working, false);
        assert!(!busy.at_rest());
        busy.runner.status = Status::Pending;
        busy.runner.respawn_requested = true;
        assert!(!busy.at_rest(), "a respawn asked of the supervisor");
    }
}
