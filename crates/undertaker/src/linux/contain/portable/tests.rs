//! The portable core over real processes: an escape zoo torn down by lineage,
//! marker and the freeze round, with no cgroup, subreaper or PDEATHSIG; the one
//! escape Linux must lose here is asserted as lost (docs/GUARANTEES.md, "portable").

use super::LinuxOs;
use crate::escalation::Escalation;
use crate::identity::TREE_MARKER;
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::signal::Signaller;
use crate::portable::lineage::{Lineage, Scope};
use crate::portable::teardown::tear_down;
use crate::portable::ProcessTable;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const INSIDE: &str = "UNDERTAKER_PORTABLE_TEST_INSIDE_PIDNS";

/// Re-runs `test_name` as PID 1 of a private PID namespace (where it can only see
/// what it started) and returns false; true when already inside. Without one: skip,
/// except under CI=true.
fn isolate(name: &str) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return true;
    }
    // The test's full name as libtest knows it: this module's path without the crate
    // (the platform module is `os`, whatever its folder is called).
    let module = module_path!().split_once("::").map_or("", |(_, rest)| rest);
    let test_name = &format!("{module}::{name}");
    let mut cmd = Command::new("unshare");
    if !rustix::process::geteuid().is_root() {
        cmd.args(["--user", "--map-root-user"]);
    }
    let out = cmd
        .args(["--pid", "--fork", "--mount-proc", "--"])
        .arg(std::env::current_exe().expect("test binary"))
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .env_remove(TREE_MARKER)
        .output();
    let skip = |why: String| {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        false
    };
    let out = match out {
        Ok(out) => out,
        Err(e) => return skip(format!("cannot run unshare: {e}")),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.starts_with("unshare:") {
        return skip(format!("no private PID namespace: {}", stderr.trim()));
    }
    eprintln!("--- inner run of {test_name} ---\n{stdout}\n{stderr}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "isolated run of {test_name} failed ({})",
        out.status
    );
    false
}

fn unique_tree() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:024x}{:08x}", nanos & ((1 << 96) - 1), std::process::id())
}

fn spawn(script: &str, tree: &str) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .env(TREE_MARKER, tree)
        .process_group(0)
        .spawn()
        .expect("sh")
}

/// Live processes whose command line is `sleep <arg>` for one of `args`, ours by uid.
fn sleepers(procfs: &Procfs, args: &[&str]) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for pid in procfs.pids().unwrap_or_default() {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let words: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if words.len() >= 2 && words[0].ends_with(b"sleep") {
            let arg = String::from_utf8_lossy(words[1]).into_owned();
            if args.contains(&arg.as_str()) && procfs.stat(pid).is_ok_and(|s| s.state != 'Z') {
                found.push((pid, arg));
            }
        }
    }
    found.sort_by(|a, b| a.1.cmp(&b.1));
    found
}

fn wait_for(mut ready: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < until, "the tree never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills a process this test started, through a pidfd (the test's own cleanup).
fn kill_own(pid: i32) {
    if let Ok(fd) = crate::linux::kernel::sys::pidfd_open(pid) {
        let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
    }
}

#[test]
fn escape_zoo_is_torn_down_except_the_scrubbed_orphan_linux_cannot_link() {
    if !isolate("escape_zoo_is_torn_down_except_the_scrubbed_orphan_linux_cannot_link") {
        return;
    }
    let procfs = Procfs::new();
    let signaller = Signaller::for_current_process(procfs.clone()).expect("signaller");
    let tree = unique_tree();
    let me = signaller.me().pid;
    // A decoy with our marker that started before the "guardian", and a stranger
    // of another tree: neither may be signalled.
    let mut early = spawn("exec sleep 306", &tree);
    std::thread::sleep(Duration::from_millis(40));
    let not_before = procfs
        .stat(me)
        .expect("me")
        .starttime
        .max(procfs.stat(early.id() as i32).expect("early").starttime + 1);
    std::thread::sleep(Duration::from_millis(40));
    let mut other = spawn("exec sleep 307", &unique_tree());
    let all = ["300", "301", "302", "303", "304", "305", "306", "307"];
    let zoo = "sleep 300 &
        setsid sh -c 'sleep 301 & wait' &
        sh -c 'setsid sh -c \"sleep 302\" &'
        sh -c 'trap \"\" TERM; sleep 303 & wait' &
        env -i sleep 304 &
        sh -c 'env -i sleep 305 &'
        wait";
    let mut cmd = spawn(zoo, &tree);
    wait_for(|| sleepers(&procfs, &all).len() == all.len());

    let mut os = LinuxOs::new(signaller.clone());
    let me_serial = os.facts(me).map(|f| f.serial);
    let mut lineage = Lineage::new(Scope {
        tree: tree.clone(),
        uid: signaller.me().uid,
        not_before,
        protected: me_serial.into_iter().collect(),
    });
    let cmd_facts = os.facts(cmd.id() as i32).expect("cmd facts");
    lineage.seed(&cmd_facts).expect("cmd is ours");
    let report = tear_down(
        &mut lineage,
        &mut os,
        Escalation {
            grace: Duration::from_millis(500),
            kill_cap: Duration::from_secs(10),
        },
    );
    let _ = cmd.wait();
    assert!(report.stuck.is_empty(), "{report:?}");
    assert!(report.freeze_rounds >= 1, "sleep 303 ignores SIGTERM");
    // Wait for the killed to be reaped by whoever inherited them.
    wait_for(|| sleepers(&procfs, &all).len() <= 3);
    let left: Vec<String> = sleepers(&procfs, &all)
        .into_iter()
        .map(|(_, a)| a)
        .collect();
    // 305: `env -i` and its parent gone before the scan: no marker, and Linux's
    // parent link is the reaper's now (xnu would keep it until an exec).
    assert_eq!(
        left,
        ["305", "306", "307"],
        "the asserted miss, and the decoys"
    );
    for (pid, arg) in sleepers(&procfs, &["305"]) {
        assert_eq!(arg, "305");
        kill_own(pid);
    }
    let _ = early.kill();
    let _ = other.kill();
    let _ = early.wait();
    let _ = other.wait();
}

/// A member proven, gone, and its number handed to a stranger (ns_last_pid): the
/// delivery to the member must refuse, and the stranger lives.
#[test]
fn a_stranger_on_a_recycled_member_number_is_never_signalled() {
    if !isolate("a_stranger_on_a_recycled_member_number_is_never_signalled") {
        return;
    }
    let procfs = Procfs::new();
    let signaller = Signaller::for_current_process(procfs.clone()).expect("signaller");
    let tree = unique_tree();
    let mut os = LinuxOs::new(signaller.clone());
    let mut member_child = spawn("exec sleep 310", &tree);
    let pid = member_child.id() as i32;
    let facts = os.facts(pid).expect("member facts");
    let mut lineage = Lineage::new(Scope {
        tree: tree.clone(),
        uid: signaller.me().uid,
        not_before: 0,
        protected: Default::default(),
    });
    let member = lineage.seed(&facts).expect("member");
    let _ = member_child.kill();
    let _ = member_child.wait();
    std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1)).expect("ns_last_pid");
    let mut decoy = Command::new("sleep")
        .arg("311")
        .env_remove(TREE_MARKER)
        // Out of our group, which the ladder protects: only the serial tells.
        .process_group(0)
        .spawn()
        .expect("decoy");
    assert_eq!(decoy.id() as i32, pid, "the number was reused");
    assert_eq!(
        os.deliver(&member, crate::portable::Signal::Kill),
        crate::portable::Delivery::AlreadyGone
    );
    let report = tear_down(
        &mut lineage,
        &mut os,
        Escalation {
            grace: Duration::from_millis(100),
            kill_cap: Duration::from_secs(2),
        },
    );
    assert!(report.delivered.is_empty(), "{report:?}");
    assert!(
        decoy.try_wait().expect("decoy").is_none(),
        "the decoy lives"
    );
    let _ = decoy.kill();
    let _ = decoy.wait();
}

// The core's guardian loop, `ps`, `sweep` and the sentinel's takeover over real
// processes: what macOS's commands run (docs/PORTING.md, "The macOS backend").
mod commands;

// `supervise` as macOS serves it: the neutral serve loop over the core's trees.
mod supervise;
