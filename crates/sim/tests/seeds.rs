//! The simulation in `./scripts/test`: a few thousand seeds, each checked after every
//! step against the supervisor's invariants, and the seeds that once found a bug. A
//! longer run is `scripts/sim N`.

use warden_sim::{Options, run_seed};

/// Seeds that broke an invariant while the scheduler was written, with flat plans (each
/// replays the bug it found when the fix is reverted): 105, 9 and 137 a worker astray
/// past its grace while a dead runner's lease lapsed, 6981 an end never counted, 12514
/// two reviewers at once after an unnamed exit report ended the wrong session.
const FOUND: &[u64] = &[105, 9, 137, 6981, 12514];

/// Runs the seeds: how many ran, how many had groups, and their dependencies on or of
/// a group.
fn run(seeds: impl Iterator<Item = u64>, opts: &Options) -> (usize, usize, usize) {
    let (mut n, mut grouped, mut group_deps) = (0, 0, 0);
    for seed in seeds {
        match run_seed(seed, opts) {
            Ok(r) => {
                grouped += usize::from(r.groups > 0);
                group_deps += r.group_deps;
            }
            Err(v) => panic!("{v}"),
        }
        n += 1;
    }
    (n, grouped, group_deps)
}

#[test]
fn safety_over_two_thousand_seeds() {
    let (n, grouped, group_deps) = run(0..2000, &Options::default());
    assert_eq!(n, 2000);
    // The plans are trees often enough to matter: a group's dependencies hold back its
    // leaves, which the invariant "a task starts only when its dependencies and its
    // groups' are done" checks.
    assert!(grouped > 1000 && group_deps > 500, "{grouped} {group_deps}");
    let flat = Options {
        groups: false,
        ..Options::default()
    };
    let (n, grouped, _) = run((0..500).chain(FOUND.iter().copied()), &flat);
    assert_eq!((n, grouped), (500 + FOUND.len(), 0));
}

#[test]
fn liveness_over_a_thousand_seeds() {
    let opts = Options {
        liveness: true,
        ..Options::default()
    };
    assert_eq!(run(0..1000, &opts).0, 1000);
}

/// Seeds that found a defect with trees and three runners: 7000474, a person's cancel
/// between a runner's recording of a session and its host's start; the host started
/// the program after the stop had found nothing to signal, and it ran on with the task
/// cancelled (now the stop leaves a marker the host looks for before it starts).
#[test]
fn seeds_found_with_three_runners() {
    let opts = Options {
        runners: 3,
        ..Options::default()
    };
    assert_eq!(run([7_000_474].into_iter(), &opts).0, 1);
}

#[test]
fn a_seed_replays_exactly() {
    let opts = Options::default();
    assert_eq!(run_seed(42, &opts), run_seed(42, &opts));
}
