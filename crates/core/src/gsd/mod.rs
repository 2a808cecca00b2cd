//! get-shit-done (GSD) `.planning/` trees, read without I/O: from the files of a tree to
//! phases, plans, dependencies and warnings ([`parse_planning`]), and from those to the
//! tasks `plan sync` keeps ([`sync`]) and the files it writes back ([`writeback`]).
//!
//! GSD keeps a project's plan as Markdown files: `ROADMAP.md`, one directory per phase
//! under `phases/` (`04.1-skills-polish/`), one `…-PLAN.md` per plan and a
//! `…-SUMMARY.md` beside it once the plan ran, and archived milestones under
//! `milestones/v1.0-phases/`. The input of [`parse_planning`] is the list of files
//! under `.planning/` as `(relative path, text)` pairs: paths use `/`, a path ending in
//! `/` is a directory (so empty phase directories are seen), and the text is `None` for
//! a file that was not read (too big, not UTF-8, a symlink out of the tree, not
//! Markdown). The application layer's walk (`warden-app`'s `gsd_read`) builds that list
//! from disk; tests build it inline.
//!
//! The rules, each written where it is applied:
//! - phases: every directory under `phases/` (active) and `milestones/<v>-phases/`
//!   (archived), plus `quick/` tasks as one last group; ordered by milestone, then by
//!   GSD's numeric phase order ([`number`]);
//! - plans: GSD's file names (`NN-MM-PLAN.md`, `NN-PLAN.md`, `PLAN.md`,
//!   `NN-GAP-PLAN.md`, `slug-PLAN.md`, `NN-MM-slug-PLAN.md`, the nested
//!   `plans/NN-PLAN-MM-slug.md`); any other file whose name mentions "plan" is reported
//!   in a warning, never dropped silently;
//! - ids: see [`ids`] and [`PlanningTree`] for collisions;
//! - titles: see [`Plan::title`] and [`Phase::title`];
//! - dependencies: see [`Plan::depends_on`];
//! - done-ness: see [`Plan::done`].

// Every input is untrusted text written by agents: nothing here may panic on it, so the
// panicking shortcuts are refused outside tests.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::string_slice,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented
    )
)]

pub mod graph;
pub mod ids;
pub mod number;
pub mod roadmap;
pub mod sync;
pub mod text;
pub mod writeback;

use number::{PhaseNumber, natural_key, parse_phase_number, parse_phase_token};
use roadmap::Roadmap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use text::{FrontMatter, Scan};

/// A GSD `.planning/` tree as Warden needs it.
///
/// Ids are unique across the whole tree (phases, plans and quick tasks share Warden's
/// task namespace). When two names give the same id, the first in tree order keeps it
/// (archived milestones, oldest first, then the active `phases/`, then `quick/`), and a
/// later one is renamed with a [`Warning`] of kind [`WarningKind::IdCollision`]:
/// - from another milestone than the holder, it gets its milestone as a prefix
///   (`v2.0-01-01`; an active phase uses `milestone:` from STATE.md, else `current`).
///   GSD numbers phases on from one milestone to the next, so this only happens after
///   `--reset-phase-numbers`; the archived (older, done) tasks keep the ids they had
///   while active, and new work is told apart;
/// - from the same milestone (two `04-…` directories), it gets `-` and 6 hex digits of
///   a hash of its path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanningTree {
    /// Phases in order: archived milestones (oldest first), active phases, quick tasks.
    pub phases: Vec<Phase>,
    /// Everything that was skipped, guessed or could not be resolved.
    pub warnings: Vec<Warning>,
    /// The current milestone from STATE.md's frontmatter (`milestone: v1.1`), if any.
    pub current_milestone: Option<String>,
}

/// One phase directory (or the group of quick tasks).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// The Warden task id: the directory name lower-cased when it fits, else shortened
    /// (see [`ids`]).
    pub id: String,
    /// The directory, relative to `.planning/` (`phases/04.1-skills-polish`).
    pub dir: String,
    /// The full directory name, kept as written (a title fallback when the id is
    /// shortened).
    pub name: String,
    /// The GSD phase number, `None` for quick tasks and unnumbered directories.
    pub number: Option<PhaseNumber>,
    /// The title: the phase's name in ROADMAP.md (its own milestone's roadmap first),
    /// else the directory name made readable (`Skills polish`).
    pub title: String,
    /// Where the title came from.
    pub title_source: TitleSource,
    /// Active, archived or quick.
    pub kind: PhaseKind,
    /// The milestone of an archived phase (`v1.0` for `milestones/v1.0-phases/`).
    pub milestone: Option<String>,
    /// Its plans, dependencies first, then by wave and plan number.
    pub plans: Vec<Plan>,
    /// Done when every plan is done; [`PhaseStatus::NoPlans`] when it has none.
    pub status: PhaseStatus,
}

/// Where a phase lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseKind {
    /// Under `phases/`.
    Active,
    /// Under `milestones/<v>-phases/`: history. Its plans count as done.
    Archived,
    /// The `quick/` tasks GSD runs outside the roadmap, grouped as one phase `quick`.
    Quick,
}

/// A phase's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseStatus {
    /// No plan yet: neither a leaf to run nor counted as a plan (GSD's "ready to plan").
    NoPlans,
    /// Some plan is not done.
    Pending,
    /// Every plan is done.
    Done,
}

/// One plan file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The Warden task id: the plan's own number as GSD writes it, lower-cased
    /// (`04-02`, `04.1-01`, `1.5-01`, `08-gap`, `27`); a file without the phase number
    /// in front gets it (`08-fix-oauth-warmup`); quick tasks are `quick-<name>`.
    pub id: String,
    /// The PLAN.md, relative to `.planning/`.
    pub file: String,
    /// Its size in bytes, `None` when it was not read.
    pub size: Option<u64>,
    /// The plan part of its name as written (`02`, `GAP`, `fix-oauth-warmup`, empty
    /// for `27-PLAN.md`).
    pub number: String,
    /// The title, from the first of: frontmatter `title`; the first sentence of the
    /// `<objective>` block; the first heading that names the plan (outside code,
    /// comments and XML-ish blocks, not a section name like `## Tasks`); the first
    /// sentence of a `## Objective` section; its line in ROADMAP.md; frontmatter
    /// `plan_name`; else `"{phase title}: plan {number}"`.
    pub title: String,
    /// Where the title came from.
    pub title_source: TitleSource,
    /// `wave` from the frontmatter.
    pub wave: Option<u32>,
    /// The ids this plan depends on, all present in the tree. From the frontmatter's
    /// `depends_on` (see [`Plan::declared_depends_on`]); when it declares none but has
    /// a `wave`, every plan of the previous wave in its phase (the highest wave below
    /// its own), since GSD runs a phase wave by wave. Edges that would close a cycle are
    /// dropped with a warning.
    pub depends_on: Vec<String>,
    /// Each `depends_on` entry as written and what it resolved to: a plan id (`04-01`,
    /// `04.1-01`, a file name or path), a plan number of the same phase (`01`, `3`), or
    /// a phase (`Phase 20`: every plan of phase 20; its own phase: the plans before it).
    /// An empty `resolved` is an entry that could not be resolved (with a warning).
    pub declared_depends_on: Vec<DeclaredDependency>,
    /// Where `depends_on` came from.
    pub dependency_source: DependencySource,
    /// The SUMMARY.md this plan's naming calls for, relative to `.planning/`: the plan's
    /// file name with its last `PLAN` turned into `SUMMARY` (`04-02-SUMMARY.md`,
    /// `08-GAP-SUMMARY.md`, `SUMMARY.md` for `PLAN.md`).
    pub summary: String,
    /// Done when [`Plan::summary`] exists with content (not only whitespace or
    /// frontmatter). Also done: a plan covered by a phase-level summary
    /// (`15-SUMMARY.md` listing it in `plans:`, or `SUMMARY.md` in a one-plan phase),
    /// and every archived plan; both say so in `done_by` and in a warning.
    pub done: bool,
    /// Why it counts as done.
    pub done_by: Option<DoneBy>,
    /// Lower-hex SHA-256 of its own SUMMARY.md, when that file makes it done: the
    /// evidence `plan sync` records when the plan was finished outside Warden.
    pub summary_digest: Option<String>,
    /// It belongs to an archived milestone.
    pub archived: bool,
    /// What an agent needs to run it; only for plans not done.
    pub work: Option<PlanWork>,
    /// The plan says how it is ordered: it has a `wave`, or a `depends_on` key (even an
    /// empty one). Plans that say neither come from GSD's first versions, which ran a
    /// phase's plans one by one in number order.
    pub declares_order: bool,
}

/// A `depends_on` entry and the ids it resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeclaredDependency {
    /// The entry as written.
    pub text: String,
    /// The plan ids it stands for (empty: unresolved).
    pub resolved: Vec<String>,
}

/// The sections of an unfinished plan that a prompt can carry. Each is the text of the
/// XML-ish block (`<objective>`, `<tasks>`, `<verification>`, `<success_criteria>`) or,
/// in older plans, of the Markdown section of that name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanWork {
    /// What the plan accomplishes.
    pub objective: Option<String>,
    /// The tasks.
    pub tasks: Option<String>,
    /// How to verify it.
    pub verification: Option<String>,
    /// When it is complete.
    pub success_criteria: Option<String>,
    /// The whole body (without the frontmatter) when the plan lacks an objective or its
    /// tasks: then the sections above are not the plan, the whole text is.
    pub whole: Option<String>,
}

/// Where a title came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TitleSource {
    /// Frontmatter `title`.
    Frontmatter,
    /// The `<objective>` block.
    Objective,
    /// A Markdown heading of the file.
    Heading,
    /// A `## Objective` / `## Goal` Markdown section.
    ObjectiveSection,
    /// ROADMAP.md (or an archived milestone's roadmap).
    Roadmap,
    /// Frontmatter `plan_name`, made readable.
    PlanName,
    /// The directory name, made readable.
    DirName,
    /// Nothing usable: built from the phase title and plan number.
    Fallback,
}

impl TitleSource {
    /// Whether the title is the author's own words rather than built from a name.
    pub fn is_real(self) -> bool {
        !matches!(self, TitleSource::DirName | TitleSource::Fallback)
    }
}

/// Where a plan's `depends_on` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DependencySource {
    /// The frontmatter's `depends_on`.
    Declared,
    /// The wave rule (see [`Plan::depends_on`]).
    Wave,
    /// Neither: no dependency.
    None,
}

/// Why a plan counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DoneBy {
    /// Its own SUMMARY.md has content.
    Summary,
    /// A phase-level summary covers it.
    PhaseSummary,
    /// It is archived history without a summary of its own.
    Archived,
}

/// Something the reader skipped, guessed or could not resolve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// What kind of problem.
    pub kind: WarningKind,
    /// The file or directory concerned, relative to `.planning/` (empty for the tree).
    pub path: String,
    /// A sentence for a person.
    pub message: String,
}

impl Warning {
    /// A warning about `path`.
    pub fn new(kind: WarningKind, path: impl Into<String>, message: impl Into<String>) -> Self {
        Warning {
            kind,
            path: path.into(),
            message: message.into(),
        }
    }
}

/// The kinds of [`Warning`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningKind {
    /// A file that matters was not read (too big, not UTF-8, a link, …).
    NotRead,
    /// A symlink was not followed.
    Symlink,
    /// Not a regular file or directory (FIFO, socket, device).
    NotRegular,
    /// A walk limit (depth, number of files, bytes) was reached.
    Limit,
    /// An I/O error on one entry.
    Io,
    /// A path in the input that is not relative and clean.
    BadPath,
    /// A file whose name looks like a plan but does not follow GSD's naming.
    NotAPlan,
    /// A plan-like file outside any phase directory.
    OutsidePhase,
    /// A directory under `phases/` without a GSD phase number.
    NoPhaseNumber,
    /// A plan whose number names another phase than its directory.
    PlanNumberMismatch,
    /// A frontmatter that is not valid YAML (read line by line) or never closes.
    BadFrontmatter,
    /// A `depends_on` entry that names nothing in the tree.
    UnresolvedDependency,
    /// A `depends_on` entry that needed interpreting (`Phase 17` inside phase 17).
    DependencyInterpreted,
    /// An edge dropped because it closed a cycle.
    DependencyCycle,
    /// A SUMMARY.md that belongs to no plan.
    SummaryWithoutPlan,
    /// A SUMMARY.md with no content: the plan is not done.
    EmptySummary,
    /// A plan counted done through a phase-level summary.
    DoneByPhaseSummary,
    /// An archived plan without a summary, counted done as history.
    ArchivedWithoutSummary,
    /// Two names gave the same id; one was renamed.
    IdCollision,
    /// A plan the roadmap ticks as done that has no summary: GSD's completion is the
    /// SUMMARY.md, so it is counted open and will run.
    RoadmapSaysDone,
    /// A file holding NUL characters, which no task, prompt or store can carry: read
    /// with each replaced by U+FFFD.
    NulReplaced,
    /// A file that is not UTF-8 throughout: read with each bad sequence replaced by
    /// U+FFFD.
    NotUtf8Replaced,
}

/// Where a file sits in the tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Scope {
    /// `milestones/<v>-phases/`.
    Archived(String),
    /// `phases/`.
    Active,
    /// `quick/`.
    Quick,
}

impl Scope {
    fn order_key(&self) -> (u8, Vec<number::NaturalPart>) {
        match self {
            Scope::Archived(v) => (0, natural_key(v)),
            Scope::Active => (1, Vec::new()),
            Scope::Quick => (2, Vec::new()),
        }
    }
}

/// A recognised plan file name.
#[derive(Debug, Clone)]
struct PlanName {
    /// The phase token in front of the name (`04.1` in `04.1-01-PLAN.md`).
    phase_token: Option<PhaseNumber>,
    /// What follows the phase token (`01`, `GAP`), or the whole stem without one.
    part: String,
    /// The first `-` token of `part` as a number.
    part_num: Option<u64>,
    /// The stem (file name without `-PLAN.md`), for quick ids.
    stem: String,
    /// The file name of the summary this plan calls for.
    summary_name: String,
}

/// Why a plan-like file name is not a plan, or `Ok` with the parsed name.
fn plan_name(file: &str) -> Result<PlanName, &'static str> {
    if file.ends_with("-PLAN-OUTLINE.md") || file.ends_with(".pre-bounce.md") {
        return Err("a GSD planning draft (outline or pre-bounce copy), not a plan");
    }
    let summary_name = match file.rfind("PLAN") {
        Some(i) => format!(
            "{}SUMMARY{}",
            file.get(..i).unwrap_or(""),
            file.get(i + 4..).unwrap_or("")
        ),
        None => return Err("does not follow GSD's plan naming"),
    };
    let part_num = |part: &str| -> Option<u64> {
        let first = part.split('-').next().unwrap_or("");
        if first.is_empty() || first.len() > 18 || !first.bytes().all(|b| b.is_ascii_digit()) {
            None
        } else {
            first.parse().ok()
        }
    };
    let stem = if file == "PLAN.md" {
        Some(String::new())
    } else {
        file.strip_suffix("-PLAN.md").map(str::to_owned)
    };
    if let Some(stem) = stem {
        if stem.is_empty() && file != "PLAN.md" {
            return Err("does not follow GSD's plan naming");
        }
        let (phase_token, part) = match parse_phase_token(&stem) {
            Some((n, rest)) => (Some(n), rest.to_owned()),
            None => (None, stem.clone()),
        };
        return Ok(PlanName {
            part_num: part_num(&part),
            phase_token,
            part,
            stem,
            summary_name,
        });
    }
    // Nested or extended layout: `PLAN-01-setup.md`, `5-PLAN-01-setup.md`.
    let (prefix, after) = if let Some(a) = file.strip_prefix("PLAN-") {
        (None, a)
    } else if let Some(i) = file.find("-PLAN-") {
        (file.get(..i), file.get(i + 6..).unwrap_or(""))
    } else {
        return Err("does not follow GSD's plan naming");
    };
    let digits_len = after.bytes().take_while(u8::is_ascii_digit).count();
    let rest = after.get(digits_len..).unwrap_or("");
    if digits_len == 0 || !(rest == ".md" || (rest.starts_with('-') && rest.ends_with(".md"))) {
        return Err("does not follow GSD's plan naming");
    }
    let num = after.get(..digits_len).unwrap_or("");
    let phase_token = match prefix {
        Some(p) => match parse_phase_token(p) {
            Some((n, "")) => Some(n),
            _ => return Err("does not follow GSD's plan naming"),
        },
        None => None,
    };
    let stem = match prefix {
        Some(p) => format!("{p}-{num}"),
        None => num.to_owned(),
    };
    Ok(PlanName {
        part_num: part_num(num),
        phase_token,
        part: num.to_owned(),
        stem,
        summary_name,
    })
}

/// A file name that mentions a plan (GSD's own "plan-shaped" test, minus the word
/// "planning"): such a file is either imported or named in a warning.
fn looks_like_plan(file: &str) -> bool {
    let lower = file.to_lowercase();
    lower.ends_with(".md") && lower.contains("plan") && !lower.contains("planning")
}

/// A summary file name (GSD: `*-SUMMARY.md`, `SUMMARY.md`, nested `SUMMARY-NN…`).
fn is_summary_name(file: &str) -> bool {
    file == "SUMMARY.md"
        || file.ends_with("-SUMMARY.md")
        || file.starts_with("SUMMARY-")
        || file.contains("-SUMMARY-")
}

/// A phase directory being assembled.
#[derive(Debug)]
struct PhaseW {
    scope: Scope,
    dir: String,
    name: String,
    number: Option<PhaseNumber>,
    slug: String,
    /// Files directly inside (and in `plans/`): (name within the phase dir, full path).
    files: Vec<(String, String)>,
    plans: Vec<usize>,
    id: String,
    title: String,
    title_source: TitleSource,
}

/// A plan being assembled.
#[derive(Debug)]
struct PlanW<'a> {
    phase: usize,
    file: String,
    /// Path of the plan inside its phase dir (`01-01-PLAN.md`, `plans/PLAN-01.md`).
    local: String,
    name: PlanName,
    text: Option<&'a str>,
    front: FrontMatter,
    scan: Scan,
    wave: Option<u32>,
    declared: Vec<String>,
    resolved: Vec<Vec<usize>>,
    deps: Vec<usize>,
    dependency_source: DependencySource,
    base_id: String,
    id: String,
    done: bool,
    done_by: Option<DoneBy>,
    summary_digest: Option<String>,
    summary: String,
}

impl PlanW<'_> {
    /// The order of plans inside a phase before dependencies are applied: wave, then
    /// plan number, then name.
    fn sort_key(&self) -> (u32, u64, Vec<number::NaturalPart>) {
        (
            self.wave.unwrap_or(0),
            self.name.part_num.unwrap_or(u64::MAX),
            natural_key(&self.local),
        )
    }
}

/// The most dependencies one plan keeps. Real plans have a handful; the cap keeps a
/// hostile tree (`Phase 20` on ten thousand plans) from growing the output quadratically.
const MAX_DEPENDENCIES: usize = 256;

/// The most `depends_on` entries read from one plan, for the same reason.
const MAX_DECLARED: usize = 256;

/// Reads a tree: see the module docs for the input and [`PlanningTree`] for the output.
pub fn parse_planning(files: &[(String, Option<String>)]) -> PlanningTree {
    let mut warnings: Vec<Warning> = Vec::new();

    // 1. Normalise and index the input.
    let mut texts: BTreeMap<String, Option<&str>> = BTreeMap::new();
    let mut dirs: HashSet<String> = HashSet::new();
    for (raw, text) in files {
        let Some((path, is_dir)) = clean_path(raw) else {
            warnings.push(Warning::new(
                WarningKind::BadPath,
                raw.clone(),
                "path is not relative to .planning/ (absolute or with `..`); ignored",
            ));
            continue;
        };
        if is_dir {
            dirs.insert(path);
        } else {
            texts.entry(path).or_insert(text.as_deref());
        }
    }

    // 2. Roadmaps and STATE.md.
    let mut roadmaps: Vec<(Scope, Roadmap)> = Vec::new();
    let mut current_milestone = None;
    for (path, text) in &texts {
        let comps: Vec<&str> = path.split('/').collect();
        let roadmap_scope = match comps.as_slice() {
            ["ROADMAP.md"] => Some(Scope::Active),
            ["milestones", f] => f
                .strip_suffix("-ROADMAP.md")
                .map(|v| Scope::Archived(v.to_owned())),
            _ => None,
        };
        if let Some(scope) = roadmap_scope {
            match text {
                Some(t) => roadmaps.push((scope, roadmap::parse(t))),
                None => warnings.push(Warning::new(
                    WarningKind::NotRead,
                    path.clone(),
                    "roadmap not read; phase titles come from directory names",
                )),
            }
        }
        if comps.as_slice() == ["STATE.md"]
            && let Some(t) = text
            && let Some(yaml) = text::split_frontmatter(t).yaml
        {
            current_milestone = state_milestone(yaml);
        }
    }

    // 3. Phase directories and the files in them.
    let mut phase_index: BTreeMap<(Scope, String), usize> = BTreeMap::new();
    let mut phases: Vec<PhaseW> = Vec::new();
    let mut ensure_phase =
        |scope: Scope, dir_path: String, name: &str, phases: &mut Vec<PhaseW>| -> usize {
            let key = (scope.clone(), name.to_owned());
            if let Some(i) = phase_index.get(&key) {
                return *i;
            }
            let (number, slug) = if scope == Scope::Quick {
                (None, String::new())
            } else {
                match parse_phase_token(name) {
                    Some((n, rest)) => (Some(n), rest.to_owned()),
                    None => (None, name.to_owned()),
                }
            };
            phases.push(PhaseW {
                scope,
                dir: dir_path,
                name: name.to_owned(),
                number,
                slug,
                files: Vec::new(),
                plans: Vec::new(),
                id: String::new(),
                title: String::new(),
                title_source: TitleSource::Fallback,
            });
            let i = phases.len() - 1;
            phase_index.insert(key, i);
            i
        };
    let all_paths: Vec<(String, bool)> = texts
        .keys()
        .map(|p| (p.clone(), false))
        .chain(dirs.iter().map(|d| (d.clone(), true)))
        .collect();
    for (path, is_dir) in &all_paths {
        let comps: Vec<&str> = path.split('/').collect();
        let (scope, base_len) = match comps.as_slice() {
            ["phases", _, ..] => (Scope::Active, 1),
            ["milestones", m, _, ..] if m.ends_with("-phases") => (
                Scope::Archived(m.strip_suffix("-phases").unwrap_or(m).to_owned()),
                2,
            ),
            ["quick", ..] => (Scope::Quick, 1),
            _ => {
                let file = comps.last().copied().unwrap_or("");
                if !is_dir && looks_like_plan(file) {
                    warnings.push(Warning::new(
                        WarningKind::OutsidePhase,
                        path.clone(),
                        "looks like a plan but is not inside a phase directory (phases/NN-name/, milestones/vX-phases/NN-name/ or quick/NAME/); not imported",
                    ));
                }
                continue;
            }
        };
        let parent = comps.get(..base_len).unwrap_or(&[]).join("/");
        let rest = comps.get(base_len..).unwrap_or(&[]);
        if scope == Scope::Quick {
            // quick/<task dir>/<files>: the whole quick/ folder is one group.
            let pi = ensure_phase(Scope::Quick, "quick".to_owned(), "quick", &mut phases);
            if let [task_dir, file] = rest
                && !is_dir
            {
                if let Some(p) = phases.get_mut(pi) {
                    p.files.push((format!("{task_dir}/{file}"), path.clone()));
                }
            } else if !is_dir && rest.last().is_some_and(|f| looks_like_plan(f)) {
                warnings.push(Warning::new(
                    WarningKind::OutsidePhase,
                    path.clone(),
                    "looks like a plan but is not in a quick task directory (quick/NAME/NAME-PLAN.md); not imported",
                ));
            }
            continue;
        }
        let Some(dir_name) = rest.first().copied() else {
            continue;
        };
        let inner = rest.get(1..).unwrap_or(&[]);
        if inner.is_empty() && !is_dir {
            // A file directly in phases/ (like `phase-8-plan.md`).
            if looks_like_plan(dir_name) {
                warnings.push(Warning::new(
                    WarningKind::OutsidePhase,
                    path.clone(),
                    "looks like a plan but sits directly in the phases folder, not in a phase directory; not imported",
                ));
            }
            continue;
        }
        let pi = ensure_phase(
            scope.clone(),
            format!("{parent}/{dir_name}"),
            dir_name,
            &mut phases,
        );
        match inner {
            [] => {}
            [file] if !is_dir => {
                if let Some(p) = phases.get_mut(pi) {
                    p.files.push(((*file).to_owned(), path.clone()));
                }
            }
            ["plans", file] if !is_dir => {
                if let Some(p) = phases.get_mut(pi) {
                    p.files.push((format!("plans/{file}"), path.clone()));
                }
            }
            _ => {
                let file = inner.last().copied().unwrap_or("");
                if !is_dir && looks_like_plan(file) {
                    warnings.push(Warning::new(
                        WarningKind::OutsidePhase,
                        path.clone(),
                        "looks like a plan but is nested too deep inside its phase directory (only the directory itself and plans/ are read); not imported",
                    ));
                }
            }
        }
    }

    // Canonical phase order: milestone, then number (unnumbered last, by name).
    let mut order: Vec<usize> = (0..phases.len()).collect();
    order.sort_by(|&a, &b| {
        let (Some(pa), Some(pb)) = (phases.get(a), phases.get(b)) else {
            return std::cmp::Ordering::Equal;
        };
        pa.scope
            .order_key()
            .cmp(&pb.scope.order_key())
            .then_with(|| match (&pa.number, &pb.number) {
                (Some(x), Some(y)) => x.cmp(y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => natural_key(&pa.name).cmp(&natural_key(&pb.name)),
            })
            .then_with(|| natural_key(&pa.name).cmp(&natural_key(&pb.name)))
    });
    let mut phases: Vec<PhaseW> = {
        let mut slots: Vec<Option<PhaseW>> = phases.into_iter().map(Some).collect();
        order
            .iter()
            .filter_map(|&i| slots.get_mut(i).and_then(Option::take))
            .collect()
    };

    // 4. Plans.
    let mut plans: Vec<PlanW> = Vec::new();
    for (pi, phase) in phases.iter_mut().enumerate() {
        if phase.number.is_none() && phase.scope != Scope::Quick {
            let has_plans = phase
                .files
                .iter()
                .any(|(local, _)| plan_name(local.rsplit('/').next().unwrap_or("")).is_ok());
            warnings.push(Warning::new(
                WarningKind::NoPhaseNumber,
                phase.dir.clone(),
                if has_plans {
                    "phase directory has no GSD phase number (NN-name); its plans are imported and the phase is ordered last"
                } else {
                    "directory under phases has no GSD phase number (NN-name)"
                },
            ));
        }
        phase.files.sort_by_key(|(local, _)| natural_key(local));
        for (local, path) in &phase.files {
            let file = local.rsplit('/').next().unwrap_or("");
            let in_plans_dir = local.starts_with("plans/");
            let quick = phase.scope == Scope::Quick;
            let recognised = match plan_name(file) {
                // In `plans/`, GSD's nested layout names files `PLAN-NN…`/`NN-PLAN-NN…`.
                Ok(_) if in_plans_dir && !file.contains("PLAN-") => {
                    Err("in plans/, GSD names plans PLAN-NN-slug.md or NN-PLAN-NN-slug.md")
                }
                other => other,
            };
            match recognised {
                Ok(name) => {
                    let text = texts.get(path).copied().flatten();
                    if text.is_none() {
                        warnings.push(Warning::new(
                            WarningKind::NotRead,
                            path.clone(),
                            "plan not read (see the read warnings); imported with a fallback title and no dependencies",
                        ));
                    }
                    let dir_of_file = path.rsplit_once('/').map_or("", |(d, _)| d);
                    let summary = format!("{dir_of_file}/{}", name.summary_name);
                    if !quick
                        && let (Some(tok), Some(dir_num)) = (&name.phase_token, &phase.number)
                        && !tok.same_phase(dir_num)
                    {
                        warnings.push(Warning::new(
                            WarningKind::PlanNumberMismatch,
                            path.clone(),
                            format!(
                                "plan number {} does not match its phase directory {}; imported in that directory",
                                tok.text, phase.name
                            ),
                        ));
                    }
                    let base_id = if quick {
                        ids::id_from_name(&format!("quick-{}", name.stem))
                    } else {
                        ids::id_from_name(&plan_base_id(&name, phase))
                    };
                    plans.push(PlanW {
                        phase: pi,
                        file: path.clone(),
                        local: local.clone(),
                        name,
                        text,
                        front: FrontMatter::default(),
                        scan: Scan::default(),
                        wave: None,
                        declared: Vec::new(),
                        resolved: Vec::new(),
                        deps: Vec::new(),
                        dependency_source: DependencySource::None,
                        base_id,
                        id: String::new(),
                        done: false,
                        done_by: None,
                        summary_digest: None,
                        summary,
                    });
                    phase.plans.push(plans.len() - 1);
                }
                Err(why) => {
                    if looks_like_plan(file) {
                        let why = if file.eq_ignore_ascii_case("PLAN-INDEX.md") {
                            "a plan index (it lists the phase's plans), not a plan"
                        } else {
                            why
                        };
                        warnings.push(Warning::new(
                            WarningKind::NotAPlan,
                            path.clone(),
                            format!("{file}: {why}; not imported"),
                        ));
                    }
                }
            }
        }
    }

    // 5. Read each plan's text: frontmatter, sections, wave, declared dependencies.
    for plan in plans.iter_mut() {
        let Some(text) = plan.text else { continue };
        let split = text::split_frontmatter(text);
        if split.unclosed {
            warnings.push(Warning::new(
                WarningKind::BadFrontmatter,
                plan.file.clone(),
                "frontmatter opens with --- but never closes; the file is read as frontmatter only",
            ));
        }
        if let Some(yaml) = split.yaml {
            let parsed = text::parse_frontmatter(yaml);
            if let Some(err) = parsed.lenient {
                warnings.push(Warning::new(
                    WarningKind::BadFrontmatter,
                    plan.file.clone(),
                    format!(
                        "frontmatter is not valid YAML ({err}); its keys were read line by line"
                    ),
                ));
            }
            plan.front = parsed.front;
        }
        plan.scan = text::scan(split.body);
        plan.wave = plan
            .front
            .wave
            .as_ref()
            .and_then(|w| w.as_text())
            .and_then(|w| w.parse::<u32>().ok());
        let deps = plan
            .front
            .depends_on
            .as_ref()
            .or(plan.front.depends_on_dashed.as_ref());
        plan.declared = deps
            .map(text::Loose::items)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| {
                !matches!(
                    d.to_ascii_lowercase().as_str(),
                    "none" | "nothing" | "n/a" | "-" | "[]"
                )
            })
            .collect();
        if plan.declared.len() > MAX_DECLARED {
            plan.declared.truncate(MAX_DECLARED);
            warnings.push(Warning::new(
                WarningKind::Limit,
                plan.file.clone(),
                format!("more than {MAX_DECLARED} depends_on entries; the rest are ignored"),
            ));
        }
    }

    // Plans within each phase in their preliminary order (so resolution of "the plans
    // before me" and the cycle search see a stable order).
    for phase in phases.iter_mut() {
        phase
            .plans
            .sort_by_key(|&i| plans.get(i).map(PlanW::sort_key));
    }

    let mut ix = Index::new(&phases, &plans);

    // 6. Done-ness.
    for (pi, phase) in phases.iter().enumerate() {
        let expected: HashSet<String> = phase
            .plans
            .iter()
            .filter_map(|&i| plans.get(i))
            .map(|p| p.summary.clone())
            .collect();
        let mut phase_summaries: Vec<(&str, &str)> = Vec::new();
        for (local, path) in &phase.files {
            let file = local.rsplit('/').next().unwrap_or("");
            if !is_summary_name(file) || expected.contains(path) {
                continue;
            }
            let phase_level = phase.scope != Scope::Quick
                && !local.contains('/')
                && (file == "SUMMARY.md"
                    || file
                        .strip_suffix("-SUMMARY.md")
                        .and_then(parse_phase_number)
                        .zip(phase.number.as_ref())
                        .is_some_and(|(a, b)| a.same_phase(b)));
            if phase_level && !phase.plans.is_empty() {
                match texts.get(path).copied().flatten() {
                    Some(t) if text::has_content(t) => phase_summaries.push((path, t)),
                    _ => {}
                }
            } else {
                warnings.push(Warning::new(
                    WarningKind::SummaryWithoutPlan,
                    path.clone(),
                    if phase_level {
                        "phase-level summary in a phase with no plan file; nothing to mark done"
                    } else {
                        "summary without a matching plan file (the plan was deleted or never written); ignored"
                    },
                ));
            }
        }
        let plan_ids: Vec<usize> = phase.plans.clone();
        for &i in &plan_ids {
            let Some(plan) = plans.get_mut(i) else {
                continue;
            };
            match texts.get(&plan.summary) {
                Some(Some(t)) if text::has_content(t) => {
                    plan.done = true;
                    plan.done_by = Some(DoneBy::Summary);
                    plan.summary_digest = Some(crate::artifact::sha256_hex(t.as_bytes()));
                }
                Some(Some(_)) => warnings.push(Warning::new(
                    WarningKind::EmptySummary,
                    plan.summary.clone(),
                    "summary is empty (or frontmatter only); the plan is not done",
                )),
                Some(None) => warnings.push(Warning::new(
                    WarningKind::NotRead,
                    plan.summary.clone(),
                    "summary exists but was not read; the plan is counted not done",
                )),
                None => {}
            }
        }
        // Phase-level summaries: the plans they list, or the only plan.
        for (path, t) in phase_summaries {
            let listed: Vec<String> = text::split_frontmatter(t)
                .yaml
                .map(|y| {
                    let f = text::parse_frontmatter(y).front;
                    f.plans.or(f.plan).map(|p| p.items()).unwrap_or_default()
                })
                .unwrap_or_default();
            let mut covered: Vec<usize> = Vec::new();
            for item in &listed {
                covered.extend(resolve_in_phase(item, pi, &phases, &ix));
            }
            if listed.is_empty() && plan_ids.len() == 1 {
                covered.extend(plan_ids.iter().copied());
            }
            let mut marked = Vec::new();
            for i in covered {
                if let Some(plan) = plans.get_mut(i)
                    && !plan.done
                {
                    plan.done = true;
                    plan.done_by = Some(DoneBy::PhaseSummary);
                    marked.push(plan.name.stem.clone());
                }
            }
            warnings.push(Warning::new(
                if marked.is_empty() {
                    WarningKind::SummaryWithoutPlan
                } else {
                    WarningKind::DoneByPhaseSummary
                },
                path.to_owned(),
                if marked.is_empty() {
                    "phase-level summary that names none of the phase's unfinished plans; ignored".to_owned()
                } else {
                    format!(
                        "phase-level summary counts as the summary of plan(s) {} (they have none of their own)",
                        marked.join(", ")
                    )
                },
            ));
        }
        if let Scope::Archived(_) = phase.scope {
            for &i in &plan_ids {
                if let Some(plan) = plans.get_mut(i)
                    && !plan.done
                {
                    plan.done = true;
                    plan.done_by = Some(DoneBy::Archived);
                    warnings.push(Warning::new(
                        WarningKind::ArchivedWithoutSummary,
                        plan.file.clone(),
                        "archived plan without a summary; counted done as milestone history",
                    ));
                }
            }
        }
        // A roadmap that ticks a plan without a summary: said aloud, as the plan will
        // run (the seed's rule: the SUMMARY.md is what makes a plan done).
        for &i in &plan_ids {
            let Some(plan) = plans.get(i) else { continue };
            let Some(n) = plan.name.phase_token.as_ref().or(phase.number.as_ref()) else {
                continue;
            };
            let part = plan.name.part.to_ascii_lowercase();
            if !plan.done
                && phase.scope == Scope::Active
                && roadmaps
                    .iter()
                    .any(|(s, r)| *s == Scope::Active && r.plan_checked(n, &part))
            {
                warnings.push(Warning::new(
                    WarningKind::RoadmapSaysDone,
                    plan.file.clone(),
                    format!(
                        "the roadmap ticks this plan as done, but it has no summary ({}): it is counted open and `warden run` will run it; write its summary if it is finished",
                        plan.summary
                    ),
                ));
            }
        }
    }

    // 7. Ids, unique across the tree.
    let active_label = current_milestone
        .as_deref()
        .map(ids::sanitize)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "current".to_owned());
    let mut taken: HashMap<String, (Scope, String)> = HashMap::new();
    for phase in phases.iter_mut() {
        let label = match &phase.scope {
            Scope::Archived(v) => ids::sanitize(v),
            Scope::Active => active_label.clone(),
            Scope::Quick => "quick".to_owned(),
        };
        let base = if phase.scope == Scope::Quick {
            "quick".to_owned()
        } else {
            ids::id_from_name(&phase.name)
        };
        phase.id = claim(
            &mut taken,
            &mut warnings,
            base,
            &phase.scope,
            &label,
            &phase.dir,
        );
        for &i in &phase.plans {
            if let Some(plan) = plans.get_mut(i) {
                plan.id = claim(
                    &mut taken,
                    &mut warnings,
                    plan.base_id.clone(),
                    &phase.scope,
                    &label,
                    &plan.file,
                );
            }
        }
    }

    for (i, plan) in plans.iter().enumerate() {
        ix.by_id.insert(plan.id.clone(), i);
    }

    // 8. Dependencies.
    let mut interpreted: Vec<Warning> = Vec::new();
    for i in 0..plans.len() {
        let Some(plan) = plans.get(i) else { continue };
        let mut resolved_all = Vec::new();
        for entry in &plan.declared {
            match resolve(entry, i, &phases, &plans, &ix) {
                Ok((targets, note)) => {
                    let mut targets: Vec<usize> = targets.into_iter().filter(|&t| t != i).collect();
                    if targets.len() > MAX_DEPENDENCIES {
                        targets.truncate(MAX_DEPENDENCIES);
                        warnings.push(Warning::new(
                            WarningKind::Limit,
                            plan.file.clone(),
                            format!(
                                "depends_on entry {entry:?} names more than {MAX_DEPENDENCIES} plans; only the first are kept"
                            ),
                        ));
                    }
                    if targets.is_empty() {
                        warnings.push(Warning::new(
                            WarningKind::UnresolvedDependency,
                            plan.file.clone(),
                            format!(
                                "depends_on entry {entry:?} names only this plan itself; dropped"
                            ),
                        ));
                    } else if let Some(note) = note {
                        interpreted.push(Warning::new(
                            WarningKind::DependencyInterpreted,
                            plan.file.clone(),
                            format!(
                                "depends_on entry {entry:?} {note}: {}",
                                shown_ids(&targets, &plans)
                            ),
                        ));
                    }
                    resolved_all.push(targets);
                }
                Err(why) => {
                    warnings.push(Warning::new(
                        WarningKind::UnresolvedDependency,
                        plan.file.clone(),
                        format!("depends_on entry {entry:?} {why}; dropped"),
                    ));
                    resolved_all.push(Vec::new());
                }
            }
        }
        if let Some(plan) = plans.get_mut(i) {
            plan.resolved = resolved_all;
        }
    }
    warnings.extend(interpreted);
    // Declared edges, or the wave rule.
    for phase in &phases {
        // wave → its plans, for "every plan of the previous wave".
        let mut by_wave: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for &j in &phase.plans {
            if let Some(w) = plans.get(j).and_then(|p| p.wave) {
                by_wave.entry(w).or_default().push(j);
            }
        }
        for &i in &phase.plans {
            let Some(plan) = plans.get(i) else { continue };
            let (mut deps, source) = if !plan.declared.is_empty() {
                let mut seen = HashSet::new();
                let d: Vec<usize> = plan
                    .resolved
                    .iter()
                    .flatten()
                    .copied()
                    .filter(|t| seen.insert(*t))
                    .collect();
                (d, DependencySource::Declared)
            } else if let Some(w) = plan.wave
                && let Some((_, prev)) = by_wave.range(..w).next_back()
            {
                (prev.clone(), DependencySource::Wave)
            } else {
                (Vec::new(), DependencySource::None)
            };
            if deps.len() > MAX_DEPENDENCIES {
                deps.truncate(MAX_DEPENDENCIES);
                warnings.push(Warning::new(
                    WarningKind::Limit,
                    plan.file.clone(),
                    format!("more than {MAX_DEPENDENCIES} dependencies; only the first are kept"),
                ));
            }
            if let Some(plan) = plans.get_mut(i) {
                plan.deps = deps;
                plan.dependency_source = source;
            }
        }
    }
    // Cycles: search in tree order (phases in order, plans in their order).
    let tree_order: Vec<usize> = phases
        .iter()
        .flat_map(|p| p.plans.iter().copied())
        .collect();
    let pos: HashMap<usize, usize> = tree_order
        .iter()
        .enumerate()
        .map(|(k, &i)| (i, k))
        .collect();
    let graph: Vec<Vec<usize>> = tree_order
        .iter()
        .map(|&i| {
            plans
                .get(i)
                .map(|p| p.deps.iter().filter_map(|d| pos.get(d).copied()).collect())
                .unwrap_or_default()
        })
        .collect();
    for (from, to) in graph::cycle_edges(tree_order.len(), &graph) {
        let (Some(&fi), Some(&ti)) = (tree_order.get(from), tree_order.get(to)) else {
            continue;
        };
        let to_id = plans.get(ti).map(|p| p.id.clone()).unwrap_or_default();
        if let Some(p) = plans.get_mut(fi) {
            p.deps.retain(|&d| d != ti);
            for r in p.resolved.iter_mut() {
                r.retain(|&d| d != ti);
            }
            warnings.push(Warning::new(
                WarningKind::DependencyCycle,
                p.file.clone(),
                format!(
                    "dependency of {} on {to_id} closes a cycle; that edge is dropped",
                    p.id
                ),
            ));
        }
    }

    // 9. Titles.
    for phase in phases.iter_mut() {
        let (title, source) = phase_title(phase, &roadmaps);
        phase.title = title;
        phase.title_source = source;
    }
    let mut out_phases = Vec::with_capacity(phases.len());
    let all_deps: Vec<Vec<usize>> = plans.iter().map(|p| p.deps.clone()).collect();
    for phase in &phases {
        if phase.scope == Scope::Quick && phase.plans.is_empty() {
            continue; // `quick/` without a quick task: nothing to show.
        }
        let key = |i: usize| plans.get(i).map(PlanW::sort_key);
        let ordered = graph::topo_order(&phase.plans, &all_deps, key);
        let mut out_plans = Vec::with_capacity(ordered.len());
        for i in ordered {
            let Some(plan) = plans.get(i) else { continue };
            out_plans.push(build_plan(plan, phase, &plans, &roadmaps));
        }
        let status = if out_plans.is_empty() {
            PhaseStatus::NoPlans
        } else if out_plans.iter().all(|p| p.done) {
            PhaseStatus::Done
        } else {
            PhaseStatus::Pending
        };
        out_phases.push(Phase {
            id: phase.id.clone(),
            dir: phase.dir.clone(),
            name: phase.name.clone(),
            number: phase.number.clone(),
            title: phase.title.clone(),
            title_source: phase.title_source,
            kind: match phase.scope {
                Scope::Archived(_) => PhaseKind::Archived,
                Scope::Active => PhaseKind::Active,
                Scope::Quick => PhaseKind::Quick,
            },
            milestone: match &phase.scope {
                Scope::Archived(v) => Some(v.clone()),
                _ => None,
            },
            plans: out_plans,
            status,
        });
    }

    PlanningTree {
        phases: out_phases,
        warnings,
        current_milestone,
    }
}

/// `raw` as a clean relative path, and whether it names a directory (ends in `/`).
/// Refuses absolute paths and `..`, which cannot come from a walk of `.planning/`.
fn clean_path(raw: &str) -> Option<(String, bool)> {
    let raw = raw.replace('\\', "/");
    let is_dir = raw.ends_with('/');
    if raw.starts_with('/') {
        return None;
    }
    let mut comps = Vec::new();
    for c in raw.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => comps.push(c),
        }
    }
    if comps.is_empty() {
        return None;
    }
    Some((comps.join("/"), is_dir))
}

/// `milestone:` from STATE.md's frontmatter.
fn state_milestone(yaml: &str) -> Option<String> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct State {
        milestone: Option<text::Loose>,
    }
    let parsed: Option<State> = serde_saphyr::from_str(yaml).ok().flatten();
    parsed?
        .milestone?
        .as_text()
        .map(str::to_owned)
        .filter(|s| s.len() <= 32)
}

/// The id a plan's name gives before uniqueness (see [`Plan::id`]).
fn plan_base_id(name: &PlanName, phase: &PhaseW) -> String {
    let first = name.part.split('-').next().unwrap_or("");
    let number_text = name
        .phase_token
        .as_ref()
        .or(phase.number.as_ref())
        .map(|n| n.text.clone())
        .unwrap_or_else(|| phase.name.clone());
    match (&name.phase_token, name.part.as_str()) {
        (Some(tok), "") => tok.text.clone(),
        (Some(tok), _) if name.part_num.is_some() => format!("{}-{first}", tok.text),
        (Some(tok), part) => format!("{}-{part}", tok.text),
        (None, "") => number_text,
        (None, _) if name.part_num.is_some() => format!("{number_text}-{first}"),
        (None, part) => format!("{number_text}-{part}"),
    }
}

/// Takes `base` if free, else renames as [`PlanningTree`] describes, with a warning.
fn claim(
    taken: &mut HashMap<String, (Scope, String)>,
    warnings: &mut Vec<Warning>,
    base: String,
    scope: &Scope,
    label: &str,
    path: &str,
) -> String {
    let Some((holder_scope, holder_path)) = taken.get(&base).cloned() else {
        taken.insert(base.clone(), (scope.clone(), path.to_owned()));
        return base;
    };
    let mut candidates = Vec::new();
    if &holder_scope != scope {
        candidates.push(ids::fit(&format!("{label}-{base}")));
    }
    candidates.push(ids::fit(&format!("{base}-{}", ids::short_hash(path, 6))));
    candidates.push(ids::fit(&format!("{base}-{}", ids::short_hash(path, 12))));
    let chosen = candidates
        .into_iter()
        .find(|c| !taken.contains_key(c))
        .unwrap_or_else(|| {
            // Only reachable with adversarial names; a counter always ends it.
            let mut n = 2u64;
            loop {
                let c = ids::fit(&format!("{base}-{}-{n}", ids::short_hash(path, 6)));
                if !taken.contains_key(&c) {
                    break c;
                }
                n += 1;
            }
        });
    warnings.push(Warning::new(
        WarningKind::IdCollision,
        path.to_owned(),
        format!("id {base:?} is already {holder_path}'s; this one is {chosen:?}"),
    ));
    taken.insert(chosen.clone(), (scope.clone(), path.to_owned()));
    chosen
}

/// The ids of plan indices.
fn ids_of(v: &[usize], plans: &[PlanW]) -> Vec<String> {
    v.iter()
        .filter_map(|&i| plans.get(i).map(|p| p.id.clone()))
        .collect()
}

/// Lookups built once so that resolving costs the same per entry however big the
/// tree (a hostile tree must not turn resolution quadratic).
#[derive(Debug, Default)]
struct Index {
    /// Phases by the integer part of their number.
    phases_by_int: HashMap<u64, Vec<usize>>,
    /// Per phase: plan part key (see [`part_keys`]) → plans.
    parts: Vec<HashMap<String, Vec<usize>>>,
    /// Per plan: its position in its phase's preliminary order.
    pos: HashMap<usize, usize>,
    /// Plan id → plan (filled once ids are known).
    by_id: HashMap<String, usize>,
    /// Lower-cased file stem → the first plan with it.
    by_stem: HashMap<String, usize>,
}

/// The keys under which a plan part is found: itself lower-cased, and `#N` for its
/// leading number, so `01`, `1` and `01-auth-hardening` all find plan `01`.
fn part_keys(part: &str) -> Vec<String> {
    let mut keys = vec![part.to_lowercase()];
    let first = part.split('-').next().unwrap_or("");
    if !first.is_empty()
        && first.len() <= 18
        && first.bytes().all(|b| b.is_ascii_digit())
        && let Ok(n) = first.parse::<u64>()
    {
        keys.push(format!("#{n}"));
    }
    keys
}

impl Index {
    fn new(phases: &[PhaseW], plans: &[PlanW]) -> Index {
        let mut ix = Index::default();
        for (pi, phase) in phases.iter().enumerate() {
            if let Some(n) = &phase.number {
                ix.phases_by_int.entry(n.integer).or_default().push(pi);
            }
            let mut parts: HashMap<String, Vec<usize>> = HashMap::new();
            for (k, &i) in phase.plans.iter().enumerate() {
                ix.pos.insert(i, k);
                let Some(plan) = plans.get(i) else { continue };
                let mut keys = vec![plan.name.part.to_lowercase()];
                if let Some(n) = plan.name.part_num {
                    keys.push(format!("#{n}"));
                }
                for key in keys {
                    parts.entry(key).or_default().push(i);
                }
                ix.by_stem.entry(plan.name.stem.to_lowercase()).or_insert(i);
            }
            ix.parts.push(parts);
        }
        ix
    }

    /// Plans of phase `pi` whose part matches `part` (exact first, then by number).
    fn in_phase(&self, pi: usize, part: &str) -> Vec<usize> {
        let Some(map) = self.parts.get(pi) else {
            return Vec::new();
        };
        for key in part_keys(part) {
            if let Some(v) = map.get(&key) {
                return v.clone();
            }
        }
        Vec::new()
    }
}

/// The ids of plan indices for a message: the first ten, then how many more.
fn shown_ids(v: &[usize], plans: &[PlanW]) -> String {
    let ids = ids_of(v.get(..10).unwrap_or(v), plans).join(", ");
    match v.len().saturating_sub(10) {
        0 => ids,
        more => format!("{ids} and {more} more"),
    }
}

/// Plans of phase `pi` named by `item` (a plan id of that phase or a plan number).
fn resolve_in_phase(item: &str, pi: usize, phases: &[PhaseW], ix: &Index) -> Vec<usize> {
    let Some(phase) = phases.get(pi) else {
        return Vec::new();
    };
    let s = bare_reference(item);
    let (tok, part) = match parse_phase_token(&s) {
        Some((n, rest)) if !rest.is_empty() => (Some(n), rest.to_owned()),
        _ => (None, s.clone()),
    };
    if let (Some(t), Some(n)) = (&tok, &phase.number)
        && !t.same_phase(n)
    {
        return Vec::new();
    }
    ix.in_phase(pi, &part)
}

/// A reference with the decoration around it removed: a path's directories, `@`, the
/// `.md` extension, a `-PLAN`/`-SUMMARY` suffix, quotes.
fn bare_reference(raw: &str) -> String {
    let s = raw
        .trim()
        .trim_matches(|c| c == '"' || c == '\'' || c == '`');
    let s = s.trim_start_matches('@');
    let s = s.rsplit(['/', '\\']).next().unwrap_or(s);
    let lower = s.to_ascii_lowercase();
    let mut s = s.to_owned();
    if lower.ends_with(".md") {
        s.truncate(s.len().saturating_sub(3));
    }
    for suffix in ["-PLAN", "-plan", "-SUMMARY", "-summary"] {
        if let Some(r) = s.strip_suffix(suffix) {
            s = r.to_owned();
        }
    }
    s.trim().to_owned()
}

/// The phase named by number `n` as seen from phase `from`: the same milestone first,
/// then the active phases, then any.
fn find_phase(n: &PhaseNumber, from: usize, phases: &[PhaseW], ix: &Index) -> Option<usize> {
    let own_scope = phases.get(from).map(|p| &p.scope);
    let matching: Vec<usize> = ix
        .phases_by_int
        .get(&n.integer)
        .map(|v| {
            v.iter()
                .copied()
                .filter(|&i| {
                    phases
                        .get(i)
                        .and_then(|p| p.number.as_ref())
                        .is_some_and(|m| m.same_phase(n))
                })
                .collect()
        })
        .unwrap_or_default();
    matching
        .iter()
        .copied()
        .find(|&i| phases.get(i).map(|p| &p.scope) == own_scope)
        .or_else(|| {
            matching
                .iter()
                .copied()
                .find(|&i| phases.get(i).is_some_and(|p| p.scope == Scope::Active))
        })
        .or_else(|| matching.first().copied())
}

/// Resolves one `depends_on` entry of plan `me` (see [`Plan::declared_depends_on`]).
/// Returns the targets and, when the entry needed interpreting, a note saying how.
#[allow(clippy::type_complexity)]
fn resolve(
    entry: &str,
    me: usize,
    phases: &[PhaseW],
    plans: &[PlanW],
    ix: &Index,
) -> Result<(Vec<usize>, Option<&'static str>), String> {
    let Some(my) = plans.get(me) else {
        return Err("cannot be resolved".to_owned());
    };
    let my_phase = my.phase;
    let s = bare_reference(entry);
    if s.is_empty() {
        return Err("is empty".to_owned());
    }
    // `Phase 20`, `phase-20`: a whole phase.
    let lower = s.to_ascii_lowercase();
    if let Some(n) = lower
        .strip_prefix("phase")
        .map(|r| r.trim_start_matches([' ', '-', '_', ':']))
        .and_then(parse_phase_number)
    {
        let Some(pi) = find_phase(&n, my_phase, phases, ix) else {
            return Err(format!("names phase {} which is not in the tree", n.text));
        };
        let Some(phase) = phases.get(pi) else {
            return Err("cannot be resolved".to_owned());
        };
        if pi == my_phase {
            // This plan's own phase: it means the plans that come before it (in the
            // phase's order by wave and number).
            let mine = ix.pos.get(&me).copied().unwrap_or(0);
            let before: Vec<usize> = phase.plans.get(..mine).unwrap_or(&[]).to_vec();
            if before.is_empty() {
                return Err("names this plan's own phase and no plan comes before it".to_owned());
            }
            return Ok((
                before,
                Some("names this plan's own phase; read as the plans before it"),
            ));
        }
        if phase.plans.is_empty() {
            return Err(format!("names phase {} which has no plans", n.text));
        }
        return Ok((phase.plans.clone(), None));
    }
    // `01`, `3`: a plan number of the same phase (GSD's short form).
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let found = resolve_in_phase(&s, my_phase, phases, ix);
        if found.is_empty() {
            return Err(format!(
                "names plan {s} of this phase, which does not exist"
            ));
        }
        return Ok((found, None));
    }
    // `04-01`, `04.1-01`, `03-01-auth-hardening`, `08-GAP`: a plan id.
    if let Some((n, rest)) = parse_phase_token(&s) {
        if rest.is_empty() {
            // A bare decimal or lettered phase number (`4.1`, `2b`): that phase.
            return resolve(&format!("Phase {}", n.text), me, phases, plans, ix);
        }
        // A phase renumbered after planning (klausbot's `13-docker-release/13-02-PLAN.md`
        // says `phase: 17-docker-release` and depends on `17-01`): the plan's own
        // frontmatter names its phase as it was when the plan was written, so a
        // reference to that number means a sibling.
        let my_dir_number = phases.get(my_phase).and_then(|p| p.number.as_ref());
        let renumbered = my
            .front
            .phase
            .as_ref()
            .and_then(|p| p.as_text())
            .and_then(|p| parse_phase_token(p).map(|(m, _)| m))
            .filter(|m| m.same_phase(&n) && my_dir_number.is_some_and(|d| !d.same_phase(m)));
        if renumbered.is_some() {
            let found = ix.in_phase(my_phase, rest);
            if let Some(first) = found.first() {
                return Ok((
                    vec![*first],
                    Some(
                        "uses the phase number in this plan's own frontmatter (the phase was renumbered); read as its sibling",
                    ),
                ));
            }
        }
        let quick = phases
            .get(my_phase)
            .is_some_and(|p| p.scope == Scope::Quick);
        if !quick && let Some(pi) = find_phase(&n, my_phase, phases, ix) {
            let found = ix.in_phase(pi, rest);
            if let Some(first) = found.first() {
                // Two plans with the same number in one phase: the first one.
                return Ok((vec![*first], None));
            }
        }
    }
    // Anything else: an exact id or file stem anywhere in the tree.
    match ix.by_id.get(&lower).or_else(|| ix.by_stem.get(&lower)) {
        Some(&i) => Ok((vec![i], None)),
        None => Err("names no plan in the tree".to_owned()),
    }
}

/// A phase's title (see [`Phase::title`]).
fn phase_title(phase: &PhaseW, roadmaps: &[(Scope, Roadmap)]) -> (String, TitleSource) {
    if phase.scope == Scope::Quick {
        return ("Quick tasks".to_owned(), TitleSource::Fallback);
    }
    if let Some(n) = &phase.number {
        // Its own milestone's roadmap: trusted as is.
        for (scope, r) in roadmaps {
            if scope == &phase.scope
                && let Some(t) = r.phase_title(n)
            {
                return (t.to_owned(), TitleSource::Roadmap);
            }
        }
        // Another milestone's roadmap: only when the name agrees with the directory's
        // slug, since numbering may have been reset between milestones.
        let mut others: Vec<&(Scope, Roadmap)> =
            roadmaps.iter().filter(|(s, _)| s != &phase.scope).collect();
        others.sort_by(|a, b| {
            let ka = (a.0 != Scope::Active, std::cmp::Reverse(a.0.order_key()));
            let kb = (b.0 != Scope::Active, std::cmp::Reverse(b.0.order_key()));
            ka.cmp(&kb)
        });
        for (_, r) in others {
            if let Some(t) = r.phase_title(n)
                && slugs_agree(t, &phase.slug)
            {
                return (t.to_owned(), TitleSource::Roadmap);
            }
        }
    }
    let readable = text::readable_name(&phase.slug);
    if readable.is_empty() {
        let shown = phase
            .number
            .as_ref()
            .map_or(phase.name.clone(), |n| n.text.clone());
        (format!("Phase {shown}"), TitleSource::Fallback)
    } else {
        (readable, TitleSource::DirName)
    }
}

/// Whether a roadmap name and a directory slug name the same thing. GSD derives the
/// slug from the name, but people rename either, so: one slug starts with the other,
/// or they share the first word, or half the slug's words appear in the name.
fn slugs_agree(title: &str, dir_slug: &str) -> bool {
    let words = |s: &str| -> Vec<String> {
        ids::sanitize(s)
            .split(['-', '.', '_'])
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let a = words(title);
    let b = words(dir_slug);
    if a.is_empty() || b.is_empty() {
        return false;
    }
    let (ja, jb) = (a.join("-"), b.join("-"));
    if ja.starts_with(&jb) || jb.starts_with(&ja) || a.first() == b.first() {
        return true;
    }
    let shared = b.iter().filter(|w| a.contains(w)).count();
    shared * 2 >= b.len()
}

/// A plan's title (see [`Plan::title`]).
fn plan_title(
    plan: &PlanW,
    phase: &PhaseW,
    roadmaps: &[(Scope, Roadmap)],
) -> (String, TitleSource) {
    let usable = |t: &str| -> bool {
        if !text::is_real_title(t) {
            return false;
        }
        // Not the bare id, nor "Plan <id>".
        let squash = |s: &str| -> String {
            s.chars()
                .filter(char::is_ascii_alphanumeric)
                .collect::<String>()
                .to_ascii_lowercase()
        };
        // Not a bare plan or phase number (`# 01-06`, `Plan 04-02`): that names, it
        // does not describe.
        let t = squash(t);
        let t = t.strip_prefix("plan").unwrap_or(&t);
        let t = t.strip_prefix("phase").unwrap_or(t);
        !t.is_empty() && !t.bytes().all(|b| b.is_ascii_digit())
    };
    let from_paragraph = |s: &str| -> Option<String> {
        let line = text::first_meaningful_line(s)?;
        Some(text::clean_title(text::first_sentence(&line)))
    };
    let f = &plan.front;
    if let Some(t) = f.title.as_ref().and_then(|t| t.as_text()) {
        let t = text::clean_title(t);
        if usable(&t) {
            return (t, TitleSource::Frontmatter);
        }
    }
    if let Some(t) = plan.scan.block("objective").and_then(from_paragraph)
        && usable(&t)
    {
        return (t, TitleSource::Objective);
    }
    let headings: Vec<&text::Heading> = plan
        .scan
        .headings
        .iter()
        .filter(|h| !text::is_generic_heading(&h.text))
        .collect();
    for level in [1, 2] {
        if let Some(h) = headings.iter().find(|h| h.level == level) {
            let t = text::clean_title(&h.text);
            if usable(&t) {
                return (t, TitleSource::Heading);
            }
        }
    }
    if let Some(t) = plan
        .scan
        .section(&["objective", "objectives", "goal"])
        .and_then(|s| from_paragraph(&s))
        && usable(&t)
    {
        return (t, TitleSource::ObjectiveSection);
    }
    if let Some(n) = plan.name.phase_token.as_ref().or(phase.number.as_ref())
        && phase.scope != Scope::Quick
    {
        let mut ordered: Vec<&(Scope, Roadmap)> = roadmaps.iter().collect();
        ordered.sort_by_key(|(s, _)| s != &phase.scope);
        for (_, r) in ordered {
            if let Some(t) = r.plan_title(n, &plan.name.part.to_ascii_lowercase())
                && usable(t)
            {
                return (t.to_owned(), TitleSource::Roadmap);
            }
        }
    }
    if let Some(t) = f.plan_name.as_ref().and_then(|t| t.as_text()) {
        let t = text::readable_name(t);
        if usable(&t) {
            return (t, TitleSource::PlanName);
        }
    }
    let fallback = if plan.name.part.is_empty() {
        phase.title.clone()
    } else {
        format!("{}: plan {}", phase.title, plan.name.part)
    };
    (
        text::truncate_chars(&fallback, text::MAX_TITLE_CHARS),
        TitleSource::Fallback,
    )
}

/// The output form of a plan.
fn build_plan(
    plan: &PlanW,
    phase: &PhaseW,
    plans: &[PlanW],
    roadmaps: &[(Scope, Roadmap)],
) -> Plan {
    let (title, title_source) = plan_title(plan, phase, roadmaps);
    let work = (!plan.done).then(|| {
        let mut work = plan_work(plan);
        // Without both an objective and tasks the sections are not the plan: the whole
        // text is.
        if work.objective.is_none() || work.tasks.is_none() {
            work.whole = plan
                .text
                .map(|t| text::split_frontmatter(t).body.trim().to_owned())
                .filter(|b| !b.is_empty());
        }
        work
    });
    Plan {
        id: plan.id.clone(),
        file: plan.file.clone(),
        size: plan.text.map(|t| t.len() as u64),
        number: plan.name.part.clone(),
        title,
        title_source,
        wave: plan.wave,
        depends_on: ids_of(&plan.deps, plans),
        declared_depends_on: plan
            .declared
            .iter()
            .zip(plan.resolved.iter())
            .map(|(text, r)| DeclaredDependency {
                text: text.clone(),
                resolved: ids_of(r, plans),
            })
            .collect(),
        dependency_source: plan.dependency_source,
        summary: plan.summary.clone(),
        done: plan.done,
        done_by: plan.done_by,
        summary_digest: plan.summary_digest.clone(),
        archived: matches!(phase.scope, Scope::Archived(_)),
        work,
        declares_order: plan.wave.is_some()
            || plan.front.depends_on.is_some()
            || plan.front.depends_on_dashed.is_some(),
    }
}

/// The sections of a plan a prompt carries (see [`PlanWork`]).
fn plan_work(plan: &PlanW) -> PlanWork {
    PlanWork {
        objective: plan
            .scan
            .block("objective")
            .map(str::to_owned)
            .or_else(|| plan.scan.section(&["objective", "objectives", "goal"])),
        tasks: plan.scan.block("tasks").map(str::to_owned).or_else(|| {
            plan.scan
                .section(&["tasks", "execution tasks", "implementation tasks", "steps"])
        }),
        verification: plan
            .scan
            .block("verification")
            .map(str::to_owned)
            .or_else(|| plan.scan.section(&["verification", "verification steps"])),
        success_criteria: plan
            .scan
            .block("success_criteria")
            .map(str::to_owned)
            .or_else(|| {
                plan.scan
                    .section(&["success criteria", "acceptance criteria"])
            }),
        whole: None,
    }
}

impl PlanningTree {
    /// Every plan, in tree order.
    pub fn plans(&self) -> impl Iterator<Item = &Plan> {
        self.phases.iter().flat_map(|p| p.plans.iter())
    }

    /// The plans not done, in tree order: what is left to run.
    pub fn unfinished(&self) -> impl Iterator<Item = &Plan> {
        self.plans().filter(|p| !p.done)
    }
}

#[cfg(test)]
mod tests;
