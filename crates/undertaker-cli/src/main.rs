//! The `undertaker` command line: a thin edge over the library.

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;
use undertaker::{duration::parse_duration, OwnerSpec, RunOptions, Tier};

#[derive(Parser, Debug)]
#[command(
    name = "undertaker",
    version,
    about = "Guard the process trees a program spawns: the whole tree dies with its owner, and nothing else is ever signalled."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run CMD so that its whole process tree dies with its owner.
    Run(RunArgs),
    /// Report which kernel mechanisms and containment tiers work on this machine.
    Doctor {
        /// Print one JSON object (fields: docs/CLI-JSON-doctor.md).
        #[arg(long)]
        json: bool,
    },
    /// Tear down the cgroups of trees whose guardian is dead (stand-in until `sweep`).
    #[command(name = "__sweep-cgroups", hide = true)]
    SweepCgroups,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// A name for the tree, shown by `undertaker ps`.
    #[arg(long)]
    label: Option<String>,
    /// How long the tree gets between SIGTERM and SIGKILL (e.g. 300ms, 2s).
    #[arg(long, default_value = "2s", value_parser = parse_grace)]
    grace: std::time::Duration,
    /// The owner is this process instead of undertaker's parent.
    #[arg(long, value_name = "PID", conflicts_with = "owner_fd", value_parser = parse_pid)]
    owner: Option<i32>,
    /// The owner holds the write end of this inherited pipe; end of file = owner gone.
    #[arg(long, value_name = "N", value_parser = parse_fd)]
    owner_fd: Option<i32>,
    /// Containment mechanism.
    #[arg(long, value_enum, default_value = "auto")]
    tier: TierArg,
    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum TierArg {
    Auto,
    Cgroup,
    Pidns,
    Subreaper,
}

impl From<TierArg> for Tier {
    fn from(t: TierArg) -> Self {
        match t {
            TierArg::Auto => Tier::Auto,
            TierArg::Cgroup => Tier::Cgroup,
            TierArg::Pidns => Tier::Pidns,
            TierArg::Subreaper => Tier::Subreaper,
        }
    }
}

fn parse_grace(s: &str) -> Result<std::time::Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn parse_pid(s: &str) -> Result<i32, String> {
    match s.parse::<i32>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("{s:?} is not a process id (a positive integer)")),
    }
}

fn parse_fd(s: &str) -> Result<i32, String> {
    match s.parse::<i32>() {
        Ok(fd) if fd >= 0 => Ok(fd),
        _ => Err(format!("{s:?} is not a file descriptor number")),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("UNDERTAKER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let code = match cli.command {
        Command::Run(args) => cmd_run(args),
        Command::Doctor { json } => cmd_doctor(json),
        Command::SweepCgroups => cmd_sweep_cgroups(),
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

fn cmd_run(args: RunArgs) -> i32 {
    let owner = match (args.owner, args.owner_fd) {
        (Some(pid), _) => OwnerSpec::Pid(pid),
        (None, Some(fd)) => OwnerSpec::Fd(fd),
        (None, None) => OwnerSpec::Parent,
    };
    let opts = RunOptions {
        command: args.command,
        label: args.label,
        grace: args.grace,
        owner,
        tier: args.tier.into(),
    };
    match undertaker::run(&opts) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("undertaker: {e}");
            e.exit_code()
        }
    }
}

#[cfg(target_os = "linux")]
fn cmd_doctor(json: bool) -> i32 {
    let report = undertaker::linux::doctor::run();
    if json {
        let mut checks = serde_json::Map::new();
        for c in &report.checks {
            checks.insert(
                c.name.into(),
                serde_json::json!({ "ok": c.ok, "detail": c.detail }),
            );
        }
        let mut tiers = serde_json::Map::new();
        for t in &report.tiers {
            tiers.insert(
                t.tier.as_str().into(),
                serde_json::json!({ "available": t.available, "detail": t.detail }),
            );
        }
        let out = serde_json::json!({
            "kernel": report.kernel,
            "checks": checks,
            "tiers": tiers,
            "auto": report.auto.as_str(),
            // STATE DIR HEALTH: filled in by the registry work.
            "state_dir": serde_json::Value::Null,
        });
        println!("{out}");
        return 0;
    }
    let mut rows: Vec<(String, &str, String)> =
        vec![("kernel".into(), "ok", report.kernel.clone())];
    for c in &report.checks {
        rows.push((
            c.name.into(),
            if c.ok { "ok" } else { "missing" },
            c.detail.clone(),
        ));
    }
    for t in &report.tiers {
        rows.push((
            format!("tier {}", t.tier),
            if t.available { "yes" } else { "no" },
            t.detail.clone(),
        ));
    }
    rows.push(("tier auto".into(), "->", report.auto.as_str().into()));
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(5).max(5);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(6).max(6);
    println!("{:w0$}  {:w1$}  detail", "check", "status");
    for (name, status, detail) in rows {
        println!("{name:w0$}  {status:w1$}  {detail}");
    }
    0
}

#[cfg(not(target_os = "linux"))]
fn cmd_doctor(_json: bool) -> i32 {
    eprintln!("undertaker: doctor is not supported on this platform yet");
    125
}

/// Sweeps the cgroup of every tree whose guardian is dead; prints one JSON line per
/// tree. Exit 0 when nothing was left alive.
#[cfg(target_os = "linux")]
fn cmd_sweep_cgroups() -> i32 {
    use undertaker::linux::{cgroup, procfs::Procfs, signal::Signaller, teardown::Escalation};
    let procfs = Procfs::new();
    let signaller = match Signaller::for_current_process(procfs.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("undertaker: reading /proc/self: {e}");
            return 125;
        }
    };
    let escalation = Escalation {
        grace: std::time::Duration::from_secs(2),
        kill_cap: std::time::Duration::from_secs(5),
    };
    let mut code = 0;
    for found in cgroup::list_tree_cgroups(&procfs) {
        if found.guardian != cgroup::GuardianState::Dead {
            continue;
        }
        let report = cgroup::sweep_orphaned_cgroup(&signaller, &found.path, &escalation);
        if !report.empty {
            code = 1;
        }
        println!(
            "{}",
            serde_json::json!({
                "tree": found.tree,
                "cgroup": found.path,
                "empty": report.empty,
                "targets": report.targets,
            })
        );
    }
    code
}

#[cfg(not(target_os = "linux"))]
fn cmd_sweep_cgroups() -> i32 {
    125
}
