//! `supervise` as macOS runs it (the neutral serve loop, `crate::supervisor`, over
//! the portable core's trees), driven here over /proc and pidfds with real
//! processes: spawn, the root's `exited` and `ended`, adopt and its refusals,
//! register and unregister, list, and the teardown of every tree at the input's end
//! (docs/SUPERVISE.md; docs/PORTING.md, "macOS").

use super::*;
use crate::protocol::framing::Frame;
use crate::registry::refusal_log::RefusalLog;
use crate::registry::OwnerKind;
use crate::supervisor::portable::{Identity, PortableTrees};
use crate::supervisor::{Channel, End, Next, Supervisor};
use serde_json::Value;
use std::collections::VecDeque;

enum Step {
    Line(String),
    /// Ticks of the serve loop, 50 ms apart: time for the trees to move.
    Ticks(u32),
}

/// The host's side as a script: its lines, pauses, then the end of input.
struct Script(VecDeque<Step>);

impl Channel for Script {
    fn next(&mut self) -> Next {
        match self.0.front_mut() {
            None => Next::End,
            Some(Step::Ticks(n)) if *n > 0 => {
                *n -= 1;
                std::thread::sleep(Duration::from_millis(50));
                Next::Tick
            }
            Some(Step::Ticks(_)) => {
                self.0.pop_front();
                Next::Tick
            }
            Some(Step::Line(_)) => match self.0.pop_front() {
                Some(Step::Line(line)) => Next::Frame(Frame::Line(line.into_bytes())),
                _ => Next::Tick,
            },
        }
    }

    fn owner_gone(&mut self) -> bool {
        false
    }

    fn stop_asked(&mut self) -> bool {
        false
    }
}

/// The reply to request `id` among the supervisor's lines.
fn reply(lines: &[Value], id: u32) -> &Value {
    lines
        .iter()
        .find(|l| l["id"] == id)
        .unwrap_or_else(|| panic!("no reply to {id} in {lines:?}"))
}

#[test]
fn the_neutral_supervisor_over_the_portable_core_serves_and_tears_every_tree_down() {
    if !isolate(
        "supervise::the_neutral_supervisor_over_the_portable_core_serves_and_tears_every_tree_down",
    ) {
        return;
    }
    let procfs = Procfs::new();
    let signaller = Signaller::for_current_process(procfs.clone()).expect("signaller");
    let me = signaller.me().pid;
    let uid = signaller.me().uid;
    let scratch = std::env::temp_dir().join(format!("ut-supervise-{}", unique_tree()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    // The owner is this process: what it starts is the owner's child.
    let own = procfs.stat(me).expect("own stat");
    // To adopt: a shell (the owner's child) with a child of its own.
    let mut adoptee = spawn("sleep 331 & exec sleep 330", "");
    // To register and unregister: it must survive the supervisor.
    let mut registered = Command::new("sleep")
        .arg("343")
        .process_group(0)
        .spawn()
        .expect("sleep");
    wait_for(|| sleepers(&procfs, &["330", "331", "343"]).len() == 3);
    let (adoptee_pid, registered_pid) = (adoptee.id(), registered.id());
    let steps = vec![
        Step::Line(r#"{"op":"hello","id":1}"#.into()),
        Step::Line(r#"{"op":"spawn","id":2,"argv":["sh","-c","sleep 341 & exit 3"]}"#.into()),
        Step::Ticks(40),
        Step::Line(r#"{"op":"spawn","id":3,"argv":["sh","-c","sleep 342 & exec sleep 344"],"label":"long"}"#.into()),
        Step::Line(format!(r#"{{"op":"adopt","id":4,"pid":{adoptee_pid}}}"#)),
        Step::Line(format!(r#"{{"op":"adopt","id":5,"pid":{adoptee_pid}}}"#)),
        Step::Line(r#"{"op":"adopt","id":6,"pid":999999}"#.into()),
        Step::Line(format!(r#"{{"op":"register","id":7,"pgid":{registered_pid}}}"#)),
        Step::Ticks(4),
        Step::Line(r#"{"op":"list","id":8}"#.into()),
        Step::Line(format!(r#"{{"op":"unregister","id":9,"pgid":{registered_pid}}}"#)),
        Step::Line(r#"{"op":"adopt","id":10}"#.into()),
        Step::Line(r#"not json"#.into()),
    ];
    let trees = PortableTrees {
        backend: || Ok(LinuxOs::new(signaller.clone())),
        table: LinuxOs::new(signaller.clone()),
        who: Identity {
            me,
            start: own.starttime,
            pgid: own.pgrp,
            uid,
            owner: Some((me, own.starttime)),
            owner_record: crate::registry::OwnerRecord {
                kind: OwnerKind::Pid,
                pid: Some(me),
                starttime: Some(own.starttime),
            },
            protect: vec![],
            parent_pgid: None,
            boot_id: "supervise-test-boot".into(),
        },
        state_dir: Some(scratch.clone()),
        label: None,
        grace: Duration::from_millis(500),
    };
    let refusals = RefusalLog::new(Some(scratch.clone()), uid, "supervise-test-boot".into());
    let mut sup = Supervisor::new(trees, Vec::<u8>::new(), refusals);
    let end = sup.run(&mut Script(steps.into()));
    assert_eq!(end, End::Input);
    let text = String::from_utf8(sup.out.clone()).expect("utf-8");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let hello = reply(&lines, 1);
    assert_eq!(hello["tier"], "portable", "{hello}");
    assert_eq!(hello["owner"]["pid"], me);
    // The first spawn: its root exited 3, its background child went with the tree.
    let first = reply(&lines, 2)["tree"].as_str().expect("tree").to_owned();
    let events: Vec<&Value> = lines.iter().filter(|l| l["tree"] == first).collect();
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "exited" && e["status"] == 3),
        "{text}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "ended" && e["live"] == 0),
        "{text}"
    );
    assert_eq!(reply(&lines, 4)["ok"], true, "{text}");
    assert!(reply(&lines, 4)["members"].as_u64() >= Some(2), "{text}");
    assert_eq!(reply(&lines, 5)["error"]["reason"], "already_guarded");
    assert_eq!(reply(&lines, 6)["error"]["reason"], "no_such_process");
    assert_eq!(reply(&lines, 7)["ok"], true, "{text}");
    let listed = reply(&lines, 8)["trees"].as_array().expect("trees").clone();
    assert_eq!(listed.len(), 3, "{text}");
    assert!(listed.iter().any(|t| t["label"] == "long"), "{text}");
    assert_eq!(reply(&lines, 9)["ok"], true, "{text}");
    assert_eq!(reply(&lines, 10)["error"]["code"], "bad_request", "{text}");
    // The input's end tore the spawned and adopted trees down; the unregistered
    // process was let go.
    let second = reply(&lines, 3)["tree"].as_str().expect("tree").to_owned();
    assert!(
        lines
            .iter()
            .any(|l| l["tree"] == second && l["event"] == "ended" && l["live"] == 0),
        "{text}"
    );
    let left = sleepers(&procfs, &["330", "331", "341", "342", "343", "344"]);
    kill_own(registered_pid as i32);
    let _ = registered.wait();
    let _ = adoptee.wait();
    let _ = std::fs::remove_dir_all(&scratch);
    assert_eq!(left, vec![(registered_pid as i32, "343".to_owned())]);
}
