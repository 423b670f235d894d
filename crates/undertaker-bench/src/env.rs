//! What the bench runs against: the binaries, the cgroup v2 mount, the machine.

use anyhow::{bail, Context};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct Env {
    pub undertaker: PathBuf,
    /// This program, for its hidden tree and stamp modes.
    pub bench: PathBuf,
    pub true_bin: PathBuf,
    pub tini: Result<PathBuf, String>,
    pub tini_static: Result<PathBuf, String>,
    pub dumb_init: Result<PathBuf, String>,
    pub catatonit: Result<PathBuf, String>,
    /// bubblewrap: the peer with undertaker's guarantee (a kernel object, its PID
    /// namespace, holds the tree, and the tree dies with bwrap's parent).
    pub bwrap: Result<PathBuf, String>,
    pub ps: Result<PathBuf, String>,
    pub pgrep: Result<PathBuf, String>,
    /// Where the bench may create cgroups, or why it may not.
    pub cgroup_parent: Result<PathBuf, String>,
    /// Private scratch dir: FIFOs, the state dir.
    pub tmp: PathBuf,
    pub state_dir: PathBuf,
    pub sweep: Result<(), String>,
    /// The C floor of `run`'s structure (`floor/floor.c`, named by
    /// `UNDERTAKER_BENCH_FLOOR`), with the directory its record files go to.
    pub floor: Option<(PathBuf, PathBuf)>,
}

/// Names a compiled `floor/floor.c` (`cc -O2 -o floor floor.c`): the bench then
/// measures it beside undertaker in `spawn`, `exit_latency` and `registry_N`.
pub const FLOOR_ENV: &str = "UNDERTAKER_BENCH_FLOOR";

const INSTALL_HINT: &str = "run scripts/install-anchors.sh";

/// `name` on $PATH (or in the usual sbin dirs), as the anchors are found.
pub fn find_tool(name: &str) -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    for d in dirs {
        let p = d.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(format!("{name} not installed ({INSTALL_HINT})"))
}

impl Env {
    pub fn discover(undertaker: Option<PathBuf>) -> anyhow::Result<Env> {
        let bench = std::env::current_exe().context("locating undertaker-bench itself")?;
        let undertaker = match undertaker {
            Some(p) => p,
            None => bench
                .parent()
                .map(|d| d.join("undertaker"))
                .unwrap_or_else(|| PathBuf::from("undertaker")),
        };
        if !undertaker.is_file() {
            bail!(
                "no undertaker binary at {} (run `cargo build --release -p undertaker-cli`, or pass --undertaker PATH)",
                undertaker.display()
            );
        }
        let true_bin = ["/bin/true", "/usr/bin/true"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .context("no /bin/true")?;
        let tmp = std::env::temp_dir().join(format!("undertaker-bench.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let state_dir = tmp.join("state");
        std::fs::create_dir(&state_dir)?;
        set_mode_0700(&tmp)?;
        set_mode_0700(&state_dir)?;
        let sweep = probe_subcommand(&undertaker, "sweep");
        let floor = match std::env::var_os(FLOOR_ENV).map(PathBuf::from) {
            Some(bin) if bin.is_file() => {
                let records = tmp.join("floor");
                std::fs::create_dir(&records)?;
                Some((bin, records))
            }
            Some(bin) => bail!("{FLOOR_ENV}: no program at {}", bin.display()),
            None => None,
        };
        Ok(Env {
            undertaker,
            bench,
            true_bin,
            tini: find_tool("tini"),
            tini_static: find_tool("tini-static"),
            dumb_init: find_tool("dumb-init"),
            bwrap: find_tool("bwrap").and_then(|p| probe_bwrap(&p).map(|()| p)),
            catatonit: find_tool("catatonit")
                .or_else(|_| {
                    let p = PathBuf::from("/usr/libexec/podman/catatonit");
                    p.is_file().then_some(p).ok_or(())
                })
                .map_err(|_| format!("catatonit not installed ({INSTALL_HINT})")),
            ps: find_tool("ps"),
            pgrep: find_tool("pgrep"),
            cgroup_parent: cgroup_parent(),
            tmp,
            state_dir,
            sweep,
            floor,
        })
    }

    /// An `undertaker` command with the bench's private state dir.
    pub fn undertaker_cmd(&self) -> Command {
        let mut c = Command::new(&self.undertaker);
        // Self-healing off: a guardian living past a second would sweep the orphaned
        // tree the sweep measurement keeps on purpose (and add its work to others).
        c.env("UNDERTAKER_NO_HEAL", "1")
            .env("UNDERTAKER_STATE_DIR", &self.state_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

fn set_mode_0700(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700))
}

/// A subcommand exists when `undertaker SUB --help` succeeds.
/// The arguments before CMD that make bwrap the peer the issue compares with.
pub const BWRAP_ARGS: [&str; 6] = [
    "--dev-bind",
    "/",
    "/",
    "--die-with-parent",
    "--unshare-pid",
    "--",
];

/// bwrap needs user namespaces (or setuid) to run: try it once.
fn probe_bwrap(bwrap: &Path) -> Result<(), String> {
    let st = Command::new(bwrap)
        .args(BWRAP_ARGS)
        .arg("/bin/true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("bwrap: {e}"))?;
    st.success()
        .then_some(())
        .ok_or_else(|| format!("bwrap cannot run here ({st})"))
}

fn probe_subcommand(undertaker: &Path, sub: &str) -> Result<(), String> {
    let out = Command::new(undertaker)
        .args([sub, "--help"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {}: {e}", undertaker.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`undertaker {sub}` not in this build"))
    }
}

/// The cgroup v2 directory the bench runs in (from /proc/self/mountinfo and
/// /proc/self/cgroup), if the bench may create children there.
fn cgroup_parent() -> Result<PathBuf, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    let mount = mountinfo
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.split_whitespace().next()? == "cgroup2")
                .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))
                .flatten()
        })
        .ok_or("no cgroup2 mount")?;
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
        })
        .unwrap_or_else(|| "/".into());
    let dir = mount.join(own.trim_start_matches('/'));
    let probe = dir.join(format!("undertaker-bench-probe.{}", std::process::id()));
    std::fs::create_dir(&probe)
        .map_err(|e| format!("cgroup v2 at {} not writable: {e}", dir.display()))?;
    let _ = std::fs::remove_dir(&probe);
    if !dir.join("cgroup.kill").exists() && !probe_kill_file(&dir) {
        return Err("kernel lacks cgroup.kill (< 5.14)".into());
    }
    Ok(dir)
}

fn probe_kill_file(dir: &Path) -> bool {
    let probe = dir.join(format!("undertaker-bench-probe2.{}", std::process::id()));
    if std::fs::create_dir(&probe).is_err() {
        return false;
    }
    let has = probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    has
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub mem_total_mib: u64,
    pub kernel: String,
    pub undertaker: String,
    pub undertaker_version: String,
}

pub fn machine(env: &Env) -> Machine {
    let mem_total_mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024);
    let uname = rustix::system::uname();
    let version = Command::new(&env.undertaker)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    Machine {
        nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
        mem_total_mib,
        kernel: uname.release().to_string_lossy().into_owned(),
        undertaker: env.undertaker.display().to_string(),
        undertaker_version: version,
    }
}
