//! One description of the supervise protocol (issue #20 item 3): the checked-in
//! `docs/supervise.schema.json` is what the Rust types say (regenerate with
//! `UNDERTAKER_BLESS=1 cargo test -p undertaker-cli --test schema`), and a real
//! supervisor's replies and events are exactly those types: each one, parsed as its
//! verb's type and written back, is the line the supervisor wrote.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use undertaker::protocol::wire::{ErrorReply, Event, OkReply};

fn schema_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/supervise.schema.json")
}

#[test]
fn the_checked_in_schema_is_what_the_types_say() {
    let mut text = serde_json::to_string_pretty(&undertaker::protocol::schema::document()).unwrap();
    text.push('\n');
    if std::env::var_os("UNDERTAKER_BLESS").is_some() {
        std::fs::write(schema_path(), &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(schema_path()).unwrap_or_default();
    assert!(
        on_disk == text,
        "docs/supervise.schema.json differs from the protocol's types: regenerate it with \
         `UNDERTAKER_BLESS=1 cargo test -p undertaker-cli --test schema`, then \
         `python3 scripts/gen-protocol-types.py` for the clients' types"
    );
}

/// A line of the supervisor, checked against its type: parsed, written back, equal.
fn check(line: &Value) {
    if line.get("event").is_some() {
        let typed: Event = serde_json::from_value(line.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&typed).unwrap(), line);
    } else if line["ok"] == false {
        let typed: ErrorReply = serde_json::from_value(line.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&typed).unwrap(), line);
    } else {
        assert_eq!(line["ok"], true, "{line}");
        let mut fields = line.clone();
        let object = fields.as_object_mut().unwrap();
        object.remove("ok");
        object.remove("id");
        let typed: OkReply =
            serde_json::from_value(fields.clone()).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(serde_json::to_value(&typed).unwrap(), fields, "{line}");
    }
}

struct Talk {
    input: std::process::ChildStdin,
    output: BufReader<std::process::ChildStdout>,
    /// Every line the supervisor wrote, replies and events.
    lines: Vec<Value>,
}

impl Talk {
    /// Sends one line; returns its reply.
    fn ask(&mut self, line: String) -> Value {
        self.input
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        loop {
            let mut text = String::new();
            assert!(
                self.output.read_line(&mut text).unwrap() > 0,
                "output closed"
            );
            let v: Value = serde_json::from_str(&text).unwrap();
            self.lines.push(v.clone());
            if v.get("event").is_none() {
                return v;
            }
        }
    }
}

#[test]
fn every_reply_and_event_of_a_real_supervisor_has_its_type() {
    if !isolate("every_reply_and_event_of_a_real_supervisor_has_its_type") {
        return;
    }
    let scratch = Scratch::new("schema-replies");
    let mut sup = undertaker()
        .arg("--state-dir")
        .arg(scratch.path())
        .args(["supervise", "--grace", "300ms", "--label", "schema"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut talk = Talk {
        input: sup.stdin.take().unwrap(),
        output: BufReader::new(sup.stdout.take().unwrap()),
        lines: Vec::new(),
    };
    let group = Command::new("sh")
        .args(["-c", "sleep 1000 & exec sleep 1000"])
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut adoptee = Command::new("sleep").arg("1000").spawn().unwrap();
    let hello = talk.ask(json!({"op": "hello", "id": "h"}).to_string());
    assert_eq!(hello["ok"], true, "{hello}");
    let spawned =
        talk.ask(json!({"op": "spawn", "id": 1, "argv": ["sh", "-c", "exit 3"]}).to_string());
    let kept = talk.ask(
        json!({"op": "spawn", "id": 2, "argv": ["sleep", "1000"], "label": "kept"}).to_string(),
    );
    let registered = talk.ask(format!("register {}", group.id()));
    assert_eq!(registered["ok"], true, "{registered}");
    let adopted = talk.ask(json!({"op": "adopt", "id": 3, "pid": adoptee.id()}).to_string());
    assert_eq!(adopted["ok"], true, "{adopted}");
    let listed = talk.ask(json!({"op": "list", "id": [4]}).to_string());
    assert!(
        listed["trees"].as_array().map_or(0, Vec::len) >= 3,
        "{listed}"
    );
    talk.ask(json!({"op": "kill", "id": 5, "tree": kept["tree"]}).to_string());
    talk.ask(json!({"op": "release", "id": 6, "tree": adopted["tree"]}).to_string());
    talk.ask(format!("unregister {}", group.id()));
    // Errors: a refusal with its reason, a bad plain line, bad JSON, an unknown tree.
    talk.ask(json!({"op": "adopt", "id": 7, "pid": 1}).to_string());
    talk.ask("register x".into());
    talk.ask("{".into());
    talk.ask(
        json!({"op": "kill", "id": 8, "tree": "0123456789abcdef0123456789abcdef"}).to_string(),
    );
    // The first spawned root has exited by now: its events are among the lines.
    assert!(wait_until(Duration::from_secs(60), || {
        talk.ask(json!({"op": "list"}).to_string());
        ["exited", "ended"].iter().all(|event| {
            talk.lines
                .iter()
                .any(|l| l["event"] == *event && l["tree"] == spawned["tree"])
        })
    }));
    for line in &talk.lines {
        check(line);
    }
    let verbs: std::collections::BTreeSet<&str> = talk
        .lines
        .iter()
        .filter(|l| l["ok"] == true)
        .filter_map(|l| l["op"].as_str())
        .collect();
    assert_eq!(
        verbs.len(),
        undertaker::protocol::Op::ALL.len(),
        "{verbs:?}"
    );
    drop(talk);
    assert_eq!(
        wait_child(&mut sup, Duration::from_secs(60)).and_then(|s| s.code()),
        Some(0)
    );
    // Released and unregistered: ours to end.
    adoptee.kill().unwrap();
    adoptee.wait().unwrap();
    for pid in live_processes_except_self() {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    assert_nothing_left();
    let _ = group;
}
