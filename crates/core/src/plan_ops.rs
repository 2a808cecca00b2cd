//! Tree-wide operations: turning a reconciled tree (`plan apply`) or a `.planning/`
//! directory scan (`plan sync`) into one change per affected task.
//!
//! Their lifecycle effects are runner decisions, exempt from the transition map like a
//! crash escalation (DESIGN 2.3), so they are recorded as `status.changed` with a reason.

use std::collections::BTreeMap;

use crate::event::EventKind;
use crate::model::{Status, Task, TaskId};
use crate::ops::{Change, Ctx, Outcome, Refusal};
use crate::tree::TreeUpdate;

/// The reason recorded on lifecycle moves made by `plan apply`.
pub const REASON_PLAN_APPLY: &str = "plan apply";

/// One change per task the reconciled tree touches, in id order. `merged` holds the
/// merge-ri result of every task the apply moves to `done` (the caller ran it: reaching
/// `done` goes through merge-ri on every path), after [`may_finish`] and, for a
/// decomposition, [`may_decompose`] let the selected task through.
pub fn plan_applied(
    prev: &[Task],
    update: &TreeUpdate,
    selected: &TaskId,
    merged: &BTreeMap<TaskId, (crate::model::PhaseStatus, Option<String>)>,
    ctx: &Ctx<'_>,
) -> Result<Vec<Change>, Refusal> {
    // This runs for every node of the tree (100,000 of them): a stored node's events
    // come from the update's sorted lists (tamper notes, edits, runner fields changed,
    // lifecycle steps), so only a node with events reads its stored task.
    let sorted = prev.windows(2).all(|w| w[0].id() < w[1].id());
    let mut by_id: Option<crate::tree::IdMap<&TaskId, &Task>> = None;
    let mut stored = |id: &TaskId| -> Option<&Task> {
        if sorted {
            return prev
                .binary_search_by(|t| t.id().cmp(id))
                .ok()
                .map(|i| &prev[i]);
        }
        by_id
            .get_or_insert_with(|| prev.iter().map(|t| (t.id(), t)).collect())
            .get(id)
            .copied()
    };
    let of = |id: &TaskId, sorted: &[TaskId]| sorted.binary_search(id).is_ok();
    // The stored nodes that can have events, looked up once per node (at 100,000 nodes
    // searching each of the lists for every node took 10 ms).
    let eventful: crate::tree::IdMap<&TaskId, ()> = plan_applied_reads(update, selected)
        .into_iter()
        .map(|id| (id, ()))
        .collect();
    let mut kinds: BTreeMap<TaskId, Vec<EventKind>> = BTreeMap::new();
    for n in &update.nodes {
        let id = &n.spec.id;
        if !n.new && !eventful.contains_key(id) {
            continue;
        }
        let mut k = Vec::new();
        if n.new {
            // The checks `task create` and `plan import` make (sizes, NUL characters).
            crate::ops::validate_spec(&n.spec)?;
            k.push(EventKind::TaskCreated {
                spec: n.spec.clone(),
                status: n.status,
                passes: n.passes,
                attempts: n.attempts,
            });
        } else {
            let notes = &update.tamper_ignored;
            let from = notes.partition_point(|t| &t.id < id);
            let to = notes.partition_point(|t| &t.id <= id);
            for tn in &notes[from..to] {
                k.push(EventKind::TamperIgnored {
                    field: tn.field.to_owned(),
                    agent_value: Some(tn.agent_value.clone()),
                    true_value: tn.true_value.clone(),
                });
            }
            // Only an edited node's spec can differ: every other field of a stored node
            // is restored from the store.
            if of(id, &update.edited) && stored(id).is_some_and(|old| old.spec != n.spec) {
                crate::ops::validate_spec(&n.spec)?;
                k.push(EventKind::TaskEdited {
                    spec: n.spec.clone(),
                });
            }
            if id == selected || of(id, &update.runner_changed) {
                k.push(EventKind::PlanApplied {
                    passes: n.passes,
                    attempts: n.attempts,
                });
            }
            {
                let steps = &update.lifecycle;
                let first = steps.partition_point(|s| &s.0 < id);
                let last = steps.partition_point(|s| &s.0 <= id);
                for (lid, from, to) in &steps[first..last] {
                    if lid == id {
                        if *to == Status::Done
                            && let Some((status, detail)) = merged.get(id)
                        {
                            if *status == crate::model::PhaseStatus::Failed {
                                return Err(Refusal::PhaseFailed {
                                    phase: crate::model::Phase::MergeRi,
                                    detail: detail.clone().unwrap_or_default(),
                                    status: *from,
                                });
                            }
                            k.push(EventKind::PhaseChanged {
                                phase: crate::model::Phase::MergeRi,
                                status: *status,
                                detail: detail.clone(),
                            });
                        }
                        k.push(EventKind::StatusChanged {
                            from: *from,
                            to: *to,
                            reason: Some(REASON_PLAN_APPLY.to_owned()),
                            evidence: None,
                            prior_review: None,
                        });
                    }
                }
            }
        }
        if !k.is_empty() {
            kinds.insert(id.clone(), k);
        }
    }
    for id in &update.removed {
        kinds.insert(id.clone(), vec![EventKind::TaskRemoved]);
    }
    kinds
        .into_iter()
        .map(|(id, k)| {
            let before = stored(&id);
            // A stored node's change needs its stored task: without it the change would
            // create the task again (see `plan_applied_reads`).
            if before.is_none() && update.created.binary_search(&id).is_err() {
                return Err(Refusal::Internal(format!(
                    "plan apply changes task {id} but was not given its stored task; this is a Warden bug"
                )));
            }
            Change::build(before, &id, k, ctx, Outcome::Applied)
        })
        .collect()
}

/// `plan apply --status done --guard pass` finishes the selected leaf on its guard's
/// outcome: a runner's decision, exempt from the transition map (DESIGN 2.3), but not
/// past what the store knows of the task. Refused (nothing written, and checked before
/// `merge-ri` runs) when the task is stuck (a person's `task retry` comes first), when
/// it is an agent's work in the review workflow that its reviewer has not passed (the
/// apply would skip the review: only a `reviewing` task, which a person may approve, is
/// finished),
/// or when a task it depends on is not done (`plan next` would never have named it).
/// Before, an orchestrator's apply finished a pending task whose dependency was still
/// pending, and one whose `## Review` said FAIL.
pub fn may_finish(task: &Task, update: &TreeUpdate) -> Result<(), Refusal> {
    let id = task.id();
    if !update
        .lifecycle
        .iter()
        .any(|(lid, _, to)| lid == id && *to == Status::Done)
    {
        return Ok(());
    }
    let refuse = |why: String| {
        Err(Refusal::ApplyDone {
            what: "finish",
            id: id.to_string(),
            why,
        })
    };
    let status = task.status();
    if status == Status::Stuck {
        return refuse(format!(
            "it is stuck (its attempts are used up); a person runs it again first: warden task retry {id}"
        ));
    }
    // A review with a reviewer: an agent's work in the review workflow (a node with no
    // work, seed 000's plain node, has no session to review and its runner decides).
    let reviewed = task.spec.workflow == crate::model::WorkflowKind::Review
        && matches!(task.spec.spec.work, Some(crate::model::WorkSpec::Agent(_)));
    if reviewed && status != Status::Reviewing {
        return refuse(format!(
            "it is in the review workflow and {status}, so done would skip its review; it reaches done through `warden task complete`, a reviewer's PASS and `warden task approve {id}`"
        ));
    }
    // Its own dependencies and its groups': a task waits for what its groups wait for
    // (a child added under a blocked task finished it by derivation).
    let at: std::collections::HashMap<&TaskId, usize> = update
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (&n.spec.id, i))
        .collect();
    let mut deps: Vec<&TaskId> = task.spec.depends_on.iter().collect();
    let mut up = at
        .get(id)
        .and_then(|&i| update.nodes[i].spec.parent.as_ref());
    let mut hops = 0;
    while let Some(p) = up
        && hops < crate::tree::MAX_DEPTH
    {
        let Some(&i) = at.get(p) else { break };
        deps.extend(&update.nodes[i].spec.depends_on);
        up = update.nodes[i].spec.parent.as_ref();
        hops += 1;
    }
    let open = deps
        .into_iter()
        .filter_map(|d| at.get(d).map(|&i| &update.nodes[i]))
        .filter(|n| n.status != Status::Done)
        .min_by(|a, b| a.spec.id.cmp(&b.spec.id));
    if let Some(d) = open {
        let next = if d.status == Status::Cancelled {
            format!(
                "a cancelled task is never done: drop it from depends_on (`warden task edit {id} --drop-depends-on {}`)",
                d.spec.id
            )
        } else {
            "finish that first (`warden plan next` names what is ready)".to_owned()
        };
        return refuse(format!(
            "it depends on {}, which is {}; {next}",
            d.spec.id, d.status
        ));
    }
    Ok(())
}

/// `plan apply --status decomposed`: a task the store says is not the agent's to plan
/// (stuck, waiting for a person's retry; in review) gains no children. Before, the
/// children of a stuck task, or of an agent's task waiting for its review, were
/// finished and the task was done by derivation, past every refusal of a direct done.
pub fn may_decompose(task: &Task) -> Result<(), Refusal> {
    let status = task.status();
    if matches!(
        status,
        Status::Stuck | Status::AgentReview | Status::Reviewing
    ) {
        return Err(Refusal::ApplyDone {
            what: "decompose",
            id: task.id().to_string(),
            why: format!(
                "it is {status}, so it is not its agent's to decompose now ({})",
                if status == Status::Stuck {
                    format!(
                        "a person runs it again first: warden task retry {}",
                        task.id()
                    )
                } else {
                    "its review decides it first".to_owned()
                }
            ),
        });
    }
    Ok(())
}

/// The stored tasks [`plan_applied`] reads for `update`: those with events (tamper
/// notes, edits, the selected node, runner fields changed, lifecycle steps, removals),
/// sorted. A caller that read the rest only as far as the reconcile needed them (see
/// [`crate::tree::StoredRows`]) decodes these in full.
pub fn plan_applied_reads<'a>(update: &'a TreeUpdate, selected: &'a TaskId) -> Vec<&'a TaskId> {
    let mut ids: Vec<&TaskId> = std::iter::once(selected)
        .chain(update.tamper_ignored.iter().map(|n| &n.id))
        .chain(&update.edited)
        .chain(&update.runner_changed)
        .chain(update.lifecycle.iter().map(|s| &s.0))
        .chain(&update.removed)
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Why `plan sync` left a task as it is, or what it wants a person to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncNoteKind {
    /// A task with the plan's id exists and `plan sync` did not make it: never touched.
    NotOurs,
    /// Done in Warden, but GSD's files say the plan is not done (its SUMMARY.md is
    /// missing or empty): a done task never moves back.
    DoneInWardenOnly,
    /// Done by GSD's files while an agent or a person holds the task: the gate decides
    /// (the SUMMARY.md counts as its handoff), not sync.
    SummaryWhileActive,
    /// A task sync made whose plan file or phase directory is gone: removed when
    /// nobody started it (and nothing kept holds or needs it), else kept for a person.
    PlanGone,
    /// A done phase holds a plan that is not done.
    PhaseReopened,
    /// A new plan of a phase a person cancelled: created cancelled with it.
    PhaseCancelled,
    /// A plan renumbered into the id of a task someone started, finished or cancelled,
    /// which stays the plan it was made from: the plan gets an id of its own.
    Renumbered,
}

/// One note of a sync.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SyncNote {
    /// What kind.
    pub kind: SyncNoteKind,
    /// The task.
    pub task: TaskId,
    /// A sentence for a person.
    pub message: String,
}

/// A plan finished outside Warden whose task has a branch: it reaches `done` through
/// `merge-ri`, one write per task (see `warden-app`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishOutside {
    /// The task.
    pub task: TaskId,
    /// The reason recorded with the move.
    pub reason: String,
    /// The SUMMARY.md and its digest, the evidence recorded with the move.
    pub evidence: Option<crate::event::EvidenceRef>,
}

/// What `plan sync` decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncDecision {
    /// One change per task created or changed, phases before their plans, in tree order.
    pub changes: Vec<Change>,
    /// Plans finished outside Warden whose tasks have a branch to merge first.
    pub finish: Vec<FinishOutside>,
    /// What was left alone, and why.
    pub notes: Vec<SyncNote>,
    /// Edges of GSD's order (one-by-one, phase after phase) onto plans that are
    /// cancelled, which sync does not keep.
    pub order_edges_onto_cancelled: usize,
}

/// The reason recorded when sync moves a plan finished outside Warden to `done`.
pub fn finished_outside_reason(summary: &str) -> String {
    format!("plan sync: finished outside Warden ({summary} exists)")
}

/// `plan sync` (DESIGN 2.6, with get-shit-done's real layouts): creates the tasks of new
/// phases and plans, updates the specs of tasks it made, and moves a plan's task to
/// `done` when GSD's files say it is done and nobody holds it. It never touches a task it
/// did not make (no matching [`crate::model::Origin`]), never moves a `done` task back,
/// and never decides for a task an agent or a person holds (`working`, `agent-review`,
/// `reviewing`, `clarification`): their gates do. `has_branch` says whether a task has a
/// git branch with work: such a task is left to [`SyncDecision::finish`].
pub fn planning_sync(
    tasks: &[Task],
    plan: &crate::gsd::sync::SyncPlan,
    has_branch: &dyn Fn(&TaskId) -> bool,
    ctx: &Ctx<'_>,
) -> Result<SyncDecision, Refusal> {
    use crate::gsd::sync::TOOL;
    let by_id: BTreeMap<&TaskId, &Task> = tasks.iter().map(|t| (t.id(), t)).collect();
    let root = plan
        .tasks
        .first()
        .and_then(|w| w.spec.origin.as_ref())
        .map(|o| o.root.clone());
    let ours = |t: &Task| {
        t.spec
            .origin
            .as_ref()
            .is_some_and(|o| o.tool == TOOL && Some(&o.root) == root.as_ref())
    };
    let never_started = |t: &Task| {
        t.status() == Status::Pending
            && t.attempts() == 0
            && t.live_session().is_none()
            && !has_branch(t.id())
    };
    let mut out = SyncDecision::default();
    let renumbered;
    let plan = match renumber(plan, &by_id, &ours, &|t| ours(t) && !never_started(t)) {
        Some((p, moved)) => {
            for Moved {
                old,
                new,
                was,
                adopted,
            } in moved
            {
                out.notes.push(SyncNote {
                    kind: SyncNoteKind::Renumbered,
                    task: new.clone(),
                    message: {
                        let path = p
                            .tasks
                            .iter()
                            .find(|w| w.spec.id == new)
                            .and_then(|w| w.spec.origin.as_ref())
                            .map_or("", |o| o.path.as_str());
                        if adopted {
                            format!(
                                "plan {path} (numbered {old} now) is task {new}, made from {was} before the plans were renumbered"
                            )
                        } else {
                            format!(
                                "plan {path} now has the number of task {old}, which was made from {was} and is another plan; it is task {new}"
                            )
                        }
                    },
                });
            }
            renumbered = p;
            &renumbered
        }
        None => plan,
    };
    // Whether each plan's task is done after this sync, for its phase.
    let mut done_after: BTreeMap<&TaskId, bool> = BTreeMap::new();
    let skipped: std::collections::BTreeSet<&TaskId> = plan
        .tasks
        .iter()
        .filter(|w| by_id.get(&w.spec.id).is_some_and(|t| !ours(t)))
        .map(|w| &w.spec.id)
        .collect();
    let note = |out: &mut SyncDecision, kind, task: &TaskId, message: String| {
        out.notes.push(SyncNote {
            kind,
            task: task.clone(),
            message,
        });
    };
    // A phase a person cancelled: its plans are cancelled (a group's cancel cancels
    // what is inside it), and a plan that appears in it later is created cancelled.
    let phase_cancelled = |w: &crate::gsd::sync::Wanted| {
        w.spec
            .parent
            .as_ref()
            .and_then(|p| by_id.get(p))
            .is_some_and(|t| ours(t) && t.status() == Status::Cancelled)
    };
    // Plans that are cancelled, or will be: GSD's order does not wait for them (a
    // phase after a cancelled one starts when the rest of that phase is done); what a
    // plan declares it needs still does, and `warden status` says so.
    let gone: std::collections::BTreeSet<&TaskId> = plan
        .tasks
        .iter()
        .filter(|w| w.is_plan)
        .filter(|w| match by_id.get(&w.spec.id) {
            Some(t) => ours(t) && t.status() == Status::Cancelled,
            None => phase_cancelled(w),
        })
        .map(|w| &w.spec.id)
        .collect();
    // Plans first (a phase's status follows them), then phases; output in tree order.
    let mut per_task: BTreeMap<&TaskId, Change> = BTreeMap::new();
    for w in plan.tasks.iter().filter(|w| w.is_plan) {
        let id = &w.spec.id;
        let mut spec = w.spec.clone();
        // Dependencies on tasks sync does not own would tie its plans to a person's tasks.
        spec.depends_on.retain(|d| !skipped.contains(d));
        let before = spec.depends_on.len();
        spec.depends_on
            .retain(|d| !(gone.contains(d) && w.order_edges.contains(d)));
        out.order_edges_onto_cancelled += before - spec.depends_on.len();
        let summary = w.summary.clone().unwrap_or_default();
        let evidence = w
            .summary_digest
            .clone()
            .map(|digest| crate::event::EvidenceRef {
                section: summary.clone(),
                digest,
                nth: 0,
            });
        let Some(t) = by_id.get(id) else {
            let status = if phase_cancelled(w) {
                note(
                    &mut out,
                    SyncNoteKind::PhaseCancelled,
                    id,
                    format!(
                        "plan {id} is new in phase {}, which is cancelled: created cancelled",
                        w.spec.parent.as_ref().map_or("", |p| p.as_str())
                    ),
                );
                Status::Cancelled
            } else if w.done {
                Status::Done
            } else {
                Status::Pending
            };
            done_after.insert(id, w.done);
            crate::ops::validate_spec(&spec)?;
            per_task.insert(
                id,
                Change::build(
                    None,
                    id,
                    vec![EventKind::TaskCreated {
                        spec,
                        status,
                        passes: w.done && status == Status::Done,
                        attempts: 0,
                    }],
                    ctx,
                    Outcome::Applied,
                )?,
            );
            continue;
        };
        if !ours(t) {
            note(
                &mut out,
                SyncNoteKind::NotOurs,
                id,
                format!(
                    "task {id} exists and was not made by plan sync; {} is not imported (rename the task or the plan)",
                    w.spec.origin.as_ref().map_or("", |o| o.path.as_str())
                ),
            );
            continue;
        }
        let mut kinds = Vec::new();
        // The spec: sync's, but the task keeps its own limits and workflow, and its body
        // once it has started (the agent was given that body).
        spec.max_attempts = t.spec.max_attempts;
        spec.workflow = t.spec.workflow;
        if t.status() != Status::Pending {
            spec.body = t.spec.body.clone();
        }
        if spec != t.spec {
            crate::ops::validate_spec(&spec)?;
            kinds.push(EventKind::TaskEdited { spec });
        }
        let status = t.status();
        let mut done = status == Status::Done;
        match (w.done, status) {
            (true, Status::Done) | (false, Status::Cancelled) | (true, Status::Cancelled) => {}
            (true, Status::Pending | Status::Stuck) if t.live_session().is_none() => {
                let reason = finished_outside_reason(&summary);
                if has_branch(id) {
                    out.finish.push(FinishOutside {
                        task: id.clone(),
                        reason,
                        evidence,
                    });
                } else {
                    kinds.push(EventKind::PlanApplied {
                        passes: true,
                        attempts: t.attempts(),
                    });
                    kinds.push(EventKind::PhaseChanged {
                        phase: crate::model::Phase::MergeRi,
                        status: crate::model::PhaseStatus::Skipped,
                        detail: Some("the task never had a branch".into()),
                    });
                    kinds.push(EventKind::StatusChanged {
                        from: status,
                        to: Status::Done,
                        reason: Some(reason),
                        evidence,
                        prior_review: None,
                    });
                    done = true;
                }
            }
            (true, s) => note(
                &mut out,
                SyncNoteKind::SummaryWhileActive,
                id,
                format!(
                    "{summary} exists but task {id} is {s}: its gate decides (the file counts as its handoff), not sync"
                ),
            ),
            (false, Status::Done) => note(
                &mut out,
                SyncNoteKind::DoneInWardenOnly,
                id,
                format!(
                    "task {id} is done in Warden but {summary} is missing or empty; left done (sync never moves a done task back)"
                ),
            ),
            (false, _) => {}
        }
        done_after.insert(id, done);
        if !kinds.is_empty() {
            per_task.insert(
                id,
                Change::build(Some(t), id, kinds, ctx, Outcome::Applied)?,
            );
        }
    }
    // Phases: created with their plans; done (and passing) when every plan is done.
    let mut plans_of: BTreeMap<&TaskId, Vec<&TaskId>> = BTreeMap::new();
    for w in plan.tasks.iter().filter(|w| w.is_plan) {
        if let Some(p) = &w.spec.parent {
            plans_of.entry(p).or_default().push(&w.spec.id);
        }
    }
    for w in plan.tasks.iter().filter(|w| !w.is_plan) {
        let id = &w.spec.id;
        let kids = plans_of.get(id).cloned().unwrap_or_default();
        let all_done = !kids.is_empty() && kids.iter().all(|k| done_after.get(k) == Some(&true));
        let Some(t) = by_id.get(id) else {
            per_task.insert(
                id,
                Change::build(
                    None,
                    id,
                    vec![EventKind::TaskCreated {
                        spec: w.spec.clone(),
                        status: if all_done {
                            Status::Done
                        } else {
                            Status::Pending
                        },
                        passes: all_done,
                        attempts: 0,
                    }],
                    ctx,
                    Outcome::Applied,
                )?,
            );
            continue;
        };
        if !ours(t) {
            note(
                &mut out,
                SyncNoteKind::NotOurs,
                id,
                format!(
                    "task {id} exists and was not made by plan sync; phase {} is not imported as a task (its plans are, under it)",
                    w.spec.origin.as_ref().map_or("", |o| o.path.as_str())
                ),
            );
            continue;
        }
        let mut kinds = Vec::new();
        let mut spec = w.spec.clone();
        spec.max_attempts = t.spec.max_attempts;
        spec.workflow = t.spec.workflow;
        spec.body = t.spec.body.clone();
        if spec != t.spec {
            kinds.push(EventKind::TaskEdited { spec });
        }
        match (all_done, t.status()) {
            (true, Status::Done | Status::Cancelled) => {}
            (true, from) => {
                kinds.push(EventKind::PlanApplied {
                    passes: true,
                    attempts: t.attempts(),
                });
                kinds.push(EventKind::StatusChanged {
                    from,
                    to: Status::Done,
                    reason: Some("plan sync: every plan of the phase is done".into()),
                    evidence: None,
                    prior_review: None,
                });
            }
            (false, Status::Done) if !kids.is_empty() => note(
                &mut out,
                SyncNoteKind::PhaseReopened,
                id,
                format!(
                    "phase {id} is done but holds a plan that is not; it stays done (sync never moves a done task back)"
                ),
            ),
            (false, _) if t.passes() => kinds.push(EventKind::PlanApplied {
                passes: false,
                attempts: t.attempts(),
            }),
            (false, _) => {}
        }
        if !kinds.is_empty() {
            per_task.insert(
                id,
                Change::build(Some(t), id, kinds, ctx, Outcome::Applied)?,
            );
        }
    }
    // Tasks sync made whose file (or phase directory) is gone. The files are the
    // truth: one nobody started is removed (its events stay in the history, and it is
    // made again if its file comes back), so that no agent is sent to a plan that no
    // longer exists and a phase left with no plan is not run as a leaf. One that was
    // started, holds work on its branch, or that another task needs is kept for a
    // person to decide.
    let wanted_spec: BTreeMap<&TaskId, &crate::model::TaskSpec> =
        plan.tasks.iter().map(|w| (&w.spec.id, &w.spec)).collect();
    let gone: Vec<&Task> = tasks
        .iter()
        .filter(|t| ours(t) && !wanted_spec.contains_key(t.id()))
        .collect();
    let mut removing: std::collections::BTreeSet<&TaskId> = Default::default();
    if !gone.is_empty() {
        // Each task's parent and dependencies after this sync.
        let after = |t: &'_ Task| -> (Option<TaskId>, Vec<TaskId>) {
            match wanted_spec.get(t.id()) {
                Some(w) => (w.parent.clone(), w.depends_on.clone()),
                None => (t.spec.parent.clone(), t.spec.depends_on.clone()),
            }
        };
        let held: std::collections::BTreeSet<&TaskId> = tasks
            .iter()
            .filter_map(|t| t.spec.parent.as_ref())
            .collect();
        let mut children: BTreeMap<TaskId, Vec<&TaskId>> = BTreeMap::new();
        let mut needed_by: BTreeMap<TaskId, Vec<&TaskId>> = BTreeMap::new();
        for t in tasks {
            let (parent, deps) = after(t);
            if let Some(p) = parent {
                children.entry(p).or_default().push(t.id());
            }
            for d in deps {
                needed_by.entry(d).or_default().push(t.id());
            }
        }
        // Plans before their phase: one pass per level at most.
        for _ in 0..=crate::tree::MAX_DEPTH {
            let before = removing.len();
            for t in &gone {
                // A phase (a task that held plans) is its plans' status, not work of its
                // own: once none is left in it, it goes whatever it was (a phase
                // directory renamed left the old one behind, done, as a leaf).
                if removing.contains(t.id()) || !(never_started(t) || held.contains(t.id())) {
                    continue;
                }
                let kept = |ids: Option<&Vec<&TaskId>>| {
                    ids.is_some_and(|v| v.iter().any(|k| !removing.contains(*k)))
                };
                if !kept(children.get(t.id())) && !kept(needed_by.get(t.id())) {
                    removing.insert(t.id());
                }
            }
            if removing.len() == before {
                break;
            }
        }
    }
    for t in &gone {
        let path = t.spec.origin.as_ref().map_or("", |o| o.path.as_str());
        let id = t.id();
        if removing.contains(id) {
            note(
                &mut out,
                SyncNoteKind::PlanGone,
                id,
                format!(
                    "task {id} was made from {path}, which is gone; removed ({})",
                    if never_started(t) {
                        "nobody had started it"
                    } else {
                        "no plan is left in it"
                    }
                ),
            );
            per_task.insert(
                id,
                Change::build(
                    Some(t),
                    id,
                    vec![EventKind::TaskRemoved],
                    ctx,
                    Outcome::Applied,
                )?,
            );
        } else if !t.status().is_terminal() {
            note(
                &mut out,
                SyncNoteKind::PlanGone,
                id,
                format!(
                    "task {id} was made from {path}, which is gone; kept, as it {} (cancel it with `warden task cancel {id}` if it is not wanted)",
                    if has_branch(id) {
                        "has work on its branch".to_owned()
                    } else if t.status() == Status::Pending && t.attempts() == 0 {
                        "holds or is needed by a task that stays".to_owned()
                    } else {
                        format!("is {}", t.status())
                    }
                ),
            );
        }
    }
    for w in &plan.tasks {
        if let Some(ch) = per_task.remove(&w.spec.id) {
            out.changes.push(ch);
        }
    }
    // The gone tasks' removals, in id order.
    out.changes.extend(per_task.into_values());
    Ok(out)
}

/// `path` without the numbers GSD renumbers: each component's leading digits and dots
/// (`phases/02-pay/02-01-PLAN.md` → `phases/-pay/-01-PLAN.md`, as is
/// `phases/01-pay/01-01-PLAN.md`).
fn unnumbered(path: &str) -> String {
    path.split('/')
        .map(|c| c.trim_start_matches(|ch: char| ch.is_ascii_digit() || ch == '.'))
        .collect::<Vec<_>>()
        .join("/")
}

/// The number of the first component of `path` that begins with one (`phases/02.1-x/…`
/// → (2, 1)): a phase's number, as GSD renumbers it.
fn phase_number(path: &str) -> Option<(u64, u64)> {
    let c = path
        .split('/')
        .find(|c| c.starts_with(|ch: char| ch.is_ascii_digit()))?;
    let digits = |s: &str| -> (u64, usize) {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        (s[..n].parse().unwrap_or(u64::MAX), n)
    };
    let (major, n) = digits(c);
    let minor = match c[n..].strip_prefix('.') {
        Some(rest) if rest.starts_with(|ch: char| ch.is_ascii_digit()) => digits(rest).0,
        _ => 0,
    };
    Some((major, minor))
}

/// A plan whose id [`renumber`] changed.
struct Moved {
    /// The id GSD's files give it.
    old: TaskId,
    /// Its task's.
    new: TaskId,
    /// The file the task `new` (a moved task) or `old` (another plan's) was made from.
    was: String,
    /// `new` is a task the plan moved away from (not an id of its own).
    adopted: bool,
}

/// GSD renumbers: removing a phase moves every later one down, directories and files
/// alike, so a plan's number (its id) may come to name what was another plan. A task
/// someone started, finished or cancelled (`kept`) stays the plan it was made from:
/// - a wanted plan whose file and title are both not its id's task's is another plan;
/// - it is the task whose file is gone that has its title and its path but for GSD's
///   numbers, from a phase numbered higher, when exactly one such task was kept (the
///   plan was renumbered: removing a phase moves the later ones down);
/// - else it gets an id of its own, its number and a hash of its file's path (as GSD
///   ids that collide within one tree do), and so does a plan whose id the first rule
///   gave to a moved task.
///
/// A plan whose file made another task before (one of these moves, at an earlier sync)
/// is that task. A task nobody started just follows the files. Returns the plan with those ids
/// changed everywhere (dependencies too) and what moved; `None` when no id changes.
fn renumber(
    plan: &crate::gsd::sync::SyncPlan,
    by_id: &BTreeMap<&TaskId, &Task>,
    ours: &dyn Fn(&Task) -> bool,
    kept: &dyn Fn(&Task) -> bool,
) -> Option<(crate::gsd::sync::SyncPlan, Vec<Moved>)> {
    use crate::gsd::ids;
    use std::collections::{HashMap, HashSet};
    let path_of = |spec: &crate::model::TaskSpec| spec.origin.as_ref().map(|o| o.path.clone());
    let plans = || plan.tasks.iter().filter(|w| w.is_plan);
    let wanted: HashSet<&str> = plan.tasks.iter().map(|w| w.spec.id.as_str()).collect();
    let wanted_paths: HashSet<String> =
        plan.tasks.iter().filter_map(|w| path_of(&w.spec)).collect();
    // Kept plans whose file is gone, by their path without GSD's numbers and their
    // title (a key two of them share names none).
    let mut moved_away: HashMap<(String, &str), Option<&TaskId>> = HashMap::new();
    for t in by_id.values().filter(|t| kept(t)) {
        let Some(path) = path_of(&t.spec) else {
            continue;
        };
        if wanted_paths.contains(&path) || !path.to_ascii_lowercase().ends_with(".md") {
            continue;
        }
        moved_away
            .entry((unnumbered(&path), t.spec.title.as_str()))
            .and_modify(|e| *e = None)
            .or_insert(Some(t.id()));
    }
    let own = |w: &crate::gsd::sync::Wanted, t: &Task| {
        path_of(&t.spec) == path_of(&w.spec) || t.spec.title == w.spec.title
    };
    let mut map: BTreeMap<TaskId, TaskId> = BTreeMap::new();
    let mut taken: HashSet<TaskId> = HashSet::new();
    let mut moved = Vec::new();
    let was = |id: &TaskId| {
        by_id
            .get(id)
            .and_then(|t| path_of(&t.spec))
            .unwrap_or_default()
    };
    // Sync's tasks by the file they were made from: a plan this step gave another id
    // before is that task again (no note: the move was noted when it happened).
    let by_path: HashMap<String, &TaskId> = by_id
        .values()
        .filter(|t| ours(t))
        .filter_map(|t| Some((path_of(&t.spec)?, t.id())))
        .collect();
    for w in plans() {
        let holder = by_id.get(&w.spec.id);
        if holder.is_some_and(|t| path_of(&t.spec) == path_of(&w.spec)) {
            continue;
        }
        if let Some(task) = path_of(&w.spec).and_then(|p| by_path.get(&p))
            && !taken.contains(*task)
        {
            taken.insert((*task).clone());
            map.insert(w.spec.id.clone(), (*task).clone());
            continue;
        }
        let key = (
            path_of(&w.spec).map(|p| unnumbered(&p)).unwrap_or_default(),
            w.spec.title.as_str(),
        );
        // Removing a phase renumbers the later ones down: a task of the same name from
        // a phase numbered lower than this one is not this plan (a new plan that took
        // a long-gone finished one's name would be taken for done).
        let renumbered_down = |task: &TaskId| {
            let now = path_of(&w.spec).and_then(|p| phase_number(&p));
            let then = by_id
                .get(task)
                .and_then(|t| path_of(&t.spec))
                .and_then(|p| phase_number(&p));
            matches!((now, then), (Some(n), Some(t)) if n < t)
        };
        if let Some(Some(task)) = moved_away.get(&key)
            && !taken.contains(*task)
            && *task != &w.spec.id
            && renumbered_down(task)
        {
            taken.insert((*task).clone());
            moved.push(Moved {
                old: w.spec.id.clone(),
                new: (*task).clone(),
                was: was(task),
                adopted: true,
            });
            map.insert(w.spec.id.clone(), (*task).clone());
            continue;
        }
        // Moved with its title and number (its phase directory renamed): its own task.
        if holder.is_some_and(|t| own(w, t)) {
            continue;
        }
    }
    for w in plans() {
        if map.contains_key(&w.spec.id) {
            continue;
        }
        let Some(t) = by_id.get(&w.spec.id) else {
            continue;
        };
        // Its id went to a moved task, or names a kept task of another plan.
        if !(taken.contains(&w.spec.id) || kept(t) && !own(w, t)) {
            continue;
        }
        let Some(now) = path_of(&w.spec) else {
            continue;
        };
        // Free: no other wanted id, none taken, and no stored task but this very plan's
        // from an earlier sync.
        let free = |c: &TaskId| {
            !wanted.contains(c.as_str())
                && !taken.contains(c)
                && by_id
                    .get(c)
                    .is_none_or(|t| path_of(&t.spec).as_deref() == Some(now.as_str()))
        };
        let base = w.spec.id.as_str();
        let hashed = |n: usize, k: Option<u64>| {
            let mut c = format!("{base}-{}", ids::short_hash(&now, n));
            if let Some(k) = k {
                c.push_str(&format!("-{k}"));
            }
            TaskId::new(&ids::fit(&c)).ok()
        };
        let Some(new) = [hashed(6, None), hashed(12, None)]
            .into_iter()
            .flatten()
            .chain((2..).map_while(|k| hashed(6, Some(k))))
            .find(|c| free(c))
        else {
            continue;
        };
        taken.insert(new.clone());
        moved.push(Moved {
            old: w.spec.id.clone(),
            new: new.clone(),
            was: was(&w.spec.id),
            adopted: false,
        });
        map.insert(w.spec.id.clone(), new);
    }
    if map.is_empty() {
        return None;
    }
    let swap = |id: &mut TaskId| {
        if let Some(n) = map.get(id) {
            *id = n.clone();
        }
    };
    let mut out = plan.clone();
    for w in &mut out.tasks {
        swap(&mut w.spec.id);
        if let Some(p) = &mut w.spec.parent {
            swap(p);
        }
        w.spec.depends_on.iter_mut().for_each(swap);
        w.order_edges.iter_mut().for_each(swap);
    }
    Some((out, moved))
}

/// The move to `done` of a plan finished outside Warden whose task has a branch, once
/// `merge-ri` ran: refused (nothing written) when the merge failed, or when the task is
/// no longer one sync may finish (someone took it meanwhile).
pub fn finish_outside(
    t: &Task,
    f: &FinishOutside,
    merge: (crate::model::PhaseStatus, Option<String>),
    ctx: &Ctx<'_>,
) -> Result<Change, Refusal> {
    let status = t.status();
    if !matches!(status, Status::Pending | Status::Stuck) || t.live_session().is_some() {
        return Err(Refusal::InvalidSpec(format!(
            "task {} is {status} now; its gate decides",
            t.id()
        )));
    }
    let (merged, detail) = merge;
    if merged == crate::model::PhaseStatus::Failed {
        return Err(Refusal::PhaseFailed {
            phase: crate::model::Phase::MergeRi,
            detail: detail.unwrap_or_else(|| "merge failed".into()),
            status,
        });
    }
    Change::build(
        Some(t),
        t.id(),
        vec![
            EventKind::PlanApplied {
                passes: true,
                attempts: t.attempts(),
            },
            EventKind::PhaseChanged {
                phase: crate::model::Phase::MergeRi,
                status: merged,
                detail,
            },
            EventKind::StatusChanged {
                from: status,
                to: Status::Done,
                reason: Some(f.reason.clone()),
                evidence: f.evidence.clone(),
                prior_review: None,
            },
        ],
        ctx,
        Outcome::Applied,
    )
}
