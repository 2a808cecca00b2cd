//! `warden serve`: the web console (`warden-web`), with its address and token from the
//! command line, `WARDEN_SERVE_TOKEN` or `[serve]` in warden.toml; prints where it
//! listens (and the token, when it made one) and serves until Ctrl-C.

use clap::Args;
use warden_core::failure::Failure;

use crate::ctx::Global;
use crate::out;

/// `warden serve` arguments.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Where to listen (default: [serve] addr in warden.toml, else 127.0.0.1:7777). Any
    /// address but loopback requires the access token on every request.
    #[arg(long, value_name = "HOST:PORT")]
    addr: Option<String>,
}

/// Runs the console.
pub fn run(g: &Global, a: ServeArgs) -> Result<(), Failure> {
    let ws = g.workspace()?;
    let config = ws.config().map_err(|e| Failure::usage(e.to_string()))?;
    let addr = a
        .addr
        .or(config.serve.addr.clone())
        .unwrap_or_else(|| warden_web::DEFAULT_ADDR.to_owned());
    let addr = addr.parse().map_err(|_| {
        Failure::usage(format!(
            "{addr:?} is not an address; use HOST:PORT with an IP, e.g. 127.0.0.1:7777 or 0.0.0.0:7777"
        ))
    })?;
    let token = std::env::var("WARDEN_SERVE_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .or(config.serve.token.clone());
    let server = warden_web::bind(
        ws,
        warden_web::Options {
            token,
            ..warden_web::Options::new(addr)
        },
    )?;
    let info = server.info();
    if g.json {
        // One line, so a script can read it before the server blocks.
        out::line(&serde_json::to_string(info).unwrap_or_default());
    } else {
        let mut text = format!(
            "Warden console ({} store) on {}\n  open {}\n",
            info.backend, info.addr, info.url
        );
        if info.token_generated {
            text.push_str(
                "  every request needs this token (set [serve] token or WARDEN_SERVE_TOKEN to keep one)\n",
            );
        } else if !info.token_required {
            text.push_str("  loopback only: no token needed on this machine\n");
        }
        text.push_str("  Ctrl-C stops it");
        out::line(&text);
    }
    server.run()
}
