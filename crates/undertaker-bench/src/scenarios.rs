//! The measurements. Each builds its contenders and hands them to `measure::run`.

use crate::env::{Env, FLOOR_ENV};
use crate::measure::{self, Attempt, Contender, Measurement, Spec};
use crate::procs::{self, mono_ns, AliveReader, Cgroup, Fifo, NotReady};
use std::ffi::OsString;
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Rounds and sizes; `--quick` and the smoke mode shrink them.
pub struct Config {
    pub spawn_rounds: usize,
    pub teardown: Vec<(usize, usize, usize)>, // (class, size, rounds)
    pub sweep: Vec<(usize, usize, usize)>,
    pub registry: Vec<(usize, usize, usize)>,
    pub ps_live: Vec<(usize, usize, usize)>,
    pub log: Vec<(usize, usize, usize)>,
    pub footprint_rounds: usize,
    /// Trees held at once for `footprint_many`.
    pub many_trees: usize,
}

impl Config {
    pub fn full() -> Self {
        Config {
            spawn_rounds: 200,
            teardown: vec![(10, 10, 40), (100, 100, 25), (1000, 1000, 12)],
            sweep: vec![(1000, 1000, 30), (5000, 5000, 15)],
            registry: vec![(1, 1, 40), (10, 10, 20), (100, 100, 10)],
            ps_live: vec![(1000, 1000, 20)],
            log: vec![(100_000, 100_000, 10)],
            footprint_rounds: 5,
            many_trees: 100,
        }
    }
    pub fn quick() -> Self {
        Config {
            spawn_rounds: 40,
            teardown: vec![(10, 10, 10), (100, 100, 6), (1000, 1000, 3)],
            sweep: vec![(1000, 1000, 5), (5000, 5000, 3)],
            registry: vec![(1, 1, 8), (10, 10, 5), (100, 100, 3)],
            ps_live: vec![(1000, 1000, 5)],
            log: vec![(100_000, 100_000, 3)],
            footprint_rounds: 2,
            many_trees: 100,
        }
    }
    /// A few seconds: every measurement runs, sizes shrunk (the key keeps the class).
    pub fn smoke() -> Self {
        Config {
            spawn_rounds: 3,
            teardown: vec![(10, 3, 1), (100, 6, 1), (1000, 12, 1)],
            sweep: vec![(1000, 10, 1), (5000, 20, 1)],
            registry: vec![(1, 1, 1), (10, 2, 1), (100, 4, 1)],
            ps_live: vec![(1000, 5, 1)],
            log: vec![(100_000, 100, 1)],
            footprint_rounds: 1,
            many_trees: 5,
        }
    }
}

pub const TIERS: [&str; 4] = ["auto", "subreaper", "cgroup", "pidns"];
pub const TINI: &str = "tini -s";
pub const BWRAP: &str = "bwrap";
pub const BARE: &str = "bare";
pub const KILLPG: &str = "kill -- -PGID";
pub const CGROUP_KILL: &str = "cgroup.kill";
pub const PS: &str = "ps -e";
pub const PGREP: &str = "pgrep -f";
pub const SWEEP: &str = "undertaker sweep --dry-run";

pub fn undertaker_name(tier: &str) -> String {
    format!("undertaker run --tier {tier}")
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A way to start CMD: bare, under an anchor init, or under `undertaker run`.
struct Wrapper {
    name: String,
    prefix: Result<Vec<OsString>, String>,
    undertaker: bool,
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

fn wrappers(env: &Env, bare: bool) -> Vec<Wrapper> {
    let anchor = |name: &str, tool: &Result<std::path::PathBuf, String>, args: &[&str]| Wrapper {
        name: name.into(),
        prefix: tool.clone().map(|p| {
            let mut v = vec![p.into_os_string()];
            v.extend(os(args));
            v
        }),
        undertaker: false,
    };
    let mut w = Vec::new();
    if bare {
        w.push(Wrapper {
            name: BARE.into(),
            prefix: Ok(vec![]),
            undertaker: false,
        });
    }
    w.push(anchor(TINI, &env.tini, &["-s", "--"]));
    w.push(anchor(BWRAP, &env.bwrap, &crate::env::BWRAP_ARGS));
    w.push(anchor("dumb-init", &env.dumb_init, &[]));
    w.push(anchor("catatonit", &env.catatonit, &["--"]));
    if let Some((floor, _)) = &env.floor {
        for (name, flags) in FLOORS {
            w.push(Wrapper {
                name: name.into(),
                prefix: Ok(vec![
                    floor.clone().into_os_string(),
                    flags.into(),
                    "--".into(),
                ]),
                undertaker: false,
            });
        }
    }
    for tier in TIERS {
        let mut v = vec![env.undertaker.clone().into_os_string()];
        v.extend(os(&["run", "--tier", tier, "--"]));
        w.push(Wrapper {
            name: undertaker_name(tier),
            prefix: Ok(v),
            undertaker: true,
        });
    }
    w
}

/// The C floor's contenders (`floor/floor.c`): the kernel work of `run`'s structure
/// alone, without undertaker.
const FLOORS: [(&str, &str); 2] = [
    ("floor: two processes (C)", "g"),
    ("floor: two processes, cgroup, record file (C)", "gcr"),
];

fn wrapped(env: &Env, prefix: &[OsString], cmd: &[OsString]) -> Command {
    let all: Vec<&OsString> = prefix.iter().chain(cmd).collect();
    let mut c = Command::new(all[0]);
    floor_env(env, &mut c);
    c.args(&all[1..])
        .env("UNDERTAKER_STATE_DIR", &env.state_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Where the floor keeps its record files and makes its cgroups: the bench's own.
fn floor_env(env: &Env, c: &mut Command) {
    if let Some((_, records)) = &env.floor {
        c.env("FLOOR_STATE", records);
        if let Ok(parent) = &env.cgroup_parent {
            c.env("FLOOR_CGROUP", parent);
        }
    }
}

/// Why a wrapped command did not succeed: undertaker's 125 means "cannot guard here"
/// (a tier this build or machine lacks); anything else is a failure.
fn not_ok(env: &Env, w: &Wrapper, cmd: &[OsString], st: ExitStatus) -> Attempt {
    let prefix = w.prefix.as_deref().unwrap_or(&[]);
    if w.undertaker && st.code() == Some(125) {
        let why = wrapped(env, prefix, cmd)
            .stderr(Stdio::piped())
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .map(str::to_string)
            })
            .unwrap_or_default();
        return Attempt::Unavailable(format!("exit 125: {why}"));
    }
    Attempt::Failed(format!("{} exited with {st}", w.name))
}

fn bench_cmd(env: &Env, args: &[&str]) -> Vec<OsString> {
    let mut v = vec![env.bench.clone().into_os_string()];
    v.extend(os(args));
    v
}

pub fn spawn(env: &Env, cfg: &Config) -> Measurement {
    spawn_measured(env, cfg, false)
}

/// The same runs as [`spawn`], each sample the CPU time (user + system) of the
/// wrapper's whole tree: what a host pays per start, whatever the load.
pub fn spawn_cpu(env: &Env, cfg: &Config) -> Measurement {
    spawn_measured(env, cfg, true)
}

fn spawn_measured(env: &Env, cfg: &Config, cpu: bool) -> Measurement {
    let cmd = vec![env.true_bin.clone().into_os_string()];
    // CPU samples count what a wrapper leaves running after it exits, too.
    let catcher = match cpu {
        true => crate::procs::OrphanCatcher::new()
            .ok()
            .map(std::rc::Rc::new),
        false => None,
    };
    let contenders = wrappers(env, true)
        .into_iter()
        .map(|w| {
            let cmd = cmd.clone();
            let catcher = catcher.clone();
            Contender::new(w.name.clone(), move || {
                let prefix = match &w.prefix {
                    Ok(p) => p,
                    Err(why) => return Attempt::Unavailable(why.clone()),
                };
                let mut c = wrapped(env, prefix, &cmd);
                let cpu_before = crate::procs::reaped_children_cpu_us();
                let t = Instant::now();
                let st = c.status();
                let dt = t.elapsed();
                if let Some(catcher) = &catcher {
                    catcher.reap_left_behind();
                }
                let cpu_used = crate::procs::reaped_children_cpu_us() - cpu_before;
                match st {
                    Ok(s) if s.success() && cpu => Attempt::Sample(cpu_used),
                    Ok(s) if s.success() => Attempt::Sample(us(dt)),
                    Ok(s) => not_ok(env, &w, &cmd, s),
                    Err(e) => Attempt::Failed(format!("spawning {}: {e}", w.name)),
                }
            })
        })
        .collect();
    measure::run(
        Spec {
            key: if cpu { "spawn_cpu" } else { "spawn" }.into(),
            what: if cpu {
                "CPU time (user + system, rusage of reaped children) of `WRAPPER /bin/true`'s whole tree, with what the wrapper left running when it exited (the bench is a subreaper while it measures)"
            } else {
                "wall time of fork+exec+wait of `WRAPPER /bin/true` from the bench"
            }
            .into(),
            unit: "µs",
            size: None,
            rounds: cfg.spawn_rounds,
            anchors: vec![BARE, TINI, BWRAP],
        },
        contenders,
    )
}

pub fn exit_latency(env: &Env, cfg: &Config) -> Measurement {
    let cmd = bench_cmd(env, &["__stamp"]);
    let contenders = wrappers(env, true)
        .into_iter()
        .map(|w| {
            let cmd = cmd.clone();
            Contender::new(w.name.clone(), move || {
                let prefix = match &w.prefix {
                    Ok(p) => p,
                    Err(why) => return Attempt::Unavailable(why.clone()),
                };
                let mut c = wrapped(env, prefix, &cmd);
                let mut child = match c.stdout(Stdio::piped()).spawn() {
                    Ok(c) => c,
                    Err(e) => return Attempt::Failed(format!("spawning {}: {e}", w.name)),
                };
                let st = child.wait();
                let end = mono_ns();
                let mut out = String::new();
                if let Some(mut so) = child.stdout.take() {
                    let _ = so.read_to_string(&mut out);
                }
                match st {
                    Ok(s) if s.success() => match out.trim().parse::<u64>() {
                        Ok(stamp) if stamp <= end => Attempt::Sample((end - stamp) as f64 / 1e3),
                        _ => Attempt::Failed(format!("{}: no exit stamp in {out:?}", w.name)),
                    },
                    Ok(s) => not_ok(env, &w, &cmd, s),
                    Err(e) => Attempt::Failed(format!("waiting for {}: {e}", w.name)),
                }
            })
        })
        .collect();
    measure::run(
        Spec {
            key: "exit_latency".into(),
            what: "CMD prints CLOCK_MONOTONIC and exits; until the bench's wait() for the wrapper returns (wrapper notices, tears down the empty tree, exits)".into(),
            unit: "µs",
            size: None,
            rounds: cfg.spawn_rounds,
            anchors: vec![BARE, TINI, BWRAP],
        },
        contenders,
    )
}

/// Scratch FIFOs for one tree: `alive` (EOF = all gone) and `stop` (bench closes it
/// and every leftover member exits on its own).
struct TreeFifos {
    alive: Fifo,
    stop: Fifo,
}

impl TreeFifos {
    fn new(env: &Env, tag: &str) -> std::io::Result<TreeFifos> {
        Ok(TreeFifos {
            alive: Fifo::new(&env.tmp, &format!("{tag}.alive"))?,
            stop: Fifo::new(&env.tmp, &format!("{tag}.stop"))?,
        })
    }
    fn path(f: &Fifo) -> String {
        f.path.display().to_string()
    }
    fn tree_args(&self, procs: usize, cgroup: Option<&str>, tag: &str) -> Vec<String> {
        vec![
            "__tree".into(),
            procs.to_string(),
            Self::path(&self.alive),
            Self::path(&self.stop),
            cgroup.unwrap_or("-").into(),
            tag.into(),
        ]
    }
}

fn ready_error(what: &str, e: NotReady, undertaker: bool) -> Attempt {
    match e {
        NotReady::Exited(st) if undertaker && st.code() == Some(125) => {
            Attempt::Unavailable(format!("{what}: exit 125 (cannot guard here)"))
        }
        NotReady::Exited(st) => {
            Attempt::Failed(format!("{what} exited with {st} before the tree was up"))
        }
        NotReady::Timeout => Attempt::Failed(format!("{what}: tree not up within the timeout")),
    }
}

const UP: Duration = Duration::from_secs(120);
const GONE: Duration = Duration::from_secs(60);

/// Owner death → last tree process gone, under `undertaker run --tier TIER --owner`.
fn teardown_undertaker(env: &Env, tier: &str, grace: &str, size: usize) -> Attempt {
    let fifos = match TreeFifos::new(env, "td") {
        Ok(f) => f,
        Err(e) => return Attempt::Failed(format!("fifo: {e}")),
    };
    let (reader, _stop) = match (fifos.alive.alive_reader(), fifos.stop.stop_writer()) {
        (Ok(r), Ok(s)) => (r, s),
        (Err(e), _) | (_, Err(e)) => return Attempt::Failed(format!("fifo: {e}")),
    };
    let mut owner = match Command::new(&env.bench)
        .args([
            "__tree",
            "1",
            "-",
            &TreeFifos::path(&fifos.stop),
            "-",
            "owner",
        ])
        .stdin(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Attempt::Failed(format!("starting owner: {e}")),
    };
    let mut guard = match env
        .undertaker_cmd()
        .args(["run", "--tier", tier, "--grace", grace, "--owner"])
        .arg(owner.id().to_string())
        .arg("--")
        .arg(&env.bench)
        .args(fifos.tree_args(size, None, "guarded"))
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            procs::kill_own_child(&mut owner);
            let _ = owner.wait();
            return Attempt::Failed(format!("starting undertaker: {e}"));
        }
    };
    let result = match reader.wait_ready(&mut guard, UP) {
        Err(e) => ready_error("undertaker run", e, true),
        Ok(()) => {
            let t0 = Instant::now();
            procs::kill_own_child(&mut owner);
            if reader.wait_eof(GONE) {
                Attempt::Sample(ms(t0.elapsed()))
            } else {
                Attempt::Failed("tree still alive a minute after its owner died".into())
            }
        }
    };
    procs::kill_own_child(&mut owner);
    let _ = owner.wait();
    let _ = procs::wait_or_kill(&mut guard, Duration::from_secs(30));
    result
}

/// The same tree as its own process group started by the bench, ended by killpg.
fn teardown_killpg(env: &Env, size: usize) -> Attempt {
    direct_tree(env, size, None, |tree, _| {
        procs::term_own_group(tree).map_err(|e| format!("killpg: {e}"))
    })
}

/// The same tree in a fresh cgroup, ended by `cgroup.kill`.
fn teardown_cgroup_kill(env: &Env, size: usize, seq: usize) -> Attempt {
    let parent = match &env.cgroup_parent {
        Ok(p) => p,
        Err(why) => return Attempt::Unavailable(why.clone()),
    };
    let cg = match Cgroup::create(
        parent,
        &format!("undertaker-bench.{}.{seq}", std::process::id()),
    ) {
        Ok(c) => c,
        Err(e) => return Attempt::Unavailable(format!("creating a cgroup: {e}")),
    };
    direct_tree(env, size, Some(&cg), |_, cg| {
        cg.expect("cgroup given")
            .kill()
            .map_err(|e| format!("cgroup.kill: {e}"))
    })
}

fn direct_tree(
    env: &Env,
    size: usize,
    cg: Option<&Cgroup>,
    kill: impl FnOnce(&Child, Option<&Cgroup>) -> Result<(), String>,
) -> Attempt {
    use std::os::unix::process::CommandExt;
    let fifos = match TreeFifos::new(env, "td") {
        Ok(f) => f,
        Err(e) => return Attempt::Failed(format!("fifo: {e}")),
    };
    let (reader, stop) = match (fifos.alive.alive_reader(), fifos.stop.stop_writer()) {
        (Ok(r), Ok(s)) => (r, s),
        (Err(e), _) | (_, Err(e)) => return Attempt::Failed(format!("fifo: {e}")),
    };
    let cg_path = cg.map(|c| c.path.display().to_string());
    let mut tree = match Command::new(&env.bench)
        .args(fifos.tree_args(size, cg_path.as_deref(), "direct"))
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Attempt::Failed(format!("starting tree: {e}")),
    };
    let result = match reader.wait_ready(&mut tree, UP) {
        Err(e) => ready_error("tree", e, false),
        Ok(()) => {
            let t0 = Instant::now();
            match kill(&tree, cg) {
                Err(e) => Attempt::Failed(e),
                Ok(()) if reader.wait_eof(GONE) => Attempt::Sample(ms(t0.elapsed())),
                Ok(()) => Attempt::Failed("tree still alive a minute after the kill".into()),
            }
        }
    };
    drop(stop);
    let _ = procs::wait_or_kill(&mut tree, GONE);
    result
}

pub fn teardown(env: &Env, class: usize, size: usize, rounds: usize) -> Measurement {
    let mut contenders: Vec<Contender<'_>> = TIERS
        .iter()
        .map(|&tier| {
            Contender::new(undertaker_name(tier), move || {
                teardown_undertaker(env, tier, "5s", size)
            })
        })
        .collect();
    // SIGKILL at once, as `cgroup.kill` does: the floor without the SIGTERM round.
    contenders.push(Contender::new(
        format!("{} --grace 0", undertaker_name("auto")),
        move || teardown_undertaker(env, "auto", "0s", size),
    ));
    contenders.push(Contender::new(KILLPG, move || teardown_killpg(env, size)));
    let mut seq = 0;
    contenders.push(Contender::new(CGROUP_KILL, move || {
        seq += 1;
        teardown_cgroup_kill(env, size, seq)
    }));
    measure::run(
        Spec {
            key: format!("teardown_{class}"),
            what: format!("a {size}-process tree that honours SIGTERM: from SIGKILL of the owner (undertaker), killpg(SIGTERM) or cgroup.kill until the last member is gone (EOF on a FIFO every member holds)"),
            unit: "ms",
            size: Some(size),
            rounds,
            anchors: vec![CGROUP_KILL, KILLPG],
        },
        contenders,
    )
}

/// Background processes for the sweep: one group of `size` the bench started.
struct Background {
    fifos: TreeFifos,
    reader: AliveReader,
    stop: Option<rustix::fd::OwnedFd>,
    root: Child,
}

impl Background {
    fn start(env: &Env, tag: &str, size: usize) -> anyhow::Result<Background> {
        use std::os::unix::process::CommandExt;
        let fifos = TreeFifos::new(env, tag)?;
        let reader = fifos.alive.alive_reader()?;
        let stop = fifos.stop.stop_writer()?;
        let mut root = Command::new(&env.bench)
            .args(fifos.tree_args(size, None, tag))
            .process_group(0)
            .stdin(Stdio::null())
            .spawn()?;
        if let Err(e) = reader.wait_ready(&mut root, UP) {
            anyhow::bail!("background processes not up: {e:?}");
        }
        Ok(Background {
            fifos,
            reader,
            stop: Some(stop),
            root,
        })
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.take();
        self.reader.wait_eof(GONE);
        let _ = procs::wait_or_kill(&mut self.root, GONE);
        let _ = &self.fifos;
    }
}

/// An orphaned guarded tree for the sweep to find: guardian and owner SIGKILLed.
fn orphaned_tree(env: &Env, tag: &str) -> anyhow::Result<Background> {
    let fifos = TreeFifos::new(env, tag)?;
    let reader = fifos.alive.alive_reader()?;
    let stop = fifos.stop.stop_writer()?;
    let mut owner = Command::new(&env.bench)
        .args([
            "__tree",
            "1",
            "-",
            &TreeFifos::path(&fifos.stop),
            "-",
            "owner",
        ])
        .stdin(Stdio::null())
        .spawn()?;
    let mut guard = env
        .undertaker_cmd()
        .args(["run", "--owner"])
        .arg(owner.id().to_string())
        .arg("--")
        .arg(&env.bench)
        .args(fifos.tree_args(3, None, tag))
        .spawn()?;
    let up = reader.wait_ready(&mut guard, UP);
    procs::kill_undertaker_processes(&mut guard);
    let _ = guard.wait();
    procs::kill_own_child(&mut owner);
    let _ = owner.wait();
    if let Err(e) = up {
        anyhow::bail!("guarded tree not up: {e:?}");
    }
    // The root is reaped by whoever inherited it; `Background` only needs a child to
    // wait for, so hand it a finished one.
    let done = Command::new(&env.true_bin).spawn()?;
    Ok(Background {
        fifos,
        reader,
        stop: Some(stop),
        root: done,
    })
}

pub fn sweep(env: &Env, class: usize, size: usize, rounds: usize) -> anyhow::Result<Measurement> {
    let baseline = process_count();
    let m = sweep_among(env, class, size, rounds);
    settle(baseline);
    // The orphan's members are gone now, but its tree cgroup stays until a sweep
    // finishes the dead guardian's tree: leave nothing behind.
    if env.sweep.is_ok() {
        let _ = env
            .undertaker_cmd()
            .args(["sweep", "--state-dir"])
            .arg(&env.state_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    m
}

/// Entries in /proc, zombies included.
fn process_count() -> usize {
    std::fs::read_dir("/proc").map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .count()
    })
}

/// Waits until the background processes are reaped by whoever inherited them: the
/// zombies would otherwise weigh on every later measurement that scans /proc.
fn settle(baseline: usize) {
    let end = Instant::now() + Duration::from_secs(30);
    while process_count() > baseline + 20 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sweep_among(env: &Env, class: usize, size: usize, rounds: usize) -> anyhow::Result<Measurement> {
    let tag = format!("undertaker-bench-find-{}", std::process::id());
    let _bg = Background::start(env, "bg", size.saturating_sub(3))?;
    let _orphan = orphaned_tree(env, &tag)?;
    let timed = |mut c: Command, ok: fn(Option<i32>) -> bool, name: &'static str| {
        let t = Instant::now();
        let st = c.status();
        let dt = t.elapsed();
        match st {
            Ok(s) if ok(s.code()) => Attempt::Sample(ms(dt)),
            Ok(s) => Attempt::Failed(format!("{name} exited with {s}")),
            Err(e) => Attempt::Failed(format!("{name}: {e}")),
        }
    };
    let quiet = |p: &std::path::Path| {
        let mut c = Command::new(p);
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    };
    let contenders = vec![
        Contender::new(SWEEP, || {
            if let Err(why) = &env.sweep {
                return Attempt::Unavailable(why.clone());
            }
            let mut c = env.undertaker_cmd();
            c.args(["sweep", "--dry-run", "--state-dir"])
                .arg(&env.state_dir);
            // Dry run: exit status says what would be left, not whether it ran.
            timed(
                c,
                |code| matches!(code, Some(c) if c != 2 && c < 125),
                SWEEP,
            )
        }),
        Contender::new(PS, || match &env.ps {
            Ok(p) => {
                let mut c = quiet(p);
                c.arg("-e");
                timed(c, |code| code == Some(0), PS)
            }
            Err(why) => Attempt::Unavailable(why.clone()),
        }),
        Contender::new(PGREP, || match &env.pgrep {
            Ok(p) => {
                let mut c = quiet(p);
                c.args(["-f", &tag]);
                timed(c, |code| code == Some(0), PGREP)
            }
            Err(why) => Attempt::Unavailable(why.clone()),
        }),
    ];
    Ok(measure::run(
        Spec {
            key: format!("sweep_{class}"),
            what: format!("one scan of the process table with {size} background processes the bench started, one orphaned guarded tree among them"),
            unit: "ms",
            size: Some(size),
            rounds,
            anchors: vec![PS],
        },
        contenders,
    ))
}

/// `undertaker ps --json` while `size` trees are live: `size` real `undertaker run --
/// sleep` (self-healing off: it would fold and sweep meanwhile), each a sentinel, a
/// guardian and CMD.
pub fn ps_live(env: &Env, class: usize, size: usize, rounds: usize) -> anyhow::Result<Measurement> {
    let mut runs = Vec::with_capacity(size);
    let started = (|| -> anyhow::Result<()> {
        for _ in 0..size {
            let mut c = env.undertaker_cmd();
            c.env("UNDERTAKER_NO_HEAL", "1")
                .args(["run", "--grace", "100ms", "--"])
                .arg(env.true_bin.with_file_name("sleep"))
                .arg("1000");
            runs.push(c.spawn()?);
        }
        // Every tree recorded and running before the first sample.
        let end = Instant::now() + UP;
        loop {
            let out = env
                .undertaker_cmd()
                .args(["ps", "--json"])
                .stdout(Stdio::piped())
                .output()?;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let running = v
                .as_array()
                .map_or(0, |a| a.iter().filter(|t| t["state"] == "running").count());
            if running >= size {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < end,
                "only {running} of {size} trees running"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    })();
    let m = started.map(|()| {
        let contenders = vec![Contender::new(format!("{PS_CMD} ({size} live trees)"), || {
            let mut c = env.undertaker_cmd();
            c.args(["ps", "--json"]);
            let t = Instant::now();
            match c.status() {
                Ok(s) if s.success() => Attempt::Sample(ms(t.elapsed())),
                Ok(s) => Attempt::Failed(format!("ps exited with {s}")),
                Err(e) => Attempt::Failed(format!("ps: {e}")),
            }
        })];
        measure::run(
            Spec {
                key: format!("ps_{class}"),
                what: format!("`undertaker ps --json` with {size} live trees (each a sentinel, a guardian and `sleep`)"),
                unit: "ms",
                size: Some(size),
                rounds,
                anchors: vec![],
            },
            contenders,
        )
    });
    // SIGTERM to each run we started (our unreaped child): it relays it to its guardian.
    for r in &runs {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(r),
            rustix::process::Signal::TERM,
        );
    }
    for mut r in runs {
        let _ = procs::wait_or_kill(&mut r, Duration::from_secs(30));
    }
    m
}

pub const PS_CMD: &str = "undertaker ps --json";
pub const LOG_PAGE: &str = "undertaker log --json --last 100";
pub const LOG_ALL: &str = "undertaker log --json";

/// The audit log holding `size` entries (one finished tree's record file, folded by a
/// first untimed `ps`): one page of 100 vs the whole log.
pub fn log_paging(
    env: &Env,
    class: usize,
    size: usize,
    rounds: usize,
) -> anyhow::Result<Measurement> {
    use std::io::Write;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
    let boot = boot.trim();
    let id = format!(
        "{:032x}",
        (0xbe7c_u128 << 64) | u128::from(std::process::id())
    );
    let trees = env.state_dir.join("trees");
    std::fs::create_dir_all(&trees)?;
    let mut f = std::io::BufWriter::new(std::fs::File::create(trees.join(format!("{id}.tree")))?);
    writeln!(
        f,
        r#"{{"tree":{{"id":"{id}","boot_id":"{boot}","label":"bench-log","tier":"subreaper","state":"running","guardian":{{"pid":1,"starttime":1,"pgid":1,"pidfs_inode":null}},"root":null,"owner":{{"kind":"parent","pid":null,"starttime":null}},"cgroup_path":null,"cgroup_id":null,"created_ms":1,"updated_ms":1,"finished_ms":null,"exit_status":null}}}}"#
    )?;
    for i in 0..size {
        writeln!(
            f,
            r#"{{"audit":{{"time_ms":{},"actor":"guardian","event":"signal","pid":{},"signal":"SIGTERM","proof":"pidfd+descendant","outcome":"delivered"}}}}"#,
            i + 1,
            i % 30000 + 2
        )?;
    }
    writeln!(
        f,
        r#"{{"finished":{{"time_ms":{},"exit_status":0}}}}"#,
        size + 1
    )?;
    drop(f);
    let fold = env.undertaker_cmd().args(["ps", "--json"]).status()?;
    anyhow::ensure!(fold.success(), "ps (the fold) exited with {fold}");
    let timed = |args: &'static [&'static str]| {
        move || {
            let mut c = env.undertaker_cmd();
            c.args(args);
            let t = Instant::now();
            match c.status() {
                Ok(s) if s.success() => Attempt::Sample(ms(t.elapsed())),
                Ok(s) => Attempt::Failed(format!("log exited with {s}")),
                Err(e) => Attempt::Failed(format!("log: {e}")),
            }
        }
    };
    Ok(measure::run(
        Spec {
            key: format!("log_{class}"),
            what: format!("`undertaker log --json` with {size} audit entries in the database: one page of the newest 100 vs all"),
            unit: "ms",
            size: Some(size),
            rounds,
            anchors: vec![LOG_ALL],
        },
        vec![
            Contender::new(LOG_PAGE, timed(&["log", "--json", "--last", "100"])),
            Contender::new(LOG_ALL, timed(&["log", "--json"])),
        ],
    ))
}

pub fn registry(env: &Env, class: usize, size: usize, rounds: usize) -> Measurement {
    #[derive(Clone, Copy, PartialEq)]
    enum Who {
        Undertaker,
        Tini,
        Bwrap,
        Bare,
        Floor,
    }
    let burst = |who: Who| -> Attempt {
        let tini = match (who, &env.tini) {
            (Who::Tini, Ok(p)) => Some(p.clone()),
            (Who::Tini, Err(why)) => return Attempt::Unavailable(why.clone()),
            _ => None,
        };
        let bwrap = match (who, &env.bwrap) {
            (Who::Bwrap, Ok(p)) => Some(p.clone()),
            (Who::Bwrap, Err(why)) => return Attempt::Unavailable(why.clone()),
            _ => None,
        };
        let undertaker = who == Who::Undertaker;
        let t = Instant::now();
        let mut children = Vec::with_capacity(size);
        for _ in 0..size {
            let mut c = match (who, &tini) {
                (Who::Undertaker, _) => {
                    let mut c = env.undertaker_cmd();
                    c.args(["run", "--"]).arg(&env.true_bin);
                    c
                }
                (Who::Tini, Some(tini)) => {
                    let mut c = Command::new(tini);
                    c.args(["-s", "--"]).arg(&env.true_bin).stdin(Stdio::null());
                    c
                }
                (Who::Bwrap, _) => {
                    // Some whenever `who` is Bwrap (checked above).
                    let mut c = Command::new(bwrap.clone().unwrap_or_default());
                    c.args(crate::env::BWRAP_ARGS)
                        .arg(&env.true_bin)
                        .stdin(Stdio::null());
                    c
                }
                (Who::Floor, _) => {
                    let Some((floor, _)) = &env.floor else {
                        return Attempt::Unavailable(format!("{FLOOR_ENV} not set"));
                    };
                    let mut c = Command::new(floor);
                    floor_env(env, &mut c);
                    c.args(["gcr", "--"])
                        .arg(&env.true_bin)
                        .stdin(Stdio::null());
                    c
                }
                _ => {
                    let mut c = Command::new(&env.true_bin);
                    c.stdin(Stdio::null());
                    c
                }
            };
            match c.spawn() {
                Ok(ch) => children.push(ch),
                Err(e) => return Attempt::Failed(format!("spawn: {e}")),
            }
        }
        let mut worst = None;
        for mut ch in children {
            match ch.wait() {
                Ok(s) if s.success() => {}
                Ok(s) => worst = Some(s),
                Err(e) => return Attempt::Failed(format!("wait: {e}")),
            }
        }
        let dt = t.elapsed();
        match worst {
            None => Attempt::Sample(ms(dt)),
            Some(s) if undertaker && s.code() == Some(125) => {
                Attempt::Unavailable("undertaker run exited 125".into())
            }
            Some(s) => Attempt::Failed(format!("a guardian exited with {s}")),
        }
    };
    let mut contenders = vec![
        Contender::new(format!("{} ×{size}", undertaker_name("auto")), move || {
            burst(Who::Undertaker)
        }),
        Contender::new(format!("{TINI} ×{size}"), move || burst(Who::Tini)),
        Contender::new(format!("{BWRAP} ×{size}"), move || burst(Who::Bwrap)),
        Contender::new(format!("bare ×{size}"), move || burst(Who::Bare)),
    ];
    if env.floor.is_some() {
        contenders.push(Contender::new(
            format!("{} ×{size}", FLOORS[1].0),
            move || burst(Who::Floor),
        ));
    }
    let m = measure::run(
        Spec {
            key: format!("registry_{class}"),
            what: format!("{size} concurrent `undertaker run -- true` (state dir in a temp dir): wall time from first spawn to last exit"),
            unit: "ms",
            size: Some(size),
            rounds,
            anchors: vec![],
        },
        contenders,
    );
    let m = with_anchor(m, format!("bare ×{size}"));
    let m = with_anchor(m, format!("{BWRAP} ×{size}"));
    with_anchor(m, format!("{TINI} ×{size}"))
}

/// Ratios against an anchor whose name is only known at run time.
fn with_anchor(mut m: Measurement, anchor: String) -> Measurement {
    let Some(base) = m.median(&anchor) else {
        m.anchors.push(anchor);
        return m;
    };
    for c in &mut m.contenders {
        if let Some(s) = c.summary {
            if let Some(r) = crate::stats::ratio(s.median, base) {
                c.ratios.insert(anchor.clone(), r);
            }
        }
    }
    m.anchors.push(anchor);
    m
}

fn vm_rss_kib(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub fn footprint_rss(env: &Env, cfg: &Config) -> Measurement {
    let mut ws = wrappers(env, false);
    ws.insert(
        1,
        Wrapper {
            name: "tini-static -s".into(),
            prefix: env.tini_static.clone().map(|p| {
                let mut v = vec![p.into_os_string()];
                v.extend(os(&["-s", "--"]));
                v
            }),
            undertaker: false,
        },
    );
    let contenders = ws
        .into_iter()
        .map(|w| {
            Contender::new(w.name.clone(), move || {
                let prefix = match &w.prefix {
                    Ok(p) => p,
                    Err(why) => return Attempt::Unavailable(why.clone()),
                };
                let fifos = match TreeFifos::new(env, "rss") {
                    Ok(f) => f,
                    Err(e) => return Attempt::Failed(format!("fifo: {e}")),
                };
                let (reader, stop) = match (fifos.alive.alive_reader(), fifos.stop.stop_writer()) {
                    (Ok(r), Ok(s)) => (r, s),
                    (Err(e), _) | (_, Err(e)) => return Attempt::Failed(format!("fifo: {e}")),
                };
                let mut cmd = vec![env.bench.clone().into_os_string()];
                cmd.extend(
                    fifos
                        .tree_args(1, None, "rss")
                        .into_iter()
                        .map(OsString::from),
                );
                let mut child = match wrapped(env, prefix, &cmd).spawn() {
                    Ok(c) => c,
                    Err(e) => return Attempt::Failed(format!("spawning {}: {e}", w.name)),
                };
                let result = match reader.wait_ready(&mut child, UP) {
                    Err(e) => ready_error(&w.name, e, w.undertaker),
                    Ok(()) => {
                        // Let the wrapper settle into its wait loop.
                        std::thread::sleep(Duration::from_millis(100));
                        match vm_rss_kib(child.id()) {
                            Some(kib) => Attempt::Sample(kib),
                            None => Attempt::Failed(format!("no VmRSS for {}", w.name)),
                        }
                    }
                };
                drop(stop);
                let _ = procs::wait_or_kill(&mut child, Duration::from_secs(20));
                result
            })
        })
        .collect();
    measure::run(
        Spec {
            key: "footprint_rss".into(),
            what: "VmRSS of the wrapper process while its CMD idles".into(),
            unit: "KiB",
            size: None,
            rounds: cfg.footprint_rounds,
            anchors: vec![TINI, "tini-static -s"],
        },
        contenders,
    )
}

/// Summed VmRSS of `pid` and its descendants that run the undertaker binary (a
/// guardian and its companion; never the guarded command).
fn undertaker_rss_kib(env: &Env, pid: u32) -> Option<f64> {
    let exe = std::fs::canonicalize(&env.undertaker).ok()?;
    let mut total = vm_rss_kib(pid)?;
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        for child in children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            if std::fs::read_link(format!("/proc/{child}/exe"))
                .ok()
                .as_ref()
                == Some(&exe)
            {
                total += vm_rss_kib(child).unwrap_or(0.0);
            }
            frontier.push(child);
        }
    }
    Some(total)
}

/// One `undertaker supervise` holding `n` spawned trees (`sleep 1000` each).
fn supervise_many_rss(env: &Env, n: usize) -> Attempt {
    use std::io::{BufRead, BufReader, Write};
    let mut child = match Command::new(&env.undertaker)
        .arg("--state-dir")
        .arg(&env.state_dir)
        .args(["supervise", "--grace", "200ms"])
        .env("UNDERTAKER_NO_HEAL", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Attempt::Failed(format!("spawning undertaker supervise: {e}")),
    };
    let (Some(mut input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
        return Attempt::Failed("no pipes".into());
    };
    let mut lines = String::new();
    for _ in 0..n {
        lines.push_str("{\"op\":\"spawn\",\"argv\":[\"sleep\",\"1000\"]}\n");
    }
    let sent = input.write_all(lines.as_bytes());
    let mut reader = BufReader::new(output);
    let mut ok = 0;
    let mut line = String::new();
    while sent.is_ok() && ok < n {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.contains("\"ok\":true") => ok += 1,
            Ok(_) => break,
        }
    }
    let result = if ok == n {
        std::thread::sleep(Duration::from_millis(200));
        match undertaker_rss_kib(env, child.id()) {
            Some(kib) => Attempt::Sample(kib),
            None => Attempt::Failed("no VmRSS for the supervisor".into()),
        }
    } else {
        Attempt::Failed(format!(
            "{ok} of {n} spawns answered ok (last: {})",
            line.trim()
        ))
    };
    drop(input);
    let _ = procs::wait_or_kill(&mut child, Duration::from_secs(30));
    result
}

/// `n` `undertaker run -- sleep 1000` guardians.
fn run_many_rss(env: &Env, n: usize) -> Attempt {
    let mut runs: Vec<Child> = Vec::with_capacity(n);
    let mut failure = None;
    for _ in 0..n {
        match Command::new(&env.undertaker)
            .arg("--state-dir")
            .arg(&env.state_dir)
            .args(["run", "--grace", "200ms", "--", "sleep", "1000"])
            .env("UNDERTAKER_NO_HEAL", "1")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => runs.push(c),
            Err(e) => {
                failure = Some(format!("spawning undertaker run: {e}"));
                break;
            }
        }
    }
    // Each guardian is up once its command runs.
    let sleeping = |c: &Child| {
        let pid = c.id();
        let mut frontier = vec![pid];
        while let Some(p) = frontier.pop() {
            let kids =
                std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
            for k in kids.split_whitespace() {
                if std::fs::read_to_string(format!("/proc/{k}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
                {
                    return true;
                }
                frontier.extend(k.parse::<u32>().ok());
            }
        }
        false
    };
    let end = Instant::now() + Duration::from_secs(60);
    while failure.is_none() && !runs.iter().all(sleeping) {
        if Instant::now() > end {
            failure = Some("guardians did not start their commands within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = match failure {
        Some(why) => Attempt::Failed(why),
        None => {
            std::thread::sleep(Duration::from_millis(200));
            let total: Option<f64> = runs.iter().map(|c| undertaker_rss_kib(env, c.id())).sum();
            total.map_or_else(|| Attempt::Failed("no VmRSS".into()), Attempt::Sample)
        }
    };
    for c in &runs {
        if let Some(pid) = rustix::process::Pid::from_raw(c.id() as i32) {
            // Our own unreaped child: its number is still its own.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
    for c in &mut runs {
        let _ = procs::wait_or_kill(c, Duration::from_secs(30));
    }
    result
}

/// Resident memory of guarding many trees at once: one supervisor vs one guardian each.
pub fn footprint_many(env: &Env, cfg: &Config) -> Measurement {
    let n = cfg.many_trees;
    let contenders = vec![
        Contender::new("undertaker supervise", move || supervise_many_rss(env, n)),
        Contender::new(RUN_EACH, move || run_many_rss(env, n)),
    ];
    measure::run(
        Spec {
            key: "footprint_many".into(),
            what: format!(
                "summed VmRSS of the undertaker processes guarding {n} idle trees: one `supervise` holding all, or one `run` each"
            ),
            unit: "KiB",
            size: Some(n),
            rounds: cfg.footprint_rounds,
            anchors: vec![RUN_EACH],
        },
        contenders,
    )
}

const RUN_EACH: &str = "undertaker run, one per tree";

pub fn footprint_binary(env: &Env) -> Measurement {
    let bins: Vec<(&str, Result<std::path::PathBuf, String>)> = vec![
        ("undertaker", Ok(env.undertaker.clone())),
        ("tini", env.tini.clone()),
        ("tini-static", env.tini_static.clone()),
        ("dumb-init", env.dumb_init.clone()),
        ("catatonit", env.catatonit.clone()),
    ];
    let contenders = bins
        .into_iter()
        .map(|(name, path)| {
            Contender::new(name, move || match &path {
                Ok(p) => match std::fs::metadata(p) {
                    Ok(m) => Attempt::Sample(m.len() as f64 / 1024.0),
                    Err(e) => Attempt::Failed(format!("{}: {e}", p.display())),
                },
                Err(why) => Attempt::Unavailable(why.clone()),
            })
        })
        .collect();
    measure::run(
        Spec {
            key: "footprint_binary".into(),
            what: "size of the executable file".into(),
            unit: "KiB",
            size: None,
            rounds: 1,
            anchors: vec!["tini", "tini-static"],
        },
        contenders,
    )
}
