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
