use super::*;

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("ut-reg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

fn sample(id: &str, boot: &str) -> TreeRecord {
    TreeRecord {
        id: id.into(),
        boot_id: boot.into(),
        label: Some("lbl".into()),
        tier: RecordedTier::Subreaper,
        state: StoredState::Running,
        guardian: GuardianRecord {
            pid: 10,
            starttime: 20,
            pgid: 10,
            pidfs_inode: Some(u64::MAX - 3),
            supervisor: false,
        },
        root: None,
        owner: OwnerRecord {
            kind: OwnerKind::Parent,
            pid: Some(9),
            starttime: Some(5),
        },
        cgroup_path: None,
        cgroup_id: None,
        created_ms: 1,
        updated_ms: 1,
        finished_ms: None,
        exit_status: None,
        start: None,
    }
}

#[test]
fn tree_lifecycle_round_trips() {
    let tmp = TempDir::new("life");
    let dir = StateDir::prepare(&tmp.0, uid()).unwrap();
    let reg = Registry::open(&dir, "boot-a").unwrap();
    assert!(reg.recovered.is_none());
    let mut t = sample("aaaa1111", "boot-a");
    reg.insert_tree(&t).unwrap();
    let root = RootRecord {
        pid: 11,
        starttime: 21,
        pgid: 11,
        sid: 1,
        uid: 0,
    };
    reg.set_root(&t.id, &root).unwrap();
    reg.set_reaping(&t.id).unwrap();
    assert_eq!(
        reg.tree(&t.id).unwrap().unwrap().state,
        StoredState::Reaping
    );
    reg.set_finished(&t.id, Some(3)).unwrap();
    let got = reg.tree(&t.id).unwrap().unwrap();
    t.root = Some(root);
    t.state = StoredState::Finished;
    t.exit_status = Some(3);
    t.updated_ms = got.updated_ms;
    t.finished_ms = got.finished_ms;
    assert_eq!(got, t);
    assert!(reg.trees(false).unwrap().is_empty());
    assert_eq!(reg.trees(true).unwrap().len(), 1);
    assert_eq!(reg.trees_by_prefix("aaaa").unwrap().len(), 1);
    assert!(reg.trees_by_prefix("b").unwrap().is_empty());

    reg.append_audit(&AuditEntry {
        tree: Some(t.id.clone()),
        actor: "sweep".into(),
        event: "signal".into(),
        pid: Some(11),
        starttime: Some(21),
        signal: Some("SIGTERM".into()),
        proof: Some("pidfd+marker".into()),
        outcome: Some("delivered".into()),
        ..Default::default()
    })
    .unwrap();
    let log = reg.audit(Some(&t.id)).unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].proof.as_deref(), Some("pidfd+marker"));
    assert!(reg.audit(Some("other")).unwrap().is_empty());
    assert_eq!(reg.audit(None).unwrap().len(), 1);
}

#[test]
fn other_boots_are_purged_on_open() {
    let tmp = TempDir::new("boot");
    let dir = StateDir::prepare(&tmp.0, uid()).unwrap();
    let reg = Registry::open(&dir, "boot-a").unwrap();
    reg.insert_tree(&sample("old", "boot-a")).unwrap();
    drop(reg);
    let reg = Registry::open(&dir, "boot-b").unwrap();
    assert!(reg.trees(true).unwrap().is_empty());
}

#[test]
fn corrupt_database_is_moved_aside() {
    let tmp = TempDir::new("corrupt");
    let dir = StateDir::prepare(&tmp.0, uid()).unwrap();
    drop(Registry::open(&dir, "b").unwrap());
    let _ = std::fs::remove_file(tmp.0.join("registry.db-wal"));
    let _ = std::fs::remove_file(tmp.0.join("registry.db-shm"));
    std::fs::write(dir.db_path(), vec![0x5a; 8192]).unwrap();
    let reg = Registry::open(&dir, "b").unwrap();
    let rec = reg.recovered.clone().expect("recovered");
    assert_eq!(rec.file, dir.db_path());
    assert_eq!(std::fs::read(&rec.moved_to).unwrap(), vec![0x5a; 8192]);
    assert!(rec.to_string().contains("registry.db"));
    reg.insert_tree(&sample("t", "b")).unwrap();
}

#[test]
fn unsafe_state_dirs_are_refused() {
    let tmp = TempDir::new("unsafe");
    std::fs::create_dir_all(&tmp.0).unwrap();
    let real = tmp.0.join("real");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.0.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = StateDir::prepare(&link, uid()).unwrap_err();
    assert!(matches!(err, RegistryError::UnsafeStateDir { .. }), "{err}");
    assert!(err.to_string().contains("symlink"));
    let err = StateDir::prepare(&real, uid() + 1).unwrap_err();
    assert!(err.to_string().contains("owned by uid"), "{err}");
    let file = tmp.0.join("file");
    std::fs::write(&file, "").unwrap();
    assert!(StateDir::prepare(&file, uid()).is_err());
    // Created private when missing.
    let fresh = tmp.0.join("a/b");
    StateDir::prepare(&fresh, uid()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}

/// Writes `trees` finished record files with `entries` audit lines each.
fn write_records(dir: &StateDir, trees: usize, entries: usize) {
    use record_file::{Line, RecordWriter};
    for t in 0..trees {
        let w = RecordWriter::create(dir, &sample(&format!("t{t:03}"), "boot")).unwrap();
        let lines: Vec<Line> = (0..entries)
            .map(|i| {
                Line::Audit(AuditEntry {
                    time_ms: 1 + i as i64,
                    actor: "guardian".into(),
                    event: "signal".into(),
                    pid: Some(i as i32),
                    ..Default::default()
                })
            })
            .collect();
        w.append(&lines).unwrap();
        w.finish(Some(0)).unwrap();
    }
}

#[test]
fn a_second_fold_of_the_same_file_changes_nothing() {
    let tmp = TempDir::new("refold");
    let dir = StateDir::prepare(&tmp.0, uid()).unwrap();
    write_records(&dir, 1, 3);
    let path = record_file::path_of(&dir, "t000");
    let kept = std::fs::read(&path).unwrap();
    let reg = Registry::open(&dir, "boot").unwrap();
    assert!(reg.fold(&dir, "boot").is_empty());
    assert!(!path.exists(), "folded file removed");
    // A folder killed after its commit, before removing the file: the file is back.
    std::fs::write(&path, &kept).unwrap();
    assert!(reg.fold(&dir, "boot").is_empty());
    assert_eq!(reg.audit(None).unwrap().len(), 3);
    let t = reg.tree("t000").unwrap().unwrap();
    assert_eq!(t.state, StoredState::Finished);
    assert_eq!(t.exit_status, Some(0));
}

#[test]
fn concurrent_folders_neither_duplicate_nor_lose_an_entry() {
    let tmp = TempDir::new("concurrent-fold");
    let dir = StateDir::prepare(&tmp.0, uid()).unwrap();
    write_records(&dir, 60, 5);
    Registry::open(&dir, "boot").unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let dir = dir.clone();
            s.spawn(move || {
                let reg = Registry::open(&dir, "boot").unwrap();
                reg.fold(&dir, "boot");
            });
        }
    });
    let reg = Registry::open(&dir, "boot").unwrap();
    assert_eq!(reg.trees(true).unwrap().len(), 60);
    assert_eq!(reg.audit(None).unwrap().len(), 300);
    assert!(record_file::list(&dir).is_empty());
}

#[test]
fn a_live_record_is_read_not_folded() {
    let tmp = TempDir::new("live-fold");
    let dir = StateDir::prepare(&tmp.0, uid()).unwrap();
    let w = record_file::RecordWriter::create(&dir, &sample("live1", "boot")).unwrap();
    let reg = Registry::open(&dir, "boot").unwrap();
    let live = reg.fold(&dir, "boot");
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].tree.id, "live1");
    assert!(reg.tree("live1").unwrap().is_none());
    w.finish(None).unwrap();
    assert!(reg.fold(&dir, "boot").is_empty());
    assert!(reg.tree("live1").unwrap().is_some());
}

#[test]
fn audit_pages_walk_back_from_the_newest() {
    let tmp = TempDir::new("pages");
    let dir = StateDir::prepare(&tmp.0, uid()).unwrap();
    write_records(&dir, 2, 5);
    let reg = Registry::open(&dir, "boot").unwrap();
    reg.fold(&dir, "boot");
    let all = reg.audit(None).unwrap();
    assert_eq!(all.len(), 10);
    let newest = reg.audit_page(None, None, 4).unwrap();
    assert_eq!(newest, all[6..]);
    let before = reg.audit_page(None, Some(newest[0].id), 4).unwrap();
    assert_eq!(before, all[2..6]);
    let one_tree = reg.audit_page(Some("t001"), None, 100).unwrap();
    assert_eq!(one_tree.len(), 5);
    assert!(one_tree.iter().all(|e| e.tree.as_deref() == Some("t001")));
    assert_eq!(reg.audit_trees_by_prefix("t00").unwrap().len(), 2);
    assert_eq!(reg.audit_trees_by_prefix("t001").unwrap(), ["t001"]);
}

/// The neutral recorder (Windows' and macOS's guardians): the record file `ps`
/// reads while the guardian lives, with the root, a note and the exit status.
#[test]
fn the_neutral_recorder_writes_the_record_file_ps_reads() {
    let tmp = TempDir::new("recorder");
    let id = crate::identity::TreeId::generate("b00710", [7; 12]);
    let start = |pid| recorder::Start {
        state_dir: Some(&tmp.0),
        uid: uid(),
        boot_id: "b00710",
        label: Some("lbl".into()),
        tier: RecordedTier::Portable,
        guardian: GuardianRecord {
            pid,
            starttime: 5,
            pgid: pid,
            pidfs_inode: None,
            supervisor: false,
        },
        owner: OwnerRecord {
            kind: OwnerKind::Parent,
            pid: Some(1),
            starttime: Some(1),
        },
    };
    let mut rec = recorder::Recorder::open(&id, start(std::process::id() as i32)).unwrap();
    assert!(rec.is_recording());
    rec.root_record(RootRecord {
        pid: 42,
        starttime: 6,
        pgid: 42,
        sid: 0,
        uid: uid(),
    });
    rec.note("hello");
    let dir = StateDir::prepare(&tmp.0, uid()).unwrap();
    let path = record_file::path_of(&dir, id.as_str());
    let live = record_file::read(&path).unwrap();
    assert_eq!(live.tree.root.as_ref().map(|r| r.pid), Some(42));
    assert_eq!(live.tree.tier, RecordedTier::Portable);
    assert!(!live.finished);
    rec.finish(Some(3));
    let done = record_file::read(&path).unwrap();
    assert!(done.finished);
    assert_eq!(done.tree.exit_status, Some(3));
    assert!(done
        .audit
        .iter()
        .any(|(_, e)| e.message.as_deref() == Some("hello")));
}
