//! Kill -9 of a command in the middle of folding record files into the database
//! (docs/REGISTRY.md, "The fold"): inside its transaction or after its commit, before
//! the files are removed. Two trees are torn down by their guardians (owner killed),
//! which leaves their record files with audit lines; `undertaker ps` starts folding
//! with a test pause at the chosen point and is killed there; then `undertaker log`
//! must show every audit line of those files exactly once. A lost or doubled entry is
//! an error.

use crate::procs::{self, Lines};
use crate::rng::Rng;
use crate::trial::{self, await_tree, Ctx, Outcome};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

pub const SCENARIO: &str = "chaos-kill-folder";

const TREE: &str = "plain,ignorer";
const GRACE: Duration = Duration::from_millis(100);
const PAUSES: [&str; 2] = [
    "UNDERTAKER_TEST_PAUSE_IN_FOLD",
    "UNDERTAKER_TEST_PAUSE_AFTER_FOLD",
];

/// Audit lines per tree id in the record files of `dir`.
fn audit_lines_in_files(dir: &std::path::Path) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir.join("trees"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".tree") else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let n = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n') && l.starts_with("{\"audit\""))
            .count();
        out.insert(id.to_owned(), n);
    }
    out
}

/// Audit entries per tree id as `undertaker log --json` shows them.
fn logged(ctx: &Ctx, dir: &std::path::Path) -> Result<BTreeMap<String, usize>> {
    let out = Command::new(&ctx.undertaker)
        .arg("--state-dir")
        .arg(dir)
        .args(["log", "--json"])
        .stdin(Stdio::null())
        .output()
        .context("undertaker log")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("log JSON")?;
    let mut counts = BTreeMap::new();
    for e in v.as_array().into_iter().flatten() {
        if let Some(t) = e["tree"].as_str() {
            *counts.entry(t.to_owned()).or_insert(0) += 1;
        }
    }
    Ok(counts)
}

/// One guarded tree torn down by its guardian after its owner's death.
fn torn_down_tree(ctx: &mut Ctx) -> Result<String> {
    let trial = ctx.next_trial();
    let mut owner = ctx.spawn_owner()?;
    let mut guardian = ctx
        .guarded_tree(&trial, TREE, GRACE, owner.id())
        .env("UNDERTAKER_NO_HEAL", "1")
        .stderr(Stdio::null())
        .spawn()
        .context("starting undertaker run")?;
    let mut lines = Lines::new(
        guardian
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout from undertaker run"))?,
    );
    let up = await_tree(&mut lines, &trial, TREE);
    trial::kill_child(&mut owner);
    let done = trial::child_exited_within(&guardian, Duration::from_secs(15));
    if !done {
        trial::kill_child(&mut guardian);
    }
    let _ = guardian.wait();
    procs::count_and_kill_survivors(&trial);
    up?;
    if !done {
        bail!("undertaker run did not finish its teardown in 15 s");
    }
    Ok(trial)
}

pub fn run_trial(ctx: &mut Ctx, rng: &mut Rng) -> Result<Outcome> {
    let dir = ctx
        .state_dir
        .clone()
        .ok_or_else(|| anyhow!("no state directory"))?;
    // Fold whatever earlier trials left, so the files counted below are these trees'.
    logged(ctx, &dir)?;
    let before = logged(ctx, &dir)?;
    torn_down_tree(ctx)?;
    torn_down_tree(ctx)?;
    let expected = audit_lines_in_files(&dir);
    // Two finished trees, each having logged its teardown: otherwise nothing is tested.
    if expected.len() != 2 || expected.values().any(|&n| n == 0) {
        bail!("expected two record files with audit lines, found {expected:?}");
    }
    let pause = PAUSES[rng.below(2) as usize];
    let mut folder = Command::new(&ctx.undertaker)
        .arg("--state-dir")
        .arg(&dir)
        .args(["ps", "--json"])
        .env(pause, "10000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the folder")?;
    // Somewhere in its first fold (opening the registry comes first).
    std::thread::sleep(Duration::from_millis(150 + rng.below(200)));
    if folder.try_wait().ok().flatten().is_some() {
        bail!("{pause}: the folder finished before the kill");
    }
    trial::kill_child(&mut folder);
    let after = logged(ctx, &dir)?;
    for (id, n) in &expected {
        let got = after.get(id).copied().unwrap_or(0) - before.get(id).copied().unwrap_or(0);
        if got != *n {
            bail!("{pause}: tree {id}: {n} audit lines in its file, {got} in the log");
        }
    }
    if !audit_lines_in_files(&dir).is_empty() {
        bail!("{pause}: record files left after the next fold");
    }
    Ok(Outcome::default())
}
