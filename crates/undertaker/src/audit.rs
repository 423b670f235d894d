//! What teardowns write to the audit log, the same on every platform: how a target
//! was proven a member, what happened to a signal, and the log line for each event
//! (docs/REGISTRY.md).

use crate::escalation::Sig;
use crate::identity::{Identity, TreeId};
use crate::ladder::Refusal;
use crate::registry::AuditEntry;
use serde::Serialize;

/// How membership in a tree was established. Written to the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Proof {
    /// Its parent, read after the pidfd was opened, is a proven member (or us) that
    /// was still alive afterwards: a structural fact the kernel maintains.
    Descendant { parent: i32 },
    /// It carries the tree's unique marker, has our uid and started after the tree.
    Marker { tree: TreeId },
    /// It matches a recorded identity (pid, starttime, pgid, uid, boot).
    Snapshot,
    /// The kernel placed it in the tree's cgroup: cgroup membership is inherited by
    /// every fork and cannot be left without write access to another cgroup.
    Cgroup { path: std::path::PathBuf },
    /// The owner handed it over (`supervise`'s `register`/`adopt`): its parent, read
    /// after the pidfd was opened, is the owner, whose pidfd was still alive afterwards.
    OwnerChild { owner: i32 },
    /// It is in the process group of a proven leader that was still alive after the
    /// group was read, so the group number still named the leader's group.
    Group { leader: i32 },
    /// The owner passed a pidfd for it: the pidfd is its identity.
    PassedPidfd,
}

impl Proof {
    pub fn label(&self) -> &'static str {
        match self {
            Proof::Descendant { .. } => "pidfd+descendant",
            Proof::Marker { .. } => "pidfd+marker",
            Proof::Snapshot => "pidfd+snapshot",
            Proof::Cgroup { .. } => "pidfd+cgroup",
            Proof::OwnerChild { .. } => "pidfd+owner-child",
            Proof::Group { .. } => "pidfd+group",
            Proof::PassedPidfd => "pidfd passed by the owner",
        }
    }
}

/// Result of a delivery attempt that passed every check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    Delivered,
    /// The pidfd's process had already exited: nobody received the signal.
    AlreadyGone,
}

/// Something the teardown did, for the audit log.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    Signal {
        target: Identity,
        signal: Sig,
        proof: Proof,
        delivery: Delivery,
    },
    Refusal {
        pid: i32,
        refusal: Refusal,
    },
}

/// One teardown event as an audit line.
pub fn audit_entry(tree: &str, actor: &str, event: &AuditEvent) -> AuditEntry {
    match event {
        AuditEvent::Signal {
            target,
            signal,
            proof,
            delivery,
        } => AuditEntry {
            tree: Some(tree.into()),
            actor: actor.into(),
            event: "signal".into(),
            pid: Some(target.pid),
            starttime: Some(target.starttime),
            signal: Some(signal.name().into()),
            proof: Some(proof.label().into()),
            outcome: Some(
                serde_json::to_value(delivery)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
            ),
            ..Default::default()
        },
        AuditEvent::Refusal { pid, refusal } => AuditEntry {
            tree: Some(tree.into()),
            actor: actor.into(),
            event: "refusal".into(),
            pid: Some(*pid),
            refusal_code: Some(refusal.code().into()),
            message: Some(refusal.to_string()),
            ..Default::default()
        },
    }
}
