//! `.warden/warden.toml`: every key optional, defaults as DESIGN.md section 4 lists them.
//!
//! Unknown keys are errors, so a typo never silently falls back to a default.

use serde::{Deserialize, Serialize};
use warden_core::model::Limits;

/// The default agent command: Claude Code in print mode.
pub const DEFAULT_AGENT_COMMAND: &[&str] = &["claude", "-p", "{prompt}"];

/// The whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[store]`.
    pub store: StoreConfig,
    /// `[agent]`.
    pub agent: AgentConfig,
    /// `[limits]`.
    pub limits: Limits,
    /// `[memory]`.
    pub memory: MemoryConfig,
    /// `[serve]`: the web console.
    pub serve: ServeConfig,
}

/// `[serve]`: `warden serve`, the web console.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// The address to listen on (default `127.0.0.1:7777`); `--addr` overrides.
    pub addr: Option<String>,
    /// The access token every request must carry; `WARDEN_SERVE_TOKEN` overrides. A
    /// console on a non-loopback address without one gets a random token at start.
    pub token: Option<String>,
}

impl std::fmt::Debug for ServeConfig {
    // The token is a secret: never in a debug print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// `[store]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite:PATH` or `postgres://…`; `WARDEN_STORE_URL` overrides.
    pub url: String,
    /// How long a writer waits for the lock before giving up with exit 4.
    pub busy_timeout_ms: u64,
    /// How long a runner's lease on a task lasts unless renewed (at a third of it); a
    /// dead runner's tasks are adopted by another runner after it.
    pub lease_ttl_s: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: "sqlite:.warden/warden.db".into(),
            busy_timeout_ms: 5000,
            lease_ttl_s: 30,
        }
    }
}

/// `[agent]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// argv template: `{prompt}`, `{prompt_file}`, `{task_id}`, `{worktree}`, `{role}`.
    pub command: Vec<String>,
    /// `process` or `tmux`.
    pub session: String,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            command: DEFAULT_AGENT_COMMAND
                .iter()
                .map(|s| s.to_string())
                .collect(),
            session: "process".into(),
        }
    }
}

/// `[memory]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// History entries kept.
    pub max_history: usize,
    /// Characters per string.
    pub max_text_len: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_history: 3,
            max_text_len: 256,
        }
    }
}

/// The file `warden init` writes: every default, commented, so people see what exists.
pub const DEFAULT_TOML: &str = r#"# Warden configuration. Every key is optional; these are the defaults.

[store]
url = "sqlite:.warden/warden.db"   # or postgres://… ; WARDEN_STORE_URL overrides
busy_timeout_ms = 5000
lease_ttl_s = 30                   # a runner's lease on a task; renewed at a third of it

[agent]
command = ["claude", "-p", "{prompt}"]   # also {prompt_file} {task_id} {worktree} {role}
session = "process"                      # or "tmux"

[limits]
max_attempts = 3
crash_threshold = 2
max_review_rounds = 2
phase_timeout_s = 3600
handoff_grace_s = 30       # a worker may go on this long after its hand-off, then it is stopped
kill_after_s = 5           # a stopped session gets this long between TERM and KILL
retry_backoff_s = 2        # wait before the 2nd attempt of shell/process work; doubles after
retry_backoff_max_s = 300

[memory]
max_history = 3
max_text_len = 256
"#;

/// Why the configuration is unusable (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}; fix the file (see `warden init` for the defaults)")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl Config {
    /// Parses the text of a warden.toml and checks its values.
    pub fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        let err = |message: String| ConfigError {
            path: path.to_owned(),
            message,
        };
        let c: Config = toml::from_str(text).map_err(|e| err(one_line(&e.to_string())))?;
        if c.limits.max_attempts == 0 {
            return Err(err("limits.max_attempts must be at least 1".into()));
        }
        if c.limits.crash_threshold == 0 {
            return Err(err("limits.crash_threshold must be at least 1".into()));
        }
        if c.limits.max_review_rounds == 0 {
            return Err(err("limits.max_review_rounds must be at least 1".into()));
        }
        if c.store.lease_ttl_s == 0 {
            return Err(err("store.lease_ttl_s must be at least 1".into()));
        }
        if c.agent.command.is_empty() {
            return Err(err("agent.command must name a program".into()));
        }
        if c.agent.session != "process" && c.agent.session != "tmux" {
            return Err(err(format!(
                "agent.session is {:?}; use \"process\" or \"tmux\"",
                c.agent.session
            )));
        }
        if c.memory.max_text_len == 0 {
            return Err(err("memory.max_text_len must be at least 1".into()));
        }
        if let Some(t) = &c.serve.token
            && (t.chars().count() < 16 || t.chars().any(|c| !c.is_ascii_graphic()))
        {
            return Err(err(
                "serve.token must be at least 16 printable ASCII characters without spaces".into(),
            ));
        }
        Ok(c)
    }

    /// The store URL: `WARDEN_STORE_URL` (from the environment, else from the
    /// [`CREDENTIALS_VAR`] file) takes precedence over `[store] url`.
    pub fn store_url(&self) -> String {
        match credential("WARDEN_STORE_URL") {
            Some(u) if !u.trim().is_empty() => u,
            _ => self.store.url.clone(),
        }
    }
}

/// Variables that can carry the store's password. Nothing Warden starts for a task (an
/// agent session, a check, the session host) sees them: agents print their environment
/// into transcripts that leave the machine. Warden's own calls from a session find them
/// through the [`CREDENTIALS_VAR`] file instead.
pub const SECRET_VARS: [&str; 2] = ["WARDEN_STORE_URL", "PGPASSWORD"];

/// Names a file (mode 0600, `NAME=value` lines) holding the [`SECRET_VARS`] the
/// supervisor was given, so Warden's own calls from inside a session reach the store.
pub const CREDENTIALS_VAR: &str = "WARDEN_CREDENTIALS";

/// One of the [`SECRET_VARS`]: from the environment, else from the file named by
/// [`CREDENTIALS_VAR`] (unreadable or missing reads as unset).
pub fn credential(name: &str) -> Option<String> {
    if let Some(v) = std::env::var(name).ok().filter(|v| !v.is_empty()) {
        return Some(v);
    }
    let file = std::env::var_os(CREDENTIALS_VAR)?;
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k == name && !v.is_empty()).then(|| v.to_owned())
    })
}

/// Writes the [`SECRET_VARS`] this process holds (see [`credential`]) to `path`, mode
/// 0600, and returns `Some(path)`; with none set, removes a stale file and returns `None`.
pub fn write_credentials(
    path: &std::path::Path,
) -> Result<Option<std::path::PathBuf>, crate::files::FileError> {
    let mut text = String::new();
    for name in SECRET_VARS {
        // A value with a line break cannot be a URL or a password line; leave it out.
        if let Some(v) = credential(name).filter(|v| !v.contains(['\n', '\r'])) {
            text.push_str(&format!("{name}={v}\n"));
        }
    }
    if text.is_empty() {
        return crate::files::remove_if_present(path).map(|()| None);
    }
    crate::files::write_private(path, text.as_bytes())?;
    Ok(Some(path.to_path_buf()))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_file_is_the_defaults() {
        let c = Config::parse(DEFAULT_TOML, "warden.toml").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(Config::parse("", "x").unwrap(), Config::default());
    }

    #[test]
    fn bad_files() {
        let check = |text: &str, needle: &str| {
            let e = Config::parse(text, "warden.toml").unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        };
        check("[limits]\nmax_atempts = 3\n", "max_atempts");
        check("[limits]\nmax_attempts = 0\n", "at least 1");
        check("[agent]\nsession = \"screen\"\n", "tmux");
        check("[store\n", "warden.toml");
        check("[serve]\ntoken = \"short\"\n", "serve.token");
        check(
            "[serve]\ntoken = \"has a space in it, long enough\"\n",
            "serve.token",
        );
        check("[serve]\nport = 1\n", "port");
    }

    #[test]
    fn serve_section() {
        let c = Config::parse(
            "[serve]\naddr = \"0.0.0.0:7777\"\ntoken = \"0123456789abcdef\"\n",
            "warden.toml",
        )
        .unwrap();
        assert_eq!(c.serve.addr.as_deref(), Some("0.0.0.0:7777"));
        assert_eq!(c.serve.token.as_deref(), Some("0123456789abcdef"));
        assert!(!format!("{c:?}").contains("0123456789abcdef"));
    }
}
