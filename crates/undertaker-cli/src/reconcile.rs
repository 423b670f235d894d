//! `ps`, `sweep`, `kill` and `log`: thin printers over the library's reconcile module.

use crate::printable::{self, print_table};
use crate::{KillArgs, LogArgs, PsArgs, SweepArgs};
use std::path::PathBuf;
use undertaker::linux::commands::reconcile::{self, Context, KillError, TreeSweep};
use undertaker::registry::RegistryError;

fn open(state_dir: Option<PathBuf>) -> Result<Context, i32> {
    Context::open(state_dir.as_deref()).map_err(|e| {
        errln!("undertaker: {}", printable::line(&e.to_string()));
        match e {
            RegistryError::UnsafeStateDir { .. } | RegistryError::NoStateDir => 2,
            _ => 1,
        }
    })
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
    let ctx = match open(state_dir) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let rows = match reconcile::ps(&ctx, args.all) {
        Ok(r) => r,
        Err(e) => {
            errln!("undertaker: {}", printable::line(&e.to_string()));
            return 1;
        }
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
                opt(r.tier.clone()),
                opt(r.guardian_pid),
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
    let ctx = match open(state_dir) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let report = match reconcile::sweep(&ctx, args.dry_run, args.grace) {
        Ok(r) => r,
        Err(e) => {
            errln!("undertaker: {}", printable::line(&e.to_string()));
            return 1;
        }
    };
    if args.json {
        print_json(&report);
    } else {
        for t in &report.trees {
            print_tree_sweep(t);
        }
        let verb = if report.dry_run {
            "would be left"
        } else {
            "left"
        };
        outln!(
            "{} tree(s) examined; {} guarded process(es) {verb} alive",
            report.trees.len(),
            report.left_alive
        );
    }
    i32::from(report.left_alive > 0)
}

pub fn cmd_kill(args: KillArgs, state_dir: Option<PathBuf>) -> i32 {
    let ctx = match open(state_dir) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let (id, rec) = match reconcile::resolve_tree(&ctx, &args.tree) {
        Ok(x) => x,
        Err(e @ (KillError::BadId(_) | KillError::Unknown(_) | KillError::Ambiguous(..))) => {
            errln!("undertaker: {}", printable::line(&e.to_string()));
            return 2;
        }
        Err(e) => {
            errln!("undertaker: {}", printable::line(&e.to_string()));
            return 1;
        }
    };
    match reconcile::kill(&ctx, &id, rec.as_ref(), args.grace) {
        Ok(t) => {
            if args.json {
                print_json(&t);
            } else {
                print_tree_sweep(&t);
            }
            i32::from(t.left_alive > 0 || matches!(t.action, "refused" | "guardian_unresponsive"))
        }
        Err(e) => {
            errln!("undertaker: {}", printable::line(&e.to_string()));
            1
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` from unix milliseconds (days-to-civil, proleptic Gregorian).
fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

pub fn cmd_log(args: LogArgs, state_dir: Option<PathBuf>) -> i32 {
    let ctx = match open(state_dir) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let entries = match ctx.registry.audit(None) {
        Ok(e) => e,
        Err(e) => {
            errln!("undertaker: {}", printable::line(&e.to_string()));
            return 1;
        }
    };
    let entries = match &args.tree {
        None => entries,
        Some(prefix) => {
            let valid = prefix.len() >= 4
                && prefix
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            let ids: std::collections::BTreeSet<&str> = entries
                .iter()
                .filter_map(|e| e.tree.as_deref())
                .filter(|t| t.starts_with(prefix.as_str()))
                .collect();
            match (valid, ids.len()) {
                (false, _) => {
                    errln!("undertaker: {prefix:?} is not a tree id (give at least 4 hex digits of one)");
                    return 2;
                }
                (true, 0) => {
                    // A recorded tree with nothing logged yet is not an error.
                    if reconcile::resolve_tree(&ctx, prefix).is_ok() {
                        vec![]
                    } else {
                        errln!("undertaker: no tree with id {prefix}");
                        return 2;
                    }
                }
                (true, 1) => {
                    let id = ids.into_iter().next().unwrap_or_default().to_owned();
                    entries
                        .into_iter()
                        .filter(|e| e.tree.as_deref() == Some(id.as_str()))
                        .collect()
                }
                (true, _) => {
                    let list: Vec<&str> = ids.into_iter().collect();
                    errln!(
                        "undertaker: {prefix} matches several trees: {}",
                        list.join(", ")
                    );
                    return 2;
                }
            }
        }
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
                utc(e.time_ms),
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

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formatting() {
        assert_eq!(super::utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
    }
}
