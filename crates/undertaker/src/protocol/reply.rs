//! The JSON lines the supervisor writes: replies and events (docs/SUPERVISE.md).

use super::{Op, ProtocolError};
use crate::identity::TreeId;
use serde_json::{json, Map, Value};

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
    line(Value::Object(object))
}

/// `{"ok":false,"op":..,"id":..,"error":{"code":..,"message":..,"reason":..}}` with its `\n`.
pub fn error(err: &ProtocolError) -> String {
    let mut detail = Map::new();
    detail.insert("code".into(), err.code.as_str().into());
    detail.insert("message".into(), err.message.clone().into());
    if let Some(reason) = err.reason {
        detail.insert("reason".into(), reason.as_str().into());
    }
    let mut object = Map::new();
    object.insert("ok".into(), Value::Bool(false));
    if let Some(op) = err.op {
        object.insert("op".into(), op.as_str().into());
    }
    if let Some(id) = &err.id {
        object.insert("id".into(), id.clone());
    }
    if let Some(pgid) = err.pgid {
        object.insert("pgid".into(), pgid.into());
    }
    object.insert("error".into(), Value::Object(detail));
    line(Value::Object(object))
}

/// `{"event":"exited","tree":..,"pid":..,"status":..}`: a spawned tree's root exited.
pub fn exited(tree: &TreeId, pid: i32, status: i32) -> String {
    line(json!({"event": "exited", "tree": tree.as_str(), "pid": pid, "status": status}))
}

fn line(value: Value) -> String {
    let mut text = value.to_string();
    text.push('\n');
    text
}
