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
