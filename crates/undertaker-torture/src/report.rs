//! Results: one cell per strategy × scenario, printed as a table or one JSON object.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub strategy: &'static str,
    pub scenario: &'static str,
    /// "reuse" or "chaos".
    pub kind: &'static str,
    /// False when the cell could not run here; `note` says why.
    pub ran: bool,
    pub note: Option<String>,
    pub trials: u32,
    /// Trials in which a decoy really got the number the scenario aimed at.
    pub reuse_forced: u32,
    /// Trials in which the decoy was placed at the intended moment (undertaker: before
    /// the guardian's next signal round; always equal to `reuse_forced` otherwise).
    pub interleaved: u32,
    /// Decoys (strangers) that received any signal or died.
    pub strangers_hit: u32,
    /// Signals the strangers recorded (a dead decoy counts one: SIGKILL).
    pub stranger_signals: u32,
    /// Tree processes still alive after the strategy finished.
    pub survivors: u32,
    /// Trials the harness could not carry out (a helper never got ready, ...).
    pub errors: u32,
}

impl Cell {
    pub fn new(strategy: &'static str, scenario: &'static str, kind: &'static str) -> Self {
        Cell {
            strategy,
            scenario,
            kind,
            ran: true,
            note: None,
            trials: 0,
            reuse_forced: 0,
            interleaved: 0,
            strangers_hit: 0,
            stranger_signals: 0,
            survivors: 0,
            errors: 0,
        }
    }

    pub fn not_run(mut self, why: &str) -> Self {
        self.ran = false;
        self.note = Some(format!("not run: {why}"));
        self
    }

    /// A failure of the strategy under test (only `undertaker` fails the run).
    pub fn failed(&self) -> bool {
        self.ran && (self.strangers_hit > 0 || self.survivors > 0 || self.errors > 0)
    }
}

/// The cells of `undertaker run --tier portable` (docs/TIERS.md, "portable").
pub const PORTABLE: &str = "undertaker-portable";

/// The strategies whose failures fail the run: undertaker's ways of holding trees
/// (`run`, `run --tier portable`, and `supervise`); the baselines are measured, not
/// judged.
pub fn under_test(strategy: &str) -> bool {
    matches!(
        strategy,
        "undertaker" | PORTABLE | crate::supervise::STRATEGY
    )
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub seed: u64,
    pub trials_requested: u32,
    pub kernel: String,
    pub uid: u32,
    pub pid_max: u32,
    pub undertaker: String,
    pub sweep_available: bool,
    pub cells: Vec<Cell>,
    /// True when every `undertaker` and `supervise` cell that ran has no stranger hit,
    /// no survivor and no error.
    pub ok: bool,
}

pub fn print_table(r: &Report) {
    println!(
        "undertaker-torture: seed {} | kernel {} | uid {} | pid_max {} | sweep {}",
        r.seed,
        r.kernel,
        r.uid,
        r.pid_max,
        if r.sweep_available {
            "yes"
        } else {
            "unavailable"
        }
    );
    println!(
        "{:<19} {:<24} {:>6} {:>6} {:>6} {:>9} {:>7} {:>9} {:>6}  note",
        "strategy",
        "scenario",
        "trials",
        "reused",
        "interl",
        "strangers",
        "signals",
        "survivors",
        "errors"
    );
    for c in &r.cells {
        if !c.ran {
            println!(
                "{:<19} {:<24} {:>6} {:>6} {:>6} {:>9} {:>7} {:>9} {:>6}  {}",
                c.strategy,
                c.scenario,
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
                c.note.as_deref().unwrap_or("")
            );
            continue;
        }
        println!(
            "{:<19} {:<24} {:>6} {:>6} {:>6} {:>9} {:>7} {:>9} {:>6}  {}",
            c.strategy,
            c.scenario,
            c.trials,
            c.reuse_forced,
            c.interleaved,
            c.strangers_hit,
            c.stranger_signals,
            c.survivors,
            c.errors,
            c.note.as_deref().unwrap_or("")
        );
    }
    println!(
        "verdict: {}",
        if r.ok {
            "undertaker (run and supervise): 0 strangers hit, 0 survivors in every cell that ran"
        } else {
            "FAIL: undertaker hit a stranger or left a survivor"
        }
    );
}
