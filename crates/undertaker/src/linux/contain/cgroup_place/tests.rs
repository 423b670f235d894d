use super::*;

const HYBRID: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
    40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

fn unified() -> CgroupMount {
    CgroupMount {
        mount_point: "/sys/fs/cgroup".into(),
        root: "/".into(),
    }
}

#[test]
fn finds_cgroup2_on_hybrid_and_unified() {
    let m = parse_cgroup2_mount(HYBRID).unwrap();
    assert_eq!(m.mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
    assert_eq!(m.root, "/");
    let unified =
        "30 24 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
    let m = parse_cgroup2_mount(unified).unwrap();
    assert_eq!(m.mount_point, PathBuf::from("/sys/fs/cgroup"));
    assert_eq!(parse_cgroup2_mount("garbage\n\n - \n"), None);
}

#[test]
fn unescapes_mount_points() {
    let line = "41 31 0:38 /a\\040b /mnt/c\\040g rw - cgroup2 cgroup2 rw\n";
    let m = parse_cgroup2_mount(line).unwrap();
    assert_eq!(m.mount_point, PathBuf::from("/mnt/c g"));
    assert_eq!(m.root, "/a b");
}

#[test]
fn maps_between_cgroup_paths_and_dirs() {
    let m = unified();
    assert_eq!(m.dir_of("/"), Some(PathBuf::from("/sys/fs/cgroup")));
    assert_eq!(
        m.dir_of("/user.slice/x.scope"),
        Some(PathBuf::from("/sys/fs/cgroup/user.slice/x.scope"))
    );
    assert_eq!(m.rel_of(Path::new("/sys/fs/cgroup/a/b")).unwrap(), "/a/b");
    assert_eq!(m.rel_of(Path::new("/sys/fs/cgroup")).unwrap(), "/");
    let sub = CgroupMount {
        mount_point: "/cg".into(),
        root: "/kube/pod".into(),
    };
    assert_eq!(sub.dir_of("/kube/pod/c"), Some(PathBuf::from("/cg/c")));
    assert_eq!(sub.dir_of("/kube/podx"), None);
    assert_eq!(sub.dir_of("/other"), None);
    assert_eq!(sub.rel_of(Path::new("/cg/c")).unwrap(), "/kube/pod/c");
}

/// A service's cgroup as systemd leaves it: writable by root, nothing enabled below.
fn service() -> OwnCgroup {
    OwnCgroup {
        dir: Some("/sys/fs/cgroup/system.slice/agent.service".into()),
        writable: true,
        ..OwnCgroup::default()
    }
}

fn place(own: &OwnCgroup, root: bool) -> Option<(PathBuf, PlaceKind)> {
    decide(&unified(), own, root, &mut Vec::new()).map(|(p, k, _)| (p, k))
}

#[test]
fn trees_go_beneath_our_own_cgroup_when_we_may_write_there() {
    let svc = PathBuf::from("/sys/fs/cgroup/system.slice/agent.service");
    assert_eq!(place(&service(), true), Some((svc.clone(), PlaceKind::Own)));
    // Delegated (Delegate=yes): ours even where controllers are enabled for children.
    let delegated = OwnCgroup {
        delegated: true,
        subtree_control: "cpu pids".into(),
        ..service()
    };
    assert_eq!(place(&delegated, false), Some((svc, PlaceKind::Delegated)));
}

#[test]
fn the_hierarchy_root_only_when_we_run_there_or_nothing_else_works() {
    let top = PathBuf::from("/sys/fs/cgroup/undertaker");
    let in_root = OwnCgroup {
        dir: Some("/sys/fs/cgroup".into()),
        hierarchy_root: true,
        writable: true,
        ..OwnCgroup::default()
    };
    assert_eq!(
        place(&in_root, true),
        Some((top.clone(), PlaceKind::HierarchyRoot))
    );
    assert_eq!(place(&in_root, false), None);
    // Not delegated, controllers enabled below: no place of our own.
    let busy = OwnCgroup {
        subtree_control: "cpu".into(),
        ..service()
    };
    let mut why = Vec::new();
    let (parent, kind, reason) = decide(&unified(), &busy, true, &mut why).unwrap();
    assert_eq!((parent, kind), (top.clone(), PlaceKind::HierarchyRoot));
    assert!(reason.starts_with("nothing else works"), "{reason}");
    assert!(
        reason.contains("enables controllers for children (cpu)"),
        "{reason}"
    );
    assert_eq!(place(&busy, false), None);
    // Not writable (a root-owned session scope, as a user): nothing.
    let foreign = OwnCgroup {
        writable: false,
        ..service()
    };
    assert_eq!(place(&foreign, false), None);
    assert_eq!(place(&foreign, true), Some((top, PlaceKind::HierarchyRoot)));
    let threaded = OwnCgroup {
        threaded: true,
        ..service()
    };
    assert_eq!(place(&threaded, false), None);
}

#[test]
fn a_containers_cgroup_is_delegated_to_it() {
    let own = OwnCgroup {
        dir: Some("/sys/fs/cgroup".into()),
        container_root: true,
        writable: true,
        ..OwnCgroup::default()
    };
    assert_eq!(
        place(&own, true),
        Some(("/sys/fs/cgroup/undertaker".into(), PlaceKind::Delegated))
    );
}

#[test]
fn tree_cgroups_may_be_anywhere_under_the_mount_but_inside_a_tree() {
    let m = unified();
    let tree = format!("undertaker.{}.1.2.3", "ab".repeat(16));
    assert!(may_hold_trees(&m, Path::new("/sys/fs/cgroup")));
    assert!(may_hold_trees(
        &m,
        Path::new("/sys/fs/cgroup/system.slice/a.service")
    ));
    assert!(!may_hold_trees(&m, Path::new("/elsewhere/a")));
    assert!(!may_hold_trees(&m, Path::new("/sys/fs/cgroup/a/../b")));
    let inside = PathBuf::from("/sys/fs/cgroup/a").join(&tree).join("x");
    assert!(!may_hold_trees(&m, &inside));
    assert!(is_tree_cgroup_path(
        &m,
        &Path::new("/sys/fs/cgroup/a").join(&tree)
    ));
    assert!(!is_tree_cgroup_path(&m, &inside.join(&tree)));
    assert!(!is_tree_cgroup_path(
        &m,
        Path::new("/sys/fs/cgroup/user.slice")
    ));
}

proptest::proptest! {
    #[test]
    fn parsers_never_panic(s in "\\PC*") {
        let _ = parse_cgroup2_mount(&s);
        let _ = unescape(&s);
        let _ = may_hold_trees(&unified(), Path::new(&s));
    }
}

#[test]
fn mountinfo_reading_of_the_rule_prefers_the_well_known_mounts() {
    use mount::{from_mountinfo_text, MountAt};
    // A cgroup2 mount listed before /sys/fs/cgroup/unified loses to it.
    let text = format!("20 1 0:40 /x /mnt/early rw - cgroup2 cgroup2 rw\n{HYBRID}");
    let by_id = |path: &str| match path {
        "/sys/fs/cgroup" => MountAt::Id(31),
        "/sys/fs/cgroup/unified" => MountAt::Id(41),
        _ => MountAt::NoMount,
    };
    let m = from_mountinfo_text(&text, by_id).unwrap();
    assert_eq!(m.mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
    assert_eq!(m.root, "/");
    // Before Linux 5.8 the mount point decides; of stacked mounts, the last listed.
    let stacked = format!("{text}50 31 0:41 /c /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
    let m = from_mountinfo_text(&stacked, |_| MountAt::Unknown).unwrap();
    assert_eq!(
        (m.mount_point.to_str(), m.root.as_str()),
        (Some("/sys/fs/cgroup/unified"), "/c")
    );
    // Neither well-known path is a cgroup2 mount: the first one listed.
    let m = from_mountinfo_text(&text, |_| MountAt::NoMount).unwrap();
    assert_eq!(
        (m.mount_point.to_str(), m.root.as_str()),
        (Some("/mnt/early"), "/x")
    );
}

/// The kernel's answer (statx + statmount) and mountinfo's agree on this machine.
#[test]
fn statmount_and_mountinfo_choose_the_same_mount_here() {
    let slow = mount::from_mountinfo();
    match mount::without_mountinfo() {
        Some(fast) => assert_eq!(Ok(fast), slow),
        None => {
            let why = format!(
                "SKIP: statmount (Linux 6.8) unavailable or no well-known cgroup2 mount here ({slow:?})"
            );
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("{why}");
        }
    }
    assert_eq!(current_mount(), slow);
}
