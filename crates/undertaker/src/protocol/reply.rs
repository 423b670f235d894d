//! The JSON lines the supervisor writes: replies and events (docs/SUPERVISE.md), in
//! the shapes of [`super::wire`].

use super::wire::{ErrorDetail, ErrorReply, Event};
use super::{Op, ProtocolError};
use crate::identity::TreeId;
use serde_json::{Map, Value};

/// The fields a successful reply adds to `ok`, `op` and `id`.
pub type Fields = Map<String, Value>;

/// `{"ok":true,"op":..,"id":..,<fields>}` with its `\n`.
pub fn ok(op: Op, id: Option<&Value>, fields: Fields) -> String {
    let mut object = fields;
    object.insert("ok".into(), Value::Bool(true));
    object.insert("op".into(), op.as_str().into());
    if let Some(id) = id {
        object.insert("id".into(), id.clone());
    }
    line(&Value::Object(object))
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

fn line(value: &impl serde::Serialize) -> String {
    // Serialising these types cannot fail: no maps with non-string keys, no I/O.
    let mut text = serde_json::to_string(value).unwrap_or_default();
    text.push('\n');
    text
}
