//! `.warden/warden.toml`: every key optional, defaults as DESIGN.md section 4 lists them.
//!
//! Unknown keys are errors, so a typo never silently falls back to a default.

use serde::{Deserialize, Serialize};
use warden_core::model::{AgentPreset, Limits, Role};

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

/// `[agent]`: which agent harness sessions run and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// `claude`, `codex`, `aider` or `custom`. Unset: `custom` when `command` is set (the
    /// configuration of Warden before presets), else `claude`. Read it through
    /// [`AgentConfig::default_preset`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<AgentPreset>,
    /// The argv template of the `custom` preset: `{prompt}`, `{prompt_file}`,
    /// `{task_id}`, `{worktree}`, `{role}`; `{{` and `}}` are literal braces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// `process` or `tmux`.
    pub session: String,
    /// Environment variables sessions see besides the basics (`HOME`, `PATH`, the locale,
    /// …, see [`BASE_ENV`]) and Warden's own: the agent's API key, for one. A trailing `*`
    /// matches a prefix (`ANTHROPIC_*`).
    pub pass_env: Vec<String>,
    /// How many times the stop hook sends an agent back to write its artifact before it
    /// lets the session end (and exit monitoring counts the crash).
    pub stop_hook_blocks: u32,
    /// `[agent.claude]`: the Claude Code preset.
    pub claude: PresetConfig,
    /// `[agent.codex]`: the Codex preset.
    pub codex: PresetConfig,
    /// `[agent.aider]`: the aider preset.
    pub aider: PresetConfig,
    /// `[agent.custom]`: per-role arguments added to `command`.
    pub custom: PresetConfig,
}

/// The old default `command` (before presets): read as the `claude` preset, which runs
/// Claude Code the way it works unattended.
const OLD_DEFAULT_COMMAND: &[&str] = &["claude", "-p", "{prompt}"];

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            preset: None,
            command: None,
            session: "process".into(),
            pass_env: Vec::new(),
            stop_hook_blocks: 3,
            claude: PresetConfig::default(),
            codex: PresetConfig::default(),
            aider: PresetConfig::default(),
            custom: PresetConfig::default(),
        }
    }
}

impl AgentConfig {
    /// The preset of tasks that name none.
    pub fn default_preset(&self) -> AgentPreset {
        match (self.preset, &self.command) {
            (Some(p), _) => p,
            (None, Some(c))
                if c.iter()
                    .map(String::as_str)
                    .ne(OLD_DEFAULT_COMMAND.iter().copied()) =>
            {
                AgentPreset::Custom
            }
            (None, _) => AgentPreset::Claude,
        }
    }

    /// The settings of one preset.
    pub fn preset(&self, p: AgentPreset) -> &PresetConfig {
        match p {
            AgentPreset::Claude => &self.claude,
            AgentPreset::Codex => &self.codex,
            AgentPreset::Aider => &self.aider,
            AgentPreset::Custom => &self.custom,
        }
    }

    /// The program a preset runs: `[agent.<preset>] program`, else the harness's usual
    /// name; for `custom`, the first word of `command`.
    pub fn program(&self, p: AgentPreset) -> Option<&str> {
        match p {
            AgentPreset::Custom => self.custom_command().first().map(String::as_str),
            other => Some(
                self.preset(other)
                    .program
                    .as_deref()
                    .unwrap_or(match other {
                        AgentPreset::Claude => "claude",
                        AgentPreset::Codex => "codex",
                        _ => "aider",
                    }),
            ),
        }
    }

    /// The `custom` preset's argv template (empty when none is configured).
    pub fn custom_command(&self) -> &[String] {
        self.command.as_deref().unwrap_or_default()
    }

    /// The extra arguments of a preset for a role: the role's own `args` when it has
    /// them, else the preset's.
    pub fn args(&self, p: AgentPreset, role: Role) -> &[String] {
        let c = self.preset(p);
        let own = match role {
            Role::Worker => &c.worker.args,
            Role::Reviewer => &c.reviewer.args,
        };
        own.as_deref().unwrap_or(&c.args)
    }

    /// The variables a session of this preset sees of Warden's environment: names, or
    /// prefixes ending in `*` — [`BASE_ENV`], the preset's own configuration variables,
    /// and `pass_env`. The store's secrets never pass, whatever matches them.
    pub fn env_patterns(&self, p: AgentPreset) -> Vec<String> {
        let own: &[&str] = match p {
            AgentPreset::Claude => &["CLAUDE_CONFIG_DIR"],
            AgentPreset::Codex => &["CODEX_HOME"],
            _ => &[],
        };
        BASE_ENV
            .iter()
            .chain(own)
            .map(|s| s.to_string())
            .chain(self.pass_env.iter().cloned())
            .collect()
    }

    /// Does a session of this preset see the variable `name`? See [`Self::env_patterns`].
    pub fn passes_env(&self, p: AgentPreset, name: &str) -> bool {
        !SECRET_VARS.contains(&name)
            && self
                .env_patterns(p)
                .iter()
                .any(|pat| env_matches(pat, name))
    }

    fn check(&self) -> Result<(), String> {
        match (self.preset, &self.command) {
            (Some(AgentPreset::Custom), None) => {
                return Err("agent.preset is \"custom\" but agent.command is not set; give the argv, e.g. command = [\"my-agent\", \"{prompt_file}\"]".into());
            }
            (Some(p), Some(_)) if p != AgentPreset::Custom => {
                return Err(format!(
                    "agent.command is only for preset = \"custom\"; remove it, or set the {p} preset's program and args in [agent.{p}]"
                ));
            }
            (_, Some(c)) if c.is_empty() || c[0].is_empty() => {
                return Err("agent.command must name a program".into());
            }
            _ => {}
        }
        if self.custom.program.is_some() {
            return Err(
                "agent.custom.program is not used: the custom preset runs agent.command".into(),
            );
        }
        for (i, pat) in self.pass_env.iter().enumerate() {
            let name = pat.strip_suffix('*').unwrap_or(pat);
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!(
                    "agent.pass_env[{i}] is {pat:?}; give variable names (letters, digits, '_'), or a prefix ending in '*'"
                ));
            }
            if let Some(s) = SECRET_VARS.iter().find(|s| env_matches(pat, s)) {
                return Err(format!(
                    "agent.pass_env[{i}] ({pat}) would give sessions {s}, the store's secret; sessions reach the store through Warden's credentials file instead"
                ));
            }
        }
        for p in AgentPreset::ALL {
            if let Some(prog) = self
                .preset(*p)
                .program
                .as_deref()
                .filter(|_| *p != AgentPreset::Custom)
                && prog.is_empty()
            {
                return Err(format!(
                    "agent.{p}.program is empty; name the program (on PATH) or its path"
                ));
            }
            let c = self.preset(*p);
            let lists = [
                ("args", Some(&c.args)),
                ("worker.args", c.worker.args.as_ref()),
                ("reviewer.args", c.reviewer.args.as_ref()),
            ];
            for (what, list) in lists {
                for a in list.into_iter().flatten() {
                    check_placeholders(a).map_err(|e| format!("agent.{p}.{what}: {e}"))?;
                }
            }
        }
        for a in self.custom_command() {
            check_placeholders(a).map_err(|e| format!("agent.command: {e}"))?;
        }
        Ok(())
    }
}

/// `[agent.<preset>]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PresetConfig {
    /// The program: a name looked up on `PATH`, or a path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// Arguments added to the preset's command line (a model, an effort level, …);
    /// placeholders as in `agent.command`.
    pub args: Vec<String>,
    /// `[agent.<preset>.worker]`.
    pub worker: RoleConfig,
    /// `[agent.<preset>.reviewer]`.
    pub reviewer: RoleConfig,
}

/// `[agent.<preset>.worker]`, `[agent.<preset>.reviewer]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoleConfig {
    /// Replaces the preset's `args` for this role (e.g. another model for the reviewer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
}

/// What every session sees of Warden's own environment, whatever `pass_env` says: what
/// programs need to run (home, user, shell, terminal, locale, temporary and XDG
/// directories, git's identity). Nothing here holds a secret. A trailing `*` matches a
/// prefix.
pub const BASE_ENV: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
];

/// Does `name` match the pattern (a name, or a prefix ending in `*`)?
pub fn env_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// The placeholders of an agent's command line.
pub const ARGV_PLACEHOLDERS: &[&str] = &["prompt", "prompt_file", "task_id", "worktree", "role"];

/// Expands the placeholders of one argument: `{name}` (lower-case letters and `_`) must be
/// one of [`ARGV_PLACEHOLDERS`] and is replaced by `value(name)`; `{{` and `}}` are
/// literal braces; any other brace is literal (`${HOME}`, JSON).
pub fn expand_placeholders(arg: &str, value: &dyn Fn(&str) -> String) -> Result<String, String> {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("{{").or_else(|| tail.strip_prefix("}}")) {
            out.push_str(&tail[..1]);
            rest = t;
            continue;
        }
        let name_len = tail[1..]
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len() - 1);
        let name = &tail[1..1 + name_len];
        if tail.starts_with('{') && !name.is_empty() && tail[1 + name_len..].starts_with('}') {
            if !ARGV_PLACEHOLDERS.contains(&name) {
                return Err(format!(
                    "unknown placeholder {{{name}}} in {arg:?}; use one of {{prompt}}, {{prompt_file}}, {{task_id}}, {{worktree}}, {{role}}, or write {{{{ and }}}} for literal braces"
                ));
            }
            out.push_str(&value(name));
            rest = &tail[2 + name_len..];
        } else {
            out.push_str(&tail[..1]);
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Checks an argument's placeholders without expanding them.
pub fn check_placeholders(arg: &str) -> Result<(), String> {
    expand_placeholders(arg, &|_| String::new()).map(drop)
}

/// `[memory]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// History entries kept.
    pub max_history: usize,
    /// Characters per string.
    pub max_text_len: usize,
    /// Items kept in each other list (goals, constraints, decisions, hypotheses, open
    /// issues): the most recent.
    pub max_items: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_history: 3,
            max_text_len: 256,
            max_items: 50,
        }
    }
}

/// Can `token` be the web console's access token: at least 16 characters, each one a
/// URL and a cookie carry as it is. A `;` cut the cookie short, a `#` or `&` the
/// printed URL, and the person's browser was refused with the right token.
pub fn token_fits(token: &str) -> bool {
    token.len() >= 16
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'))
}

/// The file `warden init` writes: every default, commented, so people see what exists.
pub const DEFAULT_TOML: &str = r#"# Warden configuration. Every key is optional; these are the defaults.

[store]
url = "sqlite:.warden/warden.db"   # or postgres://… ; WARDEN_STORE_URL overrides
busy_timeout_ms = 5000
lease_ttl_s = 30                   # a runner's lease on a task; renewed at a third of it

[agent]
preset = "claude"          # claude, codex, aider, or custom (then command = [...] is the argv)
session = "process"        # or "tmux"
pass_env = []              # variables sessions may see besides the basics, e.g. ["ANTHROPIC_API_KEY"]
stop_hook_blocks = 3       # times the stop hook sends an agent back for its Handoff or verdict
# command = ["my-agent", "--prompt-file", "{prompt_file}"]   # custom only; also {prompt}
#                                                           # {task_id} {worktree} {role}

# A preset's program and extra arguments, for every role or one:
# [agent.claude]
# program = "claude"       # a name on PATH, or a path
# args = ["--model", "opus"]
# [agent.claude.reviewer]
# args = ["--model", "sonnet"]

[limits]
max_attempts = 3
crash_threshold = 2
max_review_rounds = 2
phase_timeout_s = 3600
handoff_grace_s = 30       # a worker may go on this long after its hand-off, then it is stopped
kill_after_s = 5           # a stopped session gets this long between TERM and KILL
retry_backoff_s = 2        # wait before the 2nd attempt of shell/process work; doubles after
retry_backoff_max_s = 300
session_log_mib = 1024     # output a session may write before it is killed; 0: no limit

[memory]
max_history = 3
max_text_len = 256
max_items = 50             # per list (goals, decisions, …): the most recent are kept
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
        // SQLite takes its busy timeout in milliseconds as a C int.
        if c.store.busy_timeout_ms > i32::MAX as u64 {
            return Err(err(format!(
                "store.busy_timeout_ms is {}; it must be at most {} (about 24 days)",
                c.store.busy_timeout_ms,
                i32::MAX
            )));
        }
        c.agent.check().map_err(err)?;
        if c.agent.session != "process" && c.agent.session != "tmux" {
            return Err(err(format!(
                "agent.session is {:?}; use \"process\" or \"tmux\"",
                c.agent.session
            )));
        }
        if c.memory.max_text_len == 0 {
            return Err(err("memory.max_text_len must be at least 1".into()));
        }
        if c.memory.max_items == 0 {
            return Err(err("memory.max_items must be at least 1".into()));
        }
        if let Some(t) = &c.serve.token
            && !token_fits(t)
        {
            return Err(err(
                "serve.token must be at least 16 characters of A-Z a-z 0-9 . _ ~ - (it travels in a URL and a cookie)".into(),
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
        let mut d = Config::default();
        d.agent.preset = Some(AgentPreset::Claude);
        assert_eq!(c, d);
        assert_eq!(Config::parse("", "x").unwrap(), Config::default());
        assert_eq!(c.agent.default_preset(), AgentPreset::Claude);
        assert_eq!(
            Config::default().agent.default_preset(),
            AgentPreset::Claude
        );
    }

    #[test]
    fn presets_and_the_configuration_before_them() {
        let preset = |text: &str| Config::parse(text, "w").unwrap().agent.default_preset();
        // A command of one's own, written before presets existed, is the custom preset;
        // the old default command is the claude preset (which runs Claude Code unattended).
        assert_eq!(
            preset("[agent]\ncommand = [\"my-agent\", \"{prompt_file}\"]\n"),
            AgentPreset::Custom
        );
        assert_eq!(
            preset("[agent]\ncommand = [\"claude\", \"-p\", \"{prompt}\"]\n"),
            AgentPreset::Claude
        );
        assert_eq!(preset("[agent]\npreset = \"codex\"\n"), AgentPreset::Codex);
        let c = Config::parse(
            "[agent]\npreset = \"aider\"\n[agent.aider]\nprogram = \"/opt/aider\"\nargs = [\"--model\", \"a\"]\n[agent.aider.reviewer]\nargs = [\"--model\", \"b\"]\n",
            "w",
        )
        .unwrap()
        .agent;
        assert_eq!(c.program(AgentPreset::Aider), Some("/opt/aider"));
        assert_eq!(c.program(AgentPreset::Claude), Some("claude"));
        assert_eq!(c.args(AgentPreset::Aider, Role::Worker), ["--model", "a"]);
        assert_eq!(c.args(AgentPreset::Aider, Role::Reviewer), ["--model", "b"]);
    }

    #[test]
    fn sessions_see_the_basics_and_what_pass_env_lists() {
        let c = Config::parse(
            "[agent]\npass_env = [\"ANTHROPIC_API_KEY\", \"MY_*\"]\n",
            "w",
        )
        .unwrap()
        .agent;
        let sees = |p, n| c.passes_env(p, n);
        assert!(sees(AgentPreset::Claude, "HOME"));
        assert!(sees(AgentPreset::Claude, "LC_ALL"));
        assert!(sees(AgentPreset::Claude, "ANTHROPIC_API_KEY"));
        assert!(sees(AgentPreset::Codex, "MY_TOKEN"));
        assert!(sees(AgentPreset::Claude, "CLAUDE_CONFIG_DIR"));
        assert!(!sees(AgentPreset::Aider, "CLAUDE_CONFIG_DIR"));
        assert!(!sees(AgentPreset::Claude, "OPENAI_API_KEY"));
        assert!(!sees(AgentPreset::Claude, "AWS_SECRET_ACCESS_KEY"));
        assert!(!sees(AgentPreset::Claude, "WARDEN_STORE_URL"));
        assert!(!sees(AgentPreset::Claude, "PGPASSWORD"));
    }

    #[test]
    fn placeholders() {
        let v = |n: &str| format!("<{n}>");
        let check =
            |arg: &str, out: &str| assert_eq!(expand_placeholders(arg, &v).unwrap(), out, "{arg}");
        check("{prompt}", "<prompt>");
        check("--file={prompt_file}", "--file=<prompt_file>");
        check(
            "{task_id}-{role}@{worktree}",
            "<task_id>-<worker>@<worktree>"
                .replace("<worker>", "<role>")
                .as_str(),
        );
        check("{{prompt}}", "{prompt}");
        check("${HOME}/x", "${HOME}/x");
        check("{\"a\": 1}", "{\"a\": 1}");
        check("a}b{", "a}b{");
        check("{}", "{}");
        let e = expand_placeholders("{promt}", &v).unwrap_err();
        assert!(e.contains("{promt}") && e.contains("{prompt}"), "{e}");
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
        check(
            "[agent]\ncommand = [\"echo\", \"{promt}\"]\n",
            "unknown placeholder {promt}",
        );
        check("[agent]\npreset = \"custom\"\n", "agent.command is not set");
        check(
            "[agent]\npreset = \"codex\"\ncommand = [\"x\"]\n",
            "only for preset = \"custom\"",
        );
        check("[agent]\ncommand = []\n", "must name a program");
        check("[agent]\npreset = \"gemini\"\n", "gemini");
        check("[agent]\npass_env = [\"WARDEN_*\"]\n", "WARDEN_STORE_URL");
        check("[agent]\npass_env = [\"A B\"]\n", "pass_env[0]");
        check("[agent.claude]\nargs = [\"{rol}\"]\n", "agent.claude.args");
        check("[agent.claude]\nmodel = \"x\"\n", "model");
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
