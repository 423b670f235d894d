//! Who is a member of a tree, decided by identity: the lineage closure, grown to a
//! fixed point.
//!
//! A process is a member if
//! - its parent serial is a proven member's (a serial is never reused, so a stale
//!   link can only name the member itself, dead or alive), or
//! - its parent's version at fork is one a proven member held, and it started no
//!   earlier than that member (xnu ≥ 15.4; survives reparenting and exec), or
//! - it carries the tree's marker, has our uid and started no earlier than the
//!   guardian.
//!
//! Every member must also have our uid (nothing else may be signalled anyway), and a
//! protected serial (the guardian, its sentinel, the owner) is never a member. A dead
//! member's serial stays known: its orphans still name it.

use super::snapshot::Snapshot;
use super::{Facts, Member, ProcessTable, Serial, Why};
use std::collections::{HashMap, HashSet};

/// Passes a scan makes at most before it stops looking for more (a fork storm can
/// keep adding members; the teardown's freeze round rescans anyway).
const MAX_PASSES: usize = 64;

/// What a tree's membership is judged against.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The marker value its processes carry (`UNDERTAKER_TREE`).
    pub tree: String,
    pub uid: u32,
    /// The guardian's start: a marker member started no earlier.
    pub not_before: u64,
    /// Never members, whatever they carry: the guardian, the sentinel, the owner.
    pub protected: HashSet<Serial>,
}

/// The members proven so far, dead ones included.
#[derive(Debug, Clone)]
pub struct Lineage {
    scope: Scope,
    /// Every member ever proven, by serial.
    known: HashMap<Serial, Member>,
    /// Every version a member was seen with: (member serial, member start).
    versions: HashMap<u32, (Serial, u64)>,
}

impl Lineage {
    pub fn new(scope: Scope) -> Self {
        Self {
            scope,
            known: HashMap::new(),
            versions: HashMap::new(),
        }
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Adds a member the caller proved itself (CMD, a recorded serial that the table
    /// still shows with the same identity).
    pub fn seed(&mut self, facts: &Facts) -> Option<Member> {
        if self.scope.protected.contains(&facts.serial) || facts.uid != self.scope.uid {
            return None;
        }
        Some(self.admit(facts, Why::Seed))
    }

    /// Knows `serial` as a member without a live process behind it (a dead
    /// guardian's CMD from the record: its orphans still name it).
    pub fn seed_serial(&mut self, pid: i32, serial: Serial, start: u64) {
        if self.scope.protected.contains(&serial) {
            return;
        }
        self.known.entry(serial).or_insert(Member {
            pid,
            serial,
            start,
            why: Why::Seed,
        });
    }

    pub fn is_member(&self, serial: Serial) -> bool {
        self.known.contains_key(&serial)
    }

    pub fn known(&self) -> impl Iterator<Item = &Member> {
        self.known.values()
    }

    fn admit(&mut self, facts: &Facts, why: Why) -> Member {
        if let Some(v) = facts.version {
            self.versions.insert(v, (facts.serial, facts.start));
        }
        self.known
            .entry(facts.serial)
            .or_insert(Member {
                pid: facts.pid,
                serial: facts.serial,
                start: facts.start,
                why,
            })
            .clone()
    }

    /// Why `facts` is a member, if it is one by the rules above.
    fn judge(&self, facts: &Facts, marker: impl FnOnce() -> bool) -> Option<Why> {
        if self.scope.protected.contains(&facts.serial) || facts.uid != self.scope.uid {
            return None;
        }
        if let Some(parent) = facts.parent_serial.filter(|s| self.known.contains_key(s)) {
            return Some(Why::Lineage { parent });
        }
        if let Some(&(parent, start)) = facts
            .orig_parent_version
            .and_then(|v| self.versions.get(&v))
        {
            if facts.start >= start {
                return Some(Why::Version { parent });
            }
        }
        (facts.start >= self.scope.not_before && marker()).then_some(Why::Marker)
    }

    /// Looks at the snapshot until a pass finds no new member; returns the new ones.
    /// Members' children are read first (cheap, and it sees a link before an exec
    /// after reparenting can rewrite it), then every pid. Known members are re-read
    /// for their current version (what a `NOTE_EXEC` re-read does on macOS). The
    /// snapshot may be shared with other lineages scanned on the same tick.
    pub fn scan<T: ProcessTable>(&mut self, look: &mut Snapshot<'_, T>) -> Vec<Member> {
        self.grow(look, true)
    }

    /// [`Lineage::scan`] of the known members' children alone, to a fixed point: no
    /// look at every pid, so no marker member is found that no member is the parent
    /// of. What a tracking loop runs between full scans: a child's link to its
    /// parent is what Linux loses when the parent dies (docs/TIERS.md, "portable").
    pub fn scan_children<T: ProcessTable>(&mut self, look: &mut Snapshot<'_, T>) -> Vec<Member> {
        self.grow(look, false)
    }

    fn grow<T: ProcessTable>(&mut self, look: &mut Snapshot<'_, T>, everyone: bool) -> Vec<Member> {
        let mut found = Vec::new();
        for _ in 0..MAX_PASSES {
            let before = found.len();
            let live: Vec<i32> = self.live_pids();
            let mut candidates: Vec<i32> = live.iter().flat_map(|&p| look.children(p)).collect();
            if everyone {
                candidates.extend(look.pids());
            }
            let mut looked = HashSet::new();
            for pid in candidates {
                if !looked.insert(pid) {
                    continue;
                }
                let Some(facts) = look.facts(pid) else {
                    continue;
                };
                if self.known.contains_key(&facts.serial) {
                    if let Some(v) = facts.version {
                        self.versions.insert(v, (facts.serial, facts.start));
                    }
                    continue;
                }
                let tree = &self.scope.tree;
                if let Some(why) = self.judge(&facts, || look.carries_marker(&facts, tree)) {
                    found.push(self.admit(&facts, why));
                }
            }
            if found.len() == before {
                break;
            }
        }
        found
    }

    fn live_pids(&self) -> Vec<i32> {
        self.known.values().map(|m| m.pid).collect()
    }

    /// The known members the table still shows under the same serial, with their
    /// facts now, in pid order.
    pub fn live<T: ProcessTable>(&self, look: &mut Snapshot<'_, T>) -> Vec<(Member, Facts)> {
        // Two known members can share a number (one dead): each is checked by serial.
        let mut known: Vec<&Member> = self.known.values().collect();
        known.sort_by_key(|m| (m.pid, m.serial));
        known
            .into_iter()
            .filter_map(|m| {
                let facts = look.facts(m.pid)?;
                (facts.serial == m.serial).then(|| (m.clone(), facts))
            })
            .collect()
    }
}
