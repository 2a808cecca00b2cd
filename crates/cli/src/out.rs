//! Output helpers: stdout that treats a broken pipe as success, colour only on a
//! terminal (and never with `NO_COLOR`), JSON documents, and failures on stderr (one
//! line and its detail, or a JSON object under `--json`).

use std::io::{IsTerminal, Write};

use serde::Serialize;
use warden_core::failure::Failure;
use warden_core::model::{Status, TaskId};

/// Writes text to stdout; a closed pipe (`warden … | head`) ends the process quietly
/// with success, as ripgrep does.
pub fn print(s: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(s.as_bytes()).and_then(|_| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        warden_store::say!("error: cannot write to stdout: {e}");
        std::process::exit(5);
    }
}

/// Prints a line.
pub fn line(s: &str) {
    print(&format!("{s}\n"));
}

/// Prints one JSON document.
pub fn json<T: Serialize + ?Sized>(v: &T) {
    line(&serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into()));
}

/// Prints a failure on stderr and returns its exit status: the headline and detail lines
/// for a person, or `{"error": {code, message, detail, refused}}` under `--json`, so a
/// script never has to parse prose.
pub fn failure(f: &Failure, json: bool) -> u8 {
    if json {
        let doc = serde_json::json!({ "error": f });
        warden_store::say!("{}", serde_json::to_string(&doc).unwrap_or_default());
    } else {
        warden_store::say!("{}", f.text());
    }
    f.code.code()
}

/// What a session wrote, made safe for a terminal when stdout is one: an agent's output
/// must not drive the terminal of the person reading it (OSC 52 writes the clipboard,
/// OSC 0 the window title; others clear the screen or hide text). Colours (SGR: `ESC [
/// digits ; m`), line breaks, tabs and carriage returns pass; every other control
/// character is shown in caret notation (`^[`, `^G`), and a C1 control (U+0080–U+009F)
/// as U+FFFD, as [`one_line`] shows them. Piped or redirected output is left as it was written.
pub fn for_terminal(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !std::io::stdout().is_terminal() {
        return std::borrow::Cow::Borrowed(bytes);
    }
    terminal_safe(bytes)
}

/// See [`for_terminal`]. Bytes that are not UTF-8 are U+FFFD first, so a raw C1 byte
/// (0x9B is CSI to a terminal that reads 8-bit controls), or a C1 character whose two
/// bytes `task log -f` read in two pieces, reaches no terminal. SGR 8 (concealed text)
/// is shown, not obeyed.
pub fn terminal_safe(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let text = String::from_utf8_lossy(bytes);
    let unsafe_char =
        |c: char| (c.is_control() && !matches!(c, '\n' | '\t' | '\r')) || c == '\u{fffd}';
    if !text.chars().any(unsafe_char) {
        return match text {
            std::borrow::Cow::Borrowed(_) => std::borrow::Cow::Borrowed(bytes),
            std::borrow::Cow::Owned(t) => std::borrow::Cow::Owned(t.into_bytes()),
        };
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\u{1b}' && text[i + 1..].starts_with('[') {
            // SGR only: ESC [ then digits and semicolons, then m; not 8 (conceal).
            let params: &str = &text[i + 2..];
            let end = params.find(|ch: char| !(ch.is_ascii_digit() || ch == ';'));
            if let Some(e) = end
                && params[e..].starts_with('m')
                && !params[..e].split(';').any(|p| p == "8")
            {
                out.push_str(&text[i..i + 2 + e + 1]);
                for _ in 0..e + 2 {
                    chars.next();
                }
                continue;
            }
        }
        match c {
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(c as u8 + 0x40));
            }
            '\u{7f}' => out.push_str("^?"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out.into_bytes())
}

/// Is colour wanted on stdout?
pub fn color() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

/// A task a blocked or stuck one waits on, with the status views show of it:
/// `a (cancelled)`, or `a (no such task)`.
pub fn waited_on(id: &TaskId, status: Option<Status>) -> String {
    format!("{id} ({})", status.map_or("no such task", |s| s.as_str()))
}

/// The command that drops `dep` from the `depends_on` of `from`, quoted as a person
/// copies it.
pub fn drop_dependency(from: &TaskId, dep: &TaskId) -> String {
    format!("`{}`", warden_app::edit::drop_command(from, &[dep]))
}

/// A status, coloured for a terminal.
pub fn status(s: Status) -> String {
    if !color() {
        return s.to_string();
    }
    let code = match s {
        Status::Pending => "37",
        Status::Clarification => "35",
        Status::Working => "36",
        Status::AgentReview | Status::Reviewing => "34",
        Status::Stuck => "31;1",
        Status::Done => "32",
        Status::Cancelled => "90",
    };
    format!("\x1b[{code}m{s}\x1b[0m")
}

/// Text an agent or a reporter wrote, made safe for one line of a person's terminal: a
/// line break shows as `⏎`, a tab as a space, any other control character (an ESC
/// that would drive the terminal) in caret notation (`^[`) or as `�`, as is a
/// bidirectional-text control (which would reorder what follows it).
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    let bidi = |c: char| matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}');
    if !text.chars().any(|c| c.is_control() || bidi(c)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' | '\r' => out.push_str(" ⏎ "),
            '\t' => out.push(' '),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push('^');
                out.push(char::from((c as u8) ^ 0x40));
            }
            c if c.is_control() || bidi(c) => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_line_shows_control_characters_without_obeying_them() {
        assert_eq!(super::one_line("plain"), "plain");
        assert_eq!(
            super::one_line("a\r\nb\tc\u{1b}]0;pwned\u{7}d\u{9b}e\u{202e}f"),
            "a ⏎ b c^[]0;pwned^Gd\u{fffd}e\u{fffd}f"
        );
    }

    #[test]
    fn a_sessions_output_cannot_drive_the_terminal() {
        let shown = |b: &[u8]| String::from_utf8_lossy(&super::terminal_safe(b)).into_owned();
        // OSC 52 (clipboard), OSC 0 (title), erase screen, bell: shown, not obeyed.
        assert_eq!(
            shown(b"a\x1b]52;c;cHduZWQ=\x07b\x1b]0;t\x07c\x1b[2Jd\n"),
            "a^[]52;c;cHduZWQ=^Gb^[]0;t^Gc^[[2Jd\n"
        );
        // Colours, tabs, carriage returns and text pass as they are.
        let plain = "\x1b[1;31mred\x1b[0m\tx\r\ny \u{e9}\u{1f600}\n";
        assert_eq!(shown(plain.as_bytes()), plain);
        // A C1 CSI (U+009B) and DEL are shown too.
        assert_eq!(shown("x\u{9b}2Jy\x7f".as_bytes()), "x\u{fffd}2Jy^?");
        // Concealed text is shown as what it is; a raw 8-bit CSI, or a C1 character's
        // two bytes read apart, reach the terminal as U+FFFD.
        assert_eq!(shown(b"a\x1b[8mhidden\x1b[0m"), "a^[[8mhidden\x1b[0m");
        assert_eq!(shown(b"a\x1b[1;8mb"), "a^[[1;8mb");
        assert_eq!(shown(b"x\x9b2J"), "x\u{fffd}2J");
        assert_eq!(shown(b"x\xc2"), "x\u{fffd}");
        assert_eq!(shown(b"\x9by"), "\u{fffd}y");
    }
}
