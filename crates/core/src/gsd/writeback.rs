//! What Warden writes back into a GSD `.planning/` tree, so a person can switch between
//! GSD's commands and Warden without losing their place: the SUMMARY.md of a plan whose
//! task Warden finished (when its agent wrote none), and the progress of STATE.md.
//! Pure: the store's engine reads and writes the files.
//!
//! The SUMMARY follows the layout of GSD's summary template (frontmatter with `phase`,
//! `plan` and `completed`, a `# Phase … Plan …: … Summary` heading, a bold one-liner,
//! `## Performance`, `## Accomplishments` and a footer), filled with facts Warden holds:
//! the task, its title, when it was accepted, its review rounds, and the agent's own
//! `## Handoff`.

use jiff::Timestamp;

use super::sync::TOOL;
use crate::model::{Status, Task};

/// Everything a written SUMMARY.md says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryFacts<'a> {
    /// The task.
    pub task: &'a Task,
    /// The PLAN.md, relative to `.planning/` (from the task's origin).
    pub plan_file: &'a str,
    /// The content of the task's `## Handoff`, if it has one.
    pub handoff: Option<&'a str>,
    /// When the task was accepted.
    pub completed: Timestamp,
}

/// The phase directory name and the plan number of a PLAN.md path
/// (`phases/01-foundation/01-02-PLAN.md` → `01-foundation`, `02`).
pub fn phase_and_plan(plan_file: &str) -> (String, String) {
    let mut parts: Vec<&str> = plan_file.split('/').collect();
    let file = parts.pop().unwrap_or("");
    if parts.last() == Some(&"plans") {
        parts.pop();
    }
    let phase = parts.last().copied().unwrap_or("").to_owned();
    let stem = file
        .strip_suffix("-PLAN.md")
        .or_else(|| file.strip_suffix(".md"))
        .unwrap_or(file);
    let plan = match stem.split_once('-') {
        Some((_, rest)) => rest.split('-').next().unwrap_or(rest),
        None => stem,
    };
    (phase, plan.to_owned())
}

/// The SUMMARY.md Warden writes for a plan it finished.
pub fn summary(f: &SummaryFacts<'_>) -> String {
    let (phase, plan) = phase_and_plan(f.plan_file);
    let date = f.completed.strftime("%Y-%m-%d").to_string();
    let phase_number = phase.split('-').next().unwrap_or(&phase);
    let title = single_line(&f.task.spec.title);
    let handoff = f.handoff.map(str::trim).filter(|h| !h.is_empty());
    let one_liner = handoff
        .and_then(|h| h.lines().map(str::trim).find(|l| !l.is_empty()))
        .map(|l| {
            let l = l.strip_prefix("DONE:").unwrap_or(l).trim();
            single_line(l)
        })
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| title.clone());
    let mut out = String::new();
    out.push_str("---\n");
    out.push_str(&format!("phase: {}\n", yaml_scalar(&phase)));
    out.push_str(&format!("plan: {}\n", yaml_scalar(&plan)));
    out.push_str(&format!("completed: {date}\n"));
    out.push_str(&format!("warden_task: {}\n", f.task.id()));
    out.push_str("---\n\n");
    out.push_str(&format!(
        "# Phase {phase_number} Plan {plan}: {title} Summary\n\n**{}**\n\n",
        one_liner.replace("**", "")
    ));
    out.push_str("## Performance\n\n");
    out.push_str(&format!(
        "- **Completed:** {}\n",
        f.completed.strftime("%Y-%m-%dT%H:%M:%SZ")
    ));
    out.push_str(&format!(
        "- **Review rounds:** {}\n\n",
        f.task.review_round()
    ));
    out.push_str("## Accomplishments\n\n");
    match handoff {
        Some(h) => {
            out.push_str(h);
            out.push('\n');
        }
        None => out.push_str("Accepted in Warden; the agent wrote no handoff.\n"),
    }
    out.push_str(&format!(
        "\n---\n*Phase: {phase}*\n*Completed: {date}*\n*Written by Warden from task {}*\n",
        f.task.id()
    ));
    out
}

fn single_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A YAML scalar: plain when safe, else double-quoted.
fn yaml_scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if plain {
        s.to_owned()
    } else {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// GSD's progress over the plans of the active milestone (`phases/`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GsdProgress {
    /// Plans under `phases/`, but those cancelled (which count neither as open nor as
    /// done, as in Warden's own progress).
    pub total_plans: usize,
    /// Those done.
    pub completed_plans: usize,
    /// Phases under `phases/`, but those whose plans are all cancelled (STATE.md's
    /// `total_phases` is raised to it, never lowered: it counts the roadmap's).
    pub total_phases: usize,
    /// Phases under `phases/` whose plans (but the cancelled) are all done.
    pub completed_phases: usize,
}

impl GsdProgress {
    /// `floor(completed / total * 100)`, 0 when there is no plan.
    pub fn percent(&self) -> usize {
        (self.completed_plans * 100)
            .checked_div(self.total_plans)
            .unwrap_or(0)
    }

    /// GSD's ten-cell bar with the percentage: `[█████░░░░░] 50%`.
    pub fn line(&self) -> String {
        let full = self.percent() / 10;
        format!(
            "[{}{}] {}%",
            "█".repeat(full),
            "░".repeat(10 - full.min(10)),
            self.percent()
        )
    }
}

/// The progress of the tree `plan sync` read from `root` (an [`crate::model::Origin::root`]),
/// from the tasks it made: a plan counts as done when its task is done.
pub fn progress(tasks: &[Task], root: &str) -> GsdProgress {
    let mut p = GsdProgress::default();
    // Per phase: its plans, those that count (not cancelled), those done.
    let mut phases: std::collections::BTreeMap<&str, (usize, usize, usize)> = Default::default();
    for t in tasks {
        let Some(o) = &t.spec.origin else { continue };
        if o.tool != TOOL || o.root != root || !o.path.starts_with("phases/") {
            continue;
        }
        if !o.path.ends_with(".md") {
            phases.entry(t.id().as_str()).or_default();
            continue;
        }
        let counts = t.status() != Status::Cancelled;
        let done = t.status() == Status::Done;
        p.total_plans += usize::from(counts);
        p.completed_plans += usize::from(done);
        if let Some(parent) = &t.spec.parent {
            let e = phases.entry(parent.as_str()).or_default();
            e.0 += 1;
            e.1 += usize::from(counts);
            e.2 += usize::from(done);
        }
    }
    // A phase with no plan yet is one still to plan; one whose plans are all cancelled
    // was dropped.
    p.total_phases = phases
        .values()
        .filter(|(all, counted, _)| *all == 0 || *counted > 0)
        .count();
    p.completed_phases = phases
        .values()
        .filter(|(_, counted, done)| *counted > 0 && counted == done)
        .count();
    p
}

/// STATE.md with its progress brought up to date: the first `Progress:` line of the body
/// (`Progress: [█████░░░░░] 50%`) and, in the frontmatter's `progress:` block, the
/// `completed_plans`, `total_plans`, `completed_phases`, `total_phases` and `percent`
/// values that are there. Nothing is added; `None` when nothing changes.
pub fn update_state_md(text: &str, p: &GsdProgress) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_front = false;
    let mut front_seen = false;
    let mut in_progress_block = false;
    let mut line_done = false;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        let eol = line.get(bare.len()..).unwrap_or("");
        if bare.trim_end() == "---" && (i == 0 || in_front) && !front_seen {
            if in_front {
                front_seen = true;
            }
            in_front = !in_front;
            in_progress_block = false;
            out.push_str(line);
            continue;
        }
        if in_front {
            if !bare.starts_with([' ', '\t']) {
                in_progress_block = bare.trim_end() == "progress:";
            } else if in_progress_block && let Some((key, old)) = bare.trim_start().split_once(':')
            {
                let value = match key.trim() {
                    "completed_plans" => Some(p.completed_plans),
                    "total_plans" => Some(p.total_plans),
                    "completed_phases" => Some(p.completed_phases),
                    // GSD counts the roadmap's phases, planned or not; the folders under
                    // `phases/` are those planned so far. Raised to them (a tree read 7
                    // phases, 9 complete), never lowered (a roadmap of 3 became 1).
                    "total_phases" => {
                        let old = old.trim().parse::<usize>().unwrap_or(0);
                        Some(old.max(p.total_phases))
                    }
                    "percent" => Some(p.percent()),
                    _ => None,
                };
                if let Some(v) = value {
                    let indent = bare
                        .get(..bare.len() - bare.trim_start().len())
                        .unwrap_or("");
                    out.push_str(&format!("{indent}{}: {v}{eol}", key.trim()));
                    continue;
                }
            }
            out.push_str(line);
            continue;
        }
        if !line_done && bare.starts_with("Progress:") {
            line_done = true;
            // GSD's own line (`[bar] N%`, and whatever follows it) is brought up to
            // date; a line a person wrote in words ("79/79 (100%) — v1.0 …") is theirs.
            let rest = bare.strip_prefix("Progress:").unwrap_or(bare).trim_start();
            if let Some(tail) = after_bar(rest) {
                out.push_str(&format!("Progress: {}{tail}{eol}", p.line()));
                continue;
            }
        }
        out.push_str(line);
    }
    (out != text).then_some(out)
}

/// What follows GSD's progress bar and percentage (`[█████░░░░░] 50%`), when `text`
/// begins with them.
fn after_bar(text: &str) -> Option<&str> {
    let (bar, after) = text.strip_prefix('[')?.split_once(']')?;
    if bar.chars().any(char::is_alphanumeric) {
        return None;
    }
    let number = after.trim_start();
    let rest = number.trim_start_matches(|c: char| c.is_ascii_digit());
    if rest.len() == number.len() {
        return None;
    }
    rest.strip_prefix('%')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Origin, RunnerState, TaskId, TaskSpec, WorkflowKind};

    fn task(id: &str, parent: Option<&str>, path: &str, status: Status) -> Task {
        let mut spec = TaskSpec::new(TaskId::new(id).unwrap(), WorkflowKind::Review, 3);
        spec.parent = parent.map(|p| TaskId::new(p).unwrap());
        spec.title = "Parser and its tests".into();
        spec.origin = Some(Box::new(Origin {
            tool: "gsd".into(),
            root: ".planning".into(),
            path: path.into(),
        }));
        Task {
            spec,
            runner: RunnerState::new(status, status == Status::Done, 0, Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn phase_and_plan_from_every_naming() {
        let check = |f: &str, phase: &str, plan: &str| {
            assert_eq!(
                phase_and_plan(f),
                (phase.to_owned(), plan.to_owned()),
                "{f}"
            );
        };
        check("phases/01-foundation/01-02-PLAN.md", "01-foundation", "02");
        check("phases/04.1-polish/04.1-01-PLAN.md", "04.1-polish", "01");
        check("phases/08-x/08-GAP-PLAN.md", "08-x", "GAP");
        check("phases/06-n/plans/PLAN-01-setup.md", "06-n", "01");
        check("phases/30-e2e/PLAN.md", "30-e2e", "PLAN");
    }

    #[test]
    fn summary_is_gsd_shaped_and_holds_the_facts() {
        let t = task(
            "01-02",
            Some("01-a"),
            "phases/01-a/01-02-PLAN.md",
            Status::Done,
        );
        let s = summary(&SummaryFacts {
            task: &t,
            plan_file: "phases/01-a/01-02-PLAN.md",
            handoff: Some("DONE: wrote the parser\nUNCERTAIN: nothing\n"),
            completed: Timestamp::from_second(1_700_000_000).unwrap(),
        });
        insta::assert_snapshot!(s, @r"
        ---
        phase: 01-a
        plan: 02
        completed: 2023-11-14
        warden_task: 01-02
        ---

        # Phase 01 Plan 02: Parser and its tests Summary

        **wrote the parser**

        ## Performance

        - **Completed:** 2023-11-14T22:13:20Z
        - **Review rounds:** 0

        ## Accomplishments

        DONE: wrote the parser
        UNCERTAIN: nothing

        ---
        *Phase: 01-a*
        *Completed: 2023-11-14*
        *Written by Warden from task 01-02*
        ");
        // GSD's reader counts it as done.
        assert!(crate::gsd::text::has_content(&s));
    }

    #[test]
    fn progress_counts_active_plans_by_their_tasks() {
        let tasks = vec![
            task("01-a", None, "phases/01-a", Status::Done),
            task(
                "01-01",
                Some("01-a"),
                "phases/01-a/01-01-PLAN.md",
                Status::Done,
            ),
            task("02-b", None, "phases/02-b", Status::Pending),
            task(
                "02-01",
                Some("02-b"),
                "phases/02-b/02-01-PLAN.md",
                Status::Done,
            ),
            task(
                "02-02",
                Some("02-b"),
                "phases/02-b/02-02-PLAN.md",
                Status::Working,
            ),
            task(
                "00-01",
                Some("00-x"),
                "milestones/v1-phases/00-x/00-01-PLAN.md",
                Status::Done,
            ),
            // A cancelled plan counts neither as open nor as done; a phase of nothing
            // but cancelled plans is no phase; one with no plan yet is still to plan.
            task(
                "02-03",
                Some("02-b"),
                "phases/02-b/02-03-PLAN.md",
                Status::Cancelled,
            ),
            task("03-c", None, "phases/03-c", Status::Cancelled),
            task(
                "03-01",
                Some("03-c"),
                "phases/03-c/03-01-PLAN.md",
                Status::Cancelled,
            ),
            task("04-d", None, "phases/04-d", Status::Pending),
        ];
        let p = progress(&tasks, ".planning");
        assert_eq!(
            p,
            GsdProgress {
                total_plans: 3,
                completed_plans: 2,
                total_phases: 3,
                completed_phases: 1
            }
        );
        assert_eq!(p.line(), "[██████░░░░] 66%");
        assert_eq!(progress(&tasks, "elsewhere"), GsdProgress::default());
    }

    #[test]
    fn state_md_progress_is_rewritten_in_place() {
        let p = GsdProgress {
            total_plans: 4,
            completed_plans: 3,
            total_phases: 2,
            completed_phases: 1,
        };
        let text = "---\nmilestone: v1.0\nprogress:\n  total_phases: 1\n  completed_phases: 0\n  total_plans: 4\n  completed_plans: 2\n  percent: 50\n---\n\n# Project State\n\nProgress: [█████░░░░░] 50%\n\nProgress: kept\n";
        let out = update_state_md(text, &p).unwrap();
        assert_eq!(
            out,
            "---\nmilestone: v1.0\nprogress:\n  total_phases: 2\n  completed_phases: 1\n  total_plans: 4\n  completed_plans: 3\n  percent: 75\n---\n\n# Project State\n\nProgress: [███████░░░] 75%\n\nProgress: kept\n"
        );
        assert_eq!(update_state_md(&out, &p), None, "idempotent");
        // The roadmap's phases not planned yet stay counted.
        let roadmap = out.replace("total_phases: 2", "total_phases: 5");
        assert_eq!(update_state_md(&roadmap, &p), None);
        // No progress anywhere: nothing is added.
        assert_eq!(update_state_md("# State\n\nPhase: 1\n", &p), None);
        // GSD's line keeps what follows its bar; a line in words is the person's.
        assert_eq!(
            update_state_md("Progress: [██░░░░░░░░] 20% (2 of 10 plans)\n", &p).unwrap(),
            "Progress: [███████░░░] 75% (2 of 10 plans)\n"
        );
        let words = "Progress: 79/79 (100%) — v1.0 (Phase 1–3) alla genomförda\n";
        assert_eq!(update_state_md(words, &p), None);
        // A second frontmatter-looking block is body text.
        let twice = "---\na: 1\n---\n---\nprogress:\n  percent: 1\n---\n";
        assert_eq!(update_state_md(twice, &p), None);
    }
}
