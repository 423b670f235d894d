//! `undertaker-torture`: measures docs/DESIGN.md's promises 1–3 (no survivor, no stranger,
//! nothing lost) for undertaker and, side by side, for the designs it replaces.
//!
//! Everything runs inside a private PID namespace (see `ns`), where `ns_last_pid`
//! hands recycled pids and pgids to decoy processes that record every signal.
#![deny(unsafe_code)]

mod baselines;
mod chaos;
mod fold;
mod modes;
mod ns;
mod procs;
mod released;
mod report;
mod rng;
mod scenarios;
mod supervise;
mod svhost;
mod sys;
mod trial;

use anyhow::{bail, Context, Result};
use clap::Parser;
use report::{Cell, Report};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "undertaker-torture",
    about = "PID-reuse torture and kill -9 chaos: undertaker against naive, prune (Hermes), ladder (pi-crew) and process-wrap."
)]
struct Cli {
    /// Total trials, spread evenly over the selected scenario × strategy cells.
    #[arg(long, default_value_t = 200)]
    trials: u32,
    /// Seed for the chaos kill points (default: random, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Run only these scenarios (repeatable): leader-reused, group-reused,
    /// check-to-signal, stale-registration, chaos-kill-owner, chaos-kill-wrapper,
    /// chaos-kill-guardian, chaos-kill-undertaker, chaos-kill-both, chaos-kill-folder,
    /// and the supervise cells: sv-leader-reused, sv-group-reused, sv-check-to-signal,
    /// sv-adopt-reused, sv-replayed-registration, sv-chaos-kill-supervisor,
    /// sv-chaos-kill-host, sv-chaos-restart, sv-snapshot-same-tick, and
    /// sv-released-restarted.
    #[arg(long = "scenario", value_name = "NAME")]
    scenarios: Vec<String>,
    /// The undertaker binary (default: `undertaker` next to this executable).
    #[arg(long, value_name = "PATH")]
    undertaker: Option<PathBuf>,
    /// Passed to `undertaker run --tier`.
    #[arg(long, value_name = "TIER")]
    tier: Option<String>,
}

fn all_scenario_names() -> Vec<&'static str> {
    scenarios::SCENARIOS
        .iter()
        .map(|s| s.name())
        .chain(chaos::TARGETS.iter().map(|t| t.scenario_name()))
        .chain([fold::SCENARIO])
        .chain(supervise::CELLS.iter().map(|c| c.name()))
        .collect()
}

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    if let Some(mode) = argv
        .get(1)
        .and_then(|a| a.to_str())
        .filter(|a| a.starts_with("__"))
    {
        return modes::run(mode, &argv[2..]);
    }
    let cli = Cli::parse();
    let known = all_scenario_names();
    if let Some(bad) = cli.scenarios.iter().find(|s| !known.contains(&s.as_str())) {
        eprintln!(
            "undertaker-torture: unknown scenario {bad:?} (known: {})",
            known.join(", ")
        );
        return ExitCode::from(2);
    }
    let result = if ns::inside() {
        worker(&cli)
    } else {
        launch(&cli)
    };
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("undertaker-torture: {e:#}");
            ExitCode::from(125)
        }
    }
}

fn locate_undertaker(cli: &Cli) -> Result<PathBuf> {
    let path = match &cli.undertaker {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .context("locating our own executable")?
            .with_file_name("undertaker"),
    };
    if !path.is_file() {
        bail!(
            "no undertaker binary at {}: build it with `cargo build --release -p undertaker-cli` \
             (same profile as this harness) or pass --undertaker PATH",
            path.display()
        );
    }
    std::fs::canonicalize(&path).with_context(|| format!("resolving {}", path.display()))
}

/// Outside the namespace: resolve everything, then re-execute inside a fresh one.
fn launch(cli: &Cli) -> Result<i32> {
    let undertaker = locate_undertaker(cli)?;
    ns::probe().context("cannot create a private PID namespace")?;
    let seed = cli.seed.unwrap_or_else(|| {
        let mut b = [0u8; 8];
        let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
        u64::from_le_bytes(b)
    });
    let mut args: Vec<OsString> = vec![
        "--trials".into(),
        cli.trials.to_string().into(),
        "--seed".into(),
        seed.to_string().into(),
        "--undertaker".into(),
        undertaker.into(),
    ];
    if cli.json {
        args.push("--json".into());
    }
    for s in &cli.scenarios {
        args.push("--scenario".into());
        args.push(s.into());
    }
    if let Some(t) = &cli.tier {
        args.push("--tier".into());
        args.push(t.into());
    }
    ns::reexec(&args)
}

fn selected(cli: &Cli, name: &str) -> bool {
    cli.scenarios.is_empty() || cli.scenarios.iter().any(|s| s == name)
}

/// Inside the namespace: run every selected cell and report.
fn worker(cli: &Cli) -> Result<i32> {
    let undertaker = locate_undertaker(cli)?;
    let seed = cli.seed.unwrap_or(0);
    let exe = std::env::current_exe().context("locating our own executable")?;
    let mut ctx = trial::Ctx::new(exe, undertaker.clone(), cli.tier.clone(), seed);
    let mut rng = rng::Rng::new(seed);

    let reuse: Vec<_> = scenarios::SCENARIOS
        .iter()
        .filter(|s| selected(cli, s.name()))
        .collect();
    let chaos_targets: Vec<_> = chaos::TARGETS
        .iter()
        .filter(|t| selected(cli, t.scenario_name()))
        .collect();
    let fold_cell = selected(cli, fold::SCENARIO);
    let sv_cells: Vec<_> = supervise::CELLS
        .iter()
        .filter(|c| selected(cli, c.name()))
        .collect();
    let cell_count = reuse.len() * scenarios::STRATEGIES.len()
        + chaos_targets.len()
        + usize::from(fold_cell)
        + sv_cells.len();
    let per_cell = cli.trials.div_ceil(cell_count.max(1) as u32).max(1);

    let mut cells = Vec::new();
    for &&scenario in &reuse {
        for strategy in scenarios::STRATEGIES {
            let cell = Cell::new(strategy.name(), scenario.name(), "reuse");
            cells.push(run_cell(cell, per_cell, || {
                scenarios::run_trial(&mut ctx, strategy, scenario)
            }));
        }
    }
    for &&target in &chaos_targets {
        let cell = Cell::new("undertaker", target.scenario_name(), "chaos");
        if target.needs_sweep() && !ctx.sweep_available {
            cells.push(cell.not_run("sweep unavailable"));
            continue;
        }
        cells.push(run_cell(cell, per_cell, || {
            chaos::run_trial(&mut ctx, target, &mut rng)
        }));
    }
    if fold_cell {
        let cell = Cell::new("undertaker", fold::SCENARIO, "chaos");
        if ctx.state_dir.is_none() {
            cells.push(cell.not_run("no --state-dir"));
        } else {
            // Each trial is two trees and three commands: a fifth of the others'.
            cells.push(run_cell(cell, per_cell.div_ceil(5), || {
                fold::run_trial(&mut ctx, &mut rng)
            }));
        }
    }
    for &&sv in &sv_cells {
        let cell = Cell::new(supervise::STRATEGY, sv.name(), sv.kind());
        if ctx.state_dir.is_none() {
            cells.push(cell.not_run("no --state-dir"));
            continue;
        }
        if ctx.tier.as_deref() == Some("pidns") {
            cells.push(cell.not_run("supervise refuses the pidns tier"));
            continue;
        }
        cells.push(run_cell(cell, per_cell, || {
            supervise::run_trial(&mut ctx, sv, &mut rng)
        }));
    }
    // `undertaker run --tier portable` (docs/TIERS.md, "portable"): the same reuse
    // and chaos trials, in the default set when no tier was asked for.
    if ctx.tier.is_none() {
        ctx.tier = Some("portable".into());
        for &&scenario in &reuse {
            let cell = Cell::new(report::PORTABLE, scenario.name(), "reuse");
            cells.push(run_cell(cell, per_cell, || {
                scenarios::run_trial(&mut ctx, scenarios::Strategy::Undertaker, scenario)
            }));
        }
        for &&target in &chaos_targets {
            let cell = Cell::new(report::PORTABLE, target.scenario_name(), "chaos");
            if target.needs_sweep() && !ctx.sweep_available {
                cells.push(cell.not_run("sweep unavailable"));
                continue;
            }
            cells.push(run_cell(cell, per_cell, || {
                chaos::run_trial(&mut ctx, target, &mut rng)
            }));
        }
        ctx.tier = None;
    }
    for strategy in scenarios::STRATEGIES
        .iter()
        .filter(|s| **s != scenarios::Strategy::Undertaker)
    {
        for &&target in &chaos_targets {
            cells.push(
                Cell::new(strategy.name(), target.scenario_name(), "chaos")
                    .not_run("no recovery after its reaper is killed (state is in memory)"),
            );
        }
    }
    ctx.cleanup();

    let ok = !cells
        .iter()
        .any(|c| report::under_test(c.strategy) && c.failed());
    let report = Report {
        seed,
        trials_requested: cli.trials,
        kernel: rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned(),
        uid: rustix::process::getuid().as_raw(),
        pid_max: ns::pid_max(),
        undertaker: undertaker.display().to_string(),
        sweep_available: ctx.sweep_available,
        cells,
        ok,
    };
    if cli.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        report::print_table(&report);
    }
    Ok(if ok { 0 } else { 1 })
}

/// Runs `trials` trials into `cell`.
fn run_cell(
    mut cell: Cell,
    trials: u32,
    mut trial: impl FnMut() -> Result<trial::Outcome>,
) -> Cell {
    for _ in 0..trials {
        add(&mut cell, trial());
    }
    cell
}

fn add(cell: &mut Cell, outcome: Result<trial::Outcome>) {
    cell.trials += 1;
    match outcome {
        Ok(o) => {
            cell.reuse_forced += o.reused as u32;
            cell.interleaved += o.interleaved as u32;
            cell.survivors += o.survivors;
            if cell.note.is_none() {
                cell.note = o.note;
            }
            for d in &o.decoys {
                cell.strangers_hit += d.hit as u32;
                cell.stranger_signals += d.signals;
            }
        }
        Err(e) => {
            cell.errors += 1;
            if cell.note.is_none() {
                cell.note = Some(format!("error: {e:#}"));
            }
        }
    }
}
