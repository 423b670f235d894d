//! The sweep's decisions against a fake /proc: which processes count as a tree's
//! members, and whether an owner is still the recorded one.
use super::marker::{live_pids, marker_scan, marker_scan_except};
use super::*;
use crate::identity::TREE_MARKER;
use crate::registry::OwnerKind;
use std::collections::BTreeMap;
use std::path::PathBuf;

struct FakeProc(PathBuf);

impl FakeProc {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "undertaker-reconcile-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        FakeProc(dir)
    }

    /// A process with a state, a start time, a real uid and an environment.
    fn process(&self, pid: i32, state: char, starttime: u64, uid: u32, env: &[u8]) {
        let dir = self.0.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let zeros = vec!["0"; 30].join(" ");
        let stat = format!(
            "{pid} (p) {state} 1 {pid} {pid} 0 -1 4194560 1370 0 0 0 2 1 0 0 20 0 1 0 \
             {starttime} {zeros}\n"
        );
        std::fs::write(dir.join("stat"), stat).unwrap();
        let status = format!("Name:\tp\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n");
        std::fs::write(dir.join("status"), status).unwrap();
        std::fs::write(dir.join("environ"), env).unwrap();
    }

    fn procfs(&self) -> Procfs {
        Procfs::at(&self.0)
    }
}

impl Drop for FakeProc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn marked(id: &str) -> Vec<u8> {
    format!("PATH=/bin\0{TREE_MARKER}={id}\0HOME=/x\0").into_bytes()
}

#[test]
fn marker_scan_counts_live_marked_processes_of_our_uid_only() {
    let a = "ab".repeat(16);
    let b = "cd".repeat(16);
    let fake = FakeProc::new("markers");
    fake.process(10, 'S', 100, 1000, &marked(&a));
    fake.process(11, 'S', 101, 0, &marked(&a)); // another uid
    fake.process(12, 'Z', 102, 1000, &marked(&a)); // a zombie
    fake.process(13, 'S', 103, 1000, &marked("not-a-tree-id"));
    fake.process(14, 'S', 104, 1000, b"PATH=/bin\0");
    fake.process(15, 'R', 105, 1000, &marked(&b));
    fake.process(16, 'T', 106, 1000, &marked(&a)); // stopped still counts
    let found = marker_scan(&fake.procfs(), 1000);
    let expected: BTreeMap<String, Vec<(i32, u64)>> = [
        (a.clone(), vec![(10, 100), (16, 106)]),
        (b.clone(), vec![(15, 105)]),
    ]
    .into_iter()
    .collect();
    assert_eq!(found, expected);
}

#[test]
fn a_scan_except_counted_processes_skips_them_and_finds_the_rest() {
    let a = "ab".repeat(16);
    let fake = FakeProc::new("except");
    fake.process(30, 'S', 300, 1000, &marked(&a)); // in a tree cgroup, counted there
    fake.process(31, 'S', 301, 1000, &marked(&a)); // marked, outside every cgroup
    fake.process(32, 'Z', 302, 1000, &marked(&a)); // a zombie, outside
    let counted = std::collections::HashSet::from([30]);
    let found = marker_scan_except(&fake.procfs(), 1000, &counted);
    assert_eq!(found.get(&a), Some(&vec![(31, 301)]));
    // Counting is the union of both: each process once.
    assert_eq!(live_pids(&a, &found, &[30, 31]).len(), 2);
}

#[test]
fn an_owner_is_alive_only_as_the_recorded_process() {
    let fake = FakeProc::new("owner");
    fake.process(20, 'S', 500, 1000, b"");
    fake.process(21, 'Z', 501, 1000, b"");
    let procfs = fake.procfs();
    let owner = |pid: Option<i32>, starttime: Option<u64>| OwnerRecord {
        kind: OwnerKind::Pid,
        pid,
        starttime,
    };
    assert_eq!(
        owner_alive(&procfs, &owner(Some(20), Some(500))),
        Some(true)
    );
    // The number now belongs to a process that started later: the owner is gone.
    assert_eq!(
        owner_alive(&procfs, &owner(Some(20), Some(499))),
        Some(false)
    );
    assert_eq!(
        owner_alive(&procfs, &owner(Some(21), Some(501))),
        Some(false)
    );
    assert_eq!(owner_alive(&procfs, &owner(Some(22), Some(1))), Some(false));
    // Nothing recorded (an --owner-fd pipe): unknown, never "dead".
    assert_eq!(owner_alive(&procfs, &owner(None, None)), None);
}
