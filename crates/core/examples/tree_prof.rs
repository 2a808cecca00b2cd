//! Times the steps of tree reconcile at 100k nodes (profiling aid for bench/run's figure 2).
#![allow(clippy::print_stdout)] // an example prints its figures
use std::time::Instant;
use warden_core::event::Actor;
use warden_core::model::{Limits, TaskId, TaskSpec, WorkflowKind};
use warden_core::ops::{self, Ctx, Initial};
use warden_core::tree::{self, AgentStatus, PlanNode};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    // A second argument repeats the apply that many times (for `perf record`), quietly.
    let reps: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(8);
    let ctx = Ctx {
        now: jiff::Timestamp::UNIX_EPOCH,
        actor: Actor::Runner,
        limits: Limits::default(),
        task_file: "x",
    };
    let groups = (n / 100).max(1);
    let mut prev = Vec::new();
    for g in 0..groups {
        let spec = TaskSpec::new(
            TaskId::new(&format!("g{g}")).unwrap(),
            WorkflowKind::Review,
            3,
        );
        prev.push(
            ops::create(spec, Initial::NEW, &ctx)
                .unwrap()
                .after
                .unwrap(),
        );
    }
    for i in 0..n {
        let mut spec = TaskSpec::new(
            TaskId::new(&format!("t{i}")).unwrap(),
            WorkflowKind::Review,
            3,
        );
        spec.parent = Some(TaskId::new(&format!("g{}", i % groups)).unwrap());
        spec.order = (i / groups) as i64;
        prev.push(
            ops::create(spec, Initial::NEW, &ctx)
                .unwrap()
                .after
                .unwrap(),
        );
    }
    // As `plan apply` meets them: the store's tasks by id, the file in export order.
    prev.sort_by(|a, b| a.id().cmp(b.id()));
    let prev = prev.to_vec();
    let next: Vec<PlanNode> = tree::depth_first(&prev)
        .into_iter()
        .map(PlanNode::from_task)
        .collect();
    let ids: Vec<TaskId> = prev.iter().map(|t| t.id().clone()).collect();
    let mut best = std::time::Duration::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        if reps <= 8 {
            let _ = tree::validate_plan(&next, &ids);
        }
        let v = t.elapsed();
        let nx = next.clone();
        let t = Instant::now();
        let u = tree::apply_state_updates(
            &prev,
            nx,
            &TaskId::new("t0").unwrap(),
            AgentStatus::Retry,
            None,
            &Limits::default(),
        )
        .unwrap();
        let a = t.elapsed();
        let t = Instant::now();
        drop(u);
        if reps <= 8 {
            println!("validate {:?}  apply {:?}  drop {:?}", v, a, t.elapsed());
        }
        best = best.min(a);
    }
    println!("best apply of {reps}: {best:?}");
}
