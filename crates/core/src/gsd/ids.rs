//! Warden task ids derived from GSD names, deterministically.
//!
//! A Warden id is 1–64 characters from `a-z 0-9 . _ -`, starting with a letter or a
//! digit, and it also names a git branch (`warden/<id>`), so it must be a valid ref
//! component: no `..`, not ending in `.` or `.lock`. GSD names mostly fit once
//! lower-cased (`04.1-skills-polish`, `04-02`); those keep their name so a person
//! recognises the task. A name that does not fit (too long, or with other characters)
//! becomes its sanitised, truncated slug plus 8 hex digits of a stable hash of the full
//! name: the number stays in front (names start with it), two different long names
//! never share an id (unless their 32-bit hashes collide, which the tree-wide
//! uniqueness pass in `gsd` still catches), and the same name gives the same id on
//! every machine and every run, which `plan sync` needs to find its tasks again.

/// The longest Warden task id.
pub const MAX_ID_LEN: usize = 64;

/// Whether `s` is a valid Warden task id that is also a valid git ref component.
pub fn is_valid_id(s: &str) -> bool {
    let len = s.len();
    let mut chars = s.chars();
    let lead_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '_' || c == '-');
    (1..=MAX_ID_LEN).contains(&len)
        && lead_ok
        && rest_ok
        && !s.contains("..")
        && !s.ends_with('.')
        && !s.ends_with(".lock")
}

/// 64-bit FNV-1a: tiny, dependency-free and fixed by its definition, so the ids it
/// feeds stay the same across Rust versions and platforms (unlike `DefaultHasher`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The first `n` (≤ 16) hex digits of the FNV-1a hash of `s`.
pub fn short_hash(s: &str, n: usize) -> String {
    let full = format!("{:016x}", fnv1a64(s.as_bytes()));
    full.chars().take(n.min(16)).collect()
}

/// The hex digits a shortened id ends with.
const HASH_LEN: usize = 8;

/// Lower-cases `s` and maps every character outside the id alphabet to `-`, then tidies
/// the result: no runs of `-`, no `..`, no leading or trailing separator.
pub fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-') {
            c
        } else {
            '-'
        };
        let last = out.chars().last();
        // Collapse `--` and `..`, and a `.` next to a `-` (`a.-b` reads as `a-b`).
        match (last, c) {
            (Some('-'), '-') | (Some('.'), '.') => {}
            (Some('-'), '.') => {}
            (Some('.'), '-') => {
                out.pop();
                out.push('-');
            }
            _ => out.push(c),
        }
    }
    trim_separators(&out).to_owned()
}

/// `s` without leading and trailing `.`, `_` and `-`.
fn trim_separators(s: &str) -> &str {
    s.trim_matches(|c| matches!(c, '.' | '_' | '-'))
}

/// The id for a GSD name: the name lower-cased when that is a valid id, otherwise the
/// shortened form described in the module docs.
pub fn id_from_name(name: &str) -> String {
    let lower = name.to_lowercase();
    if is_valid_id(&lower) {
        return lower;
    }
    shortened(name, &sanitize(name))
}

/// `slug` cut to fit with a hash of `full` after it. Cuts at a `-` when one is near the
/// end so words stay whole.
fn shortened(full: &str, slug: &str) -> String {
    let hash = short_hash(full, HASH_LEN);
    let room = MAX_ID_LEN - HASH_LEN - 1;
    let mut cut = slug;
    if cut.len() > room {
        // The slug is ASCII (sanitised), so any byte index is a char boundary; `get`
        // keeps that an invariant rather than an assumption.
        cut = slug.get(..room).unwrap_or("");
        if let Some(i) = cut.rfind('-')
            && i >= room / 2
        {
            cut = cut.get(..i).unwrap_or(cut);
        }
    }
    let cut = trim_separators(cut);
    if cut.is_empty() {
        hash
    } else {
        format!("{cut}-{hash}")
    }
}

/// Makes `id` fit the rules after something was put around it (a milestone prefix, a
/// disambiguating suffix): unchanged when valid, otherwise shortened like a name.
pub fn fit(id: &str) -> String {
    if is_valid_id(id) {
        id.to_owned()
    } else {
        shortened(id, &sanitize(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_ids_follow_warden_and_git_rules() {
        for ok in [
            "04-02",
            "04.1-skills-polish",
            "2b-observability",
            "a",
            "quick-1",
        ] {
            assert!(is_valid_id(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            ".a",
            "_a",
            "A",
            "a..b",
            "a.",
            "x.lock",
            "a b",
            "é",
            &"a".repeat(65),
        ] {
            assert!(!is_valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn names_that_fit_keep_their_name() {
        assert_eq!(id_from_name("04.1-skills-polish"), "04.1-skills-polish");
        assert_eq!(id_from_name("2b-Observability"), "2b-observability");
        assert_eq!(id_from_name("08-GAP"), "08-gap");
    }

    #[test]
    fn long_names_are_shortened_stably_and_distinctly() {
        let a = "08-dashboard-ux-redesign-replace-long-scrolling-list-with-organized-layout";
        let b = "08-dashboard-ux-redesign-replace-long-scrolling-list-with-organized-layouts";
        let ia = id_from_name(a);
        let ib = id_from_name(b);
        assert!(is_valid_id(&ia) && is_valid_id(&ib), "{ia} {ib}");
        assert_ne!(ia, ib);
        assert!(ia.starts_with("08-dashboard-ux-redesign"), "{ia}");
        assert_eq!(ia, id_from_name(a), "deterministic");
        // Pinned: a change here renames every long phase a user already synced.
        assert_eq!(short_hash("abc", 8), "e71fa219");
    }

    #[test]
    fn odd_characters_are_sanitised_with_a_hash() {
        let id = id_from_name("03-UI & UX: Polish..final.lock");
        assert!(is_valid_id(&id), "{id}");
        assert!(id.starts_with("03-ui-ux-polish.final"), "{id}");
        assert_ne!(id_from_name("04-a&b"), id_from_name("04-a+b"));
        assert!(is_valid_id(&id_from_name("···")));
        assert!(is_valid_id(&id_from_name("")));
    }

    #[test]
    fn fit_repairs_composed_ids() {
        assert_eq!(fit("v1.0-01-01"), "v1.0-01-01");
        let long = format!("v1.0-{}", "x".repeat(70));
        assert!(is_valid_id(&fit(&long)));
    }
}
