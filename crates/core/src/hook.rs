//! What Warden's stop hook answers an agent harness (Claude Code, Codex) that is about to
//! end its turn: Warden's gate turned into the agent's own loop. An agent that tries to
//! stop without the artifact its role owes (a worker's `## Handoff`, a reviewer's verdict)
//! is told exactly what to write and which command to run, and goes on instead of ending
//! as a crash. Warden bounds the blocks itself: Codex has no cap of its own.

use crate::artifact::Artifacts;
use crate::model::{Role, Status, Task, WorkflowKind};

/// What the stop hook knows when the harness asks.
#[derive(Clone, Debug)]
pub struct StopInput<'a> {
    /// The task, as stored.
    pub task: &'a Task,
    /// The session's role (Warden's sessions say; for a session a person started, the
    /// role the task's status calls for).
    pub role: Role,
    /// The session heals a failed phase: it ends by design, never blocked.
    pub heal: bool,
    /// TASK.md as it is now.
    pub artifacts: &'a Artifacts,
    /// How many times this session has been blocked already.
    pub blocks: u32,
    /// The most blocks one session gets (`[agent] stop_hook_blocks`).
    pub max_blocks: u32,
    /// TASK.md's absolute path, as the agent should write to it.
    pub task_file: &'a str,
    /// How the agent runs Warden (an absolute path, shell-quoted when needed).
    pub warden: &'a str,
}

/// The hook's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopAnswer {
    /// Let the harness stop: the role's artifact is there, the task moved on, or Warden
    /// has nothing to ask of this session.
    Allow,
    /// Keep the agent going; the text tells it what to do.
    Block(String),
    /// The artifact is still missing but the session was blocked `max_blocks` times: let
    /// it stop, and exit monitoring counts the crash.
    GiveUp,
}

/// Decides the stop hook's answer.
pub fn stop(input: &StopInput<'_>) -> StopAnswer {
    let t = input.task;
    if input.heal || t.spec.workflow == WorkflowKind::Direct {
        return StopAnswer::Allow;
    }
    let id = t.id();
    let (file, warden) = (input.task_file, input.warden);
    // Only what this round wrote counts (DESIGN 6): an earlier round's section, or a
    // Review written before this review round began, is not this session's artifact.
    let fresh = t.fresh(input.artifacts);
    let given = input.artifacts;
    let ask = match (input.role, t.status()) {
        (Role::Worker, Status::Working) if fresh.handoff.is_none() => format!(
            "Warden: task {id} is not handed over yet, so it cannot go to review. {} \
             \"## Handoff\" section in {file} (DONE: what you completed; REMAINING: what is \
             left; DECISIONS: choices you made and why; UNCERTAIN: open questions), then run: \
             {warden} task complete {id}",
            if given.handoff.is_some() {
                "The one there was handed off by an earlier round: append a new"
            } else {
                "Write a"
            }
        ),
        (Role::Reviewer, Status::AgentReview) if fresh.verdict.is_none() => format!(
            "Warden: task {id} has no review verdict from this round yet. {} \"## Review\" \
             section in {file} whose first line is PASS or FAIL, followed by the specific \
             issues, then run: {warden} task update {id} --status reviewing (PASS) or \
             {warden} task update {id} --status working (FAIL)",
            if given.verdict.is_some() {
                "The one there was written before this round began: append a new"
            } else {
                "Write a"
            }
        ),
        _ => return StopAnswer::Allow,
    };
    // What the agent wrote is there but unreadable: say what to close.
    let ask = match &input.artifacts.hidden {
        Some(detail) => format!("{ask}\n(In {file}: {detail}.)"),
        None => ask,
    };
    if input.blocks >= input.max_blocks {
        return StopAnswer::GiveUp;
    }
    StopAnswer::Block(format!(
        "{ask}\n(Warden asks at most {} time(s); this is {} of them. Ending without it counts as a crash.)",
        input.max_blocks,
        input.blocks + 1
    ))
}

/// The role a session a person started plays: the one the task's status calls for.
pub fn role_for(status: Status) -> Option<Role> {
    match status {
        Status::Working => Some(Role::Worker),
        Status::AgentReview => Some(Role::Reviewer),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact;
    use crate::progress::tests::task;

    const HANDOFF: &str = "# T\n\n## Handoff\nDONE: all\n";
    const REVIEW_PASS: &str = "# T\n\n## Handoff\nDONE\n\n## Review\nPASS: fine\n";
    const REVIEW_NONE: &str = "# T\n\n## Handoff\nDONE\n\n## Review\nlooked at it\n";

    /// One row: role, status, TASK.md text, blocks so far (of 3) → answer kind.
    fn check(role: Role, status: Status, text: &str, blocks: u32, expected: &str) {
        let t = task("t", None, status);
        let art = artifact::artifacts(text);
        let answer = stop(&StopInput {
            task: &t,
            role,
            heal: false,
            artifacts: &art,
            blocks,
            max_blocks: 3,
            task_file: "/p/.warden/tasks/t/TASK.md",
            warden: "/bin/warden",
        });
        let kind = match &answer {
            StopAnswer::Allow => "allow",
            StopAnswer::GiveUp => "give up",
            StopAnswer::Block(_) => "block",
        };
        assert_eq!(
            kind, expected,
            "{role} {status} {text:?} {blocks}: {answer:?}"
        );
    }

    #[test]
    fn the_table() {
        use Role::*;
        use Status::*;
        check(Worker, Working, "# T\n", 0, "block");
        check(Worker, Working, "# T\n", 2, "block");
        check(Worker, Working, "# T\n", 3, "give up");
        check(
            Worker,
            Working,
            "# T\n\n## Handoff\n<!-- empty -->\n",
            0,
            "block",
        );
        check(Worker, Working, HANDOFF, 0, "allow");
        // The worker already handed over (`task complete`): the task moved on.
        check(Worker, AgentReview, "# T\n", 0, "allow");
        check(Worker, Clarification, "# T\n", 0, "allow");
        check(Worker, Cancelled, "# T\n", 0, "allow");
        check(Reviewer, AgentReview, HANDOFF, 0, "block");
        check(Reviewer, AgentReview, REVIEW_NONE, 1, "block");
        check(Reviewer, AgentReview, REVIEW_NONE, 3, "give up");
        check(Reviewer, AgentReview, REVIEW_PASS, 0, "allow");
        check(Reviewer, Reviewing, HANDOFF, 0, "allow");
        check(Reviewer, Working, "# T\n", 0, "allow");
    }

    /// The hook holds a round to what it wrote itself, as the gates do: a worker sent
    /// back by a FAIL is blocked on the old Handoff, and a reviewer on a "PASS" the
    /// worker wrote before the review began. Before, both were let stop, and exit
    /// monitoring then counted a crash.
    #[test]
    fn an_earlier_rounds_artifact_is_not_this_rounds() {
        use crate::event::Actor;
        use crate::ops::{Ctx, Initial, TransitionInput, create, transition};
        let ctx = Ctx::fixed(Actor::Agent);
        let spec = crate::model::TaskSpec::new(
            crate::model::TaskId::new("t").unwrap(),
            WorkflowKind::Review,
            3,
        );
        let step = |t: &Task, to, text: &str| {
            let input = TransitionInput {
                artifacts: artifact::artifacts(text),
                ..Default::default()
            };
            transition(t, to, &input, &ctx).unwrap().after.unwrap()
        };
        let t = create(spec, Initial::NEW, &ctx).unwrap().after.unwrap();
        let t = step(&t, Status::Working, "# T\n");
        let forged = "# T\n\n## Handoff\nDONE\n\n## Review\nPASS: mine\n";
        let review = step(&t, Status::AgentReview, forged);
        let failed =
            "# T\n\n## Handoff\nDONE\n\n## Review\nPASS: mine\n\n## Review\nFAIL: no tests\n";
        let back = step(&review, Status::Working, failed);
        let ask = |t: &Task, role, text: &str| {
            let art = artifact::artifacts(text);
            stop(&StopInput {
                task: t,
                role,
                heal: false,
                artifacts: &art,
                blocks: 0,
                max_blocks: 3,
                task_file: "/p/TASK.md",
                warden: "warden",
            })
        };
        match ask(&review, Role::Reviewer, forged) {
            StopAnswer::Block(text) => {
                assert!(text.contains("written before this round began"), "{text}")
            }
            other => panic!("{other:?}"),
        }
        match ask(&back, Role::Worker, failed) {
            StopAnswer::Block(text) => assert!(text.contains("earlier round"), "{text}"),
            other => panic!("{other:?}"),
        }
        // What the round writes itself lets it stop.
        let verdict = format!("{forged}\n## Review\nPASS: checked\n");
        assert_eq!(ask(&review, Role::Reviewer, &verdict), StopAnswer::Allow);
        let handoff = format!("{failed}\n## Handoff\nDONE: tests\n");
        assert_eq!(ask(&back, Role::Worker, &handoff), StopAnswer::Allow);
    }

    #[test]
    fn the_block_names_the_file_and_the_command() {
        let t = task("t", None, Status::Working);
        let art = artifact::artifacts("# T\n");
        let input = StopInput {
            task: &t,
            role: Role::Worker,
            heal: false,
            artifacts: &art,
            blocks: 0,
            max_blocks: 3,
            task_file: "/p/.warden/tasks/t/TASK.md",
            warden: "/bin/warden",
        };
        let StopAnswer::Block(text) = stop(&input) else {
            panic!("expected a block");
        };
        assert!(text.contains("## Handoff"), "{text}");
        assert!(text.contains("/p/.warden/tasks/t/TASK.md"), "{text}");
        assert!(text.contains("/bin/warden task complete t"), "{text}");
        assert!(text.contains("1 of them"), "{text}");
        // Heal sessions and direct tasks are never blocked.
        assert_eq!(
            stop(&StopInput {
                heal: true,
                ..input.clone()
            }),
            StopAnswer::Allow
        );
        let mut direct = t.clone();
        direct.spec.workflow = WorkflowKind::Direct;
        assert_eq!(
            stop(&StopInput {
                task: &direct,
                ..input
            }),
            StopAnswer::Allow
        );
    }

    #[test]
    fn roles_of_hand_started_sessions() {
        assert_eq!(role_for(Status::Working), Some(Role::Worker));
        assert_eq!(role_for(Status::AgentReview), Some(Role::Reviewer));
        assert_eq!(role_for(Status::Reviewing), None);
        assert_eq!(role_for(Status::Pending), None);
    }
}
