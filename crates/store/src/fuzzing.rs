//! Fuzz targets: every parser that reads input a person or an agent wrote. Each function
//! takes arbitrary bytes and must never panic; it also checks the invariants the parser
//! promises. `fuzz/` runs them under libFuzzer (`scripts/fuzz`); the corpus-replay test
//! runs every saved input through them in `./scripts/test`.

use warden_core::event::Actor;
use warden_core::memory::{self, MemoryCaps, MemoryDelta};
use warden_core::model::{Limits, Status, Task, TaskId, TaskSpec, WorkflowKind};
use warden_core::ops::{self, Ctx, Initial, TransitionInput};
use warden_core::tree::{self, AgentStatus, GuardOutcome, PlanFile};
use warden_core::workflow::{Workflow, WorkflowDef};

/// A fuzz target: arbitrary bytes in, a panic on a broken invariant.
pub type Target = fn(&[u8]);

/// The targets, by name (the names of `fuzz/fuzz_targets/*.rs` and `fuzz/corpus/*`).
pub const TARGETS: &[(&str, Target)] = &[
    ("taskmd", taskmd),
    ("plan_json", plan_json),
    ("plan_toml", plan_toml),
    ("plan_yaml", plan_yaml),
    ("tree_apply", tree_apply),
    ("workflow", workflow),
    ("memory_delta", memory_delta),
    ("gsd_tree", gsd_tree),
];

/// TASK.md: frontmatter, sections, verdicts, evidence, mirror rewrite.
pub fn taskmd(data: &[u8]) {
    warden_core::artifact::fuzz(data);
}

fn check_plan(plan: PlanFile) {
    let limits = Limits::default();
    if tree::validate_plan(&plan.tasks, &[]).is_ok() {
        for n in &plan.tasks {
            let spec = n.to_spec(&limits);
            let _ = ops::validate_spec(&spec);
        }
    }
}

/// Plan import, JSON.
pub fn plan_json(data: &[u8]) {
    if let Ok(p) = serde_json::from_slice::<PlanFile>(data) {
        check_plan(p);
    }
}

/// Plan import, TOML.
pub fn plan_toml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(p) = toml::from_str::<PlanFile>(text)
    {
        check_plan(p);
    }
}

/// Plan import, YAML.
pub fn plan_yaml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(p) = serde_saphyr::from_str::<PlanFile>(text)
    {
        check_plan(p);
    }
}

fn ctx() -> Ctx<'static> {
    Ctx::fixed(Actor::Agent)
}

/// A fixed previous tree: a root with two leaves, one of them working.
fn prev_tree() -> Vec<Task> {
    let mk = |id: &str, parent: Option<&str>| {
        let mut spec = TaskSpec::new(TaskId::new(id).unwrap(), WorkflowKind::Direct, 3);
        spec.parent = parent.map(|p| TaskId::new(p).unwrap());
        ops::create(spec, Initial::NEW, &ctx())
            .unwrap()
            .after
            .unwrap()
    };
    let a = mk("a", Some("root"));
    let a = ops::transition(&a, Status::Working, &TransitionInput::default(), &ctx())
        .unwrap()
        .after
        .unwrap();
    vec![mk("root", None), a, mk("b", Some("root"))]
}

/// Tree reconcile of an agent-edited tree: never panics; attempts never exceed the
/// maximum; a refusal is an error value.
pub fn tree_apply(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(plan) = serde_json::from_slice::<PlanFile>(rest) else {
        return;
    };
    let prev = prev_tree();
    let status = [
        AgentStatus::Done,
        AgentStatus::Retry,
        AgentStatus::Decomposed,
    ][selector as usize % 3];
    let guard = [
        None,
        Some(GuardOutcome::Pass),
        Some(GuardOutcome::Fail),
        Some(GuardOutcome::Skipped),
    ][(selector as usize / 3) % 4];
    let selected = TaskId::new(["a", "b", "root"][(selector as usize / 12) % 3]).unwrap();
    if let Ok(u) = tree::apply_state_updates(
        &prev,
        plan.tasks,
        &selected,
        status,
        guard,
        &Limits::default(),
    ) {
        for n in &u.nodes {
            assert!(
                n.attempts <= n.spec.max_attempts,
                "attempts above the maximum"
            );
        }
    }
}

/// Custom workflow definitions: the loader validates or reports, never panics; a
/// loaded map has no edge out of a terminal state.
pub fn workflow(data: &[u8]) {
    if let Ok(def) = serde_json::from_slice::<WorkflowDef>(data)
        && let Ok(wf) = Workflow::load(&def)
    {
        for s in Status::ALL.iter().filter(|s| s.is_terminal()) {
            assert!(wf.targets(*s).is_empty(), "edge out of a terminal state");
        }
    }
}

/// Memory deltas: merge keeps the caps whatever the input.
pub fn memory_delta(data: &[u8]) {
    if let Ok(delta) = serde_json::from_slice::<MemoryDelta>(data) {
        let caps = MemoryCaps::default();
        let m = memory::merge(&Default::default(), &delta, &caps);
        let m = memory::merge(&m, &delta, &caps);
        assert!(m.history.len() <= caps.max_history);
        for s in m.goals.iter().chain(&m.decisions).chain(&m.history) {
            assert!(s.chars().count() <= caps.max_text_len);
        }
        assert!(m.next_focus.chars().count() <= caps.max_text_len);
        let _ = memory::render(&m);
    }
}

/// A get-shit-done `.planning/` tree: the input is files separated by `\0`, each a path
/// line and its text (a path ending in `/` is a directory). Reading it never panics; the
/// ids are valid and unique; what sync wants has no dependency on a missing task and
/// none on itself; STATE.md's progress update keeps every line it does not own.
pub fn gsd_tree(data: &[u8]) {
    use warden_core::gsd::{parse_planning, sync, writeback};
    let text = String::from_utf8_lossy(data);
    let files: Vec<(String, Option<String>)> = text
        .split('\0')
        .map(|f| {
            let (path, body) = f.split_once('\n').unwrap_or((f, ""));
            let dir = path.ends_with('/');
            (path.to_owned(), (!dir).then(|| body.to_owned()))
        })
        .collect();
    let t = parse_planning(&files);
    let place = sync::Place {
        root: ".planning".into(),
        inside: Some(".planning".into()),
    };
    let wanted = sync::plan(&t, &place, 3);
    let ids: std::collections::BTreeSet<&TaskId> =
        wanted.tasks.iter().map(|w| &w.spec.id).collect();
    assert_eq!(ids.len(), wanted.tasks.len(), "ids are unique");
    for w in &wanted.tasks {
        for d in &w.spec.depends_on {
            assert!(ids.contains(d) && d != &w.spec.id, "{d} of {}", w.spec.id);
        }
        ops::validate_spec(&w.spec).unwrap();
    }
    let p = writeback::GsdProgress {
        total_plans: 3,
        completed_plans: 1,
        total_phases: 1,
        completed_phases: 0,
    };
    if let Some(out) = writeback::update_state_md(&text, &p) {
        assert_eq!(out.lines().count(), text.lines().count(), "lines are kept");
    }
}
