//! The table, the targets, the JSON.

use crate::measure::{Measurement, State};
use crate::scenarios::{
    undertaker_name, BWRAP, CGROUP_KILL, KILLPG, PS, PS_CMD, SWEEP, TIERS, TINI,
};
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct Target {
    pub name: String,
    pub status: &'static str,
    pub detail: String,
}

fn find<'a>(ms: &'a [Measurement], key: &str) -> Option<&'a Measurement> {
    ms.iter().find(|m| m.key == key)
}

fn ratio_target(
    ms: &[Measurement],
    key: &str,
    who: &str,
    anchor: &str,
    limit: f64,
    name: String,
) -> Target {
    let m = find(ms, key);
    let (a, b) = (
        m.and_then(|m| m.median(who)),
        m.and_then(|m| m.median(anchor)),
    );
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => {
            let r = a / b;
            Target {
                name,
                status: if r <= limit { "PASS" } else { "MISS" },
                detail: format!("{r:.2}× ({a:.1} vs {b:.1} {})", m.map_or("", |m| m.unit)),
            }
        }
        _ => Target {
            name,
            status: "n/a",
            detail: format!("`{who}` or `{anchor}` not measured in {key}"),
        },
    }
}

pub fn targets(ms: &[Measurement]) -> Vec<Target> {
    let auto = undertaker_name("auto");
    let mut t = vec![ratio_target(
        ms,
        "spawn",
        &auto,
        TINI,
        1.2,
        "`run -- true` ≤ 1.2× `tini -s -- true`".into(),
    )];
    // Issue 30: at or below bubblewrap, the peer with the same guarantee, in wall and
    // CPU time, in every tier.
    for tier in TIERS {
        for (key, what) in [("spawn", "wall"), ("spawn_cpu", "CPU")] {
            t.push(ratio_target(
                ms,
                key,
                &undertaker_name(tier),
                BWRAP,
                1.0,
                format!("`run --tier {tier} -- true` ≤ 1.0× bwrap ({what})"),
            ));
        }
    }
    t.push(ratio_target(
        ms,
        "exit_latency",
        &auto,
        TINI,
        1.5,
        "exit latency ≤ 1.5× tini's".into(),
    ));
    for class in [100, 1000] {
        t.push(ratio_target(
            ms,
            &format!("teardown_{class}"),
            &auto,
            KILLPG,
            1.3,
            format!("owner death → tree gone, {class} processes ≤ 1.3× `kill -- -PGID`"),
        ));
        t.push(ratio_target(
            ms,
            &format!("teardown_{class}"),
            &format!("{auto} --grace 0"),
            CGROUP_KILL,
            1.3,
            format!(
                "owner death → tree gone with `--grace 0`, {class} processes ≤ 1.3× cgroup.kill"
            ),
        ));
    }
    t.push(ratio_target(
        ms,
        "registry_100",
        &format!("{auto} ×100"),
        "bare ×100",
        3.0,
        "100 concurrent `run -- true` ≥ 1/3 of bare `true`'s throughput (time ≤ 3×)".into(),
    ));
    t.push(ratio_target(
        ms,
        "registry_100",
        &format!("{auto} ×100"),
        &format!("{TINI} ×100"),
        1.3,
        "100 concurrent `run -- true` ≤ 1.3× 100 concurrent `tini -s -- true`".into(),
    ));
    let ps = find(ms, "ps_1000").and_then(|m| m.median(&format!("{PS_CMD} (1000 live trees)")));
    t.push(match ps {
        Some(v) => Target {
            name: "`undertaker ps` with 1 000 live trees ≤ 50 ms".into(),
            status: if v <= 50.0 { "PASS" } else { "MISS" },
            detail: format!("{v:.1} ms"),
        },
        None => Target {
            name: "`undertaker ps` with 1 000 live trees ≤ 50 ms".into(),
            status: "n/a",
            detail: "ps_1000 not measured (or smoke-sized)".into(),
        },
    });
    for class in [1000, 5000] {
        t.push(ratio_target(
            ms,
            &format!("sweep_{class}"),
            SWEEP,
            PS,
            1.0,
            format!("sweep --dry-run among {class} processes ≤ 1.0× `ps -e`"),
        ));
    }
    let rss = find(ms, "footprint_rss");
    let name = "guardian idle RSS ≤ tini's + 1 MiB".to_string();
    t.push(
        match (
            rss.and_then(|m| m.median(&auto)),
            rss.and_then(|m| m.median(TINI)),
        ) {
            (Some(a), Some(b)) => Target {
                name,
                status: if a <= b + 1024.0 { "PASS" } else { "MISS" },
                detail: format!("{a:.0} KiB vs {b:.0} KiB (+{:.0} KiB)", a - b),
            },
            _ => Target {
                name,
                status: "n/a",
                detail: "undertaker or tini not measured".into(),
            },
        },
    );
    t
}

fn cell(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Markdown-compatible table: one block per measurement.
pub fn table(ms: &[Measurement], targets: &[Target]) -> String {
    let mut out = String::new();
    for m in ms {
        let size = m.size.map_or(String::new(), |s| format!(", size {s}"));
        out.push_str(&format!(
            "\n### {} ({}, {} rounds{size})\n{}\n\n",
            m.key, m.unit, m.rounds, m.what
        ));
        let mut header = "| contender | median | p90 | p99 |".to_string();
        let mut rule = "|---|---:|---:|---:|".to_string();
        for a in &m.anchors {
            header.push_str(&format!(" × {a} |"));
            rule.push_str("---:|");
        }
        out.push_str(&format!("{header}\n{rule}\n"));
        for c in &m.contenders {
            let mut row = format!("| {} |", c.name);
            match (&c.state, c.summary) {
                (State::Measured, Some(s)) => {
                    row.push_str(&format!(
                        " {} | {} | {} |",
                        cell(s.median),
                        cell(s.p90),
                        cell(s.p99)
                    ));
                    for a in &m.anchors {
                        match c.ratios.get(a) {
                            Some(r) => row.push_str(&format!(" {r:.2} |")),
                            None => row.push_str(" – |"),
                        }
                    }
                }
                (state, _) => {
                    let word = match state {
                        State::Failed => "FAILED",
                        _ => "unavailable",
                    };
                    row.push_str(&format!(
                        " {word}: {} | | |{}",
                        c.reason.as_deref().unwrap_or(""),
                        " |".repeat(m.anchors.len())
                    ));
                }
            }
            out.push_str(&row);
            out.push('\n');
        }
        if m.key.starts_with("registry_") {
            if let (Some(size), Some(c)) = (m.size, m.contenders.first()) {
                if let Some(s) = c.summary {
                    out.push_str(&format!(
                        "\n{}: {:.0} guarded runs/s\n",
                        c.name,
                        size as f64 / (s.median / 1e3)
                    ));
                }
            }
        }
    }
    out.push_str("\n### targets\n\n| target | verdict | measured |\n|---|---|---|\n");
    for t in targets {
        out.push_str(&format!("| {} | {} | {} |\n", t.name, t.status, t.detail));
    }
    out
}
