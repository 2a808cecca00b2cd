//! Drawing the dashboard: one pure function from the [`App`] state (and the time, so
//! ages are stable in tests) to a frame. Only the visible table rows are built, so a
//! frame costs the same with ten tasks or ten thousand.

use jiff::Timestamp;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Borders, Cell, Clear, HighlightSpacing, Padding, Paragraph, Row, Table, TableState, Wrap,
};
use warden_core::model::{Status, Task};
use warden_core::progress::GateStatus;

use crate::app::{App, Detail, Mode};

/// The help line, in the longest form that fits the width.
pub const HELP: [&str; 4] = [
    " ↑↓/jk move · Enter details · a approve · x reject · s respawn · r retry · c cancel · p peek · / filter · q quit",
    " ⏎ details · a approve · x reject · s respawn · r retry · c cancel · p peek · / filter · q quit",
    " ⏎ details  a approve  x reject  s respawn  r retry  c cancel  p peek  / filter  q quit",
    " ⏎ detail a approve x reject s respawn r retry c cancel p peek / find q quit",
];

/// The help line for a screen `width` columns wide.
pub fn help(width: u16) -> &'static str {
    HELP.iter()
        .find(|h| h.chars().count() <= width as usize)
        .unwrap_or(&HELP[3])
}

/// The colour of a status (the CLI's colours).
pub fn status_color(s: Status) -> Color {
    match s {
        Status::Pending => Color::Gray,
        Status::Clarification => Color::Magenta,
        Status::Working => Color::Cyan,
        Status::AgentReview | Status::Reviewing => Color::Blue,
        Status::Stuck => Color::Red,
        Status::Done => Color::Green,
        Status::Cancelled => Color::DarkGray,
    }
}

fn gate_color(g: GateStatus) -> Color {
    match g {
        GateStatus::Executing | GateStatus::Verifying => Color::Cyan,
        GateStatus::Reviewing => Color::Blue,
        GateStatus::Approved => Color::Green,
        GateStatus::Failed => Color::Red,
        GateStatus::Blocked => Color::Yellow,
        GateStatus::Skipped => Color::DarkGray,
    }
}

/// A short age: `42s`, `5m`, `3h`, `12d` (a time in the future counts as `0s`).
pub fn age(now: Timestamp, then: Timestamp) -> String {
    let s = now.as_second().saturating_sub(then.as_second()).max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Draws the whole screen.
pub fn render(frame: &mut Frame, app: &App, now: Timestamp) {
    let area = frame.area();
    let [head, counts, body, status, help_line] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(status_height(app, area)),
        Constraint::Length(1),
    ])
    .areas(area);
    render_header(frame, app, head, counts);
    // The detail pane takes about 45% of the body, once there is room for both.
    let detail_h = if body.height >= 12 {
        (body.height * 45 / 100).clamp(6, 16)
    } else {
        0
    };
    let [table, detail] =
        Layout::vertical([Constraint::Fill(1), Constraint::Length(detail_h)]).areas(body);
    render_table(frame, app, table, now);
    if detail_h > 0 {
        render_detail(frame, app, detail, now);
    }
    render_status(frame, app, status);
    frame.render_widget(
        Paragraph::new(help(area.width)).style(Style::new().fg(Color::DarkGray)),
        help_line,
    );
    match app.mode() {
        Mode::Peek => render_peek(frame, app, area),
        Mode::Detail => render_full_detail(frame, app, body, now),
        _ => {}
    }
}

fn render_header(frame: &mut Frame, app: &App, head: Rect, counts: Rect) {
    let p = app.progress();
    let bar = p.bar();
    let filled = bar.chars().take_while(|c| *c == '#').count();
    let (done, rest) = bar.split_at(filled);
    let line = Line::from(vec![
        Span::styled(" Warden", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(" · {}  ", app.project())),
        Span::styled(done.to_owned(), Style::new().fg(Color::Green)),
        Span::styled(rest.to_owned(), Style::new().fg(Color::DarkGray)),
        Span::raw(format!(
            " {}%  {}/{} leaves · {}",
            p.percentage(),
            p.complete,
            p.total,
            p.status
        )),
    ]);
    let head_used = line.width() as u16;
    frame.render_widget(Paragraph::new(line), head);
    let mut spans = vec![Span::raw(" ")];
    if app.tasks().is_empty() {
        spans.push(Span::styled("no tasks", Style::new().fg(Color::DarkGray)));
    }
    for (i, (s, n)) in app.counts().iter().enumerate() {
        if i > 0 {
            spans.push(Span::raw("  "));
        }
        spans.push(Span::styled(s.as_str(), Style::new().fg(status_color(*s))));
        spans.push(Span::raw(format!(" {n}")));
    }
    if app.dead() > 0 {
        spans.push(Span::raw("  "));
        spans.push(Span::styled(
            format!("✗ {} dead", app.dead()),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    let counts_line = Line::from(spans);
    let counts_used = counts_line.width() as u16;
    frame.render_widget(Paragraph::new(counts_line), counts);
    // Whether anything will move: the supervisors, at the right of the first line; in
    // full, else short, and on a narrow terminal over the end of the counts (it is what
    // a person must see first: at 80 columns it was dropped).
    let sup: Option<(Span, Span)> = match app.supervisors() {
        None => None,
        Some(sups) if warden_app::status::any_alive(sups) => {
            let here: Vec<String> = sups
                .iter()
                .filter(|s| s.alive != Some(false))
                .map(|s| match s.alive {
                    Some(_) => format!("pid {}", s.pid),
                    None => format!("{} pid {}", s.host, s.pid),
                })
                .collect();
            // Tasks whose steps keep failing on a supervisor's side need a person.
            let failing: Vec<&str> = sups
                .iter()
                .flat_map(|s| s.failing.iter().map(|f| f.task.as_str()))
                .collect();
            Some(if failing.is_empty() {
                let style = Style::new().fg(Color::Green);
                (
                    Span::styled(format!("● supervisor {} ", here.join(", ")), style),
                    Span::styled("● supervisor ", style),
                )
            } else {
                let style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
                (
                    Span::styled(
                        format!(
                            "● supervisor {} · ✗ steps failing: {} (`warden status`) ",
                            here.join(", "),
                            failing.join(", ")
                        ),
                        style,
                    ),
                    Span::styled("● ✗ steps failing ", style),
                )
            })
        }
        Some(_) => {
            let style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
            Some((
                Span::styled("○ no supervisor: `warden run` ", style),
                Span::styled("○ no supervisor ", style),
            ))
        }
    };
    if let Some((full, short)) = sup {
        let fits = |sp: &Span, r: Rect, used: u16| r.width > used + sp.width() as u16;
        let (sp, r) = [
            (&full, head, head_used),
            (&full, counts, counts_used),
            (&short, head, head_used),
            (&short, counts, counts_used),
        ]
        .into_iter()
        .find(|(sp, r, used)| fits(sp, *r, *used))
        .map(|(sp, r, _)| (sp, r))
        .unwrap_or((&short, counts));
        let w = (sp.width() as u16).min(r.width);
        let right = Rect {
            x: r.x + r.width - w,
            width: w,
            ..r
        };
        frame.render_widget(Clear, right);
        frame.render_widget(Paragraph::new(Line::from(sp.clone())), right);
    }
}

fn render_table(frame: &mut Frame, app: &App, area: Rect, now: Timestamp) {
    if area.height < 2 {
        return;
    }
    if app.visible().is_empty() {
        let text = if app.tasks().is_empty() {
            vec![
                Line::raw(""),
                Line::raw(" No tasks yet."),
                Line::raw(" Create one with `warden task create ID --title \"…\"`"),
                Line::raw(" or import a plan with `warden plan import plan.json`."),
            ]
        } else {
            vec![
                Line::raw(""),
                Line::raw(format!(" No task matches \"{}\".", app.filter())),
                Line::raw(" Press Esc to clear the filter."),
            ]
        };
        frame.render_widget(Paragraph::new(text), area);
        return;
    }
    // Scroll so the selection stays in view, moving the window as little as possible.
    let rows_h = (area.height - 1) as usize;
    let n = app.visible().len();
    let sel = app.selected();
    let mut offset = app.offset.get().min(n.saturating_sub(rows_h));
    if sel < offset {
        offset = sel;
    } else if sel >= offset + rows_h {
        offset = sel + 1 - rows_h;
    }
    app.offset.set(offset);
    let end = (offset + rows_h).min(n);
    let cols = columns(area.width);
    let rows: Vec<Row> = app.visible()[offset..end]
        .iter()
        .map(|&r| {
            let row = &app.rows()[r];
            let cells = task_cells(&app.tasks()[row.task], row, now);
            Row::new(pick(cells, cols))
        })
        .collect();
    let header = Row::new(pick(
        [
            "ID", "TITLE", "STATUS", "GATE", "TRIES", "CR", "RR", "", "AGE",
        ]
        .map(Cell::new),
        cols,
    ))
    .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let widths = pick(
        [
            Constraint::Fill(2),
            Constraint::Fill(3),
            Constraint::Length(13),
            Constraint::Length(9),
            Constraint::Length(5),
            Constraint::Length(2),
            Constraint::Length(2),
            Constraint::Length(1),
            Constraint::Length(4),
        ],
        cols,
    );
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .highlight_symbol("▸")
        .highlight_spacing(HighlightSpacing::Always);
    let mut state = TableState::new().with_selected(Some(sel - offset));
    frame.render_stateful_widget(table, area, &mut state);
}

/// Which of the nine columns fit in `width`: all from 70 columns on; the title, status,
/// dead mark and age from 40; below that the id, status and dead mark.
fn columns(width: u16) -> [bool; 9] {
    match width {
        70.. => [true; 9],
        40..70 => [true, true, true, false, false, false, false, true, true],
        _ => [true, false, true, false, false, false, false, true, false],
    }
}

fn pick<T>(items: [T; 9], cols: [bool; 9]) -> Vec<T> {
    items
        .into_iter()
        .zip(cols)
        .filter_map(|(x, keep)| keep.then_some(x))
        .collect()
}

fn task_cells(t: &Task, row: &crate::app::Row, now: Timestamp) -> [Cell<'static>; 9] {
    let id = format!("{}{}", "  ".repeat(row.depth.min(8)), t.id());
    let status = Cell::new(row.status.as_str()).style(Style::new().fg(status_color(row.status)));
    let gate = match row.gate {
        Some(g) => Cell::new(g.as_str()).style(Style::new().fg(gate_color(g))),
        None => Cell::new("-"),
    };
    let dead = if t.is_dead() {
        Cell::new("✗").style(Style::new().fg(Color::Red).add_modifier(Modifier::BOLD))
    } else {
        Cell::new("")
    };
    [
        Cell::new(id),
        Cell::new(t.spec.title.clone()),
        status,
        gate,
        Cell::new(format!("{}/{}", t.attempts(), t.spec.max_attempts)),
        Cell::new(count(t.crash_count())),
        Cell::new(count(t.review_round())),
        dead,
        Cell::new(age(now, t.updated_at())),
    ]
}

fn count(n: u32) -> String {
    if n == 0 { "·".into() } else { n.to_string() }
}

fn label(s: &str) -> Span<'static> {
    Span::styled(s.to_owned(), Style::new().fg(Color::DarkGray))
}

fn render_detail(frame: &mut Frame, app: &App, area: Rect, now: Timestamp) {
    let Some(t) = app.selected_task() else {
        frame.render_widget(Block::new().borders(Borders::TOP), area);
        return;
    };
    let block = Block::new()
        .borders(Borders::TOP)
        .padding(Padding::horizontal(1))
        .title(format!(" {} — {} ", t.id(), t.spec.title));
    let [left, right] = framed_halves(frame, block, area);
    let detail = app.detail();
    frame.render_widget(Paragraph::new(summary_lines(app, t, detail)), left);
    frame.render_widget(
        Paragraph::new(activity_lines(detail, right.height as usize, now)),
        right,
    );
}

fn summary_lines<'a>(app: &App, t: &'a Task, detail: Option<&'a Detail>) -> Vec<Line<'a>> {
    let mut lines = Vec::new();
    let status = app.selected_row().map_or(t.status(), |r| r.status);
    let mut first = vec![
        label("status "),
        Span::styled(status.as_str(), Style::new().fg(status_color(status))),
    ];
    if t.is_dead() {
        first.push(Span::styled(
            "  ✗ session dead (s respawns)",
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
    } else if let Some(s) = t.live_session() {
        first.push(Span::raw(format!("  session {s}")));
    }
    if t.respawn_requested() {
        first.push(Span::raw("  respawn requested"));
    }
    lines.push(Line::from(first));
    let gate = app
        .selected_row()
        .and_then(|r| r.gate)
        .map_or("-", |g| g.as_str());
    // A blocked task says what it waits for (its own dependency or a group's).
    let by = app
        .selected_row()
        .and_then(|r| r.blocked_by.as_ref())
        .map_or(String::new(), |(d, s)| {
            format!(" by {d} ({})", s.map_or("no such task", |s| s.as_str()))
        });
    lines.push(Line::from(vec![
        label("gate "),
        Span::raw(gate),
        Span::raw(by),
        label("  tries "),
        Span::raw(format!("{}/{}", t.attempts(), t.spec.max_attempts)),
        label("  crashes "),
        Span::raw(t.crash_count().to_string()),
        label("  round "),
        Span::raw(t.review_round().to_string()),
    ]));
    if !t.spec.depends_on.is_empty() {
        let d: Vec<&str> = t.spec.depends_on.iter().map(|d| d.as_str()).collect();
        lines.push(Line::from(vec![label("needs "), Span::raw(d.join(", "))]));
    }
    if let Some(f) = t.last_failure() {
        lines.push(Line::from(vec![
            label("failure "),
            Span::styled(first_line(f), Style::new().fg(Color::Red)),
        ]));
    }
    let Some(d) = detail else {
        lines.push(Line::from(label("loading…")));
        return lines;
    };
    if t.status() == warden_core::model::Status::Reviewing {
        // The review beside the keys that decide it.
        let verdict = d
            .sections
            .iter()
            .find_map(|s| s.verdict)
            .unwrap_or("no verdict");
        let findings = d
            .texts
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("review"))
            .map(|(_, l)| {
                l.iter()
                    .skip(1)
                    .take(2)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        lines.push(Line::from(vec![
            label("review "),
            Span::styled(
                verdict,
                Style::new()
                    .fg(if verdict == "PASS" {
                        Color::Green
                    } else {
                        Color::Red
                    })
                    .add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!(" {findings}")),
        ]));
        lines.push(Line::from(label(
            "a approves · x rejects with a reason · Enter reads the review",
        )));
    }
    let mut secs = vec![label("TASK.md ")];
    if d.sections.is_empty() {
        secs.push(label("no sections"));
    }
    for (i, s) in d.sections.iter().enumerate() {
        if i > 0 {
            secs.push(label(" · "));
        }
        let style = if s.has_content {
            Style::new()
        } else {
            Style::new().fg(Color::DarkGray)
        };
        let mut text = s.name.clone();
        if let Some(v) = s.verdict {
            text.push(' ');
            text.push_str(v);
        } else if s.has_content {
            text.push_str(" ✓");
        }
        secs.push(Span::styled(text, style));
    }
    lines.push(Line::from(secs));
    for p in &d.problems {
        lines.push(Line::from(Span::styled(
            p.as_str(),
            Style::new().fg(Color::Yellow),
        )));
    }
    if d.memory.is_empty() {
        lines.push(Line::from(vec![label("memory "), label("empty")]));
    } else {
        lines.push(Line::from(label("memory")));
        lines.extend(d.memory.lines().map(|l| Line::raw(format!(" {l}"))));
    }
    lines
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn activity_lines(detail: Option<&Detail>, height: usize, now: Timestamp) -> Vec<Line<'_>> {
    let Some(d) = detail else {
        return Vec::new();
    };
    let mut lines = vec![Line::from(label("events"))];
    if d.events.is_empty() {
        lines.push(Line::from(label(" none")));
    }
    // Keep at least two lines for the output below the events.
    let room = height.saturating_sub(3).max(1);
    let skip = d.events.len().saturating_sub(room);
    for e in &d.events[skip..] {
        let what = match e.kind.transition() {
            Some((f, t)) => format!("{} {f}→{t}", e.kind.type_name()),
            None => e.kind.type_name().to_owned(),
        };
        let mut spans = vec![label(&format!("{:>4} ", age(now, e.at))), Span::raw(what)];
        if let Some(r) = e.kind.reason() {
            spans.push(label(&format!(" ({})", first_line(&r))));
        }
        lines.push(Line::from(spans));
    }
    lines.push(Line::from(label("output")));
    let left = height.saturating_sub(lines.len());
    match &d.output_note {
        Some(note) if d.output.is_empty() => lines.push(Line::from(label(&format!(" {note}")))),
        _ => {
            let skip = d.output.len().saturating_sub(left);
            lines.extend(d.output[skip..].iter().map(|l| Line::raw(l.as_str())));
        }
    }
    lines
}

fn render_status(frame: &mut Frame, app: &App, area: Rect) {
    let line = match app.mode() {
        Mode::Filter => Line::from(vec![
            Span::styled(" /", Style::new().fg(Color::Yellow)),
            Span::raw(app.filter()),
            Span::styled("▏", Style::new().fg(Color::Yellow)),
            label(&format!(
                "   {} of {} · Enter keeps, Esc clears",
                app.visible().len(),
                app.rows().len()
            )),
        ]),
        Mode::Confirm(cmd) => {
            let q = cmd.question();
            // Narrow: the keys that answer come first, or they are cut off.
            let q = match q.strip_suffix(" y/n") {
                Some(ask) if q.chars().count() + 1 > area.width as usize => {
                    format!("y/n: {ask}")
                }
                _ => q,
            };
            Line::from(Span::styled(
                format!(" {q}"),
                Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
            ))
        }
        Mode::Reason { id, text } => {
            let mut ask = format!(" Reject {id}: what must change? ");
            if ask.chars().count() * 2 > area.width as usize {
                ask = format!(" Reject {id}: ");
            }
            // The end of the text and the cursor stay in view: what is typed past the
            // width scrolls off at the left (it was typed blind past the edge).
            let room = (area.width as usize).saturating_sub(Span::raw(&ask).width() + 1);
            let mut shown = text.as_str();
            let mut cut = false;
            while Span::raw(shown).width() > room.saturating_sub(usize::from(cut)) {
                let mut chars = shown.chars();
                chars.next();
                shown = chars.as_str();
                cut = true;
            }
            let shown = if cut {
                format!("…{shown}")
            } else {
                shown.to_owned()
            };
            let mut spans = vec![
                Span::styled(
                    ask,
                    Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
                ),
                Span::raw(shown),
                Span::styled("▏", Style::new().fg(Color::Yellow)),
                label("  Enter sends · Esc keeps it in review"),
            ];
            if let Some(m) = app.message().filter(|m| m.error) {
                spans.push(Span::styled(
                    format!("  {}", m.text),
                    Style::new().fg(Color::Red),
                ));
            }
            Line::from(spans)
        }
        _ => match app.message() {
            Some(m) => Line::from(Span::styled(
                format!(" {}", m.text),
                Style::new().fg(if m.error { Color::Red } else { Color::Green }),
            )),
            None if !app.filter().is_empty() => Line::from(label(&format!(
                " filter \"{}\": {} of {} tasks · / edits, Esc clears",
                app.filter(),
                app.visible().len(),
                app.rows().len()
            ))),
            None => Line::raw(""),
        },
    };
    frame.render_widget(Paragraph::new(line).wrap(Wrap { trim: false }), area);
}

/// The status line's height: one line, or up to [`STATUS_LINES`] for a message longer
/// than the screen is wide (a refused merge's paths and commands were cut off, and
/// nothing showed the rest).
fn status_height(app: &App, area: Rect) -> u16 {
    let width = area.width.max(1) as usize;
    let long = match (app.mode(), app.message()) {
        (Mode::Normal | Mode::Detail | Mode::Peek, Some(m)) => m.text.chars().count() + 1,
        _ => 0,
    };
    let lines = long.div_ceil(width).clamp(1, STATUS_LINES);
    // The table keeps room to show where the selection is.
    (lines as u16).min(area.height.saturating_sub(6).max(1))
}

/// The most lines a message takes at the bottom of the screen.
const STATUS_LINES: usize = 4;

fn render_peek(frame: &mut Frame, app: &App, area: Rect) {
    let Some(t) = app.selected_task() else {
        return;
    };
    let popup = area.centered(Constraint::Percentage(90), Constraint::Percentage(80));
    frame.render_widget(Clear, popup);
    let block = Block::bordered().title(format!(" output.log · {} — p or Esc closes ", t.id()));
    let inner = block.inner(popup);
    frame.render_widget(block, popup);
    let h = inner.height as usize;
    let lines: Vec<Line> = match app.detail() {
        None => vec![Line::from(label("loading…"))],
        Some(d) if d.output.is_empty() => vec![Line::from(label(
            d.output_note.as_deref().unwrap_or("the output is empty"),
        ))],
        Some(d) => {
            let skip = d.output.len().saturating_sub(h);
            d.output[skip..]
                .iter()
                .map(|l| Line::raw(l.as_str()))
                .collect()
        }
    };
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The selected task's detail over the table and the pane: its summary and what a
/// person reads before deciding (hand-off, review, questions) on the left, its events
/// and output on the right.
fn render_full_detail(frame: &mut Frame, app: &App, area: Rect, now: Timestamp) {
    let Some(t) = app.selected_task() else {
        return;
    };
    frame.render_widget(Clear, area);
    let block = Block::bordered()
        .padding(Padding::horizontal(1))
        .title(format!(
            " {} — {} · Enter or Esc closes ",
            t.id(),
            t.spec.title
        ));
    let [left, right] = framed_halves(frame, block, area);
    let detail = app.detail();
    let mut lines = summary_lines(app, t, detail);
    if let Some(d) = detail {
        for (name, text) in &d.texts {
            lines.push(Line::raw(""));
            lines.push(Line::from(Span::styled(
                format!("## {name}"),
                Style::new().add_modifier(Modifier::BOLD),
            )));
            lines.extend(text.iter().map(|l| Line::raw(l.as_str())));
        }
    }
    frame.render_widget(
        Paragraph::new(lines).wrap(ratatui::widgets::Wrap { trim: false }),
        left,
    );
    frame.render_widget(
        Paragraph::new(activity_lines(detail, right.height as usize, now)),
        right,
    );
}

/// Draws `block` over `area` and splits its inside into two columns.
fn framed_halves(frame: &mut Frame, block: Block<'_>, area: Rect) -> [Rect; 2] {
    let inner = block.inner(area);
    frame.render_widget(block, area);
    Layout::horizontal([Constraint::Fill(1), Constraint::Fill(1)])
        .spacing(2)
        .areas(inner)
}
