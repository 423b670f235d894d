//! What each reply and event carries, as types (docs/SUPERVISE.md). A reply is
//! `{"ok":true,"op":<verb>,"id":<the request's>}` plus the fields of its verb's type
//! here; an error is [`ErrorReply`]. Requests are [`super::Request`] itself.
//!
//! These types, with [`super::Request`], are the one description of the protocol:
//! `docs/supervise.schema.json` is generated from them (feature `schema`, checked by
//! `tests/schema.rs`), and the Python and TypeScript clients' types from that file
//! (`scripts/gen-protocol-types.py`).

use super::{ErrorCode, Op, RefusalReason};
#[cfg(feature = "schema")]
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The fields of a successful reply, by verb (`op` is the tag).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OkReply {
    Register(RegisterReply),
    Unregister(UnregisterReply),
    Hello(HelloReply),
    Spawn(SpawnReply),
    Adopt(AdoptReply),
    Kill(KillReply),
    Release(ReleaseReply),
    List(ListReply),
}

impl OkReply {
    pub fn op(&self) -> Op {
        match self {
            OkReply::Register(_) => Op::Register,
            OkReply::Unregister(_) => Op::Unregister,
            OkReply::Hello(_) => Op::Hello,
            OkReply::Spawn(_) => Op::Spawn,
            OkReply::Adopt(_) => Op::Adopt,
            OkReply::Kill(_) => Op::Kill,
            OkReply::Release(_) => Op::Release,
            OkReply::List(_) => Op::List,
        }
    }
}

/// `hello`: who answers, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct HelloReply {
    /// The protocol version (bumped on any incompatible change).
    pub protocol: u32,
    /// undertaker's version.
    pub version: String,
    /// The containment tier of every tree of this supervisor.
    pub tier: HeldTier,
    /// The supervisor's pid.
    pub pid: i32,
    pub owner: OwnerPid,
    /// Whether the channel is a Unix socket (file descriptors can be passed).
    pub socket: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum HeldTier {
    Cgroup,
    Subreaper,
    // No cgroup, no subreaper, no PDEATHSIG: the portable core tracks the members
    // (docs/TIERS.md, "portable").
    Portable,
    // Windows: one kill-on-close Job Object per tree (a plain comment: a doc comment
    // would make this variant its own schema branch).
    Job,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct OwnerPid {
    /// The owner's pid; `null` with `--owner-fd`.
    #[cfg_attr(feature = "schema", schemars(required, extend("type" = ["integer", "null"])))]
    pub pid: Option<i32>,
}

/// `register`: the group is a tree now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct RegisterReply {
    pub pgid: i32,
    pub tree: String,
    /// Processes taken at registration.
    pub members: u64,
}

/// `unregister`: the group's newest registration is released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct UnregisterReply {
    pub pgid: i32,
    pub tree: String,
}

/// `adopt`: the process and its descendants (or the group a snapshot proved) are a
/// tree now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct AdoptReply {
    /// The adopted process (adopt by `pid` or pidfd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// The adopted group (adopt by `snapshot`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgid: Option<i32>,
    pub tree: String,
    /// Processes taken at adoption.
    pub members: u64,
}

/// `spawn`: the command runs as a new tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct SpawnReply {
    pub tree: String,
    /// The root's pid.
    pub pid: i32,
}

/// `kill`: the tree was torn down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct KillReply {
    pub tree: String,
    /// Its processes still alive afterwards (0 unless some could not be killed).
    pub live: u64,
}

/// `release`: the tree is no longer guarded; nothing was signalled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct ReleaseReply {
    pub tree: String,
}

/// `list`: the trees held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct ListReply {
    pub trees: Vec<ListedTree>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct ListedTree {
    pub tree: String,
    pub kind: TreeKind,
    /// The root (spawn, adopt) or the registered group's leader; `null` when none is
    /// known (a tree taken over from a dead supervisor by its cgroup alone).
    #[cfg_attr(feature = "schema", schemars(required, extend("type" = ["integer", "null"])))]
    pub pid: Option<i32>,
    /// `null` once the root is gone.
    #[cfg_attr(feature = "schema", schemars(required, extend("type" = ["integer", "null"])))]
    pub pgid: Option<i32>,
    #[cfg_attr(feature = "schema", schemars(required, extend("type" = ["string", "null"])))]
    pub label: Option<String>,
    /// Its processes alive now.
    pub live: u64,
}

/// How a tree came to be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TreeKind {
    Spawn,
    Register,
    Adopt,
}

/// A request that failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct ErrorReply {
    /// Always `false`.
    pub ok: bool,
    /// The verb, when the line got far enough to name one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<Op>,
    /// The request's `id`, when it got far enough to carry one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<serde_json::Value>,
    /// The pgid of a plain line, so a reader can match the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgid: Option<i32>,
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(deny_unknown_fields))]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// One human line.
    pub message: String,
    /// For `refused`: why the process or group could not be proven.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<RefusalReason>,
}

/// What the supervisor says unasked, between replies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A spawned tree's root exited: sent as soon as the supervisor collects its
    /// status, before the rest of its tree is torn down (`ended` follows).
    Exited {
        tree: String,
        pid: i32,
        /// As a shell reports it: the exit code, or 128 + the signal.
        status: i32,
    },
    /// A spawned tree is gone: its teardown is over (after its `exited`, whatever
    /// ended it: its root's exit, `kill`, or the supervisor's end) and it has left
    /// `list`.
    Ended {
        tree: String,
        /// Its processes still alive (0 unless some could not be killed).
        live: u64,
    },
}
