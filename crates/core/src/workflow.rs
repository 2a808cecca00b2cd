//! Workflows as data: which status may follow which, and which transitions are gated.
//!
//! The `review` map is seed 001's exactly; `direct` is seed 000's guard-only lifecycle.
//! Custom maps are loaded from a [`WorkflowDef`] and validated before use.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{Status, WorkflowKind};

/// What a transition needs besides being in the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// A non-empty `## Handoff` section, then the guard (postchecks) passes.
    HandoffThenGuard,
    /// `## Review` verdict PASS.
    ReviewPass,
    /// `## Review` verdict FAIL and `review_round < max_review_rounds`.
    ReviewFailBelowLimit,
    /// `## Review` verdict FAIL and `review_round >= max_review_rounds`.
    ReviewFailAtLimit,
    /// The guard alone (direct workflow: `working → done`).
    Guard,
}

/// The `review` transition map (seed 001, "Transition Map").
pub const REVIEW_MAP: &[(Status, &[Status])] = &[
    (
        Status::Pending,
        &[Status::Working, Status::Clarification, Status::Cancelled],
    ),
    (Status::Clarification, &[Status::Working, Status::Cancelled]),
    (
        Status::Working,
        &[
            Status::AgentReview,
            Status::Clarification,
            Status::Stuck,
            Status::Cancelled,
        ],
    ),
    (
        Status::AgentReview,
        &[
            Status::Reviewing,
            Status::Working,
            Status::Stuck,
            Status::Cancelled,
        ],
    ),
    // reviewing → working is a person's rejection (DESIGN 6), not in seed 001.
    (
        Status::Reviewing,
        &[Status::Working, Status::Done, Status::Cancelled],
    ),
    (
        Status::Stuck,
        &[Status::Working, Status::AgentReview, Status::Cancelled],
    ),
    (Status::Done, &[]),
    (Status::Cancelled, &[]),
];

/// The `review` gates (seed 001, "Artifact Gates"; DESIGN 2.1).
pub const REVIEW_GATES: &[(Status, Status, Gate)] = &[
    (Status::Working, Status::AgentReview, Gate::HandoffThenGuard),
    (Status::AgentReview, Status::Reviewing, Gate::ReviewPass),
    (
        Status::AgentReview,
        Status::Working,
        Gate::ReviewFailBelowLimit,
    ),
    (Status::AgentReview, Status::Stuck, Gate::ReviewFailAtLimit),
    // Not in seed 001's table: a stuck task resumed by an agent goes to review only on
    // the same evidence as a working one — a Handoff and a passing guard — so a guard
    // that failed `max_attempts` times cannot be skipped by a status change.
    (Status::Stuck, Status::AgentReview, Gate::HandoffThenGuard),
];

/// The `direct` transition map (seed 000: the guard decides).
pub const DIRECT_MAP: &[(Status, &[Status])] = &[
    (Status::Pending, &[Status::Working, Status::Cancelled]),
    (
        Status::Working,
        &[Status::Done, Status::Stuck, Status::Cancelled],
    ),
    (Status::Stuck, &[Status::Working, Status::Cancelled]),
    (Status::Done, &[]),
    (Status::Cancelled, &[]),
];

/// The `direct` gates.
pub const DIRECT_GATES: &[(Status, Status, Gate)] = &[(Status::Working, Status::Done, Gate::Guard)];

/// A validated transition map, stored as one bitmask of targets per source status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workflow {
    initial: Status,
    /// `allowed[from as index]` has bit `to as index` set when `from → to` is legal.
    allowed: [u8; 8],
    /// Statuses that appear in the map at all.
    present: u8,
    gates: Vec<(Status, Status, Gate)>,
}

fn idx(s: Status) -> usize {
    Status::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

fn bit(s: Status) -> u8 {
    1u8 << idx(s)
}

impl Workflow {
    fn from_table(
        initial: Status,
        map: &[(Status, &[Status])],
        gates: &[(Status, Status, Gate)],
    ) -> Workflow {
        let mut allowed = [0u8; 8];
        let mut present = bit(initial);
        for (from, tos) in map {
            present |= bit(*from);
            for to in *tos {
                allowed[idx(*from)] |= bit(*to);
                present |= bit(*to);
            }
        }
        Workflow {
            initial,
            allowed,
            present,
            gates: gates.to_vec(),
        }
    }

    /// The built-in workflow of this kind.
    pub fn builtin(kind: WorkflowKind) -> &'static Workflow {
        use std::sync::OnceLock;
        static REVIEW: OnceLock<Workflow> = OnceLock::new();
        static DIRECT: OnceLock<Workflow> = OnceLock::new();
        match kind {
            WorkflowKind::Review => REVIEW
                .get_or_init(|| Workflow::from_table(Status::Pending, REVIEW_MAP, REVIEW_GATES)),
            WorkflowKind::Direct => DIRECT
                .get_or_init(|| Workflow::from_table(Status::Pending, DIRECT_MAP, DIRECT_GATES)),
        }
    }

    /// The status new tasks start in.
    pub fn initial(&self) -> Status {
        self.initial
    }

    /// Is `from → to` in the map?
    pub fn allows(&self, from: Status, to: Status) -> bool {
        self.allowed[idx(from)] & bit(to) != 0
    }

    /// Legal targets from `from`, in status order.
    pub fn targets(&self, from: Status) -> Vec<Status> {
        Status::ALL
            .iter()
            .copied()
            .filter(|to| self.allows(from, *to))
            .collect()
    }

    /// Does the map use this status at all?
    pub fn has_status(&self, s: Status) -> bool {
        self.present & bit(s) != 0
    }

    /// The gate on `from → to`, if any.
    pub fn gate(&self, from: Status, to: Status) -> Option<Gate> {
        self.gates
            .iter()
            .find(|(f, t, _)| *f == from && *t == to)
            .map(|(_, _, g)| *g)
    }

    /// Loads and validates a custom map. Every problem is reported at once.
    pub fn load(def: &WorkflowDef) -> Result<Workflow, Vec<WorkflowError>> {
        let mut errors = Vec::new();
        let parse = |name: &str, errors: &mut Vec<WorkflowError>| match Status::parse(name.trim()) {
            Some(s) => Some(s),
            None => {
                errors.push(WorkflowError::UnknownState(name.to_owned()));
                None
            }
        };
        let initial = parse(&def.initial, &mut errors);
        let mut edges: Vec<(Status, Vec<Status>)> = Vec::new();
        for (from, tos) in &def.transitions {
            let Some(f) = parse(from, &mut errors) else {
                continue;
            };
            let mut targets = Vec::new();
            for to in tos {
                if let Some(t) = parse(to, &mut errors) {
                    if f.is_terminal() {
                        errors.push(WorkflowError::EdgeFromTerminal(f, t));
                    }
                    if t == f {
                        errors.push(WorkflowError::SelfLoop(f));
                    }
                    targets.push(t);
                }
            }
            edges.push((f, targets));
        }
        let mut gates = Vec::new();
        for g in &def.gates {
            let (Some(f), Some(t)) = (parse(&g.from, &mut errors), parse(&g.to, &mut errors))
            else {
                continue;
            };
            let gate = match g.requires.as_str() {
                "handoff" => Gate::HandoffThenGuard,
                "review-pass" => Gate::ReviewPass,
                "review-fail-below-limit" => Gate::ReviewFailBelowLimit,
                "review-fail-at-limit" => Gate::ReviewFailAtLimit,
                "guard" => Gate::Guard,
                other => {
                    errors.push(WorkflowError::UnknownGate(other.to_owned()));
                    continue;
                }
            };
            if !edges.iter().any(|(ef, ts)| *ef == f && ts.contains(&t)) {
                errors.push(WorkflowError::GateWithoutEdge(f, t));
            }
            gates.push((f, t, gate));
        }
        let Some(initial) = initial else {
            return Err(errors);
        };
        if initial.is_terminal() {
            errors.push(WorkflowError::TerminalInitial(initial));
        }
        let table: Vec<(Status, &[Status])> =
            edges.iter().map(|(f, ts)| (*f, ts.as_slice())).collect();
        let wf = Workflow::from_table(initial, &table, &gates);
        // Reachability from the initial status over the edges.
        let mut seen = bit(initial);
        let mut frontier = vec![initial];
        while let Some(s) = frontier.pop() {
            for t in wf.targets(s) {
                if seen & bit(t) == 0 {
                    seen |= bit(t);
                    frontier.push(t);
                }
            }
        }
        for s in Status::ALL {
            if wf.has_status(*s) && seen & bit(*s) == 0 {
                errors.push(WorkflowError::Unreachable(*s));
            }
        }
        if !Status::ALL
            .iter()
            .any(|s| s.is_terminal() && seen & bit(*s) != 0)
        {
            errors.push(WorkflowError::NoTerminal);
        }
        if errors.is_empty() {
            Ok(wf)
        } else {
            Err(errors)
        }
    }
}

/// A custom workflow as written in configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowDef {
    /// The status new tasks start in.
    pub initial: String,
    /// `from → [to, …]`.
    pub transitions: BTreeMap<String, Vec<String>>,
    /// Gates on edges.
    #[serde(default)]
    pub gates: Vec<GateDef>,
}

/// One gate of a custom workflow.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateDef {
    /// Source status.
    pub from: String,
    /// Target status.
    pub to: String,
    /// `handoff`, `review-pass`, `review-fail-below-limit`, `review-fail-at-limit` or `guard`.
    pub requires: String,
}

/// A problem in a custom workflow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WorkflowError {
    /// A name that is not a Warden status.
    #[error(
        "unknown state {0:?}; use pending, clarification, working, agent-review, reviewing, stuck, done or cancelled"
    )]
    UnknownState(String),
    /// A terminal status with an outgoing edge.
    #[error("edge {0} → {1} leaves a terminal state; remove it")]
    EdgeFromTerminal(Status, Status),
    /// An edge from a status to itself.
    #[error("edge {0} → {0} goes nowhere; remove it")]
    SelfLoop(Status),
    /// A status no path from the initial status reaches.
    #[error("state {0} cannot be reached from the initial state; add an edge to it or remove it")]
    Unreachable(Status),
    /// The initial status is terminal.
    #[error("initial state {0} is terminal; start in a state that can progress")]
    TerminalInitial(Status),
    /// No terminal status can be reached.
    #[error("no terminal state (done or cancelled) is reachable; add an edge to one")]
    NoTerminal,
    /// A gate name that does not exist.
    #[error(
        "unknown gate {0:?}; use handoff, review-pass, review-fail-below-limit, review-fail-at-limit or guard"
    )]
    UnknownGate(String),
    /// A gate on an edge that is not in the map.
    #[error("gate on {0} → {1}, which is not an edge of the map; add the edge or remove the gate")]
    GateWithoutEdge(Status, Status),
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    /// Every pair of statuses against seed 001's map plus a person's rejection (reviewing →
    /// working, DESIGN 6), row by row.
    #[test]
    fn review_map_is_seed_001_plus_rejection() {
        let wf = Workflow::builtin(WorkflowKind::Review);
        let expected: &[(Status, &[Status])] = &[
            (Pending, &[Working, Clarification, Cancelled]),
            (Clarification, &[Working, Cancelled]),
            (Working, &[AgentReview, Clarification, Stuck, Cancelled]),
            (AgentReview, &[Reviewing, Working, Stuck, Cancelled]),
            (Reviewing, &[Working, Done, Cancelled]),
            (Stuck, &[Working, AgentReview, Cancelled]),
            (Done, &[]),
            (Cancelled, &[]),
        ];
        for (from, tos) in expected {
            for to in Status::ALL {
                assert_eq!(
                    wf.allows(*from, *to),
                    tos.contains(to),
                    "{from} → {to} in the review map"
                );
            }
        }
    }

    #[test]
    fn review_gates() {
        let wf = Workflow::builtin(WorkflowKind::Review);
        let check = |f, t, g: Option<Gate>| assert_eq!(wf.gate(f, t), g, "{f} → {t}");
        check(Working, AgentReview, Some(Gate::HandoffThenGuard));
        check(AgentReview, Reviewing, Some(Gate::ReviewPass));
        check(AgentReview, Working, Some(Gate::ReviewFailBelowLimit));
        check(AgentReview, Stuck, Some(Gate::ReviewFailAtLimit));
        check(Pending, Working, None);
        check(Reviewing, Done, None);
        check(Working, Stuck, None);
        check(Stuck, AgentReview, Some(Gate::HandoffThenGuard));
    }

    #[test]
    fn direct_map() {
        let wf = Workflow::builtin(WorkflowKind::Direct);
        let check = |f, t, ok: bool| assert_eq!(wf.allows(f, t), ok, "{f} → {t}");
        check(Pending, Working, true);
        check(Working, Done, true);
        check(Working, Stuck, true);
        check(Working, Cancelled, true);
        check(Stuck, Working, true);
        check(Working, AgentReview, false);
        check(Pending, Done, false);
        check(Done, Working, false);
        assert_eq!(wf.gate(Working, Done), Some(Gate::Guard));
    }

    fn def(initial: &str, edges: &[(&str, &[&str])]) -> WorkflowDef {
        WorkflowDef {
            initial: initial.into(),
            transitions: edges
                .iter()
                .map(|(f, ts)| (f.to_string(), ts.iter().map(|t| t.to_string()).collect()))
                .collect(),
            gates: Vec::new(),
        }
    }

    fn check_load(d: WorkflowDef, expected: &[WorkflowError]) {
        match Workflow::load(&d) {
            Ok(_) => assert!(expected.is_empty(), "expected errors {expected:?}"),
            Err(errs) => assert_eq!(errs, expected),
        }
    }

    #[test]
    fn loader_validates() {
        check_load(
            def(
                "pending",
                &[("pending", &["working"]), ("working", &["done"])],
            ),
            &[],
        );
        check_load(
            def(
                "pending",
                &[("pending", &["wrking"]), ("working", &["done"])],
            ),
            &[
                WorkflowError::UnknownState("wrking".into()),
                WorkflowError::Unreachable(Working),
                WorkflowError::Unreachable(Done),
                WorkflowError::NoTerminal,
            ],
        );
        check_load(
            def("pending", &[("pending", &["done"]), ("done", &["working"])]),
            &[WorkflowError::EdgeFromTerminal(Done, Working)],
        );
        check_load(
            def(
                "pending",
                &[
                    ("pending", &["done"]),
                    ("stuck", &["working"]),
                    ("working", &["done"]),
                ],
            ),
            &[
                WorkflowError::Unreachable(Working),
                WorkflowError::Unreachable(Stuck),
            ],
        );
        check_load(
            def("done", &[("pending", &["done"])]),
            &[
                WorkflowError::TerminalInitial(Done),
                WorkflowError::Unreachable(Pending),
            ],
        );
        let mut d = def(
            "pending",
            &[("pending", &["working"]), ("working", &["done"])],
        );
        d.gates.push(GateDef {
            from: "pending".into(),
            to: "done".into(),
            requires: "guard".into(),
        });
        d.gates.push(GateDef {
            from: "working".into(),
            to: "done".into(),
            requires: "vibes".into(),
        });
        check_load(
            d,
            &[
                WorkflowError::GateWithoutEdge(Pending, Done),
                WorkflowError::UnknownGate("vibes".into()),
            ],
        );
    }

    #[test]
    fn builtin_maps_pass_their_own_loader() {
        for (map, gates) in [(REVIEW_MAP, REVIEW_GATES), (DIRECT_MAP, DIRECT_GATES)] {
            let d = WorkflowDef {
                initial: "pending".into(),
                transitions: map
                    .iter()
                    .filter(|(_, ts)| !ts.is_empty())
                    .map(|(f, ts)| (f.to_string(), ts.iter().map(|t| t.to_string()).collect()))
                    .collect(),
                gates: gates
                    .iter()
                    .map(|(f, t, g)| GateDef {
                        from: f.to_string(),
                        to: t.to_string(),
                        requires: match g {
                            Gate::HandoffThenGuard => "handoff",
                            Gate::ReviewPass => "review-pass",
                            Gate::ReviewFailBelowLimit => "review-fail-below-limit",
                            Gate::ReviewFailAtLimit => "review-fail-at-limit",
                            Gate::Guard => "guard",
                        }
                        .into(),
                    })
                    .collect(),
            };
            let wf = Workflow::load(&d).expect("built-in map is valid");
            let builtin = Workflow::from_table(Status::Pending, map, gates);
            assert_eq!(wf.allowed, builtin.allowed);
        }
    }
}
