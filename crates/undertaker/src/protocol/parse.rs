//! One line → one typed request, or one typed error. Pure; never panics on any input.

use super::{Envelope, ErrorCode, Op, ProtocolError, Request, SpawnRequest, MAX_LINE};
use crate::identity::TreeId;
use serde_json::{Map, Value};

/// Parses one line (without its `\n`). `Ok(None)`: a blank line, which gets no reply.
pub fn parse_line(line: &[u8]) -> Result<Option<Envelope>, ProtocolError> {
    if line.len() > MAX_LINE {
        return Err(ProtocolError::new(
            ErrorCode::LineTooLong,
            format!("line longer than {MAX_LINE} bytes"),
        ));
    }
    let line = line.trim_ascii();
    if line.is_empty() {
        return Ok(None);
    }
    let first_word = line.split(u8::is_ascii_whitespace).next().unwrap_or(b"");
    match first_word {
        b"register" => plain(line, Op::Register).map(Some),
        b"unregister" => plain(line, Op::Unregister).map(Some),
        _ => json(line).map(Some),
    }
}

/// `register <pgid>` / `unregister <pgid>`: exactly two words, the second decimal digits.
fn plain(line: &[u8], op: Op) -> Result<Envelope, ProtocolError> {
    let words: Vec<&[u8]> = line
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty())
        .collect();
    let [_, number] = words[..] else {
        return Err(ProtocolError::new(
            ErrorCode::BadRequest,
            format!("expected `{op} <pgid>`, got {} words", words.len()),
        )
        .answering(op, None, None));
    };
    let pgid = parse_decimal(number).map_err(|e| e.answering(op, None, None))?;
    let request = match op {
        Op::Register => Request::Register { pgid },
        _ => Request::Unregister { pgid },
    };
    Ok(Envelope { id: None, request })
}

/// A pid written as digits only, in `1 ..= i32::MAX`.
fn parse_decimal(word: &[u8]) -> Result<i32, ProtocolError> {
    let shown = String::from_utf8_lossy(&word[..word.len().min(32)]).into_owned();
    if word.is_empty() || !word.iter().all(u8::is_ascii_digit) {
        return Err(ProtocolError::new(
            ErrorCode::BadPid,
            format!("not a pid: {shown:?}"),
        ));
    }
    let digits = std::str::from_utf8(word).unwrap_or("");
    match digits.parse::<i32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(ProtocolError::new(
            ErrorCode::BadPid,
            format!("pid out of range 1..={}: {shown}", i32::MAX),
        )),
    }
}

fn json(line: &[u8]) -> Result<Envelope, ProtocolError> {
    let value: Value = serde_json::from_slice(line)
        .map_err(|e| ProtocolError::new(ErrorCode::BadJson, format!("not JSON: {e}")))?;
    let Value::Object(mut object) = value else {
        return Err(ProtocolError::new(
            ErrorCode::NotObject,
            format!("expected a JSON object, got {}", kind(&value)),
        ));
    };
    let id = object.remove("id");
    let op = match object.get("op") {
        Some(Value::String(name)) => Op::from_name(name).ok_or_else(|| {
            let shown: String = name.chars().take(64).collect();
            ProtocolError::new(ErrorCode::UnknownOp, format!("unknown op {shown:?}"))
        }),
        Some(other) => Err(ProtocolError::new(
            ErrorCode::UnknownOp,
            format!("\"op\" must be a string, got {}", kind(other)),
        )),
        None => Err(ProtocolError::new(ErrorCode::UnknownOp, "missing \"op\"")),
    }
    .map_err(|mut e| {
        e.id = id.clone();
        e
    })?;
    let fields = Fields(&object);
    let request = match op {
        Op::Register => fields.pid("pgid").map(|pgid| Request::Register { pgid }),
        Op::Unregister => fields.pid("pgid").map(|pgid| Request::Unregister { pgid }),
        Op::Hello => Ok(Request::Hello),
        Op::List => Ok(Request::List),
        Op::Spawn => spawn(&fields).map(Request::Spawn),
        Op::Adopt if object.contains_key("snapshot") => adopt_group(&fields),
        Op::Adopt => fields.optional_pid("pid").map(|pid| Request::Adopt { pid }),
        Op::Kill => fields.tree().map(|tree| Request::Kill { tree }),
        Op::Release => fields.tree().map(|tree| Request::Release { tree }),
    };
    match request {
        Ok(request) => Ok(Envelope { id, request }),
        Err(e) => {
            let pgid = object.get("pgid").and_then(Value::as_i64);
            let pgid = pgid.and_then(|p| i32::try_from(p).ok()).filter(|&p| p >= 1);
            Err(e.answering(op, id, pgid))
        }
    }
}

/// `{"op":"adopt","pgid":N,"snapshot":[{"pid":P,"start_time":T}, …]}`.
fn adopt_group(fields: &Fields) -> Result<Request, ProtocolError> {
    use crate::snapshot::{SnapshotEntry, MAX_ENTRIES};
    let pgid = fields.pid("pgid")?;
    if fields.0.contains_key("pid") {
        return Err(bad("\"pid\" and \"snapshot\" exclude each other"));
    }
    let items = match fields.0.get("snapshot") {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => return Err(bad("\"snapshot\" must not be empty")),
        Some(other) => {
            return Err(bad(format!(
                "\"snapshot\" must be an array of objects, got {}",
                kind(other)
            )))
        }
        None => return Err(bad("missing \"snapshot\"")),
    };
    if items.len() > MAX_ENTRIES {
        return Err(bad(format!(
            "\"snapshot\" has more than {MAX_ENTRIES} entries"
        )));
    }
    let snapshot = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(entry) = item else {
                return Err(bad(format!("snapshot[{i}] must be an object")));
            };
            let entry = Fields(entry);
            let pid = entry.pid("pid")?;
            let start_time = entry
                .0
                .get("start_time")
                .and_then(Value::as_u64)
                .ok_or_else(|| {
                    bad(format!(
                        "snapshot[{i}].start_time must be a non-negative integer"
                    ))
                })?;
            Ok(SnapshotEntry { pid, start_time })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Request::AdoptGroup { pgid, snapshot })
}

fn spawn(fields: &Fields) -> Result<SpawnRequest, ProtocolError> {
    let argv = match fields.0.get("argv") {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, v)| fields.text(&format!("argv[{i}]"), v))
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Array(_)) => return Err(bad("\"argv\" must not be empty")),
        Some(other) => {
            return Err(bad(format!(
                "\"argv\" must be an array of strings, got {}",
                kind(other)
            )))
        }
        None => return Err(bad("missing \"argv\"")),
    };
    let env = match fields.0.get("env") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(vars)) => vars
            .iter()
            .map(|(k, v)| {
                if k.is_empty() || k.contains('=') || k.contains('\0') {
                    return Err(bad(format!("env: bad variable name {k:?}")));
                }
                Ok((k.clone(), fields.text(&format!("env.{k}"), v)?))
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(bad(format!(
                "\"env\" must be an object, got {}",
                kind(other)
            )))
        }
    };
    let env_clear = match fields.0.get("env_clear") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(bad(format!(
                "\"env_clear\" must be a boolean, got {}",
                kind(other)
            )))
        }
    };
    let label = fields.optional_text("label")?;
    if let Some(label) = label.as_ref().filter(|l| l.len() > crate::MAX_LABEL) {
        return Err(bad(format!(
            "\"label\" is {} bytes long; at most {} are allowed",
            label.len(),
            crate::MAX_LABEL
        )));
    }
    Ok(SpawnRequest {
        argv,
        env,
        env_clear,
        cwd: fields.optional_text("cwd")?,
        label,
    })
}

fn bad(message: impl Into<String>) -> ProtocolError {
    ProtocolError::new(ErrorCode::BadRequest, message)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Typed access to a request object's fields, with the field named in every error.
struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn pid(&self, name: &str) -> Result<i32, ProtocolError> {
        self.optional_pid(name)?
            .ok_or_else(|| bad(format!("missing \"{name}\"")))
    }

    fn optional_pid(&self, name: &str) -> Result<Option<i32>, ProtocolError> {
        let out_of_range = || {
            ProtocolError::new(
                ErrorCode::BadPid,
                format!("\"{name}\" must be an integer in 1..={}", i32::MAX),
            )
        };
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .filter(|&n| n >= 1)
                .map(Some)
                .ok_or_else(out_of_range),
            Some(_) => Err(out_of_range()),
        }
    }

    fn tree(&self) -> Result<TreeId, ProtocolError> {
        match self.0.get("tree") {
            Some(Value::String(s)) => TreeId::parse(s).ok_or_else(|| {
                let shown: String = s.chars().take(64).collect();
                bad(format!("\"tree\" is not a tree id: {shown:?}"))
            }),
            Some(other) => Err(bad(format!(
                "\"tree\" must be a string, got {}",
                kind(other)
            ))),
            None => Err(bad("missing \"tree\"")),
        }
    }

    fn optional_text(&self, name: &str) -> Result<Option<String>, ProtocolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => self.text(&format!("\"{name}\""), v).map(Some),
        }
    }

    /// A string usable as a C string (no NUL byte).
    fn text(&self, what: &str, value: &Value) -> Result<String, ProtocolError> {
        match value {
            Value::String(s) if !s.contains('\0') => Ok(s.clone()),
            Value::String(_) => Err(bad(format!("{what} contains a NUL byte"))),
            other => Err(bad(format!("{what} must be a string, got {}", kind(other)))),
        }
    }
}
