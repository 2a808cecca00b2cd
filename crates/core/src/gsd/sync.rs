//! From a read GSD tree to the tasks `plan sync` keeps: one task per phase that has a
//! plan, one child per plan, with GSD's titles, order and dependencies, the plan's text
//! as the task body, and its SUMMARY.md as the evidence file that counts as its handoff.
//!
//! Order is GSD's, made into `depends_on` edges so that `plan next` and `warden run`
//! follow it (the supervisor schedules a leaf when its own dependencies are done):
//! - within a phase, the edges the plans declare (`depends_on`, or the wave rule; see
//!   [`super::Plan::depends_on`]), and for plans that declare neither a wave nor a
//!   `depends_on` key (GSD's first versions ran a phase's plans one by one), an edge to
//!   the plan before it in the phase;
//! - between phases, every plan that depends on no plan of its own phase (the phase's
//!   entry plans) depends on every plan of the previous phase that has plans: a phase
//!   starts when the one before it is done. Quick tasks stand outside the roadmap and
//!   get no phase edges.
//!
//! An added edge that would close a cycle (only possible when a plan declares a
//! dependency on a later phase) is dropped with a warning; declared edges are never
//! dropped here.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{DoneBy, Phase, PhaseKind, Plan, PlanWork, PlanningTree, Warning, WarningKind};
use crate::model::{Origin, TaskId, TaskSpec, WorkflowKind};

/// The tool name `plan sync` records in [`Origin::tool`].
pub const TOOL: &str = "gsd";

/// A plan's sections are put in the task body while they are at most this long; a
/// longer plan gets its objective and the path to read.
pub const MAX_INLINE_PLAN: usize = 16 * 1024;

/// The most phase-order edges one plan gets: past it, the previous phase's last plans
/// (those no plan of that phase depends on) stand for the phase.
const MAX_PHASE_EDGES: usize = 256;

/// Where the `.planning/` directory is, as tasks record it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// [`Origin::root`]: the directory relative to the project root when inside it,
    /// else absolute.
    pub root: String,
    /// The directory's path relative to the project root (`.planning`), when it is
    /// inside the project (without symlinks): then plans get an evidence file and
    /// Warden writes back. `None` for a tree elsewhere, read only.
    pub inside: Option<String>,
}

/// One task as `plan sync` wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The spec a new task gets (an existing task keeps its own `max_attempts` and
    /// workflow, and its body once it has started).
    pub spec: TaskSpec,
    /// A plan (a leaf), not a phase.
    pub is_plan: bool,
    /// GSD counts it done (a plan: its SUMMARY.md has content, or it is archived
    /// history; a phase: every plan is done).
    pub done: bool,
    /// Why a plan is done.
    pub done_by: Option<DoneBy>,
    /// The plan's SUMMARY.md as messages show it.
    pub summary: Option<String>,
    /// Lower-hex SHA-256 of that SUMMARY.md, when it makes the plan done.
    pub summary_digest: Option<String>,
    /// The entries of `spec.depends_on` that GSD's order made (one by one within a
    /// phase, a phase after the one before), not the plan's own `depends_on` or wave:
    /// sync drops those on a cancelled plan (see `plan_ops::planning_sync`).
    pub order_edges: Vec<TaskId>,
}

/// Edge counts, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Edges {
    /// `depends_on` entries the plans declare, resolved and kept.
    pub declared: usize,
    /// From the wave rule.
    pub wave: usize,
    /// One-by-one order of plans that declare no order.
    pub sequence: usize,
    /// Phase order.
    pub phase: usize,
    /// Added edges dropped because they would close a cycle.
    pub dropped: usize,
    /// Of the one-by-one and phase-order edges, those onto cancelled plans: not kept
    /// (GSD's order does not wait for a plan a person cancelled).
    pub onto_cancelled: usize,
}

/// What `plan sync` wants the store to hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncPlan {
    /// Phases (with their plans after them), in tree order.
    pub tasks: Vec<Wanted>,
    /// Phase directories with no plan: neither a task nor counted (GSD's "ready to
    /// plan"); they become tasks once they hold a plan.
    pub empty_phases: Vec<String>,
    /// The edges made.
    pub edges: Edges,
    /// Warnings of this step (ids that are not task ids, dropped edges).
    pub warnings: Vec<Warning>,
}

/// The path of `file` (relative to `.planning/`) as messages show it.
fn shown(place: &Place, file: &str) -> String {
    match &place.inside {
        Some(rel) => format!("{rel}/{file}"),
        None => format!("{}/{file}", place.root),
    }
}

/// Builds what the store should hold for `tree` (see the module docs).
pub fn plan(tree: &PlanningTree, place: &Place, max_attempts: u32) -> SyncPlan {
    let mut warnings = Vec::new();
    let mut empty_phases = Vec::new();
    let mut edges = Edges::default();

    // Plans in tree order, and where each phase's plans sit in it.
    let mut order: Vec<(&Phase, &Plan)> = Vec::new();
    let mut ranges: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
    for (pi, phase) in tree.phases.iter().enumerate() {
        if phase.plans.is_empty() {
            empty_phases.push(phase.dir.clone());
            continue;
        }
        let start = order.len();
        order.extend(phase.plans.iter().map(|p| (phase, p)));
        ranges.push((pi, start..order.len()));
    }
    let pos: HashMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, (_, p))| (p.id.as_str(), i))
        .collect();
    // deps[i]: the plans i depends on, by position.
    let mut deps: Vec<Vec<usize>> = order
        .iter()
        .map(|(_, p)| {
            let mut seen = HashSet::new();
            p.depends_on
                .iter()
                .filter_map(|d| pos.get(d.as_str()).copied())
                .filter(|d| seen.insert(*d))
                .collect()
        })
        .collect();
    for (_, p) in &order {
        match p.dependency_source {
            super::DependencySource::Declared => edges.declared += p.depends_on.len(),
            super::DependencySource::Wave => edges.wave += p.depends_on.len(),
            super::DependencySource::None => {}
        }
    }
    // A declared edge to a later plan is the only way an added edge can close a cycle.
    let forward = deps
        .iter()
        .enumerate()
        .any(|(i, d)| d.iter().any(|&j| j > i));

    let mut dropped = 0;
    // The edges order added, (from, to).
    let mut added: HashSet<(usize, usize)> = HashSet::new();
    let mut add = |deps: &mut Vec<Vec<usize>>, from: usize, to: usize, count: &mut usize| {
        if deps.get(from).is_some_and(|d| d.contains(&to)) {
            return true;
        }
        if forward && reaches(deps, to, from) {
            let (Some((_, f)), Some((_, t))) = (order.get(from), order.get(to)) else {
                return false;
            };
            warnings.push(Warning::new(
                WarningKind::DependencyCycle,
                f.file.clone(),
                format!(
                    "{} would wait for {} by GSD's order, but {} already depends on {} through the plans' own depends_on; that order edge is dropped",
                    f.id, t.id, t.id, f.id
                ),
            ));
            dropped += 1;
            return false;
        }
        if let Some(d) = deps.get_mut(from) {
            d.push(to);
            added.insert((from, to));
            *count += 1;
        }
        true
    };

    // Within a phase: plans that declare no order run one by one.
    let mut sequence = 0;
    for (_, range) in &ranges {
        for i in range.clone().skip(1) {
            let Some((_, p)) = order.get(i) else { continue };
            if !p.declares_order && p.depends_on.is_empty() {
                add(&mut deps, i, i - 1, &mut sequence);
            }
        }
    }

    // Between phases: entry plans wait for the previous phase.
    let mut phase_edges = 0;
    let mut previous: Option<std::ops::Range<usize>> = None;
    for (pi, range) in &ranges {
        let quick = tree
            .phases
            .get(*pi)
            .is_some_and(|p| p.kind == PhaseKind::Quick);
        if quick {
            continue;
        }
        if let Some(prev) = previous.clone() {
            let mut targets: Vec<usize> = prev.clone().collect();
            if targets.len() > MAX_PHASE_EDGES {
                // The previous phase's last plans: those none of its plans depend on.
                let needed: HashSet<usize> = prev
                    .clone()
                    .flat_map(|i| deps.get(i).cloned().unwrap_or_default())
                    .collect();
                targets.retain(|t| !needed.contains(t));
                targets.truncate(MAX_PHASE_EDGES);
            }
            for i in range.clone() {
                let own_phase = deps
                    .get(i)
                    .is_some_and(|d| d.iter().any(|d| range.contains(d)));
                if own_phase {
                    continue;
                }
                for &t in &targets {
                    add(&mut deps, i, t, &mut phase_edges);
                }
            }
        }
        previous = Some(range.clone());
    }
    edges.sequence = sequence;
    edges.phase = phase_edges;
    edges.dropped = dropped;

    // The tasks.
    let mut tasks = Vec::new();
    for (pi, range) in &ranges {
        let Some(phase) = tree.phases.get(*pi) else {
            continue;
        };
        let Some(phase_id) = task_id(&phase.id, &phase.dir, &mut warnings) else {
            continue;
        };
        let mut spec = TaskSpec::new(phase_id.clone(), WorkflowKind::Review, max_attempts);
        set_title(&mut spec, &phase.title);
        spec.order = *pi as i64;
        spec.origin = Some(Box::new(origin(place, &phase.dir)));
        tasks.push(Wanted {
            spec,
            is_plan: false,
            done: phase.plans.iter().all(|p| p.done),
            done_by: None,
            summary: None,
            summary_digest: None,
            order_edges: Vec::new(),
        });
        for i in range.clone() {
            let Some((_, p)) = order.get(i) else { continue };
            let Some(id) = task_id(&p.id, &p.file, &mut warnings) else {
                continue;
            };
            let mut spec = TaskSpec::new(id, WorkflowKind::Review, max_attempts);
            set_title(&mut spec, &p.title);
            spec.parent = Some(phase_id.clone());
            spec.order = (i - range.start) as i64;
            let ids_of = |only_added: bool| -> Vec<TaskId> {
                deps.get(i)
                    .map(|d| {
                        d.iter()
                            .filter(|&&j| !only_added || added.contains(&(i, j)))
                            .filter_map(|&j| order.get(j))
                            .filter_map(|(_, q)| TaskId::new(&q.id).ok())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            spec.depends_on = ids_of(false);
            let order_edges = ids_of(true);
            spec.origin = Some(Box::new(origin(place, &p.file)));
            spec.evidence = place
                .inside
                .as_ref()
                .map(|rel| format!("{rel}/{}", p.summary));
            spec.body = body(p, place);
            tasks.push(Wanted {
                spec,
                is_plan: true,
                done: p.done,
                done_by: p.done_by,
                summary: Some(shown(place, &p.summary)),
                summary_digest: p.summary_digest.clone(),
                order_edges,
            });
        }
    }
    SyncPlan {
        tasks,
        empty_phases,
        edges,
        warnings,
    }
}

fn origin(place: &Place, path: &str) -> Origin {
    Origin {
        tool: TOOL.to_owned(),
        root: place.root.clone(),
        path: path.to_owned(),
    }
}

fn task_id(id: &str, path: &str, warnings: &mut Vec<Warning>) -> Option<TaskId> {
    match TaskId::new(id) {
        Ok(t) => Some(t),
        Err(e) => {
            warnings.push(Warning::new(
                WarningKind::BadPath,
                path.to_owned(),
                format!("{e}; not imported"),
            ));
            None
        }
    }
}

/// Is `to` reachable from `from` along `deps`?
fn reaches(deps: &[Vec<usize>], from: usize, to: usize) -> bool {
    let mut seen = vec![false; deps.len()];
    let mut stack = vec![from];
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        match seen.get_mut(n) {
            Some(s) if !*s => *s = true,
            _ => continue,
        }
        stack.extend(deps.get(n).into_iter().flatten().copied());
    }
    false
}

/// The task body of a plan: what to read and where to write the summary, then the
/// plan's own sections (or its objective and the path to read, for a long plan).
/// Done plans get only the first line: their work is history.
pub fn body(p: &Plan, place: &Place) -> String {
    let plan_file = shown(place, &p.file);
    let where_ = if place.inside.is_some() {
        "relative to the project root, $WARDEN_DIR"
    } else {
        "read only: Warden does not write there"
    };
    let mut out = format!("This task runs the get-shit-done plan `{plan_file}` ({where_}).\n");
    let Some(work) = &p.work else {
        return out;
    };
    match &place.inside {
        Some(rel) => out.push_str(&format!(
            "Do what the plan asks. When it is done, write its summary in GSD's SUMMARY.md format to `{rel}/{}` in your working directory: that file counts as your handoff (a `## Handoff` in the task file does too).\n",
            p.summary
        )),
        None => out.push_str(
            "Do what the plan asks. When it is done, write a `## Handoff` in the task file.\n",
        ),
    }
    let sections = sections(work);
    let total: usize = sections.iter().map(|(_, t)| t.len()).sum();
    if total <= MAX_INLINE_PLAN {
        for (name, text) in &sections {
            out.push_str(&format!("\n<{name}>\n{}\n</{name}>\n", text.trim()));
        }
    } else {
        if let Some(o) = &work.objective {
            let o = super::text::truncate_chars(o.trim(), 4000);
            out.push_str(&format!("\n<objective>\n{o}\n</objective>\n"));
        }
        out.push_str(&format!(
            "\nThe plan is {} bytes, too long to copy here: read its tasks and verification in `{plan_file}`.\n",
            p.size.unwrap_or(0)
        ));
    }
    out
}

fn sections(work: &PlanWork) -> Vec<(&'static str, &str)> {
    if let Some(w) = &work.whole {
        return vec![("plan", w.as_str())];
    }
    [
        ("objective", &work.objective),
        ("tasks", &work.tasks),
        ("verification", &work.verification),
        ("success_criteria", &work.success_criteria),
    ]
    .into_iter()
    .filter_map(|(n, t)| t.as_deref().map(|t| (n, t)))
    .collect()
}

/// The plans of `tree` by id, for lookups.
pub fn plans_by_id(tree: &PlanningTree) -> BTreeMap<&str, &Plan> {
    tree.plans().map(|p| (p.id.as_str(), p)).collect()
}

/// Sets a task's title from a name in the files, as one line of plain text
/// (`ops::validate_spec`) whatever a directory or heading held (a DEL, a line break);
/// one with nothing else keeps the id.
fn set_title(spec: &mut TaskSpec, title: &str) {
    let t = crate::gsd::text::one_line(title);
    if !t.trim().is_empty() {
        spec.title = t.into_owned();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gsd::parse_planning;

    fn tree(files: &[(&str, &str)]) -> PlanningTree {
        let v: Vec<(String, Option<String>)> = files
            .iter()
            .map(|(p, t)| {
                let text = (!p.ends_with('/')).then(|| (*t).to_owned());
                ((*p).to_owned(), text)
            })
            .collect();
        parse_planning(&v)
    }

    fn inside() -> Place {
        Place {
            root: ".planning".into(),
            inside: Some(".planning".into()),
        }
    }

    fn deps(p: &SyncPlan, id: &str) -> Vec<String> {
        let w = p
            .tasks
            .iter()
            .find(|w| w.spec.id.as_str() == id)
            .unwrap_or_else(|| panic!("no {id}"));
        w.spec.depends_on.iter().map(|d| d.to_string()).collect()
    }

    const OLD: &str = "# Old style plan\n\nDo it.\n";
    const W1: &str = "---\nwave: 1\ndepends_on: []\n---\n<objective>\nWave one.\n</objective>\n";
    const W2: &str = "---\nwave: 2\n---\n<objective>\nWave two.\n</objective>\n";

    #[test]
    fn order_is_made_into_edges() {
        let t = tree(&[
            ("phases/01-a/01-01-PLAN.md", OLD),
            ("phases/01-a/01-02-PLAN.md", OLD),
            ("phases/01-a/01-03-PLAN.md", OLD),
            ("phases/02-empty/", ""),
            ("phases/03-b/03-01-PLAN.md", W1),
            ("phases/03-b/03-02-PLAN.md", W1),
            ("phases/03-b/03-03-PLAN.md", W2),
            ("quick/1-fix/1-fix-PLAN.md", OLD),
        ]);
        let p = plan(&t, &inside(), 3);
        // Old plans one by one.
        assert_eq!(deps(&p, "01-01"), Vec::<String>::new());
        assert_eq!(deps(&p, "01-02"), ["01-01"]);
        assert_eq!(deps(&p, "01-03"), ["01-02"]);
        // Wave 1 waits for the previous phase with plans (the empty one is skipped);
        // wave 2 waits for wave 1 only.
        assert_eq!(deps(&p, "03-01"), ["01-01", "01-02", "01-03"]);
        assert_eq!(deps(&p, "03-02"), ["01-01", "01-02", "01-03"]);
        assert_eq!(deps(&p, "03-03"), ["03-01", "03-02"]);
        // Quick tasks stand alone.
        assert_eq!(deps(&p, "quick-1-fix"), Vec::<String>::new());
        assert_eq!(p.empty_phases, ["phases/02-empty"]);
        assert!(p.tasks.iter().all(|w| w.spec.id.as_str() != "02-empty"));
        assert_eq!(
            p.edges,
            Edges {
                declared: 0,
                wave: 2,
                sequence: 2,
                phase: 6,
                dropped: 0,
                onto_cancelled: 0
            }
        );
    }

    #[test]
    fn an_order_edge_that_closes_a_cycle_is_dropped_never_a_declared_one() {
        let t = tree(&[
            (
                "phases/01-a/01-01-PLAN.md",
                "---\ndepends_on: [02-01]\n---\n# A\n",
            ),
            ("phases/02-b/02-01-PLAN.md", "---\nwave: 1\n---\n# B\n"),
        ]);
        let p = plan(&t, &inside(), 3);
        assert_eq!(deps(&p, "01-01"), ["02-01"]);
        assert_eq!(deps(&p, "02-01"), Vec::<String>::new());
        assert_eq!(p.edges.dropped, 1);
        assert!(
            p.warnings
                .iter()
                .any(|w| w.kind == WarningKind::DependencyCycle)
        );
    }

    #[test]
    fn plans_carry_their_text_evidence_and_origin() {
        let text = "---\nwave: 1\n---\n<objective>\nBuild the parser.\n</objective>\n<tasks>\n<task>Write it</task>\n</tasks>\n<verification>\ncargo test\n</verification>\n";
        let t = tree(&[("phases/01-a/01-01-PLAN.md", text)]);
        let p = plan(&t, &inside(), 3);
        let w = &p.tasks[1];
        assert_eq!(w.spec.title, "Build the parser");
        assert_eq!(
            w.spec.evidence.as_deref(),
            Some(".planning/phases/01-a/01-01-SUMMARY.md")
        );
        assert_eq!(
            w.spec.origin.as_deref(),
            Some(&Origin {
                tool: "gsd".into(),
                root: ".planning".into(),
                path: "phases/01-a/01-01-PLAN.md".into()
            })
        );
        for part in [
            "`.planning/phases/01-a/01-01-PLAN.md`",
            "<objective>\nBuild the parser.\n</objective>",
            "<task>Write it</task>",
            "<verification>\ncargo test\n</verification>",
            "`.planning/phases/01-a/01-01-SUMMARY.md`",
        ] {
            assert!(w.spec.body.contains(part), "{part} in {}", w.spec.body);
        }
        // A tree outside the project: no evidence file, read only.
        let outside = Place {
            root: "/elsewhere/.planning".into(),
            inside: None,
        };
        let w = plan(&t, &outside, 3).tasks[1].clone();
        assert_eq!(w.spec.evidence, None);
        assert!(w.spec.body.contains("## Handoff"), "{}", w.spec.body);
        // A long plan: its objective and the path to read.
        let long = format!(
            "<objective>\nBig.\n</objective>\n<tasks>\n{}\n</tasks>\n",
            "x".repeat(MAX_INLINE_PLAN + 1)
        );
        let t = tree(&[("phases/01-a/01-01-PLAN.md", &long)]);
        let b = &plan(&t, &inside(), 3).tasks[1].spec.body;
        assert!(
            b.contains("<objective>\nBig.\n</objective>") && !b.contains("xxxx"),
            "{b}"
        );
        assert!(b.contains("too long to copy here"), "{b}");
        // A plan without sections: the whole text.
        let t = tree(&[("phases/01-a/01-01-PLAN.md", OLD)]);
        let b = &plan(&t, &inside(), 3).tasks[1].spec.body;
        assert!(
            b.contains("<plan>\n# Old style plan\n\nDo it.\n</plan>"),
            "{b}"
        );
    }

    #[test]
    fn done_plans_and_phases() {
        let t = tree(&[
            ("phases/01-a/01-01-PLAN.md", OLD),
            ("phases/01-a/01-01-SUMMARY.md", "Done.\n"),
            ("phases/01-a/01-02-PLAN.md", OLD),
        ]);
        let p = plan(&t, &inside(), 3);
        assert!(!p.tasks[0].done, "phase with an open plan");
        assert!(p.tasks[1].done && !p.tasks[2].done);
        assert_eq!(
            p.tasks[1].summary.as_deref(),
            Some(".planning/phases/01-a/01-01-SUMMARY.md")
        );
        assert!(p.tasks[1].summary_digest.is_some());
        assert_eq!(
            p.tasks[1].spec.body,
            "This task runs the get-shit-done plan `.planning/phases/01-a/01-01-PLAN.md` (relative to the project root, $WARDEN_DIR).\n"
        );
    }
}
