//! Live updates. One watcher thread sleeps on the store's change signal
//! (`Store::wait_for_change`: SQLite's data version, PostgreSQL's LISTEN/NOTIFY), and on
//! every change rebuilds the board and publishes what differs; each page holds one
//! server-sent event stream that gets the board once and the updates after it. A second
//! stream per open detail pane follows one task's output.log and TASK.md, which change
//! without a commit.

use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, broadcast, watch};
use warden_app::App;
use warden_core::event::Actor;
use warden_core::failure::Failure;
use warden_store::Workspace;
use warden_store::files;

use crate::board::{self, Board};

/// How long the watcher sleeps on the change signal before it checks whether to stop.
const WAIT: Duration = Duration::from_millis(250);
/// How often the supervisors are looked at when nothing was committed.
const SUPERVISORS_EVERY: Duration = Duration::from_secs(1);
/// How often an open detail pane's files are looked at.
const FILE_POLL: Duration = Duration::from_millis(250);
/// The most of output.log sent at once: the tail on open, or what was appended.
const TAIL_BYTES: u64 = 64 * 1024;
/// Keep-alive comments on idle streams, so proxies do not close them.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// An update as sent: its generation and its JSON, serialized once for every page.
#[derive(Debug)]
pub struct Published {
    /// The generation.
    pub generation: u64,
    /// The update, as JSON.
    pub json: String,
}

/// The latest board and the channel of updates.
#[derive(Debug)]
pub struct Live {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    // The board is serialized when a page opens, not at every change: pages open
    // rarely, changes come often.
    latest: RwLock<Arc<Board>>,
    updates: broadcast::Sender<Arc<Published>>,
}

impl Live {
    /// The latest board.
    pub fn latest(&self) -> Arc<Board> {
        match self.latest.read() {
            Ok(g) => Arc::clone(&g),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    fn publish(&self, board: Board, update: &board::Update) {
        let b = Arc::new(board);
        match self.latest.write() {
            Ok(mut g) => *g = b,
            Err(p) => *p.into_inner() = b,
        }
        // No receiver (no page open) is not an error.
        let _ = self.updates.send(Arc::new(Published {
            generation: update.generation,
            json: serde_json::to_string(update).unwrap_or_default(),
        }));
    }
}

/// Starts the watcher on its own thread and connection; returns once the first board is
/// built. It stops when `stop` is set.
pub fn start(ws: &Workspace, stop: Arc<AtomicBool>) -> Result<Arc<Live>, Failure> {
    let (ready_tx, ready) = std::sync::mpsc::channel::<Result<Arc<Live>, Failure>>();
    let ws = ws.clone();
    std::thread::Builder::new()
        .name("warden-web-watch".into())
        .spawn(move || {
            let first = App::open(ws, Actor::Person).and_then(|app| {
                let seen = app.eng.store.data_version()?;
                let board = board::build(&app, 1)?;
                Ok((app, seen, board))
            });
            let (app, seen, board) = match first {
                Ok(x) => x,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let (updates, _) = broadcast::channel(64);
            let live = Arc::new(Live {
                backend: board.backend,
                latest: RwLock::new(Arc::new(board)),
                updates,
            });
            let _ = ready_tx.send(Ok(Arc::clone(&live)));
            watch_loop(&app, &live, seen, &stop);
        })
        .map_err(|e| Failure::internal(format!("cannot start the watcher thread: {e}")))?;
    ready
        .recv()
        .map_err(|_| Failure::internal("the watcher thread died while opening the store"))?
}

fn watch_loop(app: &App, live: &Live, mut seen: u64, stop: &AtomicBool) {
    let mut looked = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let v = match app.eng.store.wait_for_change(seen, WAIT) {
            Ok(v) => v,
            Err(e) => {
                warden_store::say!("warden serve: waiting for changes failed: {e}; trying again");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        if v == seen {
            // A supervisor starts, stops or finds a step failing without a commit: its
            // announcement is a file, looked at once a second (with the leases, a query).
            if looked.elapsed() < SUPERVISORS_EVERY {
                continue;
            }
            looked = std::time::Instant::now();
            let board = live.latest();
            let now = board::supervisors(app);
            if now != board.summary.supervisors {
                let mut next = Board::clone(&board);
                next.generation += 1;
                next.summary.supervisors = now;
                if let Some(update) = board::diff(&board, &next) {
                    live.publish(next, &update);
                }
            }
            continue;
        }
        // The version is read before the tasks, so a commit in between is seen again at
        // the next wait rather than lost.
        seen = v;
        let board = live.latest();
        match board::build(app, board.generation + 1) {
            Ok(next) => {
                if let Some(update) = board::diff(&board, &next) {
                    live.publish(next, &update);
                }
            }
            Err(e) => warden_store::say!("warden serve: reading the tasks failed: {}", e.text()),
        }
    }
}

/// The board stream of a page: the latest board, then every update after it; a fresh
/// board when the page fell too far behind. Ends at shutdown.
pub fn board_stream(
    live: Arc<Live>,
    shutdown: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    // Subscribe before reading the board: nothing can fall between the two.
    let rx = live.updates.subscribe();
    let first = live.latest();
    struct St {
        live: Arc<Live>,
        rx: broadcast::Receiver<Arc<Published>>,
        seen: u64,
        first: Option<Arc<Board>>,
        shutdown: watch::Receiver<bool>,
        _permit: OwnedSemaphorePermit,
    }
    let st = St {
        live,
        rx,
        seen: first.generation,
        first: Some(first),
        shutdown,
        _permit: permit,
    };
    let s = stream::unfold(st, |mut st| async move {
        if let Some(b) = st.first.take() {
            let e = board_event(&b).retry(Duration::from_secs(1));
            return Some((Ok(e), st));
        }
        loop {
            if *st.shutdown.borrow() {
                return None;
            }
            tokio::select! {
                _ = st.shutdown.changed() => return None,
                r = st.rx.recv() => match r {
                    Ok(u) if u.generation > st.seen => {
                        st.seen = u.generation;
                        let e = Event::default()
                            .event("update")
                            .id(u.generation.to_string())
                            .data(&u.json);
                        return Some((Ok(e), st));
                    }
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let b = st.live.latest();
                        st.seen = b.generation;
                        return Some((Ok(board_event(&b)), st));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            }
        }
    });
    Sse::new(s).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

fn board_event(b: &Board) -> Event {
    Event::default()
        .event("board")
        .id(b.generation.to_string())
        .data(serde_json::to_string(b).unwrap_or_default())
}

/// An `output` event: text to show, replacing what is shown when `reset`.
#[derive(Debug, Serialize)]
struct Output {
    reset: bool,
    text: String,
    note: Option<String>,
}

/// How many of the last bytes sent a stream checks are still in the log.
const LAST_BYTES: usize = 64;

/// Where one task's stream is in its files.
#[derive(Debug)]
struct Follow {
    dir: PathBuf,
    log: PathBuf,
    task_md: PathBuf,
    /// Bytes of output.log already sent (`None` before the first look).
    offset: Option<u64>,
    /// The file those bytes came from (device, inode), and the last of them as read:
    /// a log replaced, or truncated and written again past where the stream was, is
    /// sent again from its start instead of from a stale offset.
    file: Option<(u64, u64)>,
    last: Vec<u8>,
    /// Bytes read but not yet sent: the start of a UTF-8 character cut by the read.
    pending: Vec<u8>,
    /// TASK.md's size and modification time when last looked at.
    task_md_stamp: Option<(u64, Option<SystemTime>)>,
}

/// The stream of one task's files: the tail of output.log, then what is appended to it
/// (`output` events), and a `taskmd` event whenever TASK.md changes (the page reloads
/// the detail). Ends at shutdown or when the page closes it.
pub fn task_stream(
    ws: &Workspace,
    id: &warden_core::model::TaskId,
    shutdown: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
    let follow = Follow {
        dir: ws.dir.clone(),
        log: ws.output_log(id),
        task_md: ws.task_file(id),
        offset: None,
        file: None,
        last: Vec::new(),
        pending: Vec::new(),
        task_md_stamp: stamp(&ws.task_file(id)),
    };
    let display = ws.display(&ws.output_log(id));
    struct St {
        follow: Option<Follow>,
        display: String,
        queue: Vec<Event>,
        shutdown: watch::Receiver<bool>,
        tick: tokio::time::Interval,
        _permit: OwnedSemaphorePermit,
    }
    let mut tick = tokio::time::interval(FILE_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let st = St {
        follow: Some(follow),
        display,
        queue: Vec::new(),
        shutdown,
        tick,
        _permit: permit,
    };
    let s = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(e) = st.queue.pop() {
                return Some((Ok(e), st));
            }
            if *st.shutdown.borrow() {
                return None;
            }
            tokio::select! {
                _ = st.shutdown.changed() => return None,
                _ = st.tick.tick() => {}
            }
            let follow = st.follow.take()?;
            let display = st.display.clone();
            let (follow, events) =
                match tokio::task::spawn_blocking(move || look(follow, &display)).await {
                    Ok(x) => x,
                    Err(_) => return None,
                };
            st.follow = Some(follow);
            // Popped from the end: push in reverse.
            st.queue = events.into_iter().rev().collect();
        }
    });
    Sse::new(s).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

fn stamp(path: &Path) -> Option<(u64, Option<SystemTime>)> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.len(), m.modified().ok()))
}

/// One look at a task's files: the events to send.
fn look(mut f: Follow, display: &str) -> (Follow, Vec<Event>) {
    let mut events = Vec::new();
    let now = stamp(&f.task_md);
    if now != f.task_md_stamp {
        f.task_md_stamp = now;
        events.push(Event::default().event("taskmd").data("{}"));
    }
    let out = match read_log(&mut f, display) {
        Ok(o) => o,
        Err(note) => {
            // Said once; a file that appears later is read from its start.
            let first = f.offset.is_none();
            f.offset = Some(0);
            first.then_some(Output {
                reset: true,
                text: String::new(),
                note: Some(note),
            })
        }
    };
    if let Some(o) = out {
        events.push(
            Event::default()
                .event("output")
                .data(serde_json::to_string(&o).unwrap_or_default()),
        );
    }
    (f, events)
}

/// Reads what output.log has that was not sent; `Err` with a note when it cannot be read
/// (missing, a link, not a regular file).
fn read_log(f: &mut Follow, display: &str) -> Result<Option<Output>, String> {
    files::check_no_links(&f.dir, &f.log)
        .map_err(|_| format!("{display} is not a regular file inside the workspace"))?;
    let meta = match std::fs::symlink_metadata(&f.log) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Err(format!("{display} is not a regular file")),
        Err(_) => {
            return Err(
                "no output captured yet (it appears once `warden run` starts a session)".into(),
            );
        }
    };
    let len = meta.len();
    let io = |e: std::io::Error| format!("{display}: {e}");
    let mut file = std::fs::File::open(&f.log).map_err(io)?;
    let this = {
        use std::os::unix::fs::MetadataExt;
        Some((meta.dev(), meta.ino()))
    };
    // Still the bytes that were sent, in the same file? Else it was rewritten.
    let rewritten = f.offset.is_some_and(|o| {
        this != f.file
            || (len >= o && !f.last.is_empty() && {
                let mut seen = vec![0u8; f.last.len()];
                file.seek(SeekFrom::Start(o - f.last.len() as u64)).is_err()
                    || file.read_exact(&mut seen).is_err()
                    || seen != f.last
            })
    });
    if rewritten {
        f.offset = None;
    }
    f.file = this;
    let (start, reset) = match f.offset {
        // First look, the file shrank (rewritten), or too much to send: the tail.
        None => (len.saturating_sub(TAIL_BYTES), true),
        Some(o) if len < o || len - o > TAIL_BYTES => (len.saturating_sub(TAIL_BYTES), true),
        Some(o) if len == o => return Ok(None),
        Some(o) => (o, false),
    };
    file.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(len - start).read_to_end(&mut bytes).map_err(io)?;
    f.offset = Some(start + bytes.len() as u64);
    // What a later look checks is still there (with what came before, when few bytes
    // were read this time).
    let mut last = if reset {
        Vec::new()
    } else {
        std::mem::take(&mut f.last)
    };
    last.extend_from_slice(&bytes);
    let keep = last.len().saturating_sub(LAST_BYTES);
    last.drain(..keep);
    f.last = last;
    let mut note = None;
    if reset {
        f.pending.clear();
        if start > 0 {
            // The first line is probably cut in the middle: drop it.
            match bytes.iter().position(|b| *b == b'\n') {
                Some(nl) => {
                    bytes.drain(..=nl);
                }
                None => {
                    // One line longer than the tail (a program's JSON on one line): its
                    // end, from a whole character, said so. It showed nothing.
                    let partial = bytes.iter().take_while(|b| (**b & 0xC0) == 0x80).count();
                    bytes.drain(..partial);
                    note = Some(format!(
                        "the last line is longer than {} KiB: only its end is shown ({display} holds it all)",
                        TAIL_BYTES / 1024
                    ));
                }
            }
        }
    } else {
        let mut all = std::mem::take(&mut f.pending);
        all.extend_from_slice(&bytes);
        bytes = all;
    }
    // Keep an incomplete UTF-8 character at the end for the next look.
    let cut = match std::str::from_utf8(&bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    };
    f.pending = bytes.split_off(cut);
    Ok(Some(Output {
        reset,
        text: String::from_utf8_lossy(&bytes).into_owned(),
        note,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn follow(dir: &Path) -> Follow {
        Follow {
            dir: dir.to_path_buf(),
            log: dir.join("output.log"),
            task_md: dir.join("TASK.md"),
            offset: None,
            file: None,
            last: Vec::new(),
            pending: Vec::new(),
            task_md_stamp: None,
        }
    }

    /// A last line longer than the tail is shown from a whole character, with a note.
    /// Before, nothing was shown at all.
    #[test]
    fn a_line_longer_than_the_tail_shows_its_end() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("output.log");
        let mut text = "first line\n".to_owned();
        text.push_str(&"é".repeat(40_000));
        std::fs::write(&log, &text).unwrap();
        let mut f = follow(d.path());
        let o = read_log(&mut f, "t").unwrap().unwrap();
        assert!(o.reset);
        assert!(
            !o.text.is_empty() && o.text.chars().all(|c| c == 'é'),
            "{}",
            o.text.len()
        );
        assert!(
            o.note
                .as_deref()
                .is_some_and(|n| n.contains("only its end is shown")),
            "{:?}",
            o.note
        );
    }

    /// A log truncated and written again past where the stream was, or replaced, is
    /// sent again from its start (a reset). Before, the stream went on from its old
    /// offset: the new text lost its first bytes, and no reset was sent.
    #[test]
    fn a_rewritten_log_is_sent_again_from_its_start() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("output.log");
        std::fs::write(&log, "start\n").unwrap();
        let mut f = follow(d.path());
        let o = read_log(&mut f, "log").unwrap().unwrap();
        assert_eq!((o.reset, o.text.as_str()), (true, "start\n"));
        // Appended: only what is new.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .unwrap()
            .write_all(b"more\n")
            .unwrap();
        let o = read_log(&mut f, "log").unwrap().unwrap();
        assert_eq!((o.reset, o.text.as_str()), (false, "more\n"));
        assert!(read_log(&mut f, "log").unwrap().is_none());
        // Truncated in place and written past the old offset.
        std::fs::write(&log, "AAAAAAAAAAAAAA-replaced\n").unwrap();
        let o = read_log(&mut f, "log").unwrap().unwrap();
        assert_eq!(
            (o.reset, o.text.as_str()),
            (true, "AAAAAAAAAAAAAA-replaced\n")
        );
        // Replaced by another file (a rotation).
        let new = d.path().join("new.log");
        std::fs::write(&new, "AAAAAAAAAAAAAA-replaced\nnext\n").unwrap();
        std::fs::rename(&new, &log).unwrap();
        let o = read_log(&mut f, "log").unwrap().unwrap();
        assert_eq!(
            (o.reset, o.text.as_str()),
            (true, "AAAAAAAAAAAAAA-replaced\nnext\n")
        );
    }
}
