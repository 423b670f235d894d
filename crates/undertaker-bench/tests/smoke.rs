//! Runs the whole benchmark in its tiny smoke mode (a few seconds) and checks that
//! every measurement ran and is in the JSON. Times decide nothing here.

use std::path::PathBuf;
use std::process::Command;

const KEYS: [&str; 15] = [
    "spawn",
    "spawn_cpu",
    "exit_latency",
    "teardown_10",
    "teardown_100",
    "teardown_1000",
    "sweep_1000",
    "sweep_5000",
    "registry_1",
    "registry_10",
    "registry_100",
    "ps_1000",
    "log_100000",
    "footprint_rss",
    "footprint_binary",
];

fn skip_or_fail(why: &str) {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{why}");
    }
    eprintln!("skipped: {why}");
}

#[test]
fn smoke_run_reports_every_measurement() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_undertaker-bench"));
    let undertaker = bench.with_file_name("undertaker");
    if !undertaker.is_file() {
        return skip_or_fail(&format!(
            "no undertaker binary at {} (cargo build -p undertaker-cli)",
            undertaker.display()
        ));
    }
    let out = Command::new(&bench)
        .args(["--quick", "--json", "--undertaker"])
        .arg(&undertaker)
        .env("UNDERTAKER_BENCH_SMOKE", "1")
        .output()
        .expect("running undertaker-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(doc["mode"], "smoke");
    let ms = doc["measurements"]
        .as_object()
        .expect("measurements object");
    for key in KEYS {
        let m = ms
            .get(key)
            .unwrap_or_else(|| panic!("no measurement {key}"));
        let contenders = m["contenders"].as_array().expect("contenders");
        assert!(!contenders.is_empty(), "{key}: no contenders");
        for c in contenders {
            assert_ne!(c["state"], "failed", "{key}: {c}");
        }
        // The anchors every machine has were measured.
        let measured = |name: &str| {
            contenders
                .iter()
                .any(|c| c["name"] == name && c["state"] == "measured")
        };
        // bubblewrap, the peer with the same guarantee, is a contender wherever
        // undertaker is started (measured, or unavailable with a reason).
        let bwrap = |name: &str| contenders.iter().any(|c| c["name"] == name);
        if matches!(key, "spawn" | "spawn_cpu" | "exit_latency") {
            assert!(bwrap("bwrap"), "{key}: no bwrap contender");
        }
        if let Some(n) = key.strip_prefix("registry_") {
            let size = m["size"].as_u64().unwrap_or_default();
            assert!(
                bwrap(&format!("bwrap ×{size}")),
                "{key} ({n}): no bwrap contender"
            );
        }
        match key {
            "spawn" | "spawn_cpu" | "exit_latency" => assert!(
                measured("bare") && measured("undertaker run --tier auto"),
                "{key}"
            ),
            k if k.starts_with("teardown_") => assert!(
                measured("kill -- -PGID") && measured("undertaker run --tier auto"),
                "{key}"
            ),
            k if k.starts_with("sweep_") => assert!(measured("ps -e"), "{key}"),
            "footprint_rss" => assert!(measured("undertaker run --tier auto"), "{key}"),
            _ => {}
        }
    }
    assert!(doc["targets"].as_array().is_some_and(|t| t.len() == 20));
    assert!(doc["failures"].as_array().is_some_and(|f| f.is_empty()));
}
