//! The person's acts on a task waiting in `reviewing` (DESIGN 6): `approve` (reviewing →
//! done, through merge-ri) and `reject` (back to the worker, with the reason in its next
//! prompt). Both are [`App::transition`]'s write path with the status checked under the
//! task's lock, so every front end (web console, dashboards, CLI) refuses the same way.

use warden_core::failure::Failure;
use warden_core::model::{Status, Task, TaskId};
use warden_store::Written;

use crate::task::{Answer, Applied};
use crate::{App, Result};

/// The longest rejection reason accepted, in characters: enough for a paragraph of
/// review, bounded like every other input a person names.
pub const MAX_REASON_CHARS: usize = 4000;

/// A reason (a rejection's, or a transition's `--reason`) of at most
/// [`MAX_REASON_CHARS`] characters and without a NUL or another control character but a
/// line break or a tab (exit 2 otherwise). A reason is
/// shown to people and a rejection's goes into the worker's prompt, where no NUL means
/// anything; it reaches here from MCP and the web console as JSON, where `\u0000` is one
/// escape away. (Both stores could keep it: reasons live in JSON event bodies.)
pub(crate) fn check_reason(reason: &str) -> Result<()> {
    let chars = reason.chars().count();
    if chars > MAX_REASON_CHARS {
        return Err(Failure::usage(format!(
            "the reason is {chars} characters; keep it under {MAX_REASON_CHARS}"
        )));
    }
    if reason.contains('\0') {
        return Err(Failure::usage(
            "the reason contains a NUL character (\\u0000); remove it",
        ));
    }
    // An ESC or a BEL would drive the terminal of whoever reads the history; line
    // breaks and tabs are text.
    if let Some(c) = reason
        .chars()
        .find(|&c| (c.is_control() && !matches!(c, '\n' | '\r' | '\t')) || is_bidi(c))
    {
        return Err(Failure::usage(format!(
            "the reason contains a control character (U+{:04X}); remove it",
            c as u32
        )));
    }
    Ok(())
}

/// A bidirectional-text control (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C):
/// it reorders what a reader sees after it (a "PASS" shown where "SSAP" is stored); or a
/// line or paragraph separator (U+2028, U+2029), a line break no terminal draws as one
/// (see [`warden_core::model::unprintable`]).
pub(crate) fn is_bidi(c: char) -> bool {
    !c.is_control() && warden_core::model::unprintable(c)
}

/// A reason a reporter gave that must be kept rather than refused (a session's end is
/// recorded whatever its reporter says about it): a NUL, or any control character but a
/// line break or a tab, becomes U+FFFD and anything past
/// [`MAX_REASON_CHARS`] characters is cut, marked with `…`.
pub(crate) fn bounded_reason(reason: &str) -> String {
    let mut out: String = reason
        .chars()
        .take(MAX_REASON_CHARS)
        .map(|c| {
            if (c.is_control() && !matches!(c, '\n' | '\r' | '\t')) || is_bidi(c) {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect();
    if reason.chars().nth(MAX_REASON_CHARS).is_some() {
        out.pop();
        out.push('…');
    }
    out
}

impl App {
    /// Approves a task in `reviewing`: it becomes `done` (merge-ri runs inside the
    /// transition; a failed merge refuses and leaves the task in review). Any other
    /// status is refused (exit 1).
    pub fn approve(&self, id: &TaskId) -> Result<Answer> {
        self.approve_seen(id, None)
    }

    /// [`App::approve`] of the task as the person saw it: with `seen` (the version a
    /// page showed), refused when the task changed since (a rejected round re-reviewed
    /// meanwhile would otherwise be approved unseen).
    pub fn approve_seen(&self, id: &TaskId, seen: Option<u64>) -> Result<Answer> {
        self.refuse_group(id, crate::task::OnGroup::Approve)?;
        self.decide_review(
            id,
            Status::Done,
            "approved by a person".into(),
            "approved",
            seen,
        )
    }

    /// Rejects a task in `reviewing`: it goes back to `working` with `reason` in its
    /// history, and the worker's prompt carries the reason (the fold keeps it as the
    /// task's feedback until the task leaves `working`) — one write. A blank or
    /// over-long reason is a usage error (exit 2); any status but `reviewing` is refused.
    pub fn reject(&self, id: &TaskId, reason: &str) -> Result<Answer> {
        self.reject_seen(id, reason, None)
    }

    /// [`App::reject`] of the task as the person saw it (see [`App::approve_seen`]).
    pub fn reject_seen(&self, id: &TaskId, reason: &str, seen: Option<u64>) -> Result<Answer> {
        self.refuse_group(id, crate::task::OnGroup::Reject)?;
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(Failure::usage(
                "a rejection needs a reason: say what the worker must change",
            ));
        }
        check_reason(reason)?;
        self.decide_review(
            id,
            Status::Working,
            format!("rejected by a person: {reason}"),
            "rejected",
            seen,
        )
    }

    /// One write: the transition from `reviewing` to `to`, refused under the lock when
    /// the task is anywhere else.
    fn decide_review(
        &self,
        id: &TaskId,
        to: Status,
        reason: String,
        verb: &str,
        seen: Option<u64>,
    ) -> Result<Answer> {
        let shown = self.task_file_shown(id);
        let written = self.eng.write_task(id, None, |t, doc| {
            // Under the task's lock: nothing can change it between this look and the write.
            unchanged_since(t, seen, verb)?;
            if t.status() != Status::Reviewing {
                return Err(not_in_review(id, t.status(), verb).into());
            }
            self.decide_transition(t, doc, to, Some(reason.clone()), &shown)
        });
        // An approve whose merge landed and whose record did not says so: running it
        // again records it (the merge finds the base up to date).
        let written = match written {
            Err(e) if to == Status::Done => {
                let merged = self
                    .eng
                    .get(id)
                    .ok()
                    .and_then(|t| warden_runner::pipeline::merged_unrecorded(&self.eng, &t));
                let failure = Failure::from(e);
                return Err(match merged {
                    Some(base) => Failure {
                        message: format!(
                            "{}; {id}'s work is already merged into {base}: run `warden task approve {id}` again to record it",
                            failure.message
                        ),
                        ..failure
                    },
                    None => failure,
                });
            }
            w => w?,
        };
        match written {
            // No guard runs on these edges, so no stored outcome is a failure.
            Written::Done(change) => {
                if let Some(t) = &change.after {
                    self.stop_stale_sessions(t)?;
                }
                Ok(Answer {
                    applied: Applied::Now(change),
                    failure: None,
                    cancelled_inside: Vec::new(),
                    group_was: None,
                })
            }
            Written::Replayed(_) => Err(Failure::internal(
                "a review decision was answered from a request id it never used; this is a Warden bug",
            )),
        }
    }
}

/// Refuses a person's action on a task that changed since the page or screen showed it
/// (`seen`, the version shown): a conflict (exit 4, HTTP 409), nothing written. Called
/// under the task's lock, so nothing changes it between this look and the write.
pub(crate) fn unchanged_since(t: &Task, seen: Option<u64>, verb: &str) -> Result<()> {
    match seen {
        Some(seen) if t.version() != seen => Err(Failure::refusal(
            warden_core::failure::ExitCode::Conflict,
            format!(
                "{} changed since you looked at it (version {seen}, now {}, {}); look at it again before it is {verb}",
                t.id(),
                t.version(),
                t.status()
            ),
        )),
        _ => Ok(()),
    }
}

fn not_in_review(id: &TaskId, status: Status, verb: &str) -> Failure {
    Failure::refused(format!(
        "task {id} is {status}; only a task in reviewing can be {verb}"
    ))
}

#[cfg(test)]
mod tests {
    use warden_core::event::Actor;
    use warden_core::failure::ExitCode;

    use super::*;
    use crate::task::{CreateTask, Transition};

    /// A workspace with task `t` (review workflow) moved to `status` through the real
    /// gates.
    fn app_with(status: Status) -> (tempfile::TempDir, App, TaskId) {
        let dir = tempfile::tempdir().unwrap();
        crate::init(dir.path(), None).unwrap();
        let app = App::find(Some(dir.path()), Actor::Person).unwrap();
        app.create(CreateTask {
            id: "t".into(),
            ..Default::default()
        })
        .unwrap();
        let id = TaskId::new("t").unwrap();
        let file = app.ws().task_file(&id);
        let mut path = vec![Status::Working, Status::AgentReview, Status::Reviewing];
        path.truncate(match status {
            Status::Pending => 0,
            Status::Working => 1,
            Status::AgentReview => 2,
            _ => 3,
        });
        for to in path {
            let mut text = std::fs::read_to_string(&file).unwrap();
            match to {
                Status::AgentReview => text.push_str("\n## Handoff\nbuilt it\n"),
                Status::Reviewing => text.push_str("\n## Review\nVerdict: PASS\n"),
                _ => {}
            }
            std::fs::write(&file, text).unwrap();
            app.transition(&Transition::to(id.clone(), to)).unwrap();
        }
        (dir, app, id)
    }

    #[test]
    fn approve_moves_a_reviewed_task_to_done() {
        let (_dir, app, id) = app_with(Status::Reviewing);
        let a = app.approve(&id).unwrap();
        assert_eq!(a.summary(), "t: reviewing → done");
        let t = app.task(&id).unwrap();
        assert_eq!(t.status, Status::Done);
        assert!(t.passes);
        let last = app.history(Some(&id), Some(1)).unwrap();
        assert_eq!(last[0].reason.as_deref(), Some("approved by a person"));
    }

    #[test]
    fn reject_sends_the_task_back_with_the_reason_in_its_prompt() {
        let (_dir, app, id) = app_with(Status::Reviewing);
        let a = app
            .reject(&id, "  the login form ignores errors \n")
            .unwrap();
        assert_eq!(a.summary(), "t: reviewing → working");
        assert_eq!(app.task(&id).unwrap().status, Status::Working);
        let last = app.history(Some(&id), Some(1)).unwrap();
        assert_eq!(
            last[0].reason.as_deref(),
            Some("rejected by a person: the login form ignores errors")
        );
        // The worker's prompt carries it.
        let p = app.prompt(&id).unwrap().prompt;
        assert!(p.contains("the login form ignores errors"), "{p}");
    }

    #[test]
    fn only_a_task_in_review_is_decided() {
        for status in [Status::Pending, Status::Working, Status::AgentReview] {
            let (_dir, app, id) = app_with(status);
            let e = app.approve(&id).unwrap_err();
            assert_eq!(e.code, ExitCode::Refused, "{e}");
            assert_eq!(
                e.message,
                format!("task t is {status}; only a task in reviewing can be approved")
            );
            let e = app.reject(&id, "no").unwrap_err();
            assert_eq!(e.code, ExitCode::Refused, "{e}");
            // A refused rejection leaves nothing behind.
            assert_eq!(app.memory(&id).unwrap(), Default::default());
            assert_eq!(app.task(&id).unwrap().status, status);
        }
    }

    #[test]
    fn a_reporters_reason_is_kept_cut_and_storable() {
        assert_eq!(bounded_reason("logout"), "logout");
        assert_eq!(bounded_reason("a\0b"), "a\u{FFFD}b");
        let fits = "é".repeat(MAX_REASON_CHARS);
        assert_eq!(bounded_reason(&fits), fits);
        let cut = bounded_reason(&format!("{fits}x"));
        assert_eq!(cut.chars().count(), MAX_REASON_CHARS);
        assert!(cut.ends_with("é…"), "{cut}");
    }

    #[test]
    fn a_rejection_needs_a_bounded_reason() {
        let (_dir, app, id) = app_with(Status::Reviewing);
        for reason in ["", "  \n\t"] {
            assert_eq!(app.reject(&id, reason).unwrap_err().code, ExitCode::Usage);
        }
        let long = "x".repeat(MAX_REASON_CHARS + 1);
        assert_eq!(app.reject(&id, &long).unwrap_err().code, ExitCode::Usage);
        assert_eq!(app.reject(&id, "a\0b").unwrap_err().code, ExitCode::Usage);
        assert_eq!(app.task(&id).unwrap().status, Status::Reviewing);
        let missing = TaskId::new("nope").unwrap();
        assert_eq!(app.approve(&missing).unwrap_err().code, ExitCode::NotFound);
        assert_eq!(
            app.reject(&missing, "why").unwrap_err().code,
            ExitCode::NotFound
        );
    }
}
