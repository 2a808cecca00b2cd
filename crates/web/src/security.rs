//! What every request passes before a handler sees it: a rate limit per client address,
//! the Host check that keeps a loopback console from answering a rebound name, the
//! access token (required off loopback), refusal of cross-site reads, and for every
//! action the CSRF header, Origin and content type. Also the headers every answer gets
//! (a Content-Security-Policy that allows only the console's own files).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Shared;
use crate::error::ApiError;

/// The header an action must carry with the per-server CSRF secret. A page on another
/// site cannot set it without a CORS preflight, which the console never answers, and
/// cannot read the secret from the console's page.
pub const CSRF_HEADER: &str = "x-warden-csrf";

/// The largest request body accepted (an action's JSON: a rejection reason at most).
pub const MAX_BODY: usize = 16 * 1024;

/// Request rates: a token bucket per client address for every request, and a smaller
/// one for actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rates {
    /// Requests per second, sustained.
    pub per_second: u32,
    /// Requests allowed in a burst.
    pub burst: u32,
    /// Actions (POSTs) per second, sustained.
    pub actions_per_second: u32,
    /// Actions allowed in a burst.
    pub action_burst: u32,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            per_second: 50,
            burst: 200,
            actions_per_second: 5,
            action_burst: 20,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn take(&mut self, now: Instant, per_second: u32, burst: u32) -> bool {
        let refill = now.duration_since(self.at).as_secs_f64() * f64::from(per_second);
        self.tokens = (self.tokens + refill).min(f64::from(burst));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One client address's buckets: every request it makes that is let through, its
/// actions among them, and the requests refused by the policy (charged apart, so
/// another's refused requests from the same address never use up its own).
#[derive(Debug, Clone, Copy)]
struct Buckets {
    all: Bucket,
    actions: Bucket,
    refused: Bucket,
}

/// The buckets of every client address seen recently.
#[derive(Debug)]
pub struct Limiter {
    rates: Rates,
    buckets: Mutex<HashMap<IpAddr, Buckets>>,
}

/// Addresses remembered before idle ones are forgotten.
const MAX_CLIENTS: usize = 4096;

impl Limiter {
    /// A limiter with these rates.
    pub fn new(rates: Rates) -> Limiter {
        Limiter {
            rates,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token for a request (and an action token for an action); false when the
    /// client is over its rate.
    pub fn allow(&self, ip: IpAddr, action: bool, now: Instant) -> bool {
        let r = self.rates;
        self.with(ip, now, |b| {
            b.all.take(now, r.per_second, r.burst)
                && (!action || b.actions.take(now, r.actions_per_second, r.action_burst))
        })
    }

    /// Takes a token for a request the policy refused; false when the address is over
    /// its rate of refusals (which then get 429).
    pub fn allow_refused(&self, ip: IpAddr, now: Instant) -> bool {
        let r = self.rates;
        self.with(ip, now, |b| b.refused.take(now, r.per_second, r.burst))
    }

    fn with(&self, ip: IpAddr, now: Instant, take: impl FnOnce(&mut Buckets) -> bool) -> bool {
        let r = self.rates;
        let mut map = match self.buckets.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        if map.len() >= MAX_CLIENTS && !map.contains_key(&ip) {
            // Forget the clients whose buckets are full again (idle long enough).
            map.retain(|_, b| {
                let full = |b: &Bucket| {
                    let idle = now.duration_since(b.at).as_secs_f64() * f64::from(r.per_second);
                    b.tokens + idle >= f64::from(r.burst)
                };
                !(full(&b.all) && full(&b.refused))
            });
            if map.len() >= MAX_CLIENTS {
                return false;
            }
        }
        let full = |burst: u32| Bucket {
            tokens: f64::from(burst),
            at: now,
        };
        let b = map.entry(ip).or_insert_with(|| Buckets {
            all: full(r.burst),
            actions: full(r.action_burst),
            refused: full(r.burst),
        });
        take(b)
    }
}

/// Compares two secrets in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The access policy of one server.
#[derive(Debug)]
pub struct Policy {
    /// The token every request must carry; `None` on a loopback console without one.
    pub token: Option<String>,
    /// The CSRF secret embedded in the page.
    pub csrf: String,
    /// The Host values a loopback console answers to; `None` off loopback (the token
    /// protects it there).
    pub hosts: Option<Vec<String>>,
    /// The cookie that carries the token (named after the port: cookies ignore ports).
    pub cookie: String,
    /// Request rates.
    pub limiter: Limiter,
}

impl Policy {
    /// The Host values a console bound to `addr` on loopback answers to.
    pub fn loopback_hosts(addr: SocketAddr) -> Vec<String> {
        let p = addr.port();
        let mut hosts = vec![
            format!("127.0.0.1:{p}"),
            format!("localhost:{p}"),
            format!("[::1]:{p}"),
        ];
        if !hosts.contains(&addr.to_string()) {
            hosts.push(addr.to_string());
        }
        hosts
    }

    fn token_of(&self, headers: &HeaderMap) -> Option<String> {
        if let Some(v) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            && let Some((scheme, t)) = v.trim_start().split_once(' ')
            // The scheme is case-insensitive (RFC 9110 11.1): `bearer` is `Bearer`.
            && scheme.eq_ignore_ascii_case("bearer")
        {
            return Some(t.trim().to_owned());
        }
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|kv| {
                let (k, v) = kv.trim().split_once('=')?;
                (k == self.cookie).then(|| v.to_owned())
            })
    }
}

fn query_token(uri: &axum::http::Uri) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == "token").then(|| v.to_owned())
    })
}

fn refuse(status: StatusCode, message: impl Into<String>) -> Response {
    ApiError::refused(status, message).into_response()
}

/// The middleware: every check, in order, then the handler, then the headers.
pub async fn guard(
    State(shared): State<std::sync::Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let mut res = check(&shared.policy, peer, req, next).await;
    secure_headers(res.headers_mut());
    res
}

async fn check(policy: &Policy, peer: SocketAddr, req: Request, next: Next) -> Response {
    let action = req.method() != Method::GET && req.method() != Method::HEAD;
    // A refused request is charged to a bucket of its own: on loopback every client is
    // 127.0.0.1, and a page on another site that kept posting blind, refused actions
    // used up the person's own requests (every action, the page and its live stream
    // got 429).
    if let Some(refused) = refusal(policy, &req, action) {
        if !policy.limiter.allow_refused(peer.ip(), Instant::now()) {
            return too_many();
        }
        return refused;
    }
    if !policy.limiter.allow(peer.ip(), action, Instant::now()) {
        return too_many();
    }
    next.run(req).await
}

fn too_many() -> Response {
    let mut r = refuse(
        StatusCode::TOO_MANY_REQUESTS,
        "too many requests from this address; wait a moment",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// The answer to a request the policy refuses (or the redirect that sets the token's
/// cookie), or `None` when it may reach its handler.
fn refusal(policy: &Policy, req: &Request, action: bool) -> Option<Response> {
    let headers = req.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if let Some(hosts) = &policy.hosts
        && !hosts.contains(&host)
    {
        return Some(refuse(
            StatusCode::FORBIDDEN,
            format!(
                "this console answers only to {}; open it by that address",
                hosts.first().map_or("its own address", String::as_str)
            ),
        ));
    }
    if let Some(token) = &policy.token {
        let given = policy.token_of(headers);
        if !given.as_deref().is_some_and(|g| same_secret(g, token)) {
            // Opening the printed URL: set the cookie and drop the token from the
            // address bar (and from the history).
            if req.method() == Method::GET
                && req.uri().path() == "/"
                && query_token(req.uri()).is_some_and(|q| same_secret(&q, token))
            {
                let cookie = format!(
                    "{}={token}; HttpOnly; SameSite=Strict; Path=/",
                    policy.cookie
                );
                let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
                if let Ok(v) = HeaderValue::from_str(&cookie) {
                    r.headers_mut().insert(header::SET_COOKIE, v);
                }
                return Some(r);
            }
            return Some(refuse(
                StatusCode::UNAUTHORIZED,
                "this console needs its access token: open the URL `warden serve` printed (…/?token=…) or send `Authorization: Bearer TOKEN`",
            ));
        }
    }
    // A page on another site may link to the console, but never read from it or act.
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none");
    let navigation = req.method() == Method::GET && req.uri().path() == "/";
    if !matches!(site, "same-origin" | "none") && !navigation {
        return Some(refuse(
            StatusCode::FORBIDDEN,
            format!("a {site} request is refused; use the console's own page"),
        ));
    }
    if action {
        let csrf_ok = headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| same_secret(v, &policy.csrf));
        if !csrf_ok {
            return Some(refuse(
                StatusCode::FORBIDDEN,
                "this action lacks the console's CSRF header; act from the console's page (reload it if the server restarted)",
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let expected = format!("http://{host}");
            if origin.to_str().ok().map(|o| o.to_ascii_lowercase()) != Some(expected) {
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    "this action comes from another origin and is refused",
                ));
            }
        }
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
            });
        if !json {
            return Some(refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "an action's body must be JSON (Content-Type: application/json)",
            ));
        }
        let too_long = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n > MAX_BODY as u64);
        if too_long {
            return Some(refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is over {MAX_BODY} bytes"),
            ));
        }
    }
    None
}

/// Headers every answer carries: only the console's own scripts, styles and
/// connections; no framing, no sniffing, no referrer, no caching.
fn secure_headers(h: &mut HeaderMap) {
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(
        h,
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    );
    set(h, "x-content-type-options", "nosniff");
    set(h, "x-frame-options", "DENY");
    set(h, "referrer-policy", "no-referrer");
    set(h, "cross-origin-opener-policy", "same-origin");
    set(h, "cross-origin-resource-policy", "same-origin");
    if !h.contains_key(header::CACHE_CONTROL) {
        set(h, "cache-control", "no-store");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn buckets_refill() {
        let l = Limiter::new(Rates {
            per_second: 10,
            burst: 3,
            actions_per_second: 1,
            action_burst: 1,
        });
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let t0 = Instant::now();
        assert!(l.allow(ip, true, t0));
        assert!(!l.allow(ip, true, t0), "one action in the burst");
        assert!(l.allow(ip, false, t0));
        assert!(!l.allow(ip, false, t0), "three requests in the burst");
        assert!(l.allow(ip, false, t0 + Duration::from_millis(150)));
        let other: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(l.allow(other, false, t0), "buckets are per address");
    }

    #[test]
    fn secrets_compare() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
        assert!(!same_secret("", "a"));
    }

    #[test]
    fn loopback_hosts() {
        let h = Policy::loopback_hosts("127.0.0.1:7777".parse().unwrap());
        assert_eq!(h, vec!["127.0.0.1:7777", "localhost:7777", "[::1]:7777"]);
    }
}
