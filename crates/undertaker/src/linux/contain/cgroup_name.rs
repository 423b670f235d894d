//! A tree cgroup's name: `undertaker.<tree id>.<pidns inode>.<guardian pid>.<guardian
//! starttime>` (cgroupfs holds no regular files, so the name is the record). Read by
//! the tier (`cgroup`) and by the placement rules (`cgroup_place`), which import
//! nothing of each other through it.

use crate::identity::TreeId;

/// Name prefix of every cgroup undertaker creates.
pub const NAME_PREFIX: &str = "undertaker.";

/// Name of a tree's cgroup directory.
pub fn dir_name(tree: &TreeId, pidns: u64, guardian_pid: i32, guardian_starttime: u64) -> String {
    format!("{NAME_PREFIX}{tree}.{pidns}.{guardian_pid}.{guardian_starttime}")
}

/// What a tree cgroup's name says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameFacts {
    pub tree: TreeId,
    pub pidns: u64,
    pub guardian_pid: i32,
    pub guardian_starttime: u64,
}

/// Parses a name made by [`dir_name`]; anything else is not ours.
pub fn parse_dir_name(name: &str) -> Option<NameFacts> {
    let mut parts = name.strip_prefix(NAME_PREFIX)?.split('.');
    let facts = NameFacts {
        tree: TreeId::parse(parts.next()?)?,
        pidns: parts.next()?.parse().ok()?,
        guardian_pid: parts.next()?.parse().ok().filter(|&p: &i32| p > 0)?,
        guardian_starttime: parts.next()?.parse().ok()?,
    };
    parts.next().is_none().then_some(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names_round_trip_and_reject_strangers() {
        let tree = TreeId::parse(&"ab".repeat(16)).unwrap();
        let name = dir_name(&tree, 4026531836, 1234, 99);
        let facts = parse_dir_name(&name).unwrap();
        assert_eq!(facts.tree, tree);
        assert_eq!(
            (facts.pidns, facts.guardian_pid, facts.guardian_starttime),
            (4026531836, 1234, 99)
        );
        for bad in [
            "undertaker",
            "user.slice",
            "undertaker.xyz.1.2.3",
            &format!("{NAME_PREFIX}{tree}.1.0.3"),
            &format!("{NAME_PREFIX}{tree}.1.2.3.4"),
            &format!("{NAME_PREFIX}{tree}.1.-2.3"),
        ] {
            assert_eq!(parse_dir_name(bad), None, "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn name_parser_never_panics(s in "\\PC*") {
            let _ = parse_dir_name(&s);
        }
    }
}
