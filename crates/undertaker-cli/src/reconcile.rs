//! `ps`, `sweep`, `kill` and `log`: printers over the library's commands.

use crate::printable::{self, print_table};
use crate::{KillArgs, LogArgs, PsArgs, SweepArgs};
use std::path::PathBuf;
use undertaker::report::TreeSweep;

/// Reports a failed command; its exit status.
fn failed(e: &undertaker::Error) -> i32 {
    errln!("undertaker: {}", printable::line(&e.to_string()));
    e.exit_code()
}

fn print_json(v: &impl serde::Serialize) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => outln!("{s}"),
        Err(e) => errln!("undertaker: json: {e}"),
    }
}

/// Prints `items` as JSON, or as a table under `header` with one row per item;
/// returns the exit code (0).
fn print_listing<T: serde::Serialize>(
    items: &[T],
    json: bool,
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) -> i32 {
    if json {
        print_json(&items);
    } else {
        print_table(header, &items.iter().map(row).collect::<Vec<_>>());
    }
    0
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn age(ms: Option<i64>) -> String {
    let Some(ms) = ms else { return "-".into() };
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86399 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
    }
}

pub fn cmd_ps(args: PsArgs, state_dir: Option<PathBuf>) -> i32 {
    let rows = match undertaker::ps(state_dir.as_deref(), args.all) {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    print_listing(
        &rows,
        args.json,
        &[
            "ID", "LABEL", "TIER", "GUARDIAN", "OWNER", "ROOT", "LIVE", "STATE", "AGE",
        ],
        |r| {
            vec![
                r.id.clone(),
                opt(r.label.clone()),
                opt(r.tier),
                match r.supervisor_reachable {
                    // `kill` of its trees refuses: the table says why at once.
                    Some(false) => format!("{} (cannot be asked)", opt(r.guardian_pid)),
                    _ => opt(r.guardian_pid),
                },
                opt(r.owner_pid),
                opt(r.root_pid),
                r.live_processes.to_string(),
                r.state.to_string(),
                age(r.age_ms),
            ]
        },
    )
}

fn print_tree_sweep(t: &TreeSweep) {
    let label = t
        .label
        .as_deref()
        .map(|l| format!(" ({})", printable::cell(l)))
        .unwrap_or_default();
    outln!(
        "tree {}{label}: {} — {}",
        t.id,
        t.action,
        printable::line(&t.reason)
    );
    for x in &t.targets {
        match (&x.refusal_code, &x.refusal) {
            (Some(code), Some(msg)) => outln!(
                "  pid {}: refused [{code}]: {}",
                x.pid,
                printable::line(msg)
            ),
            _ => outln!(
                "  pid {} (start {}): {} [{}]",
                x.pid,
                x.starttime,
                x.outcome,
                x.proof.as_deref().unwrap_or("-")
            ),
        }
    }
    if t.left_alive > 0 {
        outln!("  {} guarded process(es) still alive", t.left_alive);
    }
}

pub fn cmd_sweep(args: SweepArgs, state_dir: Option<PathBuf>) -> i32 {
    let report = match undertaker::sweep(state_dir.as_deref(), args.dry_run, args.grace) {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    if let Some(why) = &report.registry_error {
        errln!(
            "undertaker: {}; swept only the tree cgroups found without it",
            printable::line(why)
        );
    }
    if args.json {
        print_json(&report);
    } else {
        for t in &report.trees {
            print_tree_sweep(t);
        }
        if report.dry_run {
            let would = (report.trees.iter())
                .flat_map(|t| &t.targets)
                .filter(|x| x.outcome == undertaker::report::TargetOutcome::WouldSignal)
                .count();
            outln!(
                "{} tree(s) examined; a sweep would signal {would} guarded process(es) (dry run: nothing was signalled)",
                report.trees.len(),
            );
        } else {
            outln!(
                "{} tree(s) examined; {} guarded process(es) left alive",
                report.trees.len(),
                report.left_alive
            );
        }
    }
    report.exit_code()
}

pub fn cmd_kill(args: KillArgs, state_dir: Option<PathBuf>) -> i32 {
    match undertaker::kill(state_dir.as_deref(), &args.tree, args.grace) {
        Ok(t) => {
            if args.json {
                print_json(&t);
            } else {
                print_tree_sweep(&t);
            }
            t.exit_code()
        }
        Err(e) => failed(&e),
    }
}

pub fn cmd_log(args: LogArgs, state_dir: Option<PathBuf>) -> i32 {
    let entries = match (args.last, args.before) {
        (None, None) => undertaker::log(state_dir.as_deref(), args.tree.as_deref()),
        (last, before) => undertaker::log_page(
            state_dir.as_deref(),
            args.tree.as_deref(),
            before,
            last.unwrap_or(1000),
        ),
    };
    let entries = match entries {
        Ok(e) => e,
        Err(e) => return failed(&e),
    };
    print_listing(
        &entries,
        args.json,
        &[
            "TIME", "TREE", "ACTOR", "EVENT", "PID", "SIGNAL", "PROOF", "OUTCOME",
        ],
        |e| {
            let detail = match (&e.refusal_code, &e.message) {
                (Some(code), Some(m)) => format!("{code}: {m}"),
                (None, Some(m)) => m.clone(),
                _ => opt(e.outcome.clone()),
            };
            vec![
                crate::clock::utc(e.time_ms),
                opt(e
                    .tree
                    .as_deref()
                    .map(|t| t.chars().take(12).collect::<String>())),
                e.actor.clone(),
                e.event.clone(),
                opt(e.pid),
                opt(e.signal.clone()),
                opt(e.proof.clone()),
                detail,
            ]
        },
    )
}
