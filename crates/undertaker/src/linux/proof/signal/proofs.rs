//! The proofs that tie a live process to a guarded tree before any signal: our
//! child, the owner's child, a pidfd handed over, a member of a proven group, the
//! tree's marker, a recorded identity or serial, the tree's cgroup. Each opens the
//! pidfd first and reads the identity after (see `signal`).

use super::{pidfd_pid, serial_of, NotProven, ProvenProcess, Signaller};
use crate::audit::Proof;
use crate::identity::{Identity, TreeId, TREE_MARKER};
use crate::ladder::{self, Refusal};
use crate::linux::kernel::poll::readable_now;
use crate::linux::kernel::sys;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};

impl Signaller {
    /// Proves `pid` is a child of `parent` (`None` = of this process).
    pub fn prove_child(
        &self,
        parent: Option<&ProvenProcess>,
        pid: i32,
    ) -> Result<ProvenProcess, NotProven> {
        let opened = self.open_then_read(pid)?;
        let parent_pid = parent.map_or(self.me.pid, |p| p.pid());
        if opened.live.ppid != parent_pid {
            return Err(Refusal::NotOurs {
                pid,
                why: format!("parent is {}, not {parent_pid}", opened.live.ppid),
            }
            .into());
        }
        // The parent must have held its number the whole time for ppid to mean it.
        if parent.is_some_and(|p| p.has_exited()) {
            return Err(NotProven::Gone);
        }
        ladder::check_process(&self.me, &opened.live, None)?;
        Ok(opened.proven(Proof::Descendant { parent: parent_pid }))
    }

    /// Proves `pid` is a child of the owner (`owner_pid`, pinned by `owner_fd`) and ours
    /// by uid: what `supervise` demands of a process the host hands over.
    pub fn prove_owner_child(
        &self,
        pid: i32,
        owner_pid: i32,
        owner_fd: BorrowedFd<'_>,
    ) -> Result<ProvenProcess, NotProven> {
        let opened = self.open_then_read(pid)?;
        if opened.live.ppid != owner_pid {
            return Err(Refusal::NotOurs {
                pid,
                why: format!("parent is {}, not the owner {owner_pid}", opened.live.ppid),
            }
            .into());
        }
        // The owner must have held its number the whole time for ppid to mean it.
        if readable_now(owner_fd) {
            return Err(Refusal::NotOurs {
                pid,
                why: "the owner is gone".into(),
            }
            .into());
        }
        ladder::check_process(&self.me, &opened.live, None)?;
        Ok(opened.proven(Proof::OwnerChild { owner: owner_pid }))
    }

    /// Proves the process of a pidfd the owner passed (`SCM_RIGHTS`): the pidfd names
    /// one process for its whole life, so it is the identity; the process must still
    /// be alive, ours by uid, and not protected. `None` when `fd` is not a pidfd.
    pub fn prove_passed_pidfd(&self, fd: OwnedFd) -> Option<Result<ProvenProcess, NotProven>> {
        let pid = pidfd_pid(fd.as_fd())?;
        let proven = (|| {
            if pid <= 0 {
                return Err(NotProven::Gone);
            }
            ladder::check_pid(&self.me, pid)?;
            let opened = self.read_opened(pid, fd)?;
            ladder::check_process(&self.me, &opened.live, None)?;
            Ok(opened.proven(Proof::PassedPidfd))
        })();
        Some(proven)
    }

    /// Proves `pid` is in the process group `leader` leads, has our uid and did not
    /// start before the leader.
    pub fn prove_in_group(
        &self,
        pid: i32,
        leader: &ProvenProcess,
    ) -> Result<ProvenProcess, NotProven> {
        let opened = self.open_then_read(pid)?;
        let pgid = leader.pid();
        if opened.live.pgid != pgid || leader.identity.pgid != pgid {
            return Err(Refusal::NotGroupMember {
                pid,
                expected: pgid,
                found: opened.live.pgid,
            }
            .into());
        }
        if opened.live.starttime < leader.identity.starttime {
            return Err(Refusal::NotOurs {
                pid,
                why: "started before the group's leader".into(),
            }
            .into());
        }
        ladder::check_process(&self.me, &opened.live, None)?;
        // A live leader pins the group number: it named the leader's group.
        if leader.has_exited() {
            return Err(NotProven::Gone);
        }
        Ok(opened.proven(Proof::Group { leader: pgid }))
    }

    /// Proves `pid` carries `tree`'s marker, has our uid and did not start before
    /// `not_before` (the tree's own starttime).
    pub fn prove_by_marker(
        &self,
        pid: i32,
        tree: &TreeId,
        not_before: u64,
    ) -> Result<ProvenProcess, NotProven> {
        let opened = self.open_then_read(pid)?;
        ladder::check_process(&self.me, &opened.live, None)?;
        if opened.live.starttime < not_before {
            return Err(Refusal::NotOurs {
                pid,
                why: "started before the tree".into(),
            }
            .into());
        }
        let marker = self
            .procfs
            .environ_value(pid, TREE_MARKER)
            .map_err(|_| NotProven::Gone)?;
        if marker.as_deref() != Some(tree.as_str().as_bytes()) {
            return Err(Refusal::NotOurs {
                pid,
                why: "no tree marker".into(),
            }
            .into());
        }
        if readable_now(opened.fd.as_fd()) {
            return Err(NotProven::Gone);
        }
        Ok(opened.proven(Proof::Marker { tree: tree.clone() }))
    }

    /// Proves the live process at `expected.pid` is the one recorded in `expected`.
    pub fn prove_by_snapshot(&self, expected: &Identity) -> Result<ProvenProcess, NotProven> {
        if expected.boot_id != self.me.boot_id {
            return Err(Refusal::OtherBoot {
                recorded: expected.boot_id.clone(),
                current: self.me.boot_id.clone(),
            }
            .into());
        }
        let opened = self.open_then_read(expected.pid)?;
        ladder::check_process(&self.me, &opened.live, Some(expected))?;
        if let (Some(want), Some(have)) = (expected.pidfs_inode, opened.identity.pidfs_inode) {
            if want != have {
                return Err(Refusal::NotOurs {
                    pid: expected.pid,
                    why: "pidfs inode differs".into(),
                }
                .into());
            }
        }
        Ok(opened.proven(Proof::Snapshot))
    }

    /// What `pid` is now, read through a pidfd (so the facts describe one process),
    /// proving nothing: (identity, parent pid, state). The portable tier judges
    /// membership from these and proves again at delivery ([`Self::prove_by_serial`]).
    pub fn identify(&self, pid: i32) -> Result<(Identity, i32, char), NotProven> {
        let opened = self.open_then_read(pid)?;
        Ok((opened.identity, opened.live.ppid, opened.state))
    }

    /// Proves the live process at `pid` is the process a portable lineage proved by
    /// `serial` (see [`serial_of`]), ours by uid. Unlike [`Self::prove_by_snapshot`]
    /// its group is not compared: a member may have left it (`setsid`) since.
    pub fn prove_by_serial(&self, pid: i32, serial: u64) -> Result<ProvenProcess, NotProven> {
        let opened = self.open_then_read(pid)?;
        ladder::check_process(&self.me, &opened.live, None)?;
        if serial_of(&opened.identity) != serial {
            return Err(NotProven::Gone);
        }
        Ok(opened.proven(Proof::Snapshot))
    }

    /// Proves `pid` is in the cgroup `path` (cgroup id `id`, `rel` its path as
    /// /proc/PID/cgroup prints it). Membership is read after the pidfd was opened:
    /// from PIDFD_GET_INFO's cgroup id where the kernel has it, else from /proc.
    pub fn prove_in_cgroup(
        &self,
        pid: i32,
        path: &std::path::Path,
        id: u64,
        rel: &str,
    ) -> Result<ProvenProcess, NotProven> {
        let opened = self.open_then_read(pid)?;
        // The kernel's cgroup id was read with the rest, before the liveness check;
        // only the /proc fallback is read now and needs a check of its own below.
        let (member, checked) = match opened.info {
            Some(sys::PidfdInfo {
                cgroup_id: Some(found),
                ..
            }) => (found == id, true),
            _ => (
                self.procfs
                    .cgroup_v2_path(pid)
                    .map_err(|_| NotProven::Gone)?
                    .is_some_and(|found| found == rel),
                false,
            ),
        };
        if !member {
            return Err(Refusal::NotOurs {
                pid,
                why: "not in the tree's cgroup".into(),
            }
            .into());
        }
        ladder::check_process(&self.me, &opened.live, None)?;
        if !checked && readable_now(opened.fd.as_fd()) {
            return Err(NotProven::Gone);
        }
        Ok(opened.proven(Proof::Cgroup {
            path: path.to_path_buf(),
        }))
    }
}
