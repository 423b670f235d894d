//! The JSON lines the supervisor writes: replies and events (docs/SUPERVISE.md), in
//! the shapes of [`super::wire`].

use super::wire::{ErrorDetail, ErrorReply, Event, OkReply};
use super::ProtocolError;
use crate::identity::TreeId;
use serde::Serialize;
use serde_json::Value;

/// A successful reply as it goes out: `ok`, its verb's `op` and fields, and the
/// request's `id`.
#[derive(Serialize)]
struct OkLine<'a> {
    ok: bool,
    #[serde(flatten)]
    reply: &'a OkReply,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a Value>,
}

/// `{"ok":true,"op":..,"id":..,<the verb's fields>}` with its `\n`.
pub fn ok(id: Option<&Value>, reply: &OkReply) -> String {
    line(&OkLine {
        ok: true,
        reply,
        id,
    })
}

/// `{"ok":false,"op":..,"id":..,"error":{"code":..,"message":..,"reason":..}}` with its `\n`.
pub fn error(err: &ProtocolError) -> String {
    line(&ErrorReply {
        ok: false,
        op: err.op,
        id: err.id.clone(),
        pgid: err.pgid,
        error: ErrorDetail {
            code: err.code,
            message: err.message.clone(),
            reason: err.reason,
        },
    })
}

/// `{"event":"exited","tree":..,"pid":..,"status":..}`: a spawned tree's root exited.
pub fn exited(tree: &TreeId, pid: i32, status: i32) -> String {
    line(&Event::Exited {
        tree: tree.as_str().to_owned(),
        pid,
        status,
    })
}

/// `{"event":"ended","tree":..,"live":..}`: a spawned tree's teardown is over.
pub fn ended(tree: &TreeId, live: usize) -> String {
    line(&Event::Ended {
        tree: tree.as_str().to_owned(),
        live: live as u64,
    })
}

fn line(value: &impl serde::Serialize) -> String {
    // Serialising these types cannot fail: no maps with non-string keys, no I/O.
    let mut text = serde_json::to_string(value).unwrap_or_default();
    text.push('\n');
    text
}
