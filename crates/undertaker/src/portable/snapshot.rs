//! One look at the process table, shared by every lineage scanned in it.
//!
//! A process that holds many trees (a supervisor) scans them all on the same tick:
//! each pid is listed once, each process's facts and its marker read once, whatever
//! the number of trees, so a look costs O(processes), not O(trees × processes)
//! (docs/SUPERVISE.md, "The portable tier"). What a snapshot read is what the table
//! said at that read; a process born or changed since is seen by the next snapshot.
//! Nothing is signalled from it: [`ProcessTable::deliver`] proves its member again.

use super::{Facts, ProcessTable, Serial};
use std::collections::HashMap;

/// The table's answers, each asked once: read on first need, then kept.
pub struct Snapshot<'t, T> {
    table: &'t mut T,
    pids: Option<Vec<i32>>,
    facts: HashMap<i32, Option<Facts>>,
    children: HashMap<i32, Vec<i32>>,
    /// The marker each process carries, by serial (a number may be reused).
    markers: HashMap<Serial, Option<Vec<u8>>>,
}

impl<'t, T: ProcessTable> Snapshot<'t, T> {
    pub fn new(table: &'t mut T) -> Self {
        Self {
            table,
            pids: None,
            facts: HashMap::new(),
            children: HashMap::new(),
            markers: HashMap::new(),
        }
    }

    /// Every pid the table showed at this snapshot's first look at them all.
    pub fn pids(&mut self) -> Vec<i32> {
        let table = &mut self.table;
        self.pids.get_or_insert_with(|| table.pids()).clone()
    }

    /// The facts of the live process at `pid`, as first read in this snapshot.
    pub fn facts(&mut self, pid: i32) -> Option<Facts> {
        let table = &mut self.table;
        self.facts
            .entry(pid)
            .or_insert_with(|| table.facts(pid))
            .clone()
    }

    /// The pids of `pid`'s live children, as first read in this snapshot.
    pub fn children(&mut self, pid: i32) -> Vec<i32> {
        let table = &mut self.table;
        self.children
            .entry(pid)
            .or_insert_with(|| table.children(pid))
            .clone()
    }

    /// Whether the process `facts` describes carries `tree`'s marker.
    pub fn carries_marker(&mut self, facts: &Facts, tree: &str) -> bool {
        let table = &mut self.table;
        self.markers
            .entry(facts.serial)
            .or_insert_with(|| table.marker(facts))
            .as_deref()
            == Some(tree.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::portable::{Delivery, Member, Signal};

    /// A table that counts its reads: one process per pid, each marked `t<pid>`.
    #[derive(Default)]
    struct Counting {
        lists: usize,
        facts: usize,
        markers: usize,
    }

    impl ProcessTable for Counting {
        fn pids(&mut self) -> Vec<i32> {
            self.lists += 1;
            vec![1, 2, 3]
        }
        fn facts(&mut self, pid: i32) -> Option<Facts> {
            self.facts += 1;
            Some(Facts {
                pid,
                ppid: 0,
                pgid: pid,
                uid: 0,
                start: 0,
                serial: pid as u64,
                parent_serial: None,
                version: None,
                orig_parent_version: None,
                stopped: false,
            })
        }
        fn children(&mut self, _: i32) -> Vec<i32> {
            Vec::new()
        }
        fn marker(&mut self, facts: &Facts) -> Option<Vec<u8>> {
            self.markers += 1;
            Some(format!("t{}", facts.pid).into_bytes())
        }
        fn deliver(&mut self, _: &Member, _: Signal) -> Delivery {
            Delivery::AlreadyGone
        }
    }

    #[test]
    fn each_answer_is_read_once_however_many_trees_ask() {
        let mut table = Counting::default();
        let mut look = Snapshot::new(&mut table);
        for tree in ["t1", "t2", "t3", "t4"] {
            for pid in look.pids() {
                let facts = look.facts(pid).unwrap();
                assert_eq!(look.carries_marker(&facts, tree), tree == format!("t{pid}"));
            }
        }
        assert_eq!((table.lists, table.facts, table.markers), (1, 3, 3));
    }
}
