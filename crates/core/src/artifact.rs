//! TEMPORARY stub, replaced by the artifact module.
/// Evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    pub section: String,
    pub digest: String,
}
/// Verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
}
/// Artifacts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Artifacts {
    pub handoff: Option<Evidence>,
    pub review: Option<Evidence>,
    pub verdict: Option<Verdict>,
}
