//! Replays the saved MCP-message fuzz inputs (`fuzz/corpus/mcp_message/*`) and seeded
//! mutations of them through `warden_mcp::fuzzing::message`, on the stable toolchain.

use std::path::Path;

#[test]
fn mcp_message_corpus_and_mutations_never_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/mcp_message");
    let seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}; the target needs a seed corpus", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert!(!seeds.is_empty());
    for s in &seeds {
        warden_mcp::fuzzing::message(s);
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..400 {
        let mut data = seeds[round % seeds.len()].clone();
        for _ in 0..(next() % 6) {
            let r = next();
            let i = (r >> 8) as usize % (data.len() + 1);
            match r % 3 {
                0 if i < data.len() => data[i] = (r >> 16) as u8,
                1 if i < data.len() => {
                    data.remove(i);
                }
                _ => {
                    let bits = [b'{', b'}', b'"', b':', b',', b'\\', b'\n', b'[', 0xff];
                    data.insert(i, bits[(r >> 16) as usize % bits.len()]);
                }
            }
        }
        warden_mcp::fuzzing::message(&data);
    }
}
