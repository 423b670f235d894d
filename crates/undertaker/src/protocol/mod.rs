//! The `undertaker supervise` wire protocol (docs/SUPERVISE.md), as pure values.
//!
//! Nothing here touches a process: [`framing`] cuts a byte stream into bounded lines,
//! [`parse_line`] turns one line into a typed [`Request`] or a typed [`ProtocolError`],
//! and [`reply`] writes the JSON lines that go back. The supervisor decides what a
//! request does; this module only decides what it says.

pub mod framing;
mod parse;
pub mod reply;

pub use parse::parse_line;

use std::fmt;

/// Version reported by `hello`; bumped on any incompatible change of docs/SUPERVISE.md.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest line accepted, not counting its `\n`.
pub const MAX_LINE: usize = 64 * 1024;

/// The verbs of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

    fn from_name(name: &str) -> Option<Self> {
        [
            Op::Register,
            Op::Unregister,
            Op::Hello,
            Op::Spawn,
            Op::Adopt,
            Op::Kill,
            Op::Release,
            Op::List,
        ]
        .into_iter()
        .find(|op| op.as_str() == name)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a `spawn` asks for; stdio travels beside the line (file descriptors), not in it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpawnRequest {
    /// Non-empty; no element contains NUL.
    pub argv: Vec<String>,
    /// Set on top of the inherited environment (or an empty one with `env_clear`).
    pub env: Vec<(String, String)>,
    pub env_clear: bool,
    pub cwd: Option<String>,
    pub label: Option<String>,
}

/// One parsed request line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Register {
        pgid: i32,
    },
    Unregister {
        pgid: i32,
    },
    Hello,
    Spawn(SpawnRequest),
    /// `pid` may be absent only when a pidfd comes with the line.
    Adopt {
        pid: Option<i32>,
    },
    Kill {
        tree: crate::identity::TreeId,
    },
    Release {
        tree: crate::identity::TreeId,
    },
    List,
}

impl Request {
    pub fn op(&self) -> Op {
        match self {
            Request::Register { .. } => Op::Register,
            Request::Unregister { .. } => Op::Unregister,
            Request::Hello => Op::Hello,
            Request::Spawn(_) => Op::Spawn,
            Request::Adopt { .. } => Op::Adopt,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    NoSuchProcess,
    NotGroupLeader,
    NotOwnerChild,
    OtherUid,
    Protected,
    AlreadyGuarded,
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
