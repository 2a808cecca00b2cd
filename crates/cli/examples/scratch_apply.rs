#![allow(clippy::print_stdout)]
use std::time::Instant;
use warden_core::event::Actor;
use warden_core::tree::{self, AgentStatus};
use warden_store::{Engine, Workspace};
fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap());
    let file = std::path::PathBuf::from(std::env::args().nth(2).unwrap());
    for _ in 0..3 {
        let t = Instant::now();
        let text = std::fs::read_to_string(&file).unwrap();
        let t_read = t.elapsed();
        let t = Instant::now();
        let plan: tree::PlanFile = serde_json::from_str(&text).unwrap();
        let t_parse = t.elapsed();
        let t = Instant::now();
        let ws = Workspace::find(&dir, Some(&dir)).unwrap();
        let eng = Engine::open(ws, Actor::Runner).unwrap();
        let prev = eng.store.list().unwrap();
        let t_load = t.elapsed();
        let t = Instant::now();
        let sel = warden_core::model::TaskId::new("t0").unwrap();
        let update = tree::apply_state_updates(
            &prev,
            plan.tasks,
            &sel,
            AgentStatus::Retry,
            None,
            &eng.config.limits,
        )
        .unwrap();
        let t_apply = t.elapsed();
        let t = Instant::now();
        let changes = warden_core::plan_ops::plan_applied(
            &prev,
            &update,
            &sel,
            &Default::default(),
            &eng.ctx("x"),
        )
        .unwrap();
        let t_ops = t.elapsed();
        println!(
            "read {t_read:?} parse {t_parse:?} load {t_load:?} apply {t_apply:?} plan_applied {t_ops:?} ({} changes, {} rows)",
            changes.len(),
            prev.len()
        );
    }
}
