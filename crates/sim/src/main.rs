//! `warden-sim`: runs seeds of the deterministic supervisor simulation.
//!
//! Usage: `warden-sim [--seed N | --seeds N [--from S]] [--steps K] [--runners R]
//! [--liveness] [--flat] [--trace]`. A failing seed prints the command that replays it and exits 1.
//! `--flat` makes every plan flat, as the simulator did before groups.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use warden_sim::{Options, run_seed};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = Options::default();
    let mut from = 0u64;
    let mut count = 1000u64;
    let mut one = None;
    let mut i = 0;
    let num = |i: usize| -> u64 {
        args.get(i).and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            eprintln!(
                "error: {} needs a number; see the usage in `warden-sim --help`",
                args[i - 1]
            );
            std::process::exit(2)
        })
    };
    while i < args.len() {
        match args[i].as_str() {
            "--seed" => {
                i += 1;
                one = Some(num(i));
            }
            "--seeds" => {
                i += 1;
                count = num(i);
            }
            "--from" => {
                i += 1;
                from = num(i);
            }
            "--steps" => {
                i += 1;
                opts.steps = num(i) as usize;
            }
            "--runners" => {
                i += 1;
                opts.runners = num(i) as usize;
            }
            "--liveness" => opts.liveness = true,
            "--trace" => opts.trace = true,
            "--flat" => opts.groups = false,
            "-h" | "--help" => {
                println!(
                    "usage: warden-sim [--seed N | --seeds N [--from S]] [--steps K] [--runners R] [--liveness] [--flat] [--trace]"
                );
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("error: unknown argument {other:?}; see `warden-sim --help`");
                return ExitCode::from(2);
            }
        }
        i += 1;
    }
    let seeds: Vec<u64> = match one {
        Some(s) => vec![s],
        None => (from..from + count).collect(),
    };
    let start = std::time::Instant::now();
    let (mut events, mut sessions, mut kills, mut unstarted) = (0, 0, 0, 0);
    let (mut grouped, mut group_deps) = (0, 0);
    for s in &seeds {
        match run_seed(*s, &opts) {
            Ok(r) => {
                events += r.events;
                sessions += r.sessions;
                kills += r.kills;
                unstarted += r.unstarted;
                grouped += usize::from(r.groups > 0);
                group_deps += r.group_deps;
            }
            Err(v) => {
                eprintln!("{v}");
                if opts.liveness {
                    eprintln!("(with --liveness)");
                }
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "{} seed(s) ok in {:.1} s: {events} events, {sessions} sessions, {kills} runner kills, {unstarted} sessions never started; {grouped} seed(s) with groups, {group_deps} dependencies on or of a group",
        seeds.len(),
        start.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}
