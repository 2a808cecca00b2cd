//! Replays every saved fuzz input (`fuzz/corpus/<target>/*`, seeds and regressions)
//! through its target: the smoke run of the fuzzers that `./scripts/test` includes.

use std::path::Path;

use warden_store::fuzzing::TARGETS;

#[test]
fn every_corpus_input_replays_without_panicking() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut replayed = 0;
    for (name, target) in TARGETS {
        let dir = root.join(name);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}; every target needs a seed corpus", dir.display()));
        let mut n = 0;
        for e in entries {
            let path = e.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            target(&data);
            n += 1;
        }
        assert!(n > 0, "{name} has an empty corpus");
        replayed += n;
    }
    eprintln!("replayed {replayed} corpus inputs");
}

/// Random bytes and mutations of the seeds through every target (a stable-toolchain
/// stand-in for the fuzzer, so a plain `cargo test` exercises the targets too).
#[test]
fn mutated_seeds_never_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for (name, target) in TARGETS {
        let seeds: Vec<Vec<u8>> = std::fs::read_dir(root.join(name))
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        for round in 0..300 {
            let mut data = seeds[round % seeds.len()].clone();
            for _ in 0..(next() % 8) {
                let r = next();
                match r % 4 {
                    0 if !data.is_empty() => {
                        let i = (r >> 8) as usize % data.len();
                        data[i] = (r >> 16) as u8;
                    }
                    1 if !data.is_empty() => {
                        let i = (r >> 8) as usize % data.len();
                        data.remove(i);
                    }
                    2 => {
                        let i = (r >> 8) as usize % (data.len() + 1);
                        let bits = [
                            b'{', b'}', b'"', b':', b',', b'\n', b'#', b'-', b'[', b']', 0xff,
                        ];
                        data.insert(i, bits[(r >> 16) as usize % bits.len()]);
                    }
                    _ => {
                        let i = (r >> 8) as usize % (data.len() + 1);
                        let j = i + ((r >> 24) as usize % 16).min(data.len().saturating_sub(i));
                        let chunk = data[i..j].to_vec();
                        data.splice(i..i, chunk);
                    }
                }
            }
            target(&data);
        }
    }
}
