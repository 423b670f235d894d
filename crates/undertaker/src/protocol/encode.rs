//! How a client writes a request: [`Request`] and [`Envelope`] serialize to the JSON
//! object the supervisor's parser ([`super::parse_line`]) reads back as the same
//! request (`requests_round_trip_through_the_parser`), in the shapes of
//! docs/supervise.schema.json. Written by hand, not derived: the parser, not serde,
//! reads requests, and the schema's request shapes come from the `schemars`
//! attributes on [`Request`].

use super::{Envelope, Request};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

impl Serialize for Request {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        entries(self, &mut map)?;
        map.end()
    }
}

impl Serialize for Envelope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        entries(&self.request, &mut map)?;
        if let Some(id) = &self.id {
            map.serialize_entry("id", id)?;
        }
        map.end()
    }
}

/// `op` and the verb's fields; optional ones only when set.
fn entries<M: SerializeMap>(request: &Request, map: &mut M) -> Result<(), M::Error> {
    map.serialize_entry("op", request.op().as_str())?;
    match request {
        Request::Register { pgid } | Request::Unregister { pgid } => {
            map.serialize_entry("pgid", pgid)
        }
        Request::Hello | Request::List => Ok(()),
        Request::Spawn(spawn) => {
            map.serialize_entry("argv", &spawn.argv)?;
            if !spawn.env.is_empty() {
                map.serialize_entry("env", &Env(&spawn.env))?;
            }
            if spawn.env_clear {
                map.serialize_entry("env_clear", &true)?;
            }
            if let Some(cwd) = &spawn.cwd {
                map.serialize_entry("cwd", cwd)?;
            }
            match &spawn.label {
                Some(label) => map.serialize_entry("label", label),
                None => Ok(()),
            }
        }
        // Without `pid`, the pidfd sent with the line names the process.
        Request::Adopt { pid } => match pid {
            Some(pid) => map.serialize_entry("pid", pid),
            None => Ok(()),
        },
        Request::AdoptGroup { pgid, snapshot } => {
            map.serialize_entry("pgid", pgid)?;
            map.serialize_entry("snapshot", snapshot)
        }
        Request::Kill { tree } | Request::Release { tree } => map.serialize_entry("tree", tree),
    }
}

/// `spawn`'s environment as the JSON object the protocol carries.
struct Env<'a>(&'a [(String, String)]);

impl Serialize for Env<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}
