//! The `undertaker` command line: a thin edge over the library.

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use undertaker::{duration::parse_duration, OwnerSpec, RunOptions, Tier};

/// `println!` that never panics: a closed stdout (`undertaker ps | head -1`) drops
/// the rest of the output quietly.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that never panics: a closed stderr drops the message.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod printable;
mod reconcile;

#[derive(Parser, Debug)]
#[command(
    name = "undertaker",
    version,
    about = "Guard the process trees a program spawns: the whole tree dies with its owner, and nothing else is ever signalled."
)]
struct Cli {
    /// Where the registry lives (default: $UNDERTAKER_STATE_DIR, else
    /// $XDG_STATE_HOME/undertaker, else ~/.local/state/undertaker).
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run CMD so that its whole process tree dies with its owner.
    Run(RunArgs),
    /// One guardian for many trees: a host registers the groups it spawned, or asks
    /// for spawns, over standard input (protocol: docs/SUPERVISE.md).
    Supervise(SuperviseArgs),
    /// List guarded trees.
    Ps(PsArgs),
    /// Finish the job of dead guardians: tear down their trees, with proof.
    Sweep(SweepArgs),
    /// Tear one tree down now.
    Kill(KillArgs),
    /// Show the audit log: every signal sent and every refusal, oldest first.
    Log(LogArgs),
    /// Report which kernel mechanisms and containment tiers work on this machine.
    Doctor {
        /// Print one JSON object (fields: docs/CLI-JSON-doctor.md).
        #[arg(long)]
        json: bool,
    },
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

#[derive(clap::Args, Debug)]
struct SuperviseArgs {
    /// Default name of the trees it creates, shown by `undertaker ps`.
    #[arg(long)]
    label: Option<String>,
    /// How long each tree gets between SIGTERM and SIGKILL (e.g. 300ms, 2s).
    #[arg(long, default_value = "2s", value_parser = parse_grace)]
    grace: std::time::Duration,
    /// The owner is this process instead of the supervisor's parent.
    #[arg(long, value_name = "PID", conflicts_with = "owner_fd", value_parser = parse_pid)]
    owner: Option<i32>,
    /// The owner holds the write end of this inherited pipe; end of file = owner gone.
    #[arg(long, value_name = "N", value_parser = parse_fd)]
    owner_fd: Option<i32>,
    /// Containment mechanism (pidns is refused: it is one namespace per `run`).
    #[arg(long, value_enum, default_value = "auto")]
    tier: TierArg,
}

#[derive(clap::Args, Debug)]
struct PsArgs {
    /// Print one JSON array (fields: docs/CLI-JSON.md).
    #[arg(long)]
    json: bool,
    /// Include finished trees.
    #[arg(long)]
    all: bool,
}

#[derive(clap::Args, Debug)]
struct SweepArgs {
    /// Signal nothing; print what would be signalled.
    #[arg(long)]
    dry_run: bool,
    /// Print one JSON object (fields: docs/CLI-JSON.md).
    #[arg(long)]
    json: bool,
    /// How long leftovers get between SIGTERM and SIGKILL.
    #[arg(long, default_value = "2s", value_parser = parse_grace)]
    grace: std::time::Duration,
}

#[derive(clap::Args, Debug)]
struct KillArgs {
    /// Tree id, or a unique prefix of at least 4 characters.
    tree: String,
    /// Print one JSON object (fields: docs/CLI-JSON.md).
    #[arg(long)]
    json: bool,
    /// How long the tree gets between SIGTERM and SIGKILL when swept here.
    #[arg(long, default_value = "2s", value_parser = parse_grace)]
    grace: std::time::Duration,
}

#[derive(clap::Args, Debug)]
struct LogArgs {
    /// Print one JSON array (fields: docs/CLI-JSON.md).
    #[arg(long)]
    json: bool,
    /// Only this tree's entries (id or unique prefix of at least 4 characters).
    #[arg(long, value_name = "TREE")]
    tree: Option<String>,
    /// Only the newest N entries (one page; read without loading the rest).
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// Only entries older than this id (the next page: the first id of this one).
    #[arg(long, value_name = "ID")]
    before: Option<i64>,
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

/// The level `UNDERTAKER_LOG` asks for: a level name (`debug`), or `target=level`
/// directives separated by commas, of which the most verbose level counts (undertaker
/// logs from its own crates only). Anything unreadable means the default, `warn`.
/// A full EnvFilter would pull in a regex engine: ~1 MiB of binary and start-up work
/// in every guardian for a debugging aid.
fn log_level(spec: Option<&str>) -> tracing::level_filters::LevelFilter {
    use tracing::level_filters::LevelFilter;
    spec.and_then(|spec| {
        spec.split(',')
            .filter_map(|d| {
                let level = d.rsplit('=').next()?.trim();
                // FromStr reads "" as ERROR; an empty directive is no directive.
                (!level.is_empty()).then(|| level.parse::<LevelFilter>().ok())?
            })
            .max()
    })
    .unwrap_or(LevelFilter::WARN)
}

/// Where log lines go: stderr, with every failed write dropped. A guardian must never
/// die of its own logging (a host that closed the read end of our stderr pipe, a full
/// disk behind a redirect); the fmt layer would otherwise report the failure by
/// printing to that same stderr, which panics.
struct DroppingStderr;

impl std::io::Write for DroppingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn init_logging() {
    let spec = std::env::var("UNDERTAKER_LOG").ok();
    let _ = tracing_subscriber::fmt()
        .with_max_level(log_level(spec.as_deref()))
        .with_writer(|| DroppingStderr)
        .with_target(false)
        .without_time()
        .try_init();
}

/// Opens /dev/null on any of fds 0, 1 and 2 that was inherited closed, so nothing
/// opened later (the registry, a lock file) takes a standard fd number and receives
/// log lines or output meant for the terminal.
#[cfg(unix)]
fn fill_standard_fds() {
    use std::os::fd::{AsRawFd, IntoRawFd};
    // Not close-on-exec: standard fds are inherited by CMD.
    while let Ok(fd) = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR,
        rustix::fs::Mode::empty(),
    ) {
        if fd.as_raw_fd() > 2 {
            return;
        }
        // It filled a hole: keep it open for the life of the process.
        let _ = fd.into_raw_fd();
    }
}

#[cfg(not(unix))]
fn fill_standard_fds() {}

fn main() -> ExitCode {
    fill_standard_fds();
    let cli = Cli::parse();
    init_logging();
    let code = match cli.command {
        Command::Run(args) => cmd_run(args, cli.state_dir),
        Command::Supervise(args) => cmd_supervise(args, cli.state_dir),
        Command::Ps(args) => reconcile::cmd_ps(args, cli.state_dir),
        Command::Sweep(args) => reconcile::cmd_sweep(args, cli.state_dir),
        Command::Kill(args) => reconcile::cmd_kill(args, cli.state_dir),
        Command::Log(args) => reconcile::cmd_log(args, cli.state_dir),
        Command::Doctor { json } => cmd_doctor(json, cli.state_dir),
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

fn cmd_run(args: RunArgs, state_dir: Option<PathBuf>) -> i32 {
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
        state_dir,
    };
    match undertaker::run(&opts) {
        Ok(code) => code,
        Err(e) => {
            errln!("undertaker: {}", printable::line(&e.to_string()));
            e.exit_code()
        }
    }
}

fn cmd_supervise(args: SuperviseArgs, state_dir: Option<PathBuf>) -> i32 {
    let owner = match (args.owner, args.owner_fd) {
        (Some(pid), _) => OwnerSpec::Pid(pid),
        (None, Some(fd)) => OwnerSpec::Fd(fd),
        (None, None) => OwnerSpec::Parent,
    };
    let opts = undertaker::SuperviseOptions {
        label: args.label,
        grace: args.grace,
        owner,
        tier: args.tier.into(),
        state_dir,
    };
    match undertaker::supervise(&opts) {
        Ok(code) => code,
        Err(e) => {
            errln!("undertaker: {}", printable::line(&e.to_string()));
            e.exit_code()
        }
    }
}

fn cmd_doctor(json: bool, state_dir: Option<PathBuf>) -> i32 {
    let report = match undertaker::doctor(state_dir.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            errln!("undertaker: {}", printable::line(&e.to_string()));
            return e.exit_code();
        }
    };
    let sd = &report.state_dir;
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
            "state_dir": { "path": sd.path, "ok": sd.ok, "detail": sd.detail },
        });
        outln!("{out}");
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
    rows.push((
        "state dir".into(),
        if sd.ok { "ok" } else { "error" },
        format!("{}: {}", sd.path, sd.detail),
    ));
    let header = ["check", "status", "detail"];
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(name, status, detail)| vec![name, status.to_owned(), detail])
        .collect();
    printable::print_table(&header, &rows);
    0
}

#[cfg(test)]
mod tests {
    use super::log_level;
    use tracing::level_filters::LevelFilter;

    #[test]
    fn log_level_reads_names_and_directives() {
        assert_eq!(log_level(None), LevelFilter::WARN);
        assert_eq!(log_level(Some("debug")), LevelFilter::DEBUG);
        assert_eq!(log_level(Some("undertaker=trace")), LevelFilter::TRACE);
        assert_eq!(log_level(Some("info,undertaker=debug")), LevelFilter::DEBUG);
        assert_eq!(log_level(Some("off")), LevelFilter::OFF);
        assert_eq!(log_level(Some("nonsense")), LevelFilter::WARN);
        assert_eq!(log_level(Some("")), LevelFilter::WARN);
    }
}
