//! The stored tasks as `plan apply` reads them. At 100,000 tasks, decoding every stored
//! body took most of an apply, though an apply of a tree `plan export` printed changes a
//! handful of them. A stored task whose spec is, byte for byte, the one its node in the
//! file gives is read only for its runner fields ([`Stored::Same`]); every other one is
//! decoded in full.

use serde::Deserialize;

use crate::model::{AgentPreset, Limits, Status, Task, TaskId, TaskSpec, WorkflowKind};
use crate::tree::PlanNode;
use crate::tree::validate::NONE;
use crate::tree::{IdIndex, PARALLEL_NODES, split, split_map};

/// What the reconcile reads of a stored task (see [`crate::tree::apply_state_updates`]).
pub trait StoredTask: Sync {
    /// The id.
    fn id(&self) -> &TaskId;
    /// The stored status.
    fn status(&self) -> Status;
    /// The stored `passes`.
    fn passes(&self) -> bool;
    /// The stored `attempts`.
    fn attempts(&self) -> u32;
    /// The session believed alive, if any.
    fn live_session(&self) -> Option<&str>;
    /// The stored spec, or `None` when it is exactly the spec the file's node with this
    /// id gives ([`PlanNode::to_spec`]).
    fn spec(&self) -> Option<&TaskSpec>;
    /// The stored `max_attempts`, workflow and preset (a person's; restored from the store).
    fn person_fields(&self) -> (u32, WorkflowKind, Option<AgentPreset>);
}

impl StoredTask for Task {
    fn id(&self) -> &TaskId {
        Task::id(self)
    }
    fn status(&self) -> Status {
        Task::status(self)
    }
    fn passes(&self) -> bool {
        Task::passes(self)
    }
    fn attempts(&self) -> u32 {
        Task::attempts(self)
    }
    fn live_session(&self) -> Option<&str> {
        Task::live_session(self)
    }
    fn spec(&self) -> Option<&TaskSpec> {
        Some(&self.spec)
    }
    fn person_fields(&self) -> (u32, WorkflowKind, Option<AgentPreset>) {
        (self.spec.max_attempts, self.spec.workflow, self.spec.preset)
    }
}

/// The runner fields the reconcile reads, decoded from a stored body's `runner` object
/// (the names and defaults of [`crate::model::RunnerState`]; every other field is skipped
/// unparsed).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
struct RunnerHead {
    status: Status,
    #[serde(default)]
    passes: bool,
    #[serde(default)]
    attempts: u32,
    #[serde(default)]
    live_session: Option<String>,
}

/// A stored task as [`StoredRows`] read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Decoded in full: the file has no node with its id, or the node gives another spec.
    Task(Box<Task>),
    /// Its stored spec is the one the file's node with this id gives: only the runner
    /// fields were read.
    Same(Same),
}

/// A [`Stored::Same`] task: what the reconcile reads of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Same {
    id: TaskId,
    head: RunnerHead,
    person: Person,
}

impl StoredTask for Stored {
    fn id(&self) -> &TaskId {
        match self {
            Stored::Task(t) => t.id(),
            Stored::Same(s) => &s.id,
        }
    }
    fn status(&self) -> Status {
        match self {
            Stored::Task(t) => t.status(),
            Stored::Same(s) => s.head.status,
        }
    }
    fn passes(&self) -> bool {
        match self {
            Stored::Task(t) => t.passes(),
            Stored::Same(s) => s.head.passes,
        }
    }
    fn attempts(&self) -> u32 {
        match self {
            Stored::Task(t) => t.attempts(),
            Stored::Same(s) => s.head.attempts,
        }
    }
    fn live_session(&self) -> Option<&str> {
        match self {
            Stored::Task(t) => t.live_session(),
            Stored::Same(s) => s.head.live_session.as_deref(),
        }
    }
    fn spec(&self) -> Option<&TaskSpec> {
        match self {
            Stored::Task(t) => Some(&t.spec),
            Stored::Same(_) => None,
        }
    }
    fn person_fields(&self) -> (u32, WorkflowKind, Option<AgentPreset>) {
        match self {
            Stored::Task(t) => t.person_fields(),
            Stored::Same(s) => (s.person.max_attempts, s.person.workflow, s.person.preset),
        }
    }
}

/// How a stored body begins and where its spec ends: a task is stored as
/// `serde_json::to_string(&task)`, whose fields are `spec`, then `runner`.
const SPEC_OPEN: &[u8] = b"{\"spec\":";
const RUNNER_OPEN: &[u8] = b",\"runner\":";

/// Stored rows read as far as they can be without the plan file: each one's runner
/// fields, and an index of their ids. `plan apply` reads them while the file is parsed
/// on another thread, then reads them against its nodes with [`StoredRows::against`].
pub struct StoredRows<'a, R, F> {
    rows: &'a [R],
    /// Each row's id and body as stored.
    row: F,
    index: IdIndex<'a>,
    /// Where each row's runner object begins (just after the spec, if the body is as the
    /// store writes it) and its runner fields, when they decode.
    heads: Vec<Option<(usize, RunnerHead)>>,
}

impl<'a, R: Sync, F: Fn(&'a R) -> (&'a str, &'a str) + Sync> StoredRows<'a, R, F> {
    /// Reads `rows` (`row` gives each one's id and body as stored). The runner object is
    /// taken to start at the last `,"runner":` of a body (a string cannot hold that
    /// text unescaped); [`StoredRows::against`] checks that the spec ends exactly there.
    pub fn new(rows: &'a [R], row: F) -> Self {
        let (index, _) = IdIndex::build(rows.iter().map(|r| row(r).0).collect());
        let head = |r: &'a R| {
            let body = row(r).1.as_bytes();
            let at = memchr::memmem::rfind(body, RUNNER_OPEN)? + RUNNER_OPEN.len();
            let runner = body[at..].strip_suffix(b"}")?;
            Some((at, serde_json::from_slice::<RunnerHead>(runner).ok()?))
        };
        let heads = split_map(rows, PARALLEL_NODES, |_, part| {
            part.iter().map(head).collect()
        });
        StoredRows {
            rows,
            row,
            index,
            heads,
        }
    }

    /// The stored tasks for a reconcile with `nodes`, in the rows' order. A row whose
    /// body begins with exactly the spec its node would be given (serialized as the store
    /// serializes it), followed by a runner object that decoded, is [`Stored::Same`];
    /// any other row is decoded in full by `decode`, whose error is returned for a row
    /// that does not decode.
    pub fn against<E: Send>(
        self,
        nodes: &[PlanNode],
        limits: &Limits,
        decode: impl Fn(&str, &str) -> Result<Task, E> + Sync,
    ) -> Result<Vec<Stored>, E> {
        let StoredRows {
            rows,
            row,
            index,
            heads,
        } = self;
        let row_of = index.get_many_split(nodes, |n| n.id.as_str(), PARALLEL_NODES);
        drop(index);
        // Each node compared with its row, in the nodes' order: the person-owned fields
        // its spec gives, when the row holds exactly that spec.
        let same: Vec<Option<Person>> = split_map(nodes, PARALLEL_NODES, |from, part| {
            let mut expected = Vec::new();
            part.iter()
                .zip(&row_of[from..])
                .map(|(node, &i)| {
                    let i = (i != NONE).then_some(i as usize)?;
                    let at = heads[i].as_ref()?.0;
                    same_spec(node, row(&rows[i]).1.as_bytes(), at, limits, &mut expected)
                })
                .collect()
        });
        let mut node_of = vec![NONE; rows.len()];
        for (j, &i) in row_of.iter().enumerate() {
            if i != NONE && same[j].is_some() {
                node_of[i as usize] = j as u32;
            }
        }
        let (first, second) = split(rows, PARALLEL_NODES, |from, part| {
            part.iter()
                .enumerate()
                .map(|(k, r)| {
                    let i = from + k;
                    let j = node_of[i];
                    let person = (j != NONE).then(|| same[j as usize]).flatten();
                    if let (Some(person), Some((_, head))) = (person, &heads[i]) {
                        return Ok(Stored::Same(Same {
                            id: nodes[j as usize].id.clone(),
                            head: head.clone(),
                            person,
                        }));
                    }
                    let (id, body) = row(r);
                    decode(id, body).map(|t| Stored::Task(Box::new(t)))
                })
                .collect::<Result<Vec<Stored>, E>>()
        });
        let mut read = first?;
        if let Some(more) = second {
            read.extend(more?);
        }
        Ok(read)
    }
}

impl<R, F> std::fmt::Debug for StoredRows<'_, R, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredRows")
            .field("rows", &self.rows.len())
            .finish()
    }
}

/// The person-owned fields of a spec, for [`Stored::Same`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Person {
    max_attempts: u32,
    workflow: WorkflowKind,
    preset: Option<AgentPreset>,
}

/// The person-owned fields of the spec `node` gives, when `body` begins with exactly that
/// spec and its runner object starts at `runner_at`; `None` otherwise. `expected` is a
/// buffer kept between calls.
fn same_spec(
    node: &PlanNode,
    body: &[u8],
    runner_at: usize,
    limits: &Limits,
    expected: &mut Vec<u8>,
) -> Option<Person> {
    let spec = node.spec_view(limits);
    expected.clear();
    expected.extend_from_slice(SPEC_OPEN);
    serde_json::to_writer(&mut *expected, &spec).ok()?;
    expected.extend_from_slice(RUNNER_OPEN);
    (body.get(..runner_at)? == expected.as_slice()).then_some(Person {
        max_attempts: spec.max_attempts,
        workflow: spec.workflow,
        preset: spec.preset,
    })
}

/// Reads stored rows against the file's nodes: [`StoredRows::new`], then
/// [`StoredRows::against`] (tests; `plan apply` parses the file between the two).
#[cfg(test)]
pub(crate) fn read_stored<'a, R: Sync, E: Send>(
    rows: &'a [R],
    row: impl Fn(&'a R) -> (&'a str, &'a str) + Sync,
    nodes: &[PlanNode],
    limits: &Limits,
    decode: impl Fn(&str, &str) -> Result<Task, E> + Sync,
) -> Result<Vec<Stored>, E> {
    StoredRows::new(rows, row).against(nodes, limits, decode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RunnerState, Task, WorkSpec};
    use jiff::Timestamp;
    use proptest::prelude::*;

    fn node(id: &str) -> PlanNode {
        serde_json::from_value(serde_json::json!({"id": id, "title": format!("T {id}")})).unwrap()
    }

    fn decode(_: &str, body: &str) -> Result<Task, String> {
        serde_json::from_str(body).map_err(|e| e.to_string())
    }

    /// A row as the store writes it: the task serialized, after `edit`.
    fn stored(n: &PlanNode, edit: impl FnOnce(&mut Task)) -> (String, String) {
        let mut t = Task {
            spec: n.to_spec(&Limits::default()),
            runner: RunnerState::new(Status::Working, false, 2, Timestamp::UNIX_EPOCH),
        };
        t.runner.live_session = Some("s-1".into());
        t.runner.entry = 3;
        edit(&mut t);
        (n.id.as_str().to_owned(), serde_json::to_string(&t).unwrap())
    }

    fn read(rows: &[(String, String)], nodes: &[PlanNode]) -> Result<Vec<Stored>, String> {
        read_stored(
            rows,
            |r| (r.0.as_str(), r.1.as_str()),
            nodes,
            &Limits::default(),
            decode,
        )
    }

    #[test]
    fn a_task_stored_with_its_nodes_spec_is_read_for_its_runner_fields_only() {
        let a = node("a");
        let rows = vec![stored(&a, |_| {})];
        let got = read(&rows, std::slice::from_ref(&a)).unwrap();
        let full: Task = serde_json::from_str(&rows[0].1).unwrap();
        assert!(matches!(got[0], Stored::Same(..)), "{got:?}");
        let s = &got[0];
        assert_eq!(StoredTask::id(s), full.id());
        assert_eq!(StoredTask::status(s), full.status());
        assert_eq!(StoredTask::passes(s), full.passes());
        assert_eq!(StoredTask::attempts(s), full.attempts());
        assert_eq!(StoredTask::live_session(s), full.live_session());
        assert_eq!(StoredTask::spec(s), None);
        assert_eq!(s.person_fields(), full.person_fields());
    }

    #[test]
    fn any_difference_in_the_spec_or_a_task_the_file_lacks_is_decoded_in_full() {
        let (a, b, c) = (node("a"), node("b"), node("c"));
        let rows = vec![
            // A title edited since.
            stored(&a, |t| t.spec.title = "other".into()),
            // Evidence, which the plan shape does not carry.
            stored(&b, |t| t.spec.evidence = Some("seen".into())),
            // Not in the file.
            stored(&c, |_| {}),
        ];
        let got = read(&rows, &[a, b]).unwrap();
        for (s, (_, body)) in got.iter().zip(&rows) {
            let full: Task = serde_json::from_str(body).unwrap();
            assert_eq!(s, &Stored::Task(Box::new(full)));
        }
    }

    #[test]
    fn a_runner_object_that_does_not_decode_falls_back_to_the_full_decode_and_its_error() {
        let a = node("a");
        let (id, body) = stored(&a, |_| {});
        let rows = vec![(id, body.replace("\"attempts\":2", "\"attempts\":\"two\""))];
        let err = read(&rows, std::slice::from_ref(&a)).unwrap_err();
        assert!(err.contains("invalid type"), "{err}");
    }

    fn work() -> impl Strategy<Value = Option<WorkSpec>> {
        let text = "[a-z\"\\\\\n\u{1}é ]{0,6}";
        prop_oneof![
            Just(None),
            text.prop_map(|s| Some(WorkSpec::Shell(s))),
            prop::collection::vec(text, 0..3).prop_map(|v| Some(WorkSpec::Process(v))),
            text.prop_map(|s| Some(WorkSpec::Agent(s))),
        ]
    }

    prop_compose! {
        fn any_node()(
            title in prop::option::of("[a-z\"\\\\\t\u{7f}ü ]{0,8}"),
            body in prop::option::of("[a-z\"\n\u{1}</> ]{0,8}"),
            parent in prop::option::of(Just(TaskId::new("p").unwrap())),
            order in any::<i64>(),
            deps in prop::collection::vec(Just(TaskId::new("d").unwrap()), 0..3),
            work in work(),
            agent in prop::option::of("[a-z ]{0,6}"),
            prechecks in work(),
            postchecks in work(),
            max_attempts in prop::option::of(0u32..9),
            workflow in prop::option::of(prop_oneof![
                Just(WorkflowKind::Review),
                Just(WorkflowKind::Direct),
            ]),
            preset in prop::option::of(prop_oneof![
                Just(AgentPreset::Claude),
                Just(AgentPreset::Codex),
                Just(AgentPreset::Custom),
            ]),
        ) -> PlanNode {
            let mut n = PlanNode::new(TaskId::new("t").unwrap());
            n.title = title;
            n.body = body;
            n.parent = parent;
            n.order = order;
            n.depends_on = deps;
            n.work = work;
            n.agent = agent;
            n.prechecks = prechecks;
            n.postchecks = postchecks;
            n.max_attempts = max_attempts;
            n.workflow = workflow;
            n.preset = preset;
            n
        }
    }

    proptest! {
        /// `read_stored` compares the stored bytes with the node's borrowed view: the view
        /// must serialize exactly as the spec the node gives.
        #[test]
        fn a_nodes_spec_view_serializes_as_its_spec(n in any_node()) {
            let limits = Limits::default();
            let spec = n.to_spec(&limits);
            // Every field of a spec; a new one needs a place in `SpecView`.
            let TaskSpec {
                id: _, title: _, body: _, parent: _, order: _, depends_on: _, workflow,
                spec: _, max_attempts, evidence: _, origin: _, preset,
            } = &spec;
            let view = n.spec_view(&limits);
            prop_assert_eq!(
                serde_json::to_string(&view).unwrap(),
                serde_json::to_string(&spec).unwrap()
            );
            prop_assert_eq!(
                (view.max_attempts, view.workflow, view.preset),
                (*max_attempts, *workflow, *preset)
            );
        }
    }

    #[test]
    fn many_rows_over_two_threads_keep_their_order() {
        let nodes: Vec<PlanNode> = (0..PARALLEL_NODES + 10)
            .map(|i| node(&format!("t{i:06}")))
            .collect();
        let rows: Vec<(String, String)> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                stored(n, |t| {
                    if i % 1000 == 7 {
                        t.spec.body = "edited".into();
                    }
                })
            })
            .collect();
        let got = read(&rows, &nodes).unwrap();
        assert_eq!(got.len(), rows.len());
        for (i, (s, (id, _))) in got.iter().zip(&rows).enumerate() {
            assert_eq!(StoredTask::id(s).as_str(), id);
            assert_eq!(matches!(s, Stored::Task(_)), i % 1000 == 7, "row {i}");
        }
    }
}
