//! Replays the fuzz corpus (the seeds in `fuzz/seeds/`, plus `fuzz/corpus/` and
//! `fuzz/artifacts/` when a local fuzzing run left them) through the same entry points
//! the fuzz targets use, so every input that ever mattered stays a regression test.

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = Vec::new();
    for dir in ["seeds", "corpus", "artifacts"] {
        if let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(target)) {
            files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    files.sort();
    files
}

fn replay(target: &str, check: fn(&[u8])) {
    let files = inputs(target);
    assert!(
        files.len() >= 5,
        "fuzz/seeds/{target} holds the committed seeds; found {}",
        files.len()
    );
    for path in files {
        // A running fuzzer may replace corpus files while we read them.
        match std::fs::read(&path) {
            Ok(data) => check(&data),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
}

#[test]
fn protocol_corpus_replays_clean() {
    replay("protocol", undertaker::fuzzing::protocol);
}

#[test]
fn procfs_corpus_replays_clean() {
    replay("procfs", undertaker::fuzzing::procfs);
}
