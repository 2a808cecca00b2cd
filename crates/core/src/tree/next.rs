//! `plan next`: the leftmost open leaf whose dependencies are done, and whether the
//! plan as a whole is still open, complete, or stuck.

use serde::{Deserialize, Serialize};

use crate::model::TaskId;
use crate::model::{Status, Task};
use crate::tree::TreeIndex;

/// The state of the plan as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NextState {
    /// Work remains and can still make progress.
    Open,
    /// Every leaf passes (cancelled leaves aside); an empty plan is complete.
    Complete,
    /// Open leaves remain but none can make progress without a person.
    Stuck,
}

impl NextState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            NextState::Open => "open",
            NextState::Complete => "complete",
            NextState::Stuck => "stuck",
        }
    }
}

/// The answer of `plan next`: `{"next": "ID"|null, "state": "open"|"complete"|"stuck"}`,
/// and for a stuck plan what it is stuck on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Next {
    /// The leaf to work on, if any.
    pub next: Option<TaskId>,
    /// The plan's state.
    pub state: NextState,
    /// When `stuck`: the tasks that need a person before anything can move, in tree
    /// order, at most [`MAX_STUCK_ON`] (see [`plan_next`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stuck_on: Vec<StuckOn>,
    /// How many more there are beyond those listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stuck_on_more: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The most tasks a stuck `plan next` lists (an orchestrator's answer stays small).
pub const MAX_STUCK_ON: usize = 20;

/// A task a stuck plan waits on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StuckOn {
    /// The task: a stuck leaf, or a dependency that can never be done.
    pub task: TaskId,
    /// Its status as views show it (`cancelled` also under a cancelled group); `None`
    /// when no such task exists.
    pub status: Option<Status>,
    /// For a dependency, the first task (in tree order) whose `depends_on` names it:
    /// dropping it there (`warden task edit`) is one way on. `None` for a stuck leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed_by: Option<TaskId>,
}

/// Picks the next leaf and classifies the plan.
///
/// Definitions (the decisions where DESIGN 2.3 is silent):
/// - A task is *cancelled* when it or an ancestor is `cancelled`; cancelled tasks count
///   neither as open nor as passed, and their subtrees are never scheduled.
/// - A leaf is *open* when it does not pass, is not `done` and is not cancelled.
/// - A leaf is *stuck* when its status is `stuck` or its attempts reached
///   `max_attempts` without passing.
/// - A dependency is *done* when the task exists and is `done`, or is a parent whose
///   derived `passes` is true (groups have no lifecycle of their own). A task's
///   `depends_on` also holds back every leaf below it.
/// - `next` is the first open, non-stuck leaf in depth-first `(order, id)` order whose
///   own and ancestors' dependencies are all done. Leaves already in progress
///   (`working`, `clarification`, …) qualify: they are the work to continue.
///
/// `state` is `open` when `next` exists, or when some open leaf can still finish: it is
/// waiting only on tasks that can themselves finish (for example a dependency that
/// passed its guard and is in review). It is `complete` when no open leaf remains. It is
/// `stuck` otherwise: every open leaf is stuck or depends, directly, through a group, or
/// transitively, on a stuck, cancelled or missing task or on a dependency cycle.
///
/// A stuck plan lists what it is stuck on (`stuck_on`): its stuck open leaves, and the
/// dependencies named by an open leaf or its groups that can never be done (a task that
/// is missing, cancelled or under a cancelled group, or a group whose leaves are all
/// cancelled). Every other reason leads to one of those, except a dependency cycle
/// (which validation refuses, so only a store written before that rule holds one).
pub fn plan_next(tasks: &[Task]) -> Next {
    let idx = TreeIndex::new(tasks);
    let forest = idx.forest();
    let pre = forest.preorder();
    let n = tasks.len();

    let mut parent_of: Vec<Option<usize>> = vec![None; n];
    for p in 0..n {
        for &c in forest.children(p) {
            parent_of[c as usize] = Some(p);
        }
    }
    // Pre-order visits parents first, so ancestor flags are known when a child is seen.
    let mut cancelled = vec![false; n];
    let mut held = vec![false; n];
    // A group's own stored status and `passes` never change (no transition reaches a
    // group): its derived `passes` says whether its children did the work.
    let dep_done = |d: &TaskId| match idx.position(d) {
        Some(j) => tasks[j].status() == Status::Done || (!forest.is_leaf(j) && idx.derived[j].1),
        None => false,
    };
    for &i in &pre {
        let up = parent_of[i];
        cancelled[i] = tasks[i].status() == Status::Cancelled || up.is_some_and(|p| cancelled[p]);
        held[i] = up.is_some_and(|p| held[p]) || !tasks[i].spec.depends_on.iter().all(dep_done);
    }
    let is_open = |i: usize| {
        let t = &tasks[i];
        forest.is_leaf(i) && !cancelled[i] && !t.passes() && t.status() != Status::Done
    };
    let is_stuck = |i: usize| {
        let t = &tasks[i];
        t.status() == Status::Stuck || (!t.passes() && t.attempts() >= t.spec.max_attempts)
    };

    if let Some(&i) = pre
        .iter()
        .find(|&&i| is_open(i) && !is_stuck(i) && !held[i])
    {
        return Next {
            next: Some(tasks[i].id().clone()),
            state: NextState::Open,
            stuck_on: Vec::new(),
            stuck_on_more: 0,
        };
    }
    let open: Vec<usize> = pre.iter().copied().filter(|&i| is_open(i)).collect();
    if open.is_empty() {
        return Next {
            next: None,
            state: NextState::Complete,
            stuck_on: Vec::new(),
            stuck_on_more: 0,
        };
    }
    let finish = CanFinish::compute(tasks, &idx, &parent_of, &cancelled, is_stuck);
    if open.iter().any(|&i| finish.task(i)) {
        return Next {
            next: None,
            state: NextState::Open,
            stuck_on: Vec::new(),
            stuck_on_more: 0,
        };
    }
    // What it is stuck on, in tree order: each open leaf's own cause (stuck itself), or
    // the dependencies on its way up that can never be done.
    let mut seen = std::collections::HashSet::new();
    let mut on: Vec<StuckOn> = Vec::new();
    let mut note = |task: &TaskId, status: Option<Status>, needed_by: Option<&TaskId>| {
        if seen.insert(task.clone()) {
            on.push(StuckOn {
                task: task.clone(),
                status,
                needed_by: needed_by.cloned(),
            });
        }
    };
    for &i in &open {
        if is_stuck(i) {
            note(tasks[i].id(), Some(tasks[i].status()), None);
            continue;
        }
        let mut at = Some(i);
        let mut steps = n;
        while let Some(a) = at.filter(|_| steps > 0) {
            steps -= 1;
            let by = Some(tasks[a].id());
            for d in &tasks[a].spec.depends_on {
                match idx.position(d) {
                    None => note(d, None, by),
                    Some(j) if cancelled[j] => note(d, Some(Status::Cancelled), by),
                    Some(j) if !forest.is_leaf(j) && idx.derived[j].0 == Status::Cancelled => {
                        note(d, Some(Status::Cancelled), by)
                    }
                    Some(_) => {}
                }
            }
            at = parent_of[a];
        }
    }
    let more = on.len().saturating_sub(MAX_STUCK_ON);
    on.truncate(MAX_STUCK_ON);
    Next {
        next: None,
        state: NextState::Stuck,
        stuck_on: on,
        stuck_on_more: more,
    }
}

/// "Can this still finish without a person?" for every task, over a graph of 2n
/// questions: `F(i)` (task i can finish) and `D(i)` (the dependencies of i and of its
/// ancestors can finish). Solved by one iterative depth-first pass with memoisation; a
/// question met again while still open lies on a dependency cycle and answers `false`.
struct CanFinish {
    value: Vec<bool>,
}

impl CanFinish {
    fn compute(
        tasks: &[Task],
        idx: &TreeIndex<'_>,
        parent_of: &[Option<usize>],
        cancelled: &[bool],
        is_stuck: impl Fn(usize) -> bool,
    ) -> CanFinish {
        let n = tasks.len();
        let forest = idx.forest();
        // The questions `q` asks, or a settled answer.
        let edges = |q: usize| -> Result<Vec<usize>, bool> {
            if q < n {
                let t = &tasks[q];
                if cancelled[q] {
                    return Err(false);
                }
                if t.status() == Status::Done || t.passes() {
                    return Err(true);
                }
                if forest.is_leaf(q) {
                    if is_stuck(q) {
                        return Err(false);
                    }
                    return Ok(vec![n + q]);
                }
                let kids: Vec<usize> = forest
                    .children(q)
                    .iter()
                    .map(|&c| c as usize)
                    .filter(|&c| tasks[c].status() != Status::Cancelled)
                    .collect();
                if kids.is_empty() {
                    return Err(false);
                }
                Ok(kids)
            } else {
                let i = q - n;
                let mut out = Vec::with_capacity(tasks[i].spec.depends_on.len() + 1);
                for d in &tasks[i].spec.depends_on {
                    match idx.position(d) {
                        Some(j) => out.push(j),
                        None => return Err(false),
                    }
                }
                if let Some(p) = parent_of[i] {
                    out.push(n + p);
                }
                Ok(out)
            }
        };

        // 0: not asked, 1: being answered, 2: answered.
        let mut state = vec![0u8; 2 * n];
        let mut value = vec![false; 2 * n];
        let mut asks: Vec<Vec<usize>> = vec![Vec::new(); 2 * n];
        for root in 0..2 * n {
            if state[root] != 0 {
                continue;
            }
            let mut stack = vec![(root, false)];
            while let Some((q, expanded)) = stack.pop() {
                if expanded {
                    value[q] = asks[q].iter().all(|&a| state[a] == 2 && value[a]);
                    asks[q] = Vec::new();
                    state[q] = 2;
                    continue;
                }
                if state[q] != 0 {
                    continue;
                }
                match edges(q) {
                    Err(v) => {
                        value[q] = v;
                        state[q] = 2;
                    }
                    Ok(list) => {
                        state[q] = 1;
                        stack.push((q, true));
                        stack.extend(
                            list.iter()
                                .copied()
                                .filter(|&a| state[a] == 0)
                                .map(|a| (a, false)),
                        );
                        asks[q] = list;
                    }
                }
            }
        }
        CanFinish { value }
    }

    fn task(&self, i: usize) -> bool {
        self.value[i]
    }
}
