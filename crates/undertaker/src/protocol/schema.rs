//! The JSON Schema of the protocol (draft-07), generated from [`super::Request`] and
//! [`super::wire`]: `docs/supervise.schema.json` is this document, and
//! `tests/schema.rs` fails when the file and the types differ.
//!
//! Every message is one definition named for what it is: `<Verb>Request`,
//! `<Verb>Reply` (the reply's `ok: true`, `op` and `id` with its verb's fields),
//! `ErrorReply`, `ExitedEvent`; `Request`, `Reply` and `Event` are their unions.

use super::wire::{ErrorReply, Event, OkReply};
use super::Request;
use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

/// The whole document.
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft07().into_generator();
    let requests = generator.root_schema_for::<Request>().to_value();
    let replies = generator.root_schema_for::<OkReply>().to_value();
    let error = generator.root_schema_for::<ErrorReply>().to_value();
    let events = generator.root_schema_for::<Event>().to_value();
    let mut defs = Map::new();
    for root in [&requests, &replies, &error, &events] {
        if let Some(Value::Object(found)) = root.get("definitions") {
            defs.extend(found.clone());
        }
    }
    let any_id = json!({"description": "Any JSON value; a reply echoes its request's, unchanged."});
    let mut names = |root: &Value, tag: &str, suffix: &str, extra: &Map<String, Value>| {
        let mut refs = Vec::new();
        for variant in root["oneOf"].as_array().into_iter().flatten() {
            let verb = variant["properties"][tag]["const"].as_str().unwrap_or("?");
            // A verb with two request shapes names the second (`title`).
            let name = match variant.get("title").and_then(Value::as_str) {
                Some(title) => title.to_owned(),
                None => format!("{}{suffix}", pascal(verb)),
            };
            let message = message(variant, &mut defs, extra);
            defs.insert(name.clone(), message);
            refs.push(json!({"$ref": format!("#/definitions/{name}")}));
        }
        refs
    };
    let request_extra = Map::from_iter([("id".to_owned(), any_id.clone())]);
    let reply_extra = Map::from_iter([
        ("ok".to_owned(), json!({"type": "boolean", "const": true})),
        ("id".to_owned(), any_id),
    ]);
    let request_refs = names(&requests, "op", "Request", &request_extra);
    let reply_refs = names(&replies, "op", "Reply", &reply_extra);
    let event_refs = names(&events, "event", "Event", &Map::new());
    let mut error = error;
    if let Some(object) = error.as_object_mut() {
        object.remove("$schema");
        object.remove("definitions");
        object.remove("title");
    }
    error["properties"]["ok"] = json!({"type": "boolean", "const": false});
    defs.insert("ErrorReply".into(), error);
    // anyOf: the two shapes of `adopt` overlap (requests may carry fields they do not use).
    defs.insert("Request".into(), json!({"anyOf": request_refs}));
    let mut replies_union = reply_refs;
    replies_union.push(json!({"$ref": "#/definitions/ErrorReply"}));
    defs.insert("Reply".into(), json!({"oneOf": replies_union}));
    defs.insert("Event".into(), json!({"oneOf": event_refs}));
    json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "undertaker supervise protocol",
        "description": format!(
            "Protocol version {}: requests on the supervisor's standard input, one per line; \
             replies and events on its standard output (docs/SUPERVISE.md). Generated from the \
             Rust types (crates/undertaker/src/protocol); do not edit.",
            super::PROTOCOL_VERSION
        ),
        "anyOf": [
            {"$ref": "#/definitions/Request"},
            {"$ref": "#/definitions/Reply"},
            {"$ref": "#/definitions/Event"},
        ],
        "definitions": defs,
    })
}

/// One variant of a tagged union as a whole message: its own properties, those of the
/// type it wraps (`allOf: [{$ref}]`, inlined), and `extra`.
fn message(variant: &Value, defs: &mut Map<String, Value>, extra: &Map<String, Value>) -> Value {
    let mut properties = variant["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut required: Vec<Value> = variant["required"].as_array().cloned().unwrap_or_default();
    let mut closed = variant.get("additionalProperties") == Some(&Value::Bool(false));
    let mut description = variant.get("description").cloned();
    for part in variant["allOf"].as_array().into_iter().flatten() {
        let Some(name) = part["$ref"].as_str().and_then(|r| r.rsplit('/').next()) else {
            continue;
        };
        // The wrapped type becomes this message (its name is the message's).
        let Some(inner) = defs.remove(name) else {
            continue;
        };
        properties.extend(inner["properties"].as_object().cloned().unwrap_or_default());
        required.extend(inner["required"].as_array().cloned().unwrap_or_default());
        closed |= inner.get("additionalProperties") == Some(&Value::Bool(false));
        description = description.or_else(|| inner.get("description").cloned());
    }
    for (key, schema) in extra {
        properties.insert(key.clone(), schema.clone());
        if key != "id" {
            required.push(Value::String(key.clone()));
        }
    }
    let mut out = Map::new();
    if let Some(d) = description {
        out.insert("description".into(), d);
    }
    out.insert("type".into(), "object".into());
    out.insert("properties".into(), Value::Object(properties));
    out.insert("required".into(), Value::Array(required));
    if closed {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    Value::Object(out)
}

fn pascal(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}
