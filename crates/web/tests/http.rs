//! The HTTP layer against a real SQLite workspace and a real socket: the token, the Host
//! check, CSRF and Origin, cross-site refusal, body and rate limits, escaping of TASK.md,
//! error statuses, and the framing of both server-sent event streams. The client is a
//! few lines over `TcpStream`, so every byte the server sends is what is checked.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;
use warden_app::App;
use warden_app::task::{CreateTask, Transition};
use warden_core::event::Actor;
use warden_core::model::{Status, TaskId};
use warden_web::{Options, Rates, Running};

/// A workspace with tasks `a` (pending) and `rev` (in reviewing), and its console.
struct Fixture {
    _dir: tempfile::TempDir,
    app: App,
    console: Running,
}

impl Fixture {
    fn new(configure: impl FnOnce(&mut Options)) -> Fixture {
        Fixture::with_store(None, configure)
    }

    fn with_store(store: Option<&str>, configure: impl FnOnce(&mut Options)) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        warden_app::init(dir.path(), store).unwrap();
        let app = App::find(Some(dir.path()), Actor::Person).unwrap();
        for id in ["a", "rev"] {
            app.create(CreateTask {
                id: id.into(),
                title: Some(format!("task <b>{id}</b>")),
                ..Default::default()
            })
            .unwrap();
        }
        walk(
            &app,
            "rev",
            &[
                (Status::Working, ""),
                (Status::AgentReview, "\n## Handoff\ndone\n"),
                (Status::Reviewing, "\n## Review\nPASS\n"),
            ],
        );
        let mut opts = Options::new("127.0.0.1:0".parse().unwrap());
        configure(&mut opts);
        let ws = app.ws().clone();
        let console = warden_web::bind(ws, opts).unwrap().spawn().unwrap();
        Fixture {
            _dir: dir,
            app,
            console,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.console.info.addr
    }

    fn host(&self) -> String {
        self.addr().to_string()
    }

    /// A request with the right Host and whatever else `headers` says.
    fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        request(self.addr(), "GET", path, &self.with_host(headers), "")
    }

    fn post(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
        request(self.addr(), "POST", path, &self.with_host(headers), body)
    }

    fn with_host<'a>(&'a self, headers: &[(&'a str, &'a str)]) -> Vec<(String, String)> {
        let mut h: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if !h.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            h.push(("Host".into(), self.host()));
        }
        h
    }

    /// The CSRF secret, read from the page as the page's script reads it.
    fn csrf(&self) -> String {
        let page = self.get("/", &[]);
        assert_eq!(page.status, 200, "{}", page.body);
        let at = page.body.find("name=\"warden-csrf\" content=\"").unwrap() + 28;
        page.body[at..at + 32].to_owned()
    }

    /// An action as the page sends it.
    fn act(&self, id: &str, action: &str, body: &str) -> Response {
        let csrf = self.csrf();
        let origin = format!("http://{}", self.host());
        self.post(
            &format!("/api/tasks/{id}/{action}"),
            &[
                ("Content-Type", "application/json"),
                ("X-Warden-Csrf", &csrf),
                ("Origin", &origin),
                ("Sec-Fetch-Site", "same-origin"),
            ],
            body,
        )
    }

    fn status(&self, id: &str) -> Status {
        self.app.task(&TaskId::new(id).unwrap()).unwrap().status
    }
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The error's `code` and `refused`, checking the shape `{"error": {…}}`.
    fn error(&self) -> (u64, bool) {
        let v = self.json();
        let e = &v["error"];
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        (e["code"].as_u64().unwrap(), e["refused"].as_bool().unwrap())
    }
}

/// Moves task `id` through `steps`, appending each step's section to its TASK.md first.
fn walk(app: &App, id: &str, steps: &[(Status, &str)]) {
    let id = TaskId::new(id).unwrap();
    for (to, section) in steps {
        let file = app.ws().task_file(&id);
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str(section);
        std::fs::write(&file, text).unwrap();
        app.transition(&Transition::to(id.clone(), *to)).unwrap();
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn write_request(
    s: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &str,
) {
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST"
        && !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
}

fn read_head(r: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    (status, headers)
}

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &str,
) -> Response {
    let mut s = connect(addr);
    write_request(&mut s, method, path, headers, body);
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(chunk) = read_chunk(&mut r) {
            body.extend(chunk);
        }
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Response {
        status,
        headers,
        body: String::from_utf8(body).unwrap(),
    }
}

/// One chunk of a chunked body; `None` at the last.
fn read_chunk(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut size = String::new();
    r.read_line(&mut size).ok()?;
    let n = usize::from_str_radix(size.trim(), 16).ok()?;
    if n == 0 {
        return None;
    }
    let mut chunk = vec![0; n + 2];
    r.read_exact(&mut chunk).ok()?;
    chunk.truncate(n);
    Some(chunk)
}

/// A server-sent event stream, read event by event.
struct Events {
    r: BufReader<TcpStream>,
    buf: String,
    headers: Vec<(String, String)>,
    status: u16,
}

/// One event: its fields in order, as sent.
#[derive(Debug)]
struct Frame {
    event: Option<String>,
    id: Option<String>,
    retry: Option<String>,
    data: String,
}

impl Events {
    fn open(f: &Fixture, path: &str) -> Events {
        let mut s = connect(f.addr());
        write_request(&mut s, "GET", path, &f.with_host(&[]), "");
        let mut r = BufReader::new(s);
        let (status, headers) = read_head(&mut r);
        Events {
            r,
            buf: String::new(),
            headers,
            status,
        }
    }

    /// The next event that is not a keep-alive comment.
    fn next(&mut self) -> Frame {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let raw: String = self.buf.drain(..end + 2).collect();
                let mut f = Frame {
                    event: None,
                    id: None,
                    retry: None,
                    data: String::new(),
                };
                let mut only_comments = true;
                for line in raw.lines().filter(|l| !l.is_empty()) {
                    let (k, v) = line.split_once(':').unwrap_or((line, ""));
                    let v = v.strip_prefix(' ').unwrap_or(v).to_owned();
                    match k {
                        "" => continue,
                        "event" => f.event = Some(v),
                        "id" => f.id = Some(v),
                        "retry" => f.retry = Some(v),
                        "data" => {
                            if !f.data.is_empty() {
                                f.data.push('\n');
                            }
                            f.data.push_str(&v);
                        }
                        other => panic!("unknown SSE field {other:?} in {raw:?}"),
                    }
                    only_comments = false;
                }
                if only_comments {
                    continue;
                }
                return f;
            }
            let chunk = read_chunk(&mut self.r).expect("the stream ended");
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

#[test]
fn loopback_needs_no_token_but_only_answers_to_its_own_names() {
    let f = Fixture::new(|_| {});
    assert!(f.console.info.loopback && !f.console.info.token_required);
    let page = f.get("/", &[]);
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    let port = f.addr().port();
    for host in [format!("localhost:{port}"), format!("[::1]:{port}")] {
        assert_eq!(f.get("/", &[("Host", &host)]).status, 200, "{host}");
    }
    // A name rebound to 127.0.0.1 by another site is refused.
    let r = f.get("/api/tasks/a", &[("Host", &format!("evil.example:{port}"))]);
    assert_eq!(r.status, 403);
    assert_eq!(r.error(), (2, true));
}

#[test]
fn a_token_is_required_on_every_request_when_set() {
    let token = "0123456789abcdef0123";
    let f = Fixture::new(|o| o.token = Some(token.into()));
    assert!(f.console.info.token_required && !f.console.info.token_generated);
    assert!(f.console.info.url.ends_with(&format!("/?token={token}")));
    for path in [
        "/",
        "/assets/app.js",
        "/api/events",
        "/api/tasks/a",
        "/nope",
    ] {
        let r = f.get(path, &[]);
        assert_eq!(r.status, 401, "{path}");
        assert_eq!(r.error(), (2, true));
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer realm=\"warden\"")
        );
    }
    let bearer = format!("Bearer {token}");
    assert_eq!(
        f.get("/api/tasks/a", &[("Authorization", &bearer)]).status,
        200
    );
    assert_eq!(f.get("/", &[("Authorization", "Bearer wrong")]).status, 401);
    // The scheme is case-insensitive; another scheme with the token is not a bearer's.
    for scheme in ["bearer", "BEARER"] {
        let auth = format!("{scheme} {token}");
        assert_eq!(
            f.get("/api/tasks/a", &[("Authorization", &auth)]).status,
            200,
            "{scheme}"
        );
    }
    let basic = format!("Basic {token}");
    assert_eq!(
        f.get("/api/tasks/a", &[("Authorization", &basic)]).status,
        401
    );
    // The printed URL sets the cookie and drops the token from the address.
    let r = f.get(&format!("/?token={token}"), &[]);
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/"));
    let cookie = r.header("set-cookie").unwrap().to_owned();
    let name = format!("warden_token_{}", f.addr().port());
    assert_eq!(
        cookie,
        format!("{name}={token}; HttpOnly; SameSite=Strict; Path=/")
    );
    let pair = cookie.split(';').next().unwrap();
    assert_eq!(f.get("/api/tasks/a", &[("Cookie", pair)]).status, 200);
    assert_eq!(
        f.get("/", &[("Cookie", &format!("{name}=wrong"))]).status,
        401
    );
    assert_eq!(f.get("/?token=wrong", &[]).status, 401);
}

#[test]
fn a_token_that_is_too_short_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    warden_app::init(dir.path(), None).unwrap();
    let ws = warden_app::find_workspace(Some(dir.path())).unwrap();
    // Too short, or with a character a URL or a cookie does not carry as it is (a `;`
    // cut the cookie short and the person was refused with the right token).
    for bad in [
        "short",
        "abcdefgh;ijklmnopq",
        "abcdefgh#ijklmnopq",
        "abcdefgh&ijklmnop\"",
    ] {
        let mut o = Options::new("127.0.0.1:0".parse().unwrap());
        o.token = Some(bad.into());
        let e = warden_web::bind(ws.clone(), o).unwrap_err();
        assert_eq!(e.code, warden_core::failure::ExitCode::Usage, "{bad}: {e}");
        assert!(e.message.contains("A-Z a-z 0-9 . _ ~ -"), "{e}");
    }
    assert!(warden_web::token_fits("Abc-0123_456.789~x"));
}

#[test]
fn actions_need_the_csrf_header_same_origin_and_json() {
    let f = Fixture::new(|_| {});
    let csrf = f.csrf();
    let origin = format!("http://{}", f.host());
    let path = "/api/tasks/a/cancel";
    let refused = |r: Response, status: u16| {
        assert_eq!(r.status, status, "{}", r.body);
        assert_eq!(r.error(), (2, true));
    };
    let json = ("Content-Type", "application/json");
    refused(f.post(path, &[json], "{}"), 403);
    refused(
        f.post(
            path,
            &[json, ("X-Warden-Csrf", "0".repeat(32).as_str())],
            "{}",
        ),
        403,
    );
    refused(
        f.post(
            path,
            &[
                json,
                ("X-Warden-Csrf", &csrf),
                ("Origin", "http://evil.example"),
            ],
            "{}",
        ),
        403,
    );
    refused(
        f.post(
            path,
            &[
                json,
                ("X-Warden-Csrf", &csrf),
                ("Sec-Fetch-Site", "cross-site"),
            ],
            "{}",
        ),
        403,
    );
    refused(
        f.post(
            path,
            &[
                ("Content-Type", "text/plain"),
                ("X-Warden-Csrf", &csrf),
                ("Origin", &origin),
            ],
            "{}",
        ),
        415,
    );
    assert_eq!(
        f.status("a"),
        Status::Pending,
        "nothing was refused halfway"
    );
    // Reads from another site are refused too; navigating to the page is not.
    refused(
        f.get("/api/tasks/a", &[("Sec-Fetch-Site", "cross-site")]),
        403,
    );
    assert_eq!(f.get("/", &[("Sec-Fetch-Site", "cross-site")]).status, 200);
    // The page's own request goes through.
    let r = f.act("a", "cancel", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["message"], "a: pending → cancelled");
    assert_eq!(v["task"]["status"], "cancelled");
    assert_eq!(f.status("a"), Status::Cancelled);
}

#[test]
fn approve_and_reject_act_through_the_app_layer() {
    let f = Fixture::new(|_| {});
    let r = f.act("rev", "reject", r#"{"reason": "the form ignores errors"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["message"], "rev: reviewing → working");
    assert_eq!(f.status("rev"), Status::Working);
    // Not in review any more: the app layer refuses, the console says 422.
    let r = f.act("rev", "approve", "");
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.error(), (1, true));
    assert_eq!(
        r.json()["error"]["message"],
        "task rev is working; only a task in reviewing can be approved"
    );
}

/// An approve carries the version the page showed: a task rejected and reviewed again
/// meanwhile (a round the person never saw) is refused, nothing written; the round
/// shown is approved.
#[test]
fn an_approve_is_of_the_round_the_person_saw() {
    let f = Fixture::new(|_| {});
    let seen = f.get("/api/tasks/rev", &[]).json()["task"]["version"]
        .as_u64()
        .unwrap();
    f.app
        .reject(&TaskId::new("rev").unwrap(), "redo the form")
        .unwrap();
    walk(
        &f.app,
        "rev",
        &[
            (Status::AgentReview, "\n## Handoff\nanother change\n"),
            (Status::Reviewing, "\n## Review\nPASS round 2\n"),
        ],
    );
    let now = f.get("/api/tasks/rev", &[]).json()["task"]["version"]
        .as_u64()
        .unwrap();
    for (action, verb) in [("approve", "approved"), ("reject", "rejected")] {
        let body = if action == "reject" {
            format!(r#"{{"version": {seen}, "reason": "no"}}"#)
        } else {
            format!(r#"{{"version": {seen}}}"#)
        };
        let r = f.act("rev", action, &body);
        assert_eq!(r.status, 409, "{}", r.body);
        assert_eq!(r.error(), (4, true), "a conflict, as a stale version is");
        assert_eq!(
            r.json()["error"]["message"],
            format!(
                "rev changed since you looked at it (version {seen}, now {now}, reviewing); look at it again before it is {verb}"
            )
        );
    }
    assert_eq!(f.status("rev"), Status::Reviewing, "nothing written");
    let r = f.act("rev", "approve", &format!(r#"{{"version": {now}}}"#));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(f.status("rev"), Status::Done);
}

/// Cancel, retry and respawn carry the version the page showed too: a task that moved
/// meanwhile is refused as a conflict (409, exit code 4), nothing written; the version
/// shown now goes through. A body without a version acts on the task as it is.
#[test]
fn every_action_is_of_the_task_the_person_saw() {
    let f = Fixture::new(|_| {});
    let version = |id: &str| {
        f.get(&format!("/api/tasks/{id}"), &[]).json()["task"]["version"]
            .as_u64()
            .unwrap()
    };
    let seen = version("a");
    f.app
        .transition(&Transition::to(TaskId::new("a").unwrap(), Status::Working))
        .unwrap();
    let now = version("a");
    for (action, verb) in [
        ("cancel", "cancelled"),
        ("retry", "retried"),
        ("respawn", "respawned"),
    ] {
        let r = f.act("a", action, &format!(r#"{{"version": {seen}}}"#));
        assert_eq!(r.status, 409, "{action}: {}", r.body);
        assert_eq!(r.error(), (4, true));
        assert_eq!(
            r.json()["error"]["message"],
            format!(
                "a changed since you looked at it (version {seen}, now {now}, working); look at it again before it is {verb}"
            )
        );
        assert_eq!(f.status("a"), Status::Working, "{action}: nothing written");
        assert_eq!(version("a"), now, "{action}: nothing written");
    }
    let r = f.act("a", "cancel", &format!(r#"{{"version": {now}}}"#));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(f.status("a"), Status::Cancelled);
}

/// A cancel refused as stale changes nothing: it stopped the task's running guard
/// before it looked at the version (the hand-off's check was killed, "a person is
/// cancelling the task", and the 409 said nothing was written).
#[test]
fn a_stale_cancel_stops_no_check() {
    let f = Fixture::new(|_| {});
    let marker = f._dir.path().join("guard-ran");
    f.app
        .create(CreateTask {
            id: "g".into(),
            postchecks: Some(warden_core::model::WorkSpec::Shell(format!(
                "touch '{}'; sleep 2",
                marker.display()
            ))),
            ..Default::default()
        })
        .unwrap();
    walk(&f.app, "g", &[(Status::Working, "\n## Handoff\ndone\n")]);
    let now = f.get("/api/tasks/g", &[]).json()["task"]["version"]
        .as_u64()
        .unwrap();
    let root = f._dir.path().to_path_buf();
    let complete = std::thread::spawn(move || {
        let app = App::find(Some(&root), Actor::Person).unwrap();
        app.transition(&Transition::to(
            TaskId::new("g").unwrap(),
            Status::AgentReview,
        ))
        .and_then(|a| a.into_result())
        .map(|_| ())
    });
    let start = std::time::Instant::now();
    while !marker.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the guard never ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = f.act("g", "cancel", &format!(r#"{{"version": {}}}"#, now - 1));
    assert_eq!(r.status, 409, "{}", r.body);
    complete
        .join()
        .unwrap()
        .expect("the guard ran to its end and the hand-off was taken");
    assert_eq!(f.status("g"), Status::AgentReview);
}

#[test]
fn failures_have_the_documented_statuses() {
    let f = Fixture::new(|_| {});
    let check = |r: Response, status: u16, code: u64| {
        assert_eq!(r.status, status, "{}", r.body);
        assert_eq!(r.error().0, code, "{}", r.body);
    };
    check(f.get("/api/tasks/nope", &[]), 404, 3);
    check(f.get("/api/tasks/Bad%20Id", &[]), 400, 2);
    // A path that is not UTF-8 once decoded is a JSON failure too (it was axum's text).
    check(f.get("/api/tasks/%ff", &[]), 400, 2);
    check(f.get("/api/tasks/%ff/live", &[]), 400, 2);
    check(f.act("%ff", "approve", "{}"), 400, 2);
    check(f.get("/no/such/page", &[]), 404, 3);
    check(f.act("a", "explode", "{}"), 404, 3);
    check(f.get("/api/tasks/rev/approve", &[]), 405, 2);
    check(f.act("nope", "approve", "{}"), 404, 3);
    check(f.act("a", "approve", "{}"), 422, 1);
    check(f.act("rev", "reject", "{}"), 400, 2);
    check(f.act("rev", "reject", "not json"), 400, 2);
    check(
        f.act("rev", "reject", r#"{"reason": "x", "status": "done"}"#),
        400,
        2,
    );
    assert_eq!(f.status("rev"), Status::Reviewing);
}

#[test]
fn bodies_are_bounded() {
    let f = Fixture::new(|_| {});
    let big = format!(r#"{{"reason": "{}"}}"#, "x".repeat(20_000));
    let r = f.act("rev", "reject", &big);
    assert_eq!(r.status, 413, "{}", r.body);
    // The same without a Content-Length: the body is cut off at the limit as it streams.
    let mut s = connect(f.addr());
    let csrf = f.csrf();
    let head = format!(
        "POST /api/tasks/rev/reject HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nX-Warden-Csrf: {csrf}\r\nTransfer-Encoding: chunked\r\n\r\n",
        f.host()
    );
    s.write_all(head.as_bytes()).unwrap();
    for _ in 0..5 {
        let chunk = "y".repeat(8192);
        let _ = s.write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes());
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let (status, _) = read_head(&mut BufReader::new(s));
    assert_eq!(status, 413);
    // A reason within the body limit but over the app's bound is a usage error.
    let long = format!(r#"{{"reason": "{}"}}"#, "z".repeat(5000));
    let r = f.act("rev", "reject", &long);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(f.status("rev"), Status::Reviewing);
}

/// A reason is kept by the actions that keep one: a cancel's is in the history; one
/// sent with approve (which has nowhere to keep it) is refused, not answered 200 and
/// dropped.
#[test]
fn a_reason_is_kept_or_refused() {
    let f = Fixture::new(|_| {});
    let r = f.act("rev", "approve", r#"{"reason": "looks right"}"#);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json()["error"]["message"],
        "approve takes no reason (reject and cancel do); send {}"
    );
    assert_eq!(f.status("rev"), Status::Reviewing);
    let r = f.act("a", "cancel", r#"{"reason": "a duplicate of rev"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let a = TaskId::new("a").unwrap();
    let reasons: Vec<Option<String>> = f
        .app
        .history(Some(&a), None)
        .unwrap()
        .into_iter()
        .filter_map(|e| e.to.map(|_| e.reason))
        .collect();
    assert_eq!(
        reasons.last(),
        Some(&Some(
            "cancelled by a person in the web console: a duplicate of rev".to_owned()
        ))
    );
}

#[test]
fn rates_are_bounded_per_address() {
    let f = Fixture::new(|o| {
        o.rates = Rates {
            per_second: 1,
            burst: 3,
            actions_per_second: 1,
            action_burst: 1,
        }
    });
    let statuses: Vec<u16> = (0..5).map(|_| f.get("/api/tasks/a", &[]).status).collect();
    assert_eq!(&statuses[..3], &[200, 200, 200]);
    let r = f.get("/api/tasks/a", &[]);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.error(), (2, true));
}

/// Requests the policy refuses are charged apart: on loopback every client shares
/// 127.0.0.1, and a page on another site posting blind, refused actions used up the
/// person's own rate (every action, the page and its stream got 429).
#[test]
fn refused_requests_do_not_use_up_the_persons_rate() {
    let f = Fixture::new(|o| {
        o.rates = Rates {
            per_second: 1,
            burst: 3,
            actions_per_second: 1,
            action_burst: 1,
        }
    });
    let flood: Vec<u16> = (0..20)
        .map(|_| {
            f.post(
                "/api/tasks/a/cancel",
                &[
                    ("Content-Type", "text/plain"),
                    ("Origin", "http://evil.example"),
                ],
                "{}",
            )
            .status
        })
        .collect();
    assert_eq!(&flood[..3], &[403, 403, 403], "{flood:?}");
    assert!(flood[3..].iter().all(|&s| s == 429), "{flood:?}");
    // The page and the person's action go through (a GET for the page, one for the
    // action's CSRF secret, the action).
    assert_eq!(f.get("/api/tasks/a", &[]).status, 200);
    let r = f.act("a", "cancel", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(f.status("a"), Status::Cancelled);
}

/// A connection that sends part of a request and then nothing is closed once the header
/// read timeout passes; before, it was held for as long as the client liked, and enough
/// of them took every file descriptor the server had.
#[test]
fn a_request_whose_headers_never_end_is_closed() {
    let f = Fixture::new(|o| o.header_read_timeout = Duration::from_millis(500));
    let mut half = connect(f.addr());
    half.write_all(format!("GET / HTTP/1.1\r\nHost: {}\r\n", f.host()).as_bytes())
        .unwrap();
    half.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 1024];
    let closed = loop {
        match half.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(e) => panic!("the half request was not closed: {e}"),
        }
    };
    assert!(closed);
    // Whole requests are served as before.
    assert_eq!(f.get("/api/tasks/a", &[]).status, 200);
}

/// An action after the project's `.warden/` was moved away changes nothing on disk:
/// before, the task's lock made `.warden/tasks/<id>/` again, a skeleton `warden init`
/// refused and a moved-back copy nested in.
#[test]
fn an_action_on_a_moved_store_leaves_nothing_behind() {
    let f = Fixture::new(|_| {});
    let root = f.app.ws().root.clone();
    let away = f._dir.path().join("moved-away");
    std::fs::rename(root.join(".warden"), &away).unwrap();
    let r = f.act("a", "cancel", "{}");
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("was removed since this process opened it; nothing was written"),
        "{}",
        r.body
    );
    assert!(
        !root.join(".warden").exists(),
        "a skeleton .warden/ was made"
    );
}

#[test]
fn task_md_is_escaped() {
    let f = Fixture::new(|_| {});
    let file = f.app.ws().task_file(&TaskId::new("a").unwrap());
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("\n## Notes\n<script>alert(1)</script>\n\nSee <img src=x onerror=alert(2)> and [x](javascript:alert(3)).\n");
    std::fs::write(&file, text).unwrap();
    let r = f.get("/api/tasks/a", &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    let notes = v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "Notes")
        .unwrap();
    let html = notes["html"].as_str().unwrap();
    assert_eq!(
        html,
        "&lt;script&gt;alert(1)&lt;/script&gt;\n<p>See &lt;img src=x onerror=alert(2)&gt; and <span class=\"link\">x</span>.</p>\n"
    );
    assert_eq!(notes["has_content"], true);
    // Titles are data, never markup: the page sets them as text.
    assert_eq!(v["task"]["title"], "task <b>a</b>");
}

#[test]
fn the_board_stream_sends_the_board_then_each_change() {
    let f = Fixture::new(|_| {});
    let mut ev = Events::open(&f, "/api/events");
    assert_eq!(ev.status, 200);
    let ct = ev
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.as_str());
    assert_eq!(ct, Some("text/event-stream"));
    let board = ev.next();
    assert_eq!(board.event.as_deref(), Some("board"));
    assert_eq!(board.id.as_deref(), Some("1"));
    assert_eq!(board.retry.as_deref(), Some("1000"));
    assert!(!board.data.contains('\n'), "one data line of JSON");
    let b: Value = serde_json::from_str(&board.data).unwrap();
    assert_eq!(b["generation"], 1);
    assert_eq!(b["backend"], "sqlite");
    let ids: Vec<&str> = b["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "rev"]);
    assert_eq!(b["summary"]["total"], 2);
    // A change through another connection (another process would do the same).
    f.app
        .transition(&Transition::to(TaskId::new("a").unwrap(), Status::Working))
        .unwrap();
    let update = ev.next();
    assert_eq!(update.event.as_deref(), Some("update"));
    assert_eq!(update.id.as_deref(), Some("2"));
    let u: Value = serde_json::from_str(&update.data).unwrap();
    assert_eq!(u["generation"], 2);
    assert_eq!(
        u["rows"].as_array().unwrap().len(),
        1,
        "only the changed row"
    );
    assert_eq!(u["rows"][0]["id"], "a");
    assert_eq!(u["rows"][0]["status"], "working");
    assert_eq!(u["order"], Value::Null);
    assert_eq!(u["removed"], serde_json::json!([]));
    // A new task changes the order.
    f.app
        .create(CreateTask {
            id: "b".into(),
            ..Default::default()
        })
        .unwrap();
    let u: Value = serde_json::from_str(&ev.next().data).unwrap();
    assert_eq!(u["order"], serde_json::json!(["a", "b", "rev"]));
}

#[test]
fn the_task_stream_follows_output_and_task_md() {
    let f = Fixture::new(|_| {});
    let id = TaskId::new("a").unwrap();
    let log = f.app.ws().output_log(&id);
    std::fs::write(&log, "line one\nline two\n").unwrap();
    let mut ev = Events::open(&f, "/api/tasks/a/live");
    assert_eq!(ev.status, 200);
    let first = ev.next();
    assert_eq!(first.event.as_deref(), Some("output"));
    let o: Value = serde_json::from_str(&first.data).unwrap();
    assert_eq!(o["reset"], true);
    assert_eq!(o["text"], "line one\nline two\n");
    // Appended output arrives as it is written; a UTF-8 character cut by the writer
    // waits for its last byte.
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let check = "\u{2713}".as_bytes();
    file.write_all(b"three ").unwrap();
    file.write_all(&check[..2]).unwrap();
    let o: Value = serde_json::from_str(&ev.next().data).unwrap();
    assert_eq!(
        (&o["reset"], &o["text"]),
        (&Value::Bool(false), &Value::from("three "))
    );
    file.write_all(&check[2..]).unwrap();
    let o: Value = serde_json::from_str(&ev.next().data).unwrap();
    assert_eq!(o["text"], "\u{2713}");
    let md = f.app.ws().task_file(&id);
    let mut text = std::fs::read_to_string(&md).unwrap();
    text.push_str("\n## Handoff\nwritten by the agent\n");
    std::fs::write(&md, text).unwrap();
    let e = ev.next();
    assert_eq!(e.event.as_deref(), Some("taskmd"));
    // Unknown tasks have no stream.
    assert_eq!(f.get("/api/tasks/nope/live", &[]).status, 404);
}

#[test]
fn the_board_stream_follows_a_postgres_store_too() {
    let Some(db) = warden_store::postgres::testing::database("web::postgres") else {
        return;
    };
    let f = Fixture::with_store(Some(&db.url), |_| {});
    assert_eq!(f.console.info.backend, "postgres");
    let mut ev = Events::open(&f, "/api/events");
    let b: Value = serde_json::from_str(&ev.next().data).unwrap();
    assert_eq!(b["backend"], "postgres");
    assert_eq!(b["rows"].as_array().unwrap().len(), 2);
    // Woken by NOTIFY from another connection.
    f.app
        .transition(&Transition::to(TaskId::new("a").unwrap(), Status::Working))
        .unwrap();
    let u: Value = serde_json::from_str(&ev.next().data).unwrap();
    assert_eq!(u["rows"][0]["id"], "a");
    assert_eq!(u["rows"][0]["status"], "working");
    // And the actions write to it.
    let r = f.act("rev", "approve", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(f.status("rev"), Status::Done);
}

/// The console's counts are tasks' counts, as `warden status` and the dashboard give
/// them: a group is left out (its status is its tasks'). Before, a group was counted
/// by its own stored status, so a stuck phase added one "pending".
#[test]
fn the_summary_counts_tasks_not_groups() {
    let f = Fixture::new(|_| {});
    for (id, parent) in [("g", None), ("c", Some("g"))] {
        f.app
            .create(CreateTask {
                id: id.into(),
                parent: parent.map(Into::into),
                ..Default::default()
            })
            .unwrap();
    }
    let c = TaskId::new("c").unwrap();
    for to in [Status::Working, Status::Stuck] {
        f.app.transition(&Transition::to(c.clone(), to)).unwrap();
    }
    let board = warden_web::board::build(&f.app, 1).unwrap();
    assert_eq!(
        board.summary.counts,
        [
            (Status::Pending, 1),
            (Status::Reviewing, 1),
            (Status::Stuck, 1)
        ]
    );
}
