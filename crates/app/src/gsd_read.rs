//! Reading a get-shit-done `.planning/` directory from disk for `plan sync`: a bounded
//! walk that lists its directories and Markdown files with their text, for the pure
//! reader in `warden_core::gsd`.
//!
//! The tree is written by people and agents, so the walk trusts nothing in it. Every
//! directory is opened with `O_NOFOLLOW | O_DIRECTORY` and every file through the
//! store's safe read (a link check on each component, `O_NOFOLLOW | O_NONBLOCK`, a
//! regular UTF-8 file of at most 1 MiB), so a symlink is never followed out of the tree,
//! a directory link is never entered and a FIFO never blocks. A file link that stays
//! inside the tree is read through its real path. Depth, entries and total bytes are
//! bounded. Everything skipped is a warning; a skipped Markdown file is still listed
//! (without text) so the reader can say what it could not use.

use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use warden_core::failure::Failure;
use warden_core::gsd::{PlanningTree, Warning, WarningKind, parse_planning};
use warden_store::files::{self, FileError};

/// Bounds on a walk, so a huge or hostile tree costs a bounded amount of time and memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadLimits {
    /// Directory levels below `.planning/` (GSD uses at most 4).
    pub max_depth: usize,
    /// Directory entries looked at in all.
    pub max_entries: usize,
    /// All file text read together, in bytes.
    pub max_total_bytes: u64,
}

impl Default for ReadLimits {
    /// Depth 8, 20 000 entries, 64 MiB in all: far above any real GSD tree (the largest
    /// in the corpus has under 300 files and 5 MiB).
    fn default() -> Self {
        ReadLimits {
            max_depth: 8,
            max_entries: 20_000,
            max_total_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The files of a tree and what the walk skipped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Listing {
    /// `(path relative to the root with '/', text)`, sorted; directories end in `/` and
    /// have no text; a Markdown file that was not read has `None`.
    pub files: Vec<(String, Option<String>)>,
    /// What was skipped and why.
    pub warnings: Vec<Warning>,
}

/// Reads and parses a `.planning/` directory; the walk's warnings come first.
pub fn read_planning(dir: &Path) -> Result<PlanningTree, Failure> {
    let listing = list_planning(dir, &ReadLimits::default())?;
    let mut tree = parse_planning(&listing.files);
    let mut warnings = listing.warnings;
    warnings.append(&mut tree.warnings);
    tree.warnings = warnings;
    Ok(tree)
}

fn is_markdown(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".md")
}

/// Walks `dir` (see the module docs). The root itself may be a symlink (a person named
/// it); nothing below it is followed out of it.
pub fn list_planning(dir: &Path, limits: &ReadLimits) -> Result<Listing, Failure> {
    let not_dir = || {
        Failure::usage(format!(
            "{} is not a directory; plan sync reads a get-shit-done .planning/ directory (phases/NN-name/NN-MM-PLAN.md)",
            dir.display()
        ))
    };
    let root = std::fs::canonicalize(dir).map_err(|_| not_dir())?;
    if !root.is_dir() {
        return Err(not_dir());
    }
    let mut walk = Walk {
        root: root.clone(),
        limits: limits.clone(),
        out: Listing::default(),
        entries: 0,
        bytes: 0,
        budget_warned: false,
    };
    // Depth-first with an explicit stack: no recursion to overflow.
    let mut stack: Vec<(PathBuf, String, usize)> = vec![(root, String::new(), 0)];
    'walk: while let Some((abs, rel, depth)) = stack.pop() {
        let names = match list_dir(&abs) {
            Ok(n) => n,
            Err(e) => {
                walk.warn(WarningKind::Io, &rel, format!("directory not read: {e}"));
                continue;
            }
        };
        let mut subdirs = Vec::new();
        for name in names {
            walk.entries += 1;
            if walk.entries > walk.limits.max_entries {
                walk.warn(
                    WarningKind::Limit,
                    &rel,
                    format!(
                        "more than {} entries under the planning directory; the rest is not read",
                        walk.limits.max_entries
                    ),
                );
                break 'walk;
            }
            let child = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let path = abs.join(&name);
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) => {
                    walk.warn(WarningKind::Io, &child, format!("not read: {e}"));
                    continue;
                }
            };
            let ft = meta.file_type();
            if ft.is_dir() {
                walk.out.files.push((format!("{child}/"), None));
                if depth + 1 > walk.limits.max_depth {
                    walk.warn(
                        WarningKind::Limit,
                        &child,
                        format!("deeper than {} levels; not read", walk.limits.max_depth),
                    );
                } else {
                    subdirs.push((path, child, depth + 1));
                }
            } else if ft.is_symlink() {
                walk.symlink(&path, &child, &name);
            } else if !ft.is_file() {
                // Not listed: a FIFO named like a plan is no plan.
                walk.warn(
                    WarningKind::NotRegular,
                    &child,
                    "not a regular file (a FIFO, socket or device); not opened, not imported",
                );
            } else if is_markdown(&name) {
                let text = walk.read(&abs, &path, &child, meta.len());
                walk.out.files.push((child, text));
            }
        }
        // Reversed so the stack pops them in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    walk.out.files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(walk.out)
}

/// The entry names of a directory, sorted, opened without following a link; names that
/// are not UTF-8 are left out (the reader could not name them).
fn list_dir(dir: &Path) -> std::io::Result<Vec<String>> {
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&fd)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if let Ok(n) = std::str::from_utf8(name) {
            names.push(n.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

struct Walk {
    root: PathBuf,
    limits: ReadLimits,
    out: Listing,
    entries: usize,
    bytes: u64,
    budget_warned: bool,
}

impl Walk {
    fn warn(&mut self, kind: WarningKind, rel: &str, message: impl Into<String>) {
        self.out.warnings.push(Warning::new(kind, rel, message));
    }

    /// A symlink: a Markdown file link whose target stays inside the tree is read
    /// through the target's real path; a link out of the tree, a dangling one and any
    /// directory link are refused with a warning.
    fn symlink(&mut self, path: &Path, rel: &str, name: &str) {
        let target = std::fs::canonicalize(path);
        let inside = target.as_ref().is_ok_and(|t| t.starts_with(&self.root));
        let meta = target
            .as_ref()
            .ok()
            .and_then(|t| std::fs::symlink_metadata(t).ok());
        match (inside, meta, target) {
            (true, Some(m), Ok(t)) if m.is_file() => {
                if is_markdown(name) {
                    let root = self.root.clone();
                    let text = self.read(&root, &t, rel, m.len());
                    self.out.files.push((rel.to_owned(), text));
                }
            }
            (true, Some(m), _) if m.is_dir() => self.warn(
                WarningKind::Symlink,
                rel,
                "a symbolic link to a directory; not followed (it could loop)",
            ),
            (true, _, _) => self.warn(
                WarningKind::Symlink,
                rel,
                "a symbolic link to something that is not a regular file; not followed",
            ),
            // Not listed at all: a plan linked out of the tree is no plan (its task would
            // send an agent to a file Warden refused to read), a SUMMARY no evidence.
            (false, _, _) => self.warn(
                WarningKind::Symlink,
                rel,
                "a symbolic link out of the planning directory (or dangling); refused, not imported",
            ),
        }
    }

    /// Reads one file through the store's safe read, within the byte budget.
    fn read(&mut self, base: &Path, path: &Path, rel: &str, len: u64) -> Option<String> {
        if self.bytes.saturating_add(len) > self.limits.max_total_bytes {
            if !self.budget_warned {
                self.budget_warned = true;
                self.warn(
                    WarningKind::Limit,
                    rel,
                    format!(
                        "the planning directory holds more than {} bytes of Markdown; this file and larger ones after it are not read",
                        self.limits.max_total_bytes
                    ),
                );
            }
            return None;
        }
        // A byte that is not UTF-8 (a plan saved in Latin-1, a stray byte from a
        // terminal) is one character, not the whole file: not reading it gave its task
        // a stand-in title and dropped its text and its `depends_on`, which turned the
        // plan's order round.
        let read = files::read_text_lossy(base, path).map(|(text, bad)| {
            if let Some(at) = bad {
                self.warn(
                    WarningKind::NotUtf8Replaced,
                    rel,
                    format!(
                        "this file is not UTF-8 (the first bad byte at offset {at}); read with each bad sequence replaced by U+FFFD"
                    ),
                );
            }
            text
        });
        match read {
            // No task, prompt or store can carry a NUL, and one in a plan's text stopped
            // the whole sync, naming its task. Real plans hold them (a regex quoted
            // with its control characters typed out): each is replaced, and said so.
            Ok(text) if let Some(at) = text.find('\0') => {
                let n = text.matches('\0').count();
                self.warn(
                    WarningKind::NulReplaced,
                    rel,
                    format!(
                        "this file contains {n} NUL character{} (the first at byte offset {at}); read with each replaced by U+FFFD",
                        if n == 1 { "" } else { "s" }
                    ),
                );
                let text = text.replace('\0', "\u{fffd}");
                self.bytes += text.len() as u64;
                Some(text)
            }
            Ok(text) => {
                self.bytes += text.len() as u64;
                Some(text)
            }
            Err(e) => {
                let kind = match e {
                    FileError::Symlink(_) => WarningKind::Symlink,
                    FileError::NotRegular(_) => WarningKind::NotRegular,
                    FileError::TooLarge(..) | FileError::NotUtf8(..) => WarningKind::NotRead,
                    FileError::Missing(_) | FileError::Io { .. } => WarningKind::Io,
                };
                // The store's message names the absolute path; the warning names `rel`.
                let why = e.to_string();
                let why = why
                    .strip_prefix(&path.display().to_string())
                    .map(|r| format!("this file{r}"))
                    .unwrap_or(why);
                self.warn(kind, rel, format!("not read: {why}"));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(name);
        fs::create_dir_all(&p).unwrap();
        (d, p)
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    fn kinds(l: &Listing) -> Vec<(WarningKind, String)> {
        l.warnings
            .iter()
            .map(|w| (w.kind, w.path.clone()))
            .collect()
    }

    #[test]
    fn lists_markdown_and_directories_sorted() {
        let (_d, planning) = scratch(".planning");
        write(&planning, "ROADMAP.md", "# Roadmap\n");
        write(&planning, "phases/01-a/01-01-PLAN.md", "# Plan\n");
        write(&planning, "phases/01-a/notes.txt", "ignored");
        fs::create_dir_all(planning.join("phases/02-empty")).unwrap();
        let l = list_planning(&planning, &ReadLimits::default()).unwrap();
        let paths: Vec<&str> = l.files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "ROADMAP.md",
                "phases/",
                "phases/01-a/",
                "phases/01-a/01-01-PLAN.md",
                "phases/02-empty/"
            ]
        );
        assert_eq!(l.files[3].1.as_deref(), Some("# Plan\n"));
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    }

    #[test]
    fn refuses_big_replaces_non_utf8_and_counts_limits() {
        let (_d, root) = scratch("limits");
        write(
            &root,
            "big.md",
            &"x".repeat(files::MAX_FILE_BYTES as usize + 1),
        );
        fs::write(root.join("bad.md"), [0xff, 0xfe, b'a']).unwrap();
        write(&root, "nul.md", "# A plan\n\nbinary \0 junk\n");
        write(&root, "a/b/c/d.md", "deep");
        let limits = ReadLimits {
            max_depth: 2,
            max_entries: 100,
            max_total_bytes: 10 * 1024 * 1024,
        };
        let l = list_planning(&root, &limits).unwrap();
        let get = |p: &str| l.files.iter().find(|(x, _)| x == p).unwrap().1.clone();
        assert_eq!(get("big.md"), None);
        assert_eq!(get("bad.md").as_deref(), Some("\u{fffd}\u{fffd}a"));
        assert_eq!(
            get("nul.md").as_deref(),
            Some("# A plan\n\nbinary \u{fffd} junk\n")
        );
        let k = kinds(&l);
        assert!(
            k.contains(&(WarningKind::NotRead, "big.md".into())),
            "{k:?}"
        );
        assert!(
            k.contains(&(WarningKind::NotUtf8Replaced, "bad.md".into())),
            "{k:?}"
        );
        assert!(
            k.contains(&(WarningKind::NulReplaced, "nul.md".into())),
            "{k:?}"
        );
        assert!(k.contains(&(WarningKind::Limit, "a/b/c".into())), "{k:?}");
        let few = ReadLimits {
            max_entries: 2,
            ..limits
        };
        let l = list_planning(&root, &few).unwrap();
        assert!(kinds(&l).iter().any(|(k, _)| *k == WarningKind::Limit));
    }

    #[test]
    fn never_follows_symlinks_out_and_never_blocks_on_a_fifo() {
        use std::os::unix::fs::symlink;
        let (_d, root) = scratch("links");
        let outside = root.join("outside");
        let planning = root.join(".planning");
        write(&outside, "secret.md", "secret");
        write(&planning, "phases/01-a/01-01-PLAN.md", "# In tree\n");
        symlink(
            outside.join("secret.md"),
            planning.join("phases/01-a/01-02-PLAN.md"),
        )
        .unwrap();
        symlink(
            planning.join("phases/01-a/01-01-PLAN.md"),
            planning.join("phases/01-a/01-04-PLAN.md"),
        )
        .unwrap();
        symlink(&outside, planning.join("phases/02-linked")).unwrap();
        symlink(&planning, planning.join("loop")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            planning.join("phases/01-a/01-03-PLAN.md"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let l = list_planning(&planning, &ReadLimits::default()).unwrap();
        let get = |p: &str| l.files.iter().find(|(x, _)| x == p).map(|(_, t)| t.clone());
        // Refused files are not listed: no plan, no task for an agent to be sent to.
        assert_eq!(get("phases/01-a/01-02-PLAN.md"), None, "link out");
        assert_eq!(
            get("phases/01-a/01-04-PLAN.md"),
            Some(Some("# In tree\n".to_owned())),
            "link inside"
        );
        assert!(l.files.iter().all(|(_, t)| t.as_deref() != Some("secret")));
        let k = kinds(&l);
        assert!(k.contains(&(WarningKind::Symlink, "phases/01-a/01-02-PLAN.md".into())));
        assert!(k.contains(&(WarningKind::Symlink, "phases/02-linked".into())));
        assert!(k.contains(&(WarningKind::Symlink, "loop".into())));
        assert_eq!(get("phases/01-a/01-03-PLAN.md"), None, "a FIFO");
        assert!(
            k.contains(&(WarningKind::NotRegular, "phases/01-a/01-03-PLAN.md".into())),
            "{k:?}"
        );
    }

    #[test]
    fn a_missing_root_is_a_usage_error() {
        let e = list_planning(Path::new("/nonexistent/.planning"), &ReadLimits::default());
        assert_eq!(e.unwrap_err().code, warden_core::failure::ExitCode::Usage);
    }
}
