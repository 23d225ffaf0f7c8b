//! Replays the committed fuzz corpus (`rds-core/fuzz/corpus/<target>/`) through the same
//! checks the fuzz targets run (`rds-core/fuzz/checks.rs`), on the stable toolchain. CI runs
//! this instead of `cargo fuzz`; a crash input saved from a fuzzer run belongs in the corpus.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).unwrap();
            (p, data)
        })
        .collect()
}

type Check = fn(&[u8]);

fn replay(target: &str, check: Check) {
    let files = corpus(target);
    assert!(files.len() >= 10, "{target}: only {} inputs", files.len());
    for (path, data) in files {
        let r = std::panic::catch_unwind(|| check(&data));
        assert!(r.is_ok(), "{target}: {} fails its checks", path.display());
    }
}

#[test]
fn header_corpus() {
    replay("header", checks::header);
}

#[test]
fn stream_corpus() {
    replay("stream", checks::stream);
}

#[test]
fn frag_corpus() {
    replay("frag", checks::frag);
}

#[test]
fn engine_corpus() {
    replay("engine", checks::engine);
}

#[test]
fn ctl_corpus() {
    replay("ctl", checks::ctl);
}

#[test]
fn ib_private_corpus() {
    replay("ib_private", checks::ib_private);
}

#[test]
fn pcap_corpus() {
    replay("pcap", checks::pcap);
}

/// Every truncation of every corpus input is an input too (cheap extra coverage of the
/// zero-padded tails the readers produce).
#[test]
fn truncated_inputs() {
    let targets: [(&str, Check); 7] = [
        ("header", checks::header),
        ("stream", checks::stream),
        ("frag", checks::frag),
        ("engine", checks::engine),
        ("ctl", checks::ctl),
        ("ib_private", checks::ib_private),
        ("pcap", checks::pcap),
    ];
    for (target, check) in targets {
        for (path, data) in corpus(target) {
            for cut in [0, 1, 2, 8, 24, 31, 32, 40, 47, 48, 49, 55, 56, 100, 1000]
                .into_iter()
                .chain([data.len() / 2])
            {
                if cut < data.len() {
                    let r = std::panic::catch_unwind(|| check(&data[..cut]));
                    assert!(r.is_ok(), "{target}: {} cut at {cut}", path.display());
                }
            }
        }
    }
}

#[test]
fn ring_corpus() {
    replay("ring", checks::ring);
}
