//! The `undertaker supervise` wire protocol (docs/SUPERVISE.md), as pure values.
//!
//! Nothing here touches a process: `framing` cuts a byte stream into bounded lines,
//! `parse_line` turns one line into a typed [`Request`] or a typed [`ProtocolError`],
//! and `reply` writes the JSON lines that go back; a client serializes a
//! [`Request`] (or an [`Envelope`], with its `id`) to write one. The supervisor
//! decides what a request does; this module only decides what it says.

mod encode;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod framing;
mod parse;
#[cfg_attr(not(any(target_os = "linux", windows)), allow(dead_code))]
pub(crate) mod reply;
#[cfg(feature = "schema")]
pub mod schema;
pub mod wire;

pub(crate) use parse::parse_line;

#[cfg(feature = "schema")]
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use std::fmt;

/// Version reported by `hello`; bumped on any incompatible change of docs/SUPERVISE.md.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest line accepted, not counting its `\n`.
pub const MAX_LINE: usize = 64 * 1024;

/// The verbs of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Register,
    Unregister,
    Hello,
    Spawn,
    Adopt,
    Kill,
    Release,
    List,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Register => "register",
            Op::Unregister => "unregister",
            Op::Hello => "hello",
            Op::Spawn => "spawn",
            Op::Adopt => "adopt",
            Op::Kill => "kill",
            Op::Release => "release",
            Op::List => "list",
        }
    }

    /// Every verb, in the order docs/SUPERVISE.md lists them.
    pub const ALL: [Op; 8] = [
        Op::Register,
        Op::Unregister,
        Op::Hello,
        Op::Spawn,
        Op::Adopt,
        Op::Kill,
        Op::Release,
        Op::List,
    ];

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == name)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a `spawn` asks for; stdio travels beside the line (file descriptors), not in it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
pub struct SpawnRequest {
    /// The command and its arguments; `argv[0]` is looked up in `PATH`. No NUL bytes.
    #[cfg_attr(feature = "schema", schemars(length(min = 1)))]
    pub argv: Vec<String>,
    /// Set on top of the inherited environment (or an empty one with `env_clear`).
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<std::collections::BTreeMap<String, String>>")
    )]
    pub env: Vec<(String, String)>,
    #[cfg_attr(feature = "schema", schemars(with = "Option<bool>"))]
    pub env_clear: bool,
    /// Working directory (default: the supervisor's).
    pub cwd: Option<String>,
    /// At most 256 bytes (default: `--label`).
    #[cfg_attr(feature = "schema", schemars(length(max = 256)))]
    pub label: Option<String>,
}

/// One parsed request line. Every JSON request may also carry `"id"` (any JSON value),
/// echoed in its reply; `register`/`unregister` may also be plain lines.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[cfg_attr(feature = "schema", schemars(tag = "op", rename_all = "snake_case"))]
pub enum Request {
    /// A process group whose leader is a child of the owner becomes a tree.
    Register {
        #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
        pgid: i32,
    },
    /// Stop guarding the newest registration of that group; nothing is signalled.
    Unregister {
        #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
        pgid: i32,
    },
    /// Who answers, and how.
    Hello,
    /// Start a command as a new tree.
    Spawn(SpawnRequest),
    /// A process and its descendants become a tree. `pid` may be absent only when a
    /// pidfd comes with the line.
    Adopt {
        #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
        pid: Option<i32>,
    },
    /// `adopt` of a whole group proven by the host's snapshot (pi-crew records leader
    /// pid and start time at spawn): `{"op":"adopt","pgid":N,"snapshot":[…]}`.
    #[cfg_attr(
        feature = "schema",
        schemars(rename = "adopt", title = "AdoptGroupRequest")
    )]
    AdoptGroup {
        #[cfg_attr(feature = "schema", schemars(range(min = 2)))]
        pgid: i32,
        /// Processes recorded while the group was known to be the host's; one alive
        /// with its start time and still in the group proves it.
        #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 1024)))]
        snapshot: Vec<crate::snapshot::SnapshotEntry>,
    },
    /// Tear one tree down now.
    Kill {
        #[cfg_attr(feature = "schema", schemars(with = "String"))]
        tree: crate::identity::TreeId,
    },
    /// Stop guarding one tree; nothing is signalled.
    Release {
        #[cfg_attr(feature = "schema", schemars(with = "String"))]
        tree: crate::identity::TreeId,
    },
    /// The trees held.
    List,
}

impl Request {
    pub fn op(&self) -> Op {
        match self {
            Request::Register { .. } => Op::Register,
            Request::Unregister { .. } => Op::Unregister,
            Request::Hello => Op::Hello,
            Request::Spawn(_) => Op::Spawn,
            Request::Adopt { .. } | Request::AdoptGroup { .. } => Op::Adopt,
            Request::Kill { .. } => Op::Kill,
            Request::Release { .. } => Op::Release,
            Request::List => Op::List,
        }
    }
}

/// A request with the `"id"` its reply must echo (plain lines have none).
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub id: Option<serde_json::Value>,
    pub request: Request,
}

/// The `code` of an error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    LineTooLong,
    BadJson,
    NotObject,
    UnknownOp,
    BadRequest,
    BadPid,
    BadFds,
    Refused,
    NotRegistered,
    UnknownTree,
    NotFound,
    NotExecutable,
    SpawnFailed,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::LineTooLong => "line_too_long",
            ErrorCode::BadJson => "bad_json",
            ErrorCode::NotObject => "not_object",
            ErrorCode::UnknownOp => "unknown_op",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::BadPid => "bad_pid",
            ErrorCode::BadFds => "bad_fds",
            ErrorCode::Refused => "refused",
            ErrorCode::NotRegistered => "not_registered",
            ErrorCode::UnknownTree => "unknown_tree",
            ErrorCode::NotFound => "not_found",
            ErrorCode::NotExecutable => "not_executable",
            ErrorCode::SpawnFailed => "spawn_failed",
        }
    }
}

/// Why a `register` or `adopt` could not be proven (`error.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    NoSuchProcess,
    NotGroupLeader,
    NotOwnerChild,
    OtherUid,
    Protected,
    AlreadyGuarded,
    UnprovenGroup,
    // Windows: the process is in a job that cannot take ours as a child (before
    // Windows 8), or the kernel refused nesting ours under its job.
    OtherJob,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::NoSuchProcess => "no_such_process",
            RefusalReason::NotGroupLeader => "not_group_leader",
            RefusalReason::NotOwnerChild => "not_owner_child",
            RefusalReason::OtherUid => "other_uid",
            RefusalReason::Protected => "protected",
            RefusalReason::AlreadyGuarded => "already_guarded",
            RefusalReason::UnprovenGroup => "unproven_group",
            RefusalReason::OtherJob => "other_job",
        }
    }
}

/// A request that failed, with what its error reply needs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ProtocolError {
    pub code: ErrorCode,
    pub reason: Option<RefusalReason>,
    pub message: String,
    /// The verb, when the line got far enough to name one.
    pub op: Option<Op>,
    pub id: Option<serde_json::Value>,
    /// The pgid of a plain line, echoed so a reader can match the reply.
    pub pgid: Option<i32>,
}

impl ProtocolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: None,
            message: message.into(),
            op: None,
            id: None,
            pgid: None,
        }
    }

    pub fn refused(reason: RefusalReason, message: impl Into<String>) -> Self {
        Self {
            reason: Some(reason),
            ..Self::new(ErrorCode::Refused, message)
        }
    }

    /// Attaches the verb, the id and (plain lines) the pgid of the request it answers.
    pub fn answering(mut self, op: Op, id: Option<serde_json::Value>, pgid: Option<i32>) -> Self {
        self.op = Some(op);
        self.id = id;
        self.pgid = pgid;
        self
    }
}

#[cfg(test)]
mod tests;
