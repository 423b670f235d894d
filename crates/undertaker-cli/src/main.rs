//! The `undertaker` command line: a thin edge over the library.

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use undertaker::{
    duration::parse_duration, GuardOptions, OwnerSpec, RunOptions, SuperviseOptions, Tier,
};

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

// musl's allocator maps and unmaps pages all through start-up; this heap keeps and
// reuses them, and gives them back when the process settles. It pays with glibc too
// (docs/BENCHMARKS.md, "Issue 30, fourth round: the allocator").
#[cfg(target_os = "linux")]
#[global_allocator]
static HEAP: undertaker::DlmallocHeap = undertaker::DlmallocHeap;

mod clock;
mod logging;
mod printable;
mod reconcile;

const TOP_HELP: &str = "\
Examples:
  undertaker run -- npx -y @modelcontextprotocol/server-everything
  undertaker run --label build --grace 5s -- make -j8
  undertaker ps                      what is guarded now, and by whom
  undertaker kill 4e98               end one tree (id or a unique prefix)
  undertaker sweep --dry-run         what dead guardians left, and what a sweep would signal
  undertaker doctor                  which tiers work here, and how to get the others

Exit status: `run` exits with CMD's status (128+N when a signal N ended it), 127 or 126
when CMD cannot be found or run, 125 when undertaker could not guard it; 2 for a usage
error everywhere; `kill` and `sweep` 0 when nothing guarded is left alive, 1 otherwise,
and `kill` 3 when the tree's supervisor cannot be asked (nothing is signalled then).";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "undertaker",
    version,
    about = "Guard the process trees a program spawns: the whole tree dies with its owner, and nothing else is ever signalled.",
    after_help = TOP_HELP
)]
struct Cli {
    /// Where the registry lives (default: $UNDERTAKER_STATE_DIR, else
    /// $XDG_STATE_HOME/undertaker, else ~/.local/state/undertaker).
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// For `run`, `supervise` and `doctor`, given before the command: create tree
    /// cgroups in this cgroup directory, one you own (default: $UNDERTAKER_CGROUP_ROOT,
    /// else beneath undertaker's own cgroup where possible).
    #[arg(long, value_name = "PATH")]
    cgroup_root: Option<PathBuf>,
    /// For `run` and `supervise`, given before the command: no self-healing round (the
    /// look for dead guardians' trees they make at start; as $UNDERTAKER_NO_HEAL does).
    #[arg(long)]
    no_heal: bool,
    /// Log level: error, warn, info, debug, trace (default: $UNDERTAKER_LOG, else warn).
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug, Clone)]
// Each subcommand's arguments are built only when that subcommand is parsed (or its
// help shown): building all of them on every start cost `run` 16 % of its CPU time,
// most of it in page faults and allocator churn (docs/BENCHMARKS.md, "Issue 30,
// fourth round").
#[command(defer = true)]
enum Command {
    /// Run CMD so that its whole process tree dies with its owner.
    Run(RunArgs),
    /// One guardian for many trees: a host registers the groups it spawned, or asks
    /// for spawns, over standard input.
    #[command(after_help = SUPERVISE_HELP)]
    Supervise(SuperviseArgs),
    /// List guarded trees.
    Ps(PsArgs),
    /// Finish the job of dead guardians: tear down their trees, with proof.
    Sweep(SweepArgs),
    /// Tear one tree down now.
    ///
    /// A tree a supervisor holds is ended by asking that supervisor over its control
    /// socket; the supervisor is never signalled. When it cannot be asked (no control
    /// socket in this state dir, e.g. it runs in another PID namespace), nothing is
    /// signalled and the exit status is 3.
    ///
    /// Exit status: 0 the tree is gone; 1 something of it is left or it could not be
    /// touched; 2 usage error; 3 its supervisor cannot be asked.
    Kill(KillArgs),
    /// Show the audit log: every signal sent and every refusal, oldest first.
    Log(LogArgs),
    /// Report which kernel mechanisms and containment tiers work on this machine.
    Doctor {
        /// Print one JSON object: checks, tiers, cgroup placement, state dir.
        #[arg(long)]
        json: bool,
    },
}

const SUPERVISE_HELP: &str = "\
Protocol (one request per line on standard input, one reply per line on standard output;
the whole schema is docs/SUPERVISE.md in the source repository):
  register PGID                      plain line (Hermes Agent's): guard group PGID, a child's
  unregister PGID                    stop guarding it, signalling nothing
  {\"op\":\"hello\"}                     version, tier, pid
  {\"op\":\"spawn\",\"argv\":[...]}        start a command as a new tree
  {\"op\":\"adopt\",\"pid\":N}             guard a child of the host and its descendants
  {\"op\":\"kill\",\"tree\":ID}            end one tree now (\"release\": stop guarding it)
  {\"op\":\"list\"}                      every tree and its live count
End of input, the owner's death or SIGTERM ends every tree; the exit status is then 0.";

// What `run` and `supervise` share (the library's `GuardOptions`). A plain comment: a
// doc comment here would become the about line of `run --help` and `supervise --help`
// (the subcommands are built deferred, and a flattened struct's doc then wins).
#[derive(clap::Args, Debug, Clone)]
struct GuardArgs {
    /// A name for the tree, shown by `undertaker ps` (supervise: the default name of
    /// the trees it creates).
    #[arg(long)]
    label: Option<String>,
    /// How long a tree gets between SIGTERM and SIGKILL (e.g. 300ms, 2s).
    #[arg(long, default_value = "2s", value_parser = parse_grace)]
    grace: std::time::Duration,
    /// The owner is this process instead of undertaker's parent.
    #[arg(long, value_name = "PID", conflicts_with = "owner_fd", value_parser = parse_pid)]
    owner: Option<i32>,
    /// The owner holds the write end of this inherited pipe; end of file = owner gone.
    #[arg(long, value_name = "N", value_parser = parse_fd)]
    owner_fd: Option<i32>,
    /// run: do not count the stdio peer as an owner (by default, when stdin and stdout
    /// are pipes or sockets, no writer left on stdin and no reader on stdout tear the
    /// tree down as the owner's death does).
    #[arg(long)]
    no_stdio_owner: bool,
    /// Containment mechanism (supervise refuses pidns: it is one namespace per `run`).
    #[arg(long, value_enum, default_value = "auto")]
    tier: TierArg,
}

impl GuardArgs {
    fn options(self, state_dir: Option<PathBuf>) -> GuardOptions {
        let owner = match (self.owner, self.owner_fd) {
            (Some(pid), _) => OwnerSpec::Pid(pid),
            (None, Some(fd)) => OwnerSpec::Fd(fd),
            (None, None) => OwnerSpec::Parent,
        };
        GuardOptions {
            label: self.label,
            grace: self.grace,
            owner,
            stdio_owner: !self.no_stdio_owner,
            tier: self.tier.into(),
            state_dir,
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
struct RunArgs {
    #[command(flatten)]
    guard: GuardArgs,
    /// Before CMD starts, end the live tree(s) with this --label that the same host
    /// started (the host behind any launcher).
    #[arg(long, requires = "label")]
    replace: bool,
    /// The command and its arguments. An option-looking word before CMD (or before
    /// `--`) is one of undertaker's: a mistyped option is a usage error, never the
    /// command; after `--`, CMD may start with `-`.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

#[derive(clap::Args, Debug, Clone)]
struct SuperviseArgs {
    #[command(flatten)]
    guard: GuardArgs,
    /// The host's own process group: never registered, never signalled (the
    /// argument Hermes Agent gives its death supervisor; 0, a group outside our PID
    /// namespace, names none).
    #[arg(long, value_name = "PGID", value_parser = parse_pgid)]
    parent_pgid: Option<i32>,
}

#[derive(clap::Args, Debug, Clone)]
struct PsArgs {
    /// Print one JSON array, a tree per element, with every column's value.
    #[arg(long)]
    json: bool,
    /// Include finished trees.
    #[arg(long)]
    all: bool,
    /// Group the trees by the host that started them (JSON: one object per host).
    #[arg(long)]
    by_owner: bool,
}

#[derive(clap::Args, Debug, Clone)]
struct SweepArgs {
    /// Signal nothing; print what would be signalled.
    #[arg(long)]
    dry_run: bool,
    /// Print one JSON object: each tree examined, what was done, what is left alive.
    #[arg(long)]
    json: bool,
    /// How long leftovers get between SIGTERM and SIGKILL.
    #[arg(long, default_value = "2s", value_parser = parse_grace)]
    grace: std::time::Duration,
}

#[derive(clap::Args, Debug, Clone)]
struct KillArgs {
    /// Tree id, a unique prefix of at least 4 characters, or a label.
    tree: String,
    /// End every live tree with the label (needed when it names more than one;
    /// --json then prints an array).
    #[arg(long)]
    all: bool,
    /// Print one JSON object: what was done to the tree, what is left alive.
    #[arg(long)]
    json: bool,
    /// How long the tree gets between SIGTERM and SIGKILL when swept here.
    #[arg(long, default_value = "2s", value_parser = parse_grace)]
    grace: std::time::Duration,
}

#[derive(clap::Args, Debug, Clone)]
struct LogArgs {
    /// Print one JSON array, an entry per element.
    #[arg(long)]
    json: bool,
    /// Only this tree's entries (id, unique prefix of at least 4 characters, or a
    /// label: every tree with it).
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
    Portable,
}

impl From<TierArg> for Tier {
    fn from(t: TierArg) -> Self {
        match t {
            TierArg::Auto => Tier::Auto,
            TierArg::Cgroup => Tier::Cgroup,
            TierArg::Pidns => Tier::Pidns,
            TierArg::Subreaper => Tier::Subreaper,
            TierArg::Portable => Tier::Portable,
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

fn parse_pgid(s: &str) -> Result<i32, String> {
    match s.parse::<i32>() {
        Ok(p) if p >= 0 => Ok(p),
        _ => Err(format!(
            "{s:?} is not a process group id (a non-negative integer)"
        )),
    }
}

fn parse_fd(s: &str) -> Result<i32, String> {
    match s.parse::<i32>() {
        Ok(fd) if fd >= 0 => Ok(fd),
        _ => Err(format!("{s:?} is not a file descriptor number")),
    }
}

fn init_logging(flag: Option<String>) {
    let spec = flag.or_else(|| std::env::var("UNDERTAKER_LOG").ok());
    logging::init(logging::level(spec.as_deref()));
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(usage_error(e)),
    };
    // Clap's parse leaves its results on top of the ~40 KiB it used and freed: copied
    // now that those are free, they sit low, and the heap's top goes back to the kernel
    // when an idle sentinel or guardian settles (docs/BENCHMARKS.md, "Issue 30, fourth
    // round: the allocator").
    let cli = {
        let copy = cli.clone();
        drop(cli);
        copy
    };
    init_logging(cli.log_level);
    if let Some(path) = cli.cgroup_root {
        undertaker::settings::set_cgroup_root(path);
    }
    if cli.no_heal {
        undertaker::settings::disable_self_healing();
    }
    let code = match cli.command {
        Command::Run(args) => {
            // The tree is gone and recorded: the host's wait need not wait for the C
            // library's exit work too (in the sentinel and in the guardian).
            let code = cmd_run(args, cli.state_dir);
            let _ = std::io::Write::flush(&mut std::io::stdout());
            undertaker::exit_now(code.clamp(0, 255))
        }
        Command::Supervise(args) => cmd_supervise(args, cli.state_dir),
        Command::Ps(args) => reconcile::cmd_ps(args, cli.state_dir),
        Command::Sweep(args) => reconcile::cmd_sweep(args, cli.state_dir),
        Command::Kill(args) => reconcile::cmd_kill(args, cli.state_dir),
        Command::Log(args) => reconcile::cmd_log(args, cli.state_dir),
        Command::Doctor { json } => cmd_doctor(json, cli.state_dir),
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// A command line clap refused: `--help` and `--version` print as clap prints them;
/// a usage error is one line on stderr (a mistyped option names the one meant) and
/// exit status 2.
fn usage_error(e: clap::Error) -> u8 {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return e.exit_code().clamp(0, 255) as u8;
    }
    let text = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    let line = match (e.kind(), text(ContextKind::InvalidArg)) {
        (ErrorKind::UnknownArgument, Some(arg)) => {
            let hint = match text(ContextKind::SuggestedArg) {
                Some(meant) => format!("; did you mean {meant}?"),
                None => String::new(),
            };
            format!("unknown option {arg}{hint}")
        }
        _ => {
            // clap's message without its usage block, on one line.
            let rendered = e.render().to_string();
            let message: Vec<&str> = (rendered.lines())
                .take_while(|l| !l.starts_with("Usage:"))
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("tip:") && !l.starts_with("For more"))
                .collect();
            message.join(" ").trim_start_matches("error: ").to_owned()
        }
    };
    errln!("undertaker: {} (see --help)", printable::line(&line));
    2
}

fn cmd_run(args: RunArgs, state_dir: Option<PathBuf>) -> i32 {
    let opts = RunOptions {
        command: args.command,
        guard: args.guard.options(state_dir),
        replace: args.replace,
    };
    report(undertaker::run(&opts))
}

fn cmd_supervise(args: SuperviseArgs, state_dir: Option<PathBuf>) -> i32 {
    let opts = SuperviseOptions {
        guard: args.guard.options(state_dir),
        parent_pgid: args.parent_pgid.filter(|&p| p > 0),
    };
    report(undertaker::supervise(&opts))
}

/// The status to exit with; a failure also gets its one line on stderr.
fn report(result: Result<i32, undertaker::RunError>) -> i32 {
    match result {
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
            "cgroup_placement": report.cgroup_placement,
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
    let place = &report.cgroup_placement;
    rows.push((
        "cgroup placement".into(),
        place.kind.unwrap_or("none"),
        match &place.path {
            Some(path) => format!("{path}: {}", place.reason),
            None => place.reason.clone(),
        },
    ));
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
    // The table shortens long details: an unavailable tier's reason, with what to do
    // about it, is printed in full.
    for t in report.tiers.iter().filter(|t| !t.available) {
        outln!(
            "\ntier {} is unavailable: {}",
            t.tier,
            printable::line(&t.detail)
        );
    }
    0
}

#[cfg(test)]
mod tests {
    /// clap checks a command's definition when it builds it; with the subcommands
    /// deferred, a mistake in one would surface only when that subcommand is used.
    #[test]
    fn every_subcommand_definition_is_valid() {
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }
}
