//! Phase and plan titles from a GSD `ROADMAP.md` (or an archived
//! `milestones/v1.0-ROADMAP.md`).
//!
//! GSD writes each phase twice: in the overview list (`- [x] **Phase 4: Name** - …`,
//! or by hand `- [x] Phase 1: Name (4/4 plans) — completed …`) and as a details
//! heading (`### Phase 4: Name`, `## Phase 1: …`, `#### Phase 16: …`). Headings give
//! the cleanest name, then bold list entries (the `**` delimit the name), then plain
//! list entries, whose trailing `(3/3 plans)` or ` — completed …` are cut. Under each
//! phase GSD lists its plans (`- [x] 04-02-PLAN.md — Title` or `- [ ] 01-01: Title`),
//! which give plan titles when the PLAN.md itself has none.

use super::number::{PhaseNumber, parse_phase_token};
use super::text::{clean_title, is_real_title, strip_markdown};

/// How a phase title was found, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// `### Phase 4: Name`.
    Heading,
    /// `- [x] **Phase 4: Name** - …`.
    BoldItem,
    /// `- [x] Phase 4: Name (2/2 plans)`.
    PlainItem,
}

/// A phase named in a roadmap.
#[derive(Debug, Clone, PartialEq)]
pub struct RoadmapPhase {
    /// Its number.
    pub number: PhaseNumber,
    /// Its name, cleaned.
    pub title: String,
    /// Where it came from.
    pub rank: Rank,
}

/// A plan named in a roadmap.
#[derive(Debug, Clone, PartialEq)]
pub struct RoadmapPlan {
    /// The phase number written in the plan token.
    pub phase: PhaseNumber,
    /// The plan part after it, lower-cased (`02`, `gap`).
    pub plan: String,
    /// Its title.
    pub title: String,
    /// Whether its checkbox is ticked (`- [x] …`).
    pub checked: bool,
}

/// Everything a roadmap says that the reader uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Roadmap {
    /// Phase names, in file order.
    pub phases: Vec<RoadmapPhase>,
    /// Plan titles, in file order.
    pub plans: Vec<RoadmapPlan>,
}

impl Roadmap {
    /// The best title for a phase number: the best rank, then the first in the file.
    pub fn phase_title(&self, n: &PhaseNumber) -> Option<&str> {
        self.phases
            .iter()
            .filter(|p| p.number.same_phase(n))
            .min_by_key(|p| p.rank)
            .map(|p| p.title.as_str())
    }

    /// The title of plan `plan` (lower-cased plan part) of phase `n`.
    pub fn plan_title(&self, n: &PhaseNumber, plan: &str) -> Option<&str> {
        self.plans
            .iter()
            .find(|p| p.phase.same_phase(n) && plan_parts_match(&p.plan, plan))
            .map(|p| p.title.as_str())
    }

    /// Whether the roadmap ticks plan `plan` (lower-cased plan part) of phase `n` as
    /// done.
    pub fn plan_checked(&self, n: &PhaseNumber, plan: &str) -> bool {
        self.plans
            .iter()
            .any(|p| p.checked && p.phase.same_phase(n) && plan_parts_match(&p.plan, plan))
    }
}

/// `01` and `1` are the same plan; other parts compare case-insensitively.
pub fn plan_parts_match(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.eq_ignore_ascii_case(b),
    }
}

/// Reads a roadmap. Lines inside code fences are skipped (a roadmap may quote a
/// template).
pub fn parse(text: &str) -> Roadmap {
    let mut out = Roadmap::default();
    let mut fence: Option<char> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(c) = t.chars().next().filter(|c| *c == '`' || *c == '~')
            && t.starts_with(&c.to_string().repeat(3))
        {
            fence = match fence {
                Some(open) if open == c => None,
                Some(open) => Some(open),
                None => Some(c),
            };
            continue;
        }
        if fence.is_some() {
            continue;
        }
        if let Some(p) = phase_line(t) {
            out.phases.push(p);
        } else if let Some(p) = plan_line(t) {
            out.plans.push(p);
        }
    }
    out
}

/// After `Phase` (any case) and spaces: the number, then `:` (or `.`/`-`/`—`) and the
/// name.
fn after_phase_word(s: &str) -> Option<(PhaseNumber, &str)> {
    let word = s.get(..5)?;
    if !word.eq_ignore_ascii_case("phase") {
        return None;
    }
    let rest = s.get(5..)?.trim_start();
    let tok_len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .unwrap_or(rest.len());
    let tok = rest.get(..tok_len)?.trim_end_matches('.');
    let (number, tail) = parse_phase_token(tok)?;
    if !tail.is_empty() {
        return None;
    }
    let after = rest.get(tok.len()..)?.trim_start();
    let name = after
        .strip_prefix(':')
        .or_else(|| after.strip_prefix(" -"))
        .or_else(|| after.strip_prefix('-'))
        .or_else(|| after.strip_prefix('—'))
        .or_else(|| after.strip_prefix('–'))
        .or_else(|| after.strip_prefix('.'))?;
    Some((number, name))
}

fn phase_line(t: &str) -> Option<RoadmapPhase> {
    // `### Phase 4: Name`
    let hashes = t.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) {
        let rest = t.get(hashes..)?.trim_start();
        let rest = rest.trim_start_matches(['✅', '🚧', '📋', ' ']);
        let (number, name) = after_phase_word(rest)?;
        let title = clean_title(name.trim().trim_end_matches('#'));
        return is_real_title(&title).then_some(RoadmapPhase {
            number,
            title,
            rank: Rank::Heading,
        });
    }
    // `- [x] **Phase 4: Name** - …`, `- [ ] Phase 1: Name (4/4 plans) — …`, `* …`.
    let item = t
        .strip_prefix("- ")
        .or_else(|| t.strip_prefix("* "))
        .or_else(|| t.strip_prefix("+ "))?
        .trim_start();
    let item = strip_checkbox(item).trim_start_matches(['✅', '🚧', '📋', '⬜', ' ']);
    if let Some(bold) = item.strip_prefix("**") {
        let end = bold.find("**")?;
        let inner = bold.get(..end)?;
        let (number, name) = after_phase_word(inner.trim())?;
        let title = clean_title(name);
        return is_real_title(&title).then_some(RoadmapPhase {
            number,
            title,
            rank: Rank::BoldItem,
        });
    }
    let (number, name) = after_phase_word(item)?;
    let mut name = name.trim();
    // Cut the status that follows the name.
    for sep in [" (", " — ", " – ", " - ", " ✅", " ✓"] {
        if let Some(i) = name.find(sep)
            && i > 0
        {
            name = name.get(..i).unwrap_or(name);
        }
    }
    let title = clean_title(name);
    is_real_title(&title).then_some(RoadmapPhase {
        number,
        title,
        rank: Rank::PlainItem,
    })
}

fn strip_checkbox(s: &str) -> &str {
    for b in ["[ ]", "[x]", "[X]", "[-]", "[~]"] {
        if let Some(r) = s.strip_prefix(b) {
            return r.trim_start();
        }
    }
    s
}

/// `- [x] 04-02-PLAN.md — Title`, `- [ ] 01-01: Title`, `- [x] **02-01**: Title`.
fn plan_line(t: &str) -> Option<RoadmapPlan> {
    let item = t
        .strip_prefix("- ")
        .or_else(|| t.strip_prefix("* "))?
        .trim_start();
    let checked = item.starts_with("[x]") || item.starts_with("[X]");
    let item = strip_checkbox(item);
    let item = strip_markdown(item);
    let tok_len = item
        .find(|c: char| c.is_whitespace() || c == ':')
        .unwrap_or(item.len());
    let tok = item.get(..tok_len)?;
    let tok = tok
        .strip_suffix("-PLAN.md")
        .or_else(|| tok.strip_suffix("-plan.md"))
        .unwrap_or(tok);
    let (phase, plan) = parse_phase_token(tok)?;
    let plan_tok = plan.split('-').next().unwrap_or("");
    if plan_tok.is_empty() || !plan_tok.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let rest = item.get(tok_len..)?.trim_start();
    let rest = rest.trim_start_matches([':', '—', '–', '-']).trim_start();
    let title = clean_title(rest);
    is_real_title(&title).then_some(RoadmapPlan {
        phase,
        plan: plan_tok.to_ascii_lowercase(),
        title,
        checked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gsd::number::parse_phase_number;

    const ROADMAP: &str = "\
# Roadmap
- [x] **Phase 1: Foundation** - scaffold (completed 2026-01-01)
- [ ] **Phase 2.1: Trail Polish (INSERTED)** - stars
- [x] Phase 1.5: Google OAuth [INSERTED] (1/1 plan) — completed 2026-02-28
- ✅ [v2.2 Polish](milestones/v2.2-ROADMAP.md) (Phase 12) - SHIPPED
### Phase 4: Skills
#### Phase 16: Text-layer routing (OCR-skip)
## Phase 02.1: add turbo (INSERTED)
```
### Phase 9: In a fence
```
Plans:
- [x] 04-02-PLAN.md — Skill installer
- [ ] 01-01: Project scaffold
- [ ] 08-GAP-PLAN.md: Gap closure
";

    #[test]
    fn reads_every_phase_line_form() {
        let r = parse(ROADMAP);
        let get = |s: &str| {
            r.phase_title(&parse_phase_number(s).unwrap())
                .map(str::to_owned)
        };
        assert_eq!(get("1").as_deref(), Some("Foundation"));
        assert_eq!(get("02.1").as_deref(), Some("add turbo"));
        assert_eq!(get("1.5").as_deref(), Some("Google OAuth"));
        assert_eq!(get("4").as_deref(), Some("Skills"));
        assert_eq!(get("16").as_deref(), Some("Text-layer routing (OCR-skip)"));
        assert_eq!(get("12"), None, "a milestone line is not a phase line");
        assert_eq!(get("9"), None, "fenced lines are skipped");
    }

    #[test]
    fn reads_plan_lines() {
        let r = parse(ROADMAP);
        let n4 = parse_phase_number("4").unwrap();
        assert_eq!(r.plan_title(&n4, "02"), Some("Skill installer"));
        assert_eq!(
            r.plan_title(&parse_phase_number("01").unwrap(), "1"),
            Some("Project scaffold")
        );
        assert_eq!(
            r.plan_title(&parse_phase_number("8").unwrap(), "gap"),
            Some("Gap closure")
        );
    }

    #[test]
    fn garbage_is_harmless() {
        for s in [
            "- [x] **Phase",
            "### Phase",
            "- Phase 9",
            "- [ ] **",
            "#",
            "- 01-",
            "### Phase 1:",
        ] {
            let _ = parse(s);
        }
    }
}
