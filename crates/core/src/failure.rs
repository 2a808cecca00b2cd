//! The one failure type every layer shares: a documented exit code (DESIGN 4), a
//! one-line message saying what is wrong and what to do, optional detail lines (a
//! guard's output tail), and whether the request was refused by the rules. Each crate's
//! own error enum converts into it in one place; front ends only format it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Warden's documented exit codes (DESIGN 4), plus the two `warden run --until-idle`
/// adds for a script to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExitCode {
    /// 0: ok.
    Ok,
    /// 1: refused (illegal transition, failed gate or guard, invalid input content).
    Refused,
    /// 2: usage or configuration error.
    Usage,
    /// 3: not found.
    NotFound,
    /// 4: conflict (stale version, lost lease, busy lock); safe to retry.
    Conflict,
    /// 5: storage or internal error.
    Internal,
    /// 6: `run --until-idle` stopped with tasks waiting for a person (a review to
    /// approve, a question in clarification).
    NeedsPerson,
    /// 7: `run --until-idle` stopped with tasks stuck or with a dead session.
    StuckOrDead,
}

impl ExitCode {
    /// Every code, in numeric order.
    pub const ALL: &'static [ExitCode] = &[
        ExitCode::Ok,
        ExitCode::Refused,
        ExitCode::Usage,
        ExitCode::NotFound,
        ExitCode::Conflict,
        ExitCode::Internal,
        ExitCode::NeedsPerson,
        ExitCode::StuckOrDead,
    ];

    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            ExitCode::Ok => 0,
            ExitCode::Refused => 1,
            ExitCode::Usage => 2,
            ExitCode::NotFound => 3,
            ExitCode::Conflict => 4,
            ExitCode::Internal => 5,
            ExitCode::NeedsPerson => 6,
            ExitCode::StuckOrDead => 7,
        }
    }

    /// The code for a process exit status, if it is one of ours.
    pub fn from_code(n: i64) -> Option<ExitCode> {
        ExitCode::ALL
            .iter()
            .copied()
            .find(|c| i64::from(c.code()) == n)
    }
}

impl fmt::Display for ExitCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code())
    }
}

impl Serialize for ExitCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(self.code())
    }
}

impl<'de> Deserialize<'de> for ExitCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        ExitCode::from_code(n).ok_or_else(|| serde::de::Error::custom(format!("exit code {n}")))
    }
}

/// Why a request did not succeed, as every front end reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The exit code.
    pub code: ExitCode,
    /// One line: what is wrong and what to do (without a `refused:`/`error:` prefix).
    pub message: String,
    /// Lines after the message (a failed guard's output tail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Refused by the rules (shown as `refused: …`), as opposed to an error.
    #[serde(default)]
    pub refused: bool,
}

impl Failure {
    /// A failure that is not a refusal.
    pub fn new(code: ExitCode, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            detail: None,
            refused: false,
        }
    }

    /// A refusal by the rules (exit 1).
    pub fn refused(message: impl Into<String>) -> Failure {
        Failure::refusal(ExitCode::Refused, message)
    }

    /// A refusal with another exit code (a guard Warden could not start is refused with
    /// exit 5: Warden's fault, not the agent's).
    pub fn refusal(code: ExitCode, message: impl Into<String>) -> Failure {
        Failure {
            refused: true,
            ..Failure::new(code, message)
        }
    }

    /// A usage or configuration error (exit 2).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(ExitCode::Usage, message)
    }

    /// Not found (exit 3).
    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure::new(ExitCode::NotFound, message)
    }

    /// A conflict (exit 4): safe to retry.
    pub fn conflict(message: impl Into<String>) -> Failure {
        Failure::new(ExitCode::Conflict, message)
    }

    /// A storage or internal error (exit 5).
    pub fn internal(message: impl Into<String>) -> Failure {
        Failure::new(ExitCode::Internal, message)
    }

    /// The same failure with detail lines.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Failure {
        self.detail = Some(detail.into());
        self
    }

    /// The first line as a person reads it: `refused: …` or `error: …`.
    pub fn headline(&self) -> String {
        let prefix = if self.refused { "refused" } else { "error" };
        format!("{prefix}: {}", self.message)
    }

    /// The headline and the detail lines, as the CLI prints them on stderr.
    pub fn text(&self) -> String {
        let mut s = self.headline();
        if let Some(d) = &self.detail {
            let d = d.trim_end();
            if !d.is_empty() {
                s.push('\n');
                s.push_str(d);
            }
        }
        s
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.headline())
    }
}

impl std::error::Error for Failure {}

impl From<crate::model::IdError> for Failure {
    fn from(e: crate::model::IdError) -> Self {
        Failure::usage(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_documented_numbers() {
        let got: Vec<u8> = ExitCode::ALL.iter().map(|c| c.code()).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        for c in ExitCode::ALL {
            assert_eq!(ExitCode::from_code(i64::from(c.code())), Some(*c));
        }
        assert_eq!(ExitCode::from_code(9), None);
    }

    #[test]
    fn the_text_is_what_a_person_reads() {
        let check = |f: Failure, want: &str| assert_eq!(f.text(), want);
        check(
            Failure::not_found("no task x; list tasks with `warden task list`"),
            "error: no task x; list tasks with `warden task list`",
        );
        check(
            Failure::refused("pending → done is not allowed"),
            "refused: pending → done is not allowed",
        );
        check(
            Failure::refused("the postchecks of a failed").with_detail("line 1\nline 2\n\n"),
            "refused: the postchecks of a failed\nline 1\nline 2",
        );
        check(Failure::usage("bad").with_detail("  \n"), "error: bad");
    }

    #[test]
    fn it_round_trips_as_json() {
        let f = Failure::refusal(ExitCode::Internal, "guard").with_detail("tail");
        let v = serde_json::to_string(&f).unwrap();
        assert_eq!(
            v,
            r#"{"code":5,"message":"guard","detail":"tail","refused":true}"#
        );
        assert_eq!(serde_json::from_str::<Failure>(&v).unwrap(), f);
    }
}
