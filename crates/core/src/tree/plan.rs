//! The flat plan file: what `plan import` reads (JSON, TOML or YAML) and `plan export`
//! writes (JSON). One object per task, parents by id; runner-owned fields may appear
//! (an import sets them, an agent's edit of them is ignored and recorded).

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::{
    AgentPreset, Limits, Specs, Status, Task, TaskId, TaskSpec, WorkSpec, WorkflowKind,
};

/// A whole plan file: `{"tasks": [...]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// The newest event of the store when `plan export` wrote the file. `plan apply`
    /// refuses to remove a task that changed after it: whoever edited the file never
    /// saw that task as it is (one created since, one a session started on). Import
    /// ignores it; a file without it is not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of_event: Option<u64>,
    /// Every task of the plan, in any order (output is sorted by the reader).
    #[serde(default)]
    pub tasks: Vec<PlanNode>,
}

/// One task in the flat plan shape.
///
/// `work`, `prechecks` and `postchecks` accept a plain string (a shell command) or a
/// [`WorkSpec`] object (`{"shell": ..}`, `{"process": [..]}`, `{"agent": ..}`);
/// `agent: "text"` is shorthand for `work: {"agent": "text"}`. `passes`, `attempts` and
/// `status` are runner-owned: import may set the first two and `status: cancelled` (a
/// person's decision that export keeps), `plan apply` ignores all three.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanNode {
    /// The id.
    pub id: TaskId,
    /// A one-line title; defaults to the id.
    #[serde(default)]
    pub title: Option<String>,
    /// The parent, if any.
    #[serde(default)]
    pub parent: Option<TaskId>,
    /// Sort key among siblings (ties broken by id).
    #[serde(default)]
    pub order: i64,
    /// Tasks that must be `done` before this one is scheduled.
    #[serde(default)]
    pub depends_on: Vec<TaskId>,
    /// The work: a shell string or a WorkSpec object.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_spec",
        deserialize_with = "de_spec"
    )]
    pub work: Option<WorkSpec>,
    /// Shorthand for agent work: the instructions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Checks before the work: a shell string or a WorkSpec object.
    #[serde(default, serialize_with = "ser_spec", deserialize_with = "de_spec")]
    pub prechecks: Option<WorkSpec>,
    /// Checks after the work (the guard): a shell string or a WorkSpec object.
    #[serde(default, serialize_with = "ser_spec", deserialize_with = "de_spec")]
    pub postchecks: Option<WorkSpec>,
    /// Failed attempts allowed; defaults to the configured limit.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// `review` or `direct`; defaults to `direct` for shell and process work, else `review`.
    #[serde(default)]
    pub workflow: Option<WorkflowKind>,
    /// Runner-owned: accepted. Import may set it; `plan apply` restores it.
    #[serde(default)]
    pub passes: Option<bool>,
    /// Runner-owned: failed attempts. Import may set it; `plan apply` restores it.
    #[serde(default)]
    pub attempts: Option<u32>,
    /// Runner-owned: exported only as `cancelled` (which import takes, so a plan moved to
    /// another store keeps what a person dropped); `plan apply` ignores and records a
    /// value written here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Free text: instructions and context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The agent preset of this task's sessions (default: the configured one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<AgentPreset>,
}

impl PlanNode {
    /// A node with only an id; every other field absent.
    pub fn new(id: TaskId) -> PlanNode {
        PlanNode {
            id,
            title: None,
            parent: None,
            order: 0,
            depends_on: Vec::new(),
            work: None,
            agent: None,
            prechecks: None,
            postchecks: None,
            max_attempts: None,
            workflow: None,
            passes: None,
            attempts: None,
            status: None,
            body: None,
            preset: None,
        }
    }

    /// The export shape of a task: shell work as a plain string, process work as an
    /// object, agent work as `agent`; runner-owned `passes` and `attempts` included,
    /// `status` only for a cancelled task (the rest follows from `passes` and
    /// `attempts`).
    pub fn from_task(task: &Task) -> PlanNode {
        let spec = &task.spec;
        let (work, agent) = match &spec.spec.work {
            Some(WorkSpec::Agent(text)) => (None, Some(text.clone())),
            other => (other.clone(), None),
        };
        PlanNode {
            id: spec.id.clone(),
            title: Some(spec.title.clone()),
            parent: spec.parent.clone(),
            order: spec.order,
            depends_on: spec.depends_on.clone(),
            work,
            agent,
            prechecks: spec.spec.prechecks.clone(),
            postchecks: spec.spec.postchecks.clone(),
            max_attempts: Some(spec.max_attempts),
            workflow: Some(spec.workflow),
            passes: Some(task.passes()),
            attempts: Some(task.attempts()),
            status: (task.status() == Status::Cancelled).then_some(Status::Cancelled),
            body: (!spec.body.is_empty()).then(|| spec.body.clone()),
            preset: spec.preset,
        }
    }

    /// The work this node asks for: `work`, else `agent` as an agent spec. A node with
    /// both is invalid ([`crate::tree::validate_plan`] reports it); `work` wins here.
    pub fn work_spec(&self) -> Option<WorkSpec> {
        match (&self.work, &self.agent) {
            (Some(w), _) => Some(w.clone()),
            (None, Some(a)) => Some(WorkSpec::Agent(a.clone())),
            (None, None) => None,
        }
    }

    /// The user-owned spec with defaults filled in: title = id; workflow `direct` for
    /// shell or process work, `review` otherwise (DESIGN 2.1); `max_attempts` from
    /// `limits`. Validate first: with both `work` and `agent`, `work` wins.
    pub fn to_spec(&self, limits: &Limits) -> TaskSpec {
        self.clone().into_spec(limits)
    }

    /// The title [`PlanNode::into_spec`] gives: the file's, or the id.
    pub(crate) fn spec_title(&self) -> &str {
        self.title.as_deref().unwrap_or(self.id.as_str())
    }

    /// The body [`PlanNode::into_spec`] gives: the file's, or empty.
    pub(crate) fn spec_body(&self) -> &str {
        self.body.as_deref().unwrap_or("")
    }

    /// [`PlanNode::to_spec`] without copying the strings.
    #[inline]
    pub fn into_spec(self, limits: &Limits) -> TaskSpec {
        let untitled = self.title.is_none();
        let mut spec = self.into_spec_untitled(limits);
        if untitled {
            spec.title = spec.id.as_str().to_owned();
        }
        spec
    }

    /// The workflow [`PlanNode::into_spec`] gives: the file's, else `direct` for shell
    /// or process work and `review` for an agent's or none.
    fn spec_workflow(&self) -> WorkflowKind {
        self.workflow.unwrap_or(match self.work {
            Some(WorkSpec::Shell(_) | WorkSpec::Process(_)) => WorkflowKind::Direct,
            _ => WorkflowKind::Review,
        })
    }

    /// The spec [`PlanNode::to_spec`] gives, borrowed from the node: it serializes to the
    /// same bytes (a test holds the two together), without copying a string.
    pub(crate) fn spec_view<'a>(&'a self, limits: &Limits) -> SpecView<'a> {
        let work = match (&self.work, &self.agent) {
            (Some(WorkSpec::Shell(c)), _) => Some(WorkRef::Shell(c)),
            (Some(WorkSpec::Process(argv)), _) => Some(WorkRef::Process(argv)),
            (Some(WorkSpec::Agent(a)), _) | (None, Some(a)) => Some(WorkRef::Agent(a)),
            (None, None) => None,
        };
        SpecView {
            id: &self.id,
            title: self.spec_title(),
            body: self.spec_body(),
            parent: self.parent.as_ref(),
            order: self.order,
            depends_on: &self.depends_on,
            workflow: self.spec_workflow(),
            spec: SpecsView {
                work,
                prechecks: self.prechecks.as_ref(),
                postchecks: self.postchecks.as_ref(),
            },
            max_attempts: self.max_attempts.unwrap_or(limits.max_attempts),
            preset: self.preset,
        }
    }

    /// [`PlanNode::into_spec`], except that a node without a title gets an empty one
    /// (the caller names it after its id). Only moves: nothing takes a reference into
    /// the node, so a caller mapping nodes in place moves each field straight across.
    #[inline]
    pub(crate) fn into_spec_untitled(self, limits: &Limits) -> TaskSpec {
        let workflow = self.spec_workflow();
        let work = match (self.work, self.agent) {
            (Some(w), _) => Some(w),
            (None, Some(a)) => Some(WorkSpec::Agent(a)),
            (None, None) => None,
        };
        TaskSpec {
            id: self.id,
            title: self.title.unwrap_or_default(),
            body: self.body.unwrap_or_default(),
            parent: self.parent,
            order: self.order,
            depends_on: self.depends_on,
            workflow,
            spec: Specs {
                work,
                prechecks: self.prechecks,
                postchecks: self.postchecks,
            },
            max_attempts: self.max_attempts.unwrap_or(limits.max_attempts),
            evidence: None,
            origin: None,
            preset: self.preset,
        }
    }
}

/// [`TaskSpec`] as [`PlanNode::spec_view`] borrows it: the same fields, in the same
/// order, under the same names (a `TaskSpec` from a node has no evidence and no origin).
#[derive(Debug, Serialize)]
pub(crate) struct SpecView<'a> {
    id: &'a TaskId,
    title: &'a str,
    body: &'a str,
    parent: Option<&'a TaskId>,
    order: i64,
    depends_on: &'a [TaskId],
    pub(crate) workflow: WorkflowKind,
    spec: SpecsView<'a>,
    pub(crate) max_attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) preset: Option<AgentPreset>,
}

/// [`crate::model::Specs`], borrowed.
#[derive(Debug, Serialize)]
struct SpecsView<'a> {
    work: Option<WorkRef<'a>>,
    prechecks: Option<&'a WorkSpec>,
    postchecks: Option<&'a WorkSpec>,
}

/// [`WorkSpec`], borrowed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum WorkRef<'a> {
    Shell(&'a str),
    Process(&'a [String]),
    Agent(&'a str),
}

/// Writes a shell spec as a plain string and any other spec as its object.
fn ser_spec<S: Serializer>(spec: &Option<WorkSpec>, s: S) -> Result<S::Ok, S::Error> {
    match spec {
        None => s.serialize_none(),
        Some(WorkSpec::Shell(cmd)) => s.serialize_str(cmd),
        Some(other) => other.serialize(s),
    }
}

/// Reads `null`/absent, a plain string (shell) or a WorkSpec object. A visitor rather
/// than `#[serde(untagged)]` so that a bad value gets a message naming the accepted shapes.
fn de_spec<'de, D: Deserializer<'de>>(d: D) -> Result<Option<WorkSpec>, D::Error> {
    d.deserialize_option(OptSpecVisitor)
}

struct OptSpecVisitor;

impl<'de> Visitor<'de> for OptSpecVisitor {
    type Value = Option<WorkSpec>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTED_SPEC)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(SpecVisitor).map(Some)
    }
    // Formats without an explicit option marker hand the value straight to the visitor.
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        SpecVisitor.visit_str(v).map(Some)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        SpecVisitor.visit_map(map).map(Some)
    }
}

const EXPECTED_SPEC: &str = "a shell command string or an object {\"shell\": \"cmd\"}, {\"process\": [\"argv0\", ...]} or {\"agent\": \"instructions\"}";

struct SpecVisitor;

impl<'de> Visitor<'de> for SpecVisitor {
    type Value = WorkSpec;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTED_SPEC)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(WorkSpec::Shell(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(WorkSpec::Shell(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        WorkSpec::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}
