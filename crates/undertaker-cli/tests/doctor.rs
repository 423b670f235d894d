//! `undertaker doctor`: human table and stable JSON.
#![cfg(target_os = "linux")]

mod common;

use common::undertaker;

const CHECKS: [&str; 8] = [
    "pidfd_open",
    "pidfd_signal_process_group",
    "pidfd_get_info",
    "pidfs",
    "cgroup2_mount",
    "cgroup2_writable",
    "user_pid_namespaces",
    "subreaper",
];

#[test]
fn json_has_the_documented_fields() {
    let out = undertaker().args(["doctor", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    for name in CHECKS {
        assert!(v["checks"][name]["ok"].is_boolean(), "{name}");
        assert!(v["checks"][name]["detail"].is_string(), "{name}");
    }
    for tier in ["cgroup", "pidns", "subreaper", "portable"] {
        assert!(v["tiers"][tier]["available"].is_boolean(), "{tier}");
        assert!(v["tiers"][tier]["detail"].is_string(), "{tier}");
    }
    let auto = v["auto"].as_str().unwrap();
    assert!(auto == "cgroup" || auto == "subreaper");
    assert_eq!(
        auto == "cgroup",
        v["tiers"]["cgroup"]["available"].as_bool().unwrap()
    );
    assert!(v.get("state_dir").is_some());
    // The machine's own answer must agree with what `run --tier` does.
    for tier in ["cgroup", "pidns", "portable"] {
        let ok = v["tiers"][tier]["available"].as_bool().unwrap();
        let st = undertaker()
            .args(["run", "--tier", tier, "--", "true"])
            .status()
            .unwrap();
        assert_eq!(st.success(), ok, "doctor and run disagree on {tier}");
    }
}

#[test]
fn human_output_is_an_aligned_table() {
    let out = undertaker().arg("doctor").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("check"));
    let col = lines[0].find("status").unwrap();
    for line in &lines[1..] {
        assert_eq!(line.as_bytes()[col - 1], b' ', "{line}");
        assert_ne!(line.as_bytes()[col], b' ', "{line}");
    }
    for name in CHECKS {
        assert!(text.contains(name), "{name}");
    }
    assert!(text.contains("tier auto"));
}

/// A user without the cgroup tier is told how to get it, in full, after the table.
#[test]
fn an_unavailable_cgroup_tier_says_how_to_get_it() {
    if !common::is_root() {
        common::skip("needs root to run doctor as uid 65534 through setpriv");
        return;
    }
    let out = common::undertaker_as_nobody()
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    if report["tiers"]["cgroup"]["available"] == true {
        // Not a missing capability: this machine delegates a cgroup to uid 65534.
        eprintln!("uid 65534 has the cgroup tier here: nothing to advise");
        return;
    }
    let out = common::undertaker_as_nobody()
        .arg("doctor")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let advice = (text.lines())
        .find(|l| l.starts_with("tier cgroup is unavailable: "))
        .unwrap_or_else(|| panic!("no full line on the cgroup tier: {text}"));
    for needed in [
        "systemd-run --user --scope -p Delegate=yes",
        "--cgroup-root",
    ] {
        assert!(advice.contains(needed), "{needed:?} missing: {advice}");
    }
}
