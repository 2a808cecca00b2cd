//! Times TASK.md parsing against pulldown-cmark's own event stream (profiling aid for
//! bench/run's figure 3).
#![allow(clippy::print_stdout)] // an example prints its figures
use std::time::Instant;

fn main() {
    let mut doc = String::from(
        "---\nid: t\ntitle: \"A task\"\nstatus: working\nattempts: 1\n---\n# A task\n\n## Context\n",
    );
    while doc.len() < 1 << 20 {
        doc.push_str("Some context line with `code` and *emphasis*, and a [link](http://x).\n\n```rust\nfn main() {}\n## not a heading\n```\n\n### Detail\n- item one\n- item two\n\n<!-- a comment with PASS -->\n");
    }
    doc.push_str("\n## Handoff\nDONE: everything\n\n## Review\nVerdict: PASS\n");
    let mb = doc.len() as f64 / 1e6;
    for _ in 0..3 {
        let t = Instant::now();
        std::hint::black_box(warden_core::artifact::artifacts(&doc));
        let a = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let n = pulldown_cmark::Parser::new_ext(&doc, pulldown_cmark::Options::empty())
            .into_offset_iter()
            .count();
        std::hint::black_box(n);
        let p = t.elapsed().as_secs_f64();
        println!(
            "artifacts {:.0} MB/s   pulldown-cmark events {:.0} MB/s",
            mb / a,
            mb / p
        );
    }
}
