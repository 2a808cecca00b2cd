//! Tree-wide operations: turning a reconciled tree (`plan apply`) or a `.planning/`
//! directory scan (`plan sync`) into one change per affected task.
//!
//! Their lifecycle effects are runner decisions, exempt from the transition map like a
//! crash escalation (DESIGN 2.3), so they are recorded as `status.changed` with a reason.

use std::collections::BTreeMap;

use crate::event::EventKind;
use crate::model::{Limits, Status, Task, TaskId, TaskSpec, WorkflowKind};
use crate::ops::{Change, Ctx, Outcome, Refusal};
use crate::tree::TreeUpdate;

/// The reason recorded on lifecycle moves made by `plan apply`.
pub const REASON_PLAN_APPLY: &str = "plan apply";

/// One change per task the reconciled tree touches, in id order. `merged` holds the
/// merge-ri result of every task the apply moves to `done` (the caller ran it: reaching
/// `done` goes through merge-ri on every path).
pub fn plan_applied(
    prev: &[Task],
    update: &TreeUpdate,
    selected: &TaskId,
    merged: &BTreeMap<TaskId, (crate::model::PhaseStatus, Option<String>)>,
    ctx: &Ctx<'_>,
) -> Result<Vec<Change>, Refusal> {
    let before: BTreeMap<&TaskId, &Task> = prev.iter().map(|t| (t.id(), t)).collect();
    let mut kinds: BTreeMap<TaskId, Vec<EventKind>> = BTreeMap::new();
    for n in &update.nodes {
        let id = &n.spec.id;
        let mut k = Vec::new();
        match before.get(id) {
            None => k.push(EventKind::TaskCreated {
                spec: n.spec.clone(),
                status: n.status,
                passes: n.passes,
                attempts: n.attempts,
            }),
            Some(old) => {
                for tn in update.tamper_ignored.iter().filter(|t| &t.id == id) {
                    k.push(EventKind::TamperIgnored {
                        field: tn.field.to_owned(),
                        agent_value: Some(tn.agent_value.clone()),
                        true_value: tn.true_value.clone(),
                    });
                }
                if old.spec != n.spec {
                    k.push(EventKind::TaskEdited {
                        spec: n.spec.clone(),
                    });
                }
                if id == selected || old.passes() != n.passes || old.attempts() != n.attempts {
                    k.push(EventKind::PlanApplied {
                        passes: n.passes,
                        attempts: n.attempts,
                    });
                }
                for (lid, from, to) in &update.lifecycle {
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
        .map(|(id, k)| Change::build(before.get(&id).copied(), &id, k, ctx, Outcome::Applied))
        .collect()
}

/// A phase directory found by `plan sync` (`phases/NN-name/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScannedPhase {
    /// `NN-name`, lower-cased.
    pub id: TaskId,
    /// A title for a new phase task.
    pub title: String,
    /// Its plans, in file order.
    pub plans: Vec<ScannedPlan>,
}

/// A plan file found by `plan sync` (`NN-MM-PLAN.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScannedPlan {
    /// `NN-MM`.
    pub id: TaskId,
    /// A title for a new plan task.
    pub title: String,
    /// Its `NN-MM-SUMMARY.md` exists.
    pub done: bool,
}

/// `plan sync`: the filesystem is the source of truth. Missing phases and plans are
/// created; a plan with a SUMMARY.md passes (and is done); one whose SUMMARY.md was
/// deleted stops passing (and is pending again); a phase passes iff all its plans pass.
pub fn planning_sync(
    tasks: &[Task],
    scanned: &[ScannedPhase],
    limits: &Limits,
    ctx: &Ctx<'_>,
) -> Result<Vec<Change>, Refusal> {
    let by_id: BTreeMap<&TaskId, &Task> = tasks.iter().map(|t| (t.id(), t)).collect();
    let mut changes = Vec::new();
    for (i, phase) in scanned.iter().enumerate() {
        let all_done = !phase.plans.is_empty() && phase.plans.iter().all(|p| p.done);
        for (j, plan) in phase.plans.iter().enumerate() {
            match by_id.get(&plan.id) {
                None => {
                    let mut spec =
                        TaskSpec::new(plan.id.clone(), WorkflowKind::Review, limits.max_attempts);
                    spec.title = plan.title.clone();
                    spec.parent = Some(phase.id.clone());
                    spec.order = j as i64;
                    changes.push(Change::build(
                        None,
                        &plan.id,
                        vec![EventKind::TaskCreated {
                            spec,
                            status: if plan.done {
                                Status::Done
                            } else {
                                Status::Pending
                            },
                            passes: plan.done,
                            attempts: 0,
                        }],
                        ctx,
                        Outcome::Applied,
                    )?);
                }
                Some(t) => {
                    if let Some(ch) = sync_passes(t, plan.done, "SUMMARY.md", ctx)? {
                        changes.push(ch);
                    }
                }
            }
        }
        match by_id.get(&phase.id) {
            None => {
                let mut spec =
                    TaskSpec::new(phase.id.clone(), WorkflowKind::Review, limits.max_attempts);
                spec.title = phase.title.clone();
                spec.order = i as i64;
                changes.push(Change::build(
                    None,
                    &phase.id,
                    vec![EventKind::TaskCreated {
                        spec,
                        status: Status::Pending,
                        passes: all_done,
                        attempts: 0,
                    }],
                    ctx,
                    Outcome::Applied,
                )?);
            }
            Some(t) if t.passes() != all_done => changes.push(Change::build(
                Some(t),
                t.id(),
                vec![EventKind::PlanApplied {
                    passes: all_done,
                    attempts: t.attempts(),
                }],
                ctx,
                Outcome::Applied,
            )?),
            Some(_) => {}
        }
    }
    Ok(changes)
}

fn sync_passes(t: &Task, done: bool, what: &str, ctx: &Ctx<'_>) -> Result<Option<Change>, Refusal> {
    if t.passes() == done && (t.status() == Status::Done) == done {
        return Ok(None);
    }
    let mut kinds = vec![EventKind::PlanApplied {
        passes: done,
        attempts: t.attempts(),
    }];
    let to = if done { Status::Done } else { Status::Pending };
    if t.status() != to && t.status() != Status::Cancelled {
        kinds.push(EventKind::StatusChanged {
            from: t.status(),
            to,
            reason: Some(if done {
                format!("plan sync: {what} exists")
            } else {
                format!("plan sync: {what} was removed")
            }),
            evidence: None,
        });
    }
    Change::build(Some(t), t.id(), kinds, ctx, Outcome::Applied).map(Some)
}
