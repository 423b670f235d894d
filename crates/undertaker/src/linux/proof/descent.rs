//! Finding a tree's processes by parentage: [`ProcTable`] is one pass over /proc (the
//! parent of every process, and the tree marker of each child of ours), shared by
//! every tree looked at in the same round; [`ProcTable::walk`] adds every descendant
//! of proven processes, each proven as the child of a proven parent.
//!
//! The parent links come from one pass over /proc (many kernels lack
//! `/proc/PID/task/TID/children`); each link is then re-proven through a pidfd.
//! Exited processes (zombies) never prove: their pidfd is already readable, and they
//! have no children left to walk.

use crate::identity::{TreeId, TREE_MARKER};
use crate::linux::kernel::procfs::Procfs;
use crate::linux::proof::signal::{Members, Signaller};
use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};

/// One look at the process table.
pub struct ProcTable {
    children_of: HashMap<i32, Vec<i32>>,
    /// Our children by the tree marker they carry, read on first need.
    marked_children: OnceCell<HashMap<Vec<u8>, Vec<i32>>>,
    procfs: Procfs,
    me: i32,
}

impl ProcTable {
    /// Reads every process's parent, and the marker of each of our children.
    pub fn scan(signaller: &Signaller) -> Self {
        let procfs = signaller.procfs();
        let mut children_of: HashMap<i32, Vec<i32>> = HashMap::new();
        for pid in procfs.pids().unwrap_or_default() {
            if let Ok(stat) = procfs.stat(pid) {
                children_of.entry(stat.ppid).or_default().push(pid);
            }
        }
        Self {
            children_of,
            marked_children: OnceCell::new(),
            procfs: procfs.clone(),
            me: signaller.me().pid,
        }
    }

    /// The children of `pid` at the scan (candidates: each is proven afterwards).
    pub fn children(&self, pid: i32) -> &[i32] {
        self.children_of.get(&pid).map_or(&[], Vec::as_slice)
    }

    /// Our children at the scan that carry `tree`'s marker.
    pub fn marked(&self, tree: &TreeId) -> &[i32] {
        let marked = self.marked_children.get_or_init(|| {
            let mut marked: HashMap<Vec<u8>, Vec<i32>> = HashMap::new();
            for &pid in self.children(self.me) {
                if let Ok(Some(marker)) = self.procfs.environ_value(pid, TREE_MARKER) {
                    marked.entry(marker).or_default().push(pid);
                }
            }
            marked
        });
        marked
            .get(tree.as_str().as_bytes())
            .map_or(&[], Vec::as_slice)
    }

    /// `found` plus every descendant of its processes, each proven as the child of a
    /// proven parent.
    pub fn walk(&self, signaller: &Signaller, mut found: Members) -> Members {
        let mut seen: HashSet<i32> = found.proven.iter().map(|p| p.pid()).collect();
        let mut frontier: Vec<usize> = (0..found.proven.len()).collect();
        while let Some(i) = frontier.pop() {
            let parent_pid = found.proven[i].pid();
            for &pid in self.children(parent_pid) {
                if !seen.insert(pid) {
                    continue;
                }
                let before = found.proven.len();
                let result = signaller.prove_child(Some(&found.proven[i]), pid);
                found.add(pid, result);
                if found.proven.len() > before {
                    frontier.push(before);
                }
            }
        }
        found
    }

    /// Every descendant of this process.
    pub fn descendants(&self, signaller: &Signaller) -> Members {
        let me = signaller.me().pid;
        let children = Members::collect(self.children(me).to_vec(), |pid| {
            signaller.prove_child(None, pid)
        });
        self.walk(signaller, children)
    }
}
