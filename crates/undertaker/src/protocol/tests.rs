use super::*;
use proptest::prelude::*;
use serde_json::{json, Value};

fn parse(line: &str) -> Result<Option<Envelope>, ProtocolError> {
    parse_line(line.as_bytes())
}

fn request(line: &str) -> Request {
    parse(line).unwrap().unwrap().request
}

fn code(line: &str) -> ErrorCode {
    parse(line).unwrap_err().code
}

const TREE: &str = "0123456789abcdef0123456789abcdef";

#[test]
fn plain_lines_are_the_hermes_protocol() {
    assert_eq!(request("register 4242"), Request::Register { pgid: 4242 });
    assert_eq!(request("unregister 7"), Request::Unregister { pgid: 7 });
    assert_eq!(
        request("  register\t12  \r"),
        Request::Register { pgid: 12 }
    );
    assert_eq!(request("register 0042"), Request::Register { pgid: 42 });
    assert_eq!(parse("register 5").unwrap().unwrap().id, None);
}

#[test]
fn blank_lines_get_no_reply() {
    assert_eq!(parse(""), Ok(None));
    assert_eq!(parse(" \t\r"), Ok(None));
}

#[test]
fn bad_plain_lines_are_typed() {
    let table = [
        ("register", ErrorCode::BadRequest),
        ("register 1 2", ErrorCode::BadRequest),
        ("register -5", ErrorCode::BadPid),
        ("register +5", ErrorCode::BadPid),
        ("register 0", ErrorCode::BadPid),
        ("register 2147483648", ErrorCode::BadPid),
        ("register 99999999999999999999999", ErrorCode::BadPid),
        ("register 12a", ErrorCode::BadPid),
        ("register 1.5", ErrorCode::BadPid),
        ("unregister x", ErrorCode::BadPid),
        ("registerx 5", ErrorCode::BadJson),
        ("REGISTER 5", ErrorCode::BadJson),
    ];
    for (line, want) in table {
        let err = parse(line).unwrap_err();
        assert_eq!(err.code, want, "{line:?}: {err:?}");
        if line.starts_with("register ") || line == "register" {
            assert_eq!(err.op, Some(Op::Register), "{line:?}");
        }
    }
}

#[test]
fn pid_one_parses_and_is_left_to_the_prover() {
    // pid 1 is a valid number; refusing it is the proof's job (reason `protected`).
    assert_eq!(request("register 1"), Request::Register { pgid: 1 });
    assert_eq!(
        request("register 2147483647"),
        Request::Register { pgid: i32::MAX }
    );
}

#[test]
fn json_requests_parse_with_their_id() {
    let e = parse(r#"{"op":"hello","id":7}"#).unwrap().unwrap();
    assert_eq!(e.request, Request::Hello);
    assert_eq!(e.id, Some(json!(7)));
    let e = parse(r#"{"op":"list","id":{"nested":[1]}}"#)
        .unwrap()
        .unwrap();
    assert_eq!(e.id, Some(json!({"nested": [1]})));
    assert_eq!(
        request(r#"{"op":"adopt","pid":55}"#),
        Request::Adopt { pid: Some(55) }
    );
    assert_eq!(request(r#"{"op":"adopt"}"#), Request::Adopt { pid: None });
    assert_eq!(
        request(r#"{"op":"register","pgid":9,"extra":true}"#),
        Request::Register { pgid: 9 }
    );
    let tree = crate::identity::TreeId::parse(TREE).unwrap();
    assert_eq!(
        request(&format!(r#"{{"op":"kill","tree":"{TREE}"}}"#)),
        Request::Kill { tree: tree.clone() }
    );
    assert_eq!(
        request(&format!(r#"{{"op":"release","tree":"{TREE}"}}"#)),
        Request::Release { tree }
    );
}

#[test]
fn adopt_with_a_snapshot_parses_and_its_bad_shapes_are_typed() {
    use crate::snapshot::{SnapshotEntry, MAX_ENTRIES};
    assert_eq!(
        request(
            r#"{"op":"adopt","pgid":40,"snapshot":[{"pid":40,"start_time":7},{"pid":41,"start_time":0}]}"#
        ),
        Request::AdoptGroup {
            pgid: 40,
            snapshot: vec![
                SnapshotEntry {
                    pid: 40,
                    start_time: 7
                },
                SnapshotEntry {
                    pid: 41,
                    start_time: 0
                },
            ],
        }
    );
    let too_many = format!(
        r#"{{"op":"adopt","pgid":40,"snapshot":[{}]}}"#,
        vec![r#"{"pid":40,"start_time":7}"#; MAX_ENTRIES + 1].join(",")
    );
    let cases: Vec<(String, ErrorCode)> = vec![
        (
            r#"{"op":"adopt","pgid":40,"snapshot":[]}"#.into(),
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"adopt","snapshot":[{"pid":40,"start_time":7}]}"#.into(),
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"adopt","pgid":0,"snapshot":[{"pid":40,"start_time":7}]}"#.into(),
            ErrorCode::BadPid,
        ),
        (
            r#"{"op":"adopt","pgid":40,"pid":40,"snapshot":[{"pid":40,"start_time":7}]}"#.into(),
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"adopt","pgid":40,"snapshot":{"pid":40}}"#.into(),
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"adopt","pgid":40,"snapshot":[7]}"#.into(),
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"adopt","pgid":40,"snapshot":[{"pid":-1,"start_time":7}]}"#.into(),
            ErrorCode::BadPid,
        ),
        (
            r#"{"op":"adopt","pgid":40,"snapshot":[{"pid":40}]}"#.into(),
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"adopt","pgid":40,"snapshot":[{"pid":40,"start_time":-7}]}"#.into(),
            ErrorCode::BadRequest,
        ),
        (too_many, ErrorCode::BadRequest),
    ];
    for (line, want) in cases {
        assert_eq!(code(&line), want, "{line}");
    }
}

#[test]
fn spawn_carries_argv_env_cwd_label() {
    let r = request(
        r#"{"op":"spawn","argv":["sh","-c","x"],"env":{"A":"1","B":""},"env_clear":true,"cwd":"/tmp","label":"l"}"#,
    );
    assert_eq!(
        r,
        Request::Spawn(SpawnRequest {
            argv: vec!["sh".into(), "-c".into(), "x".into()],
            env: vec![("A".into(), "1".into()), ("B".into(), String::new())],
            env_clear: true,
            cwd: Some("/tmp".into()),
            label: Some("l".into()),
        })
    );
    assert_eq!(
        request(r#"{"op":"spawn","argv":["true"]}"#),
        Request::Spawn(SpawnRequest {
            argv: vec!["true".into()],
            ..SpawnRequest::default()
        })
    );
}

#[test]
fn a_spawn_label_is_held_to_the_bound_of_label() {
    let line =
        |n: usize| json!({"op": "spawn", "argv": ["true"], "label": "é".repeat(n)}).to_string();
    // "é" is two bytes: the bound counts bytes, as `--label` does.
    let at_bound = crate::MAX_LABEL / 2;
    assert!(matches!(request(&line(at_bound)), Request::Spawn(_)));
    let err = parse(&line(at_bound + 1)).unwrap_err();
    assert_eq!(err.code, ErrorCode::BadRequest, "{err:?}");
    assert!(err.message.contains("label"), "{err:?}");
}

#[test]
fn bad_json_requests_are_typed_and_keep_their_id() {
    let table = [
        ("not json", ErrorCode::BadJson),
        ("{\"op\":", ErrorCode::BadJson),
        ("[1,2]", ErrorCode::NotObject),
        ("42", ErrorCode::NotObject),
        ("\"hello\"", ErrorCode::NotObject),
        ("null", ErrorCode::NotObject),
        (r#"{"id":1}"#, ErrorCode::UnknownOp),
        (r#"{"op":5,"id":1}"#, ErrorCode::UnknownOp),
        (r#"{"op":"reboot","id":1}"#, ErrorCode::UnknownOp),
        (r#"{"op":"spawn","id":1}"#, ErrorCode::BadRequest),
        (r#"{"op":"spawn","argv":[],"id":1}"#, ErrorCode::BadRequest),
        (
            r#"{"op":"spawn","argv":"sh","id":1}"#,
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"spawn","argv":["a",1],"id":1}"#,
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"spawn","argv":["a\u0000b"],"id":1}"#,
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"spawn","argv":["a"],"env":[],"id":1}"#,
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"spawn","argv":["a"],"env":{"A=B":"c"},"id":1}"#,
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"spawn","argv":["a"],"env":{"A":1},"id":1}"#,
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"spawn","argv":["a"],"env_clear":"yes","id":1}"#,
            ErrorCode::BadRequest,
        ),
        (
            r#"{"op":"spawn","argv":["a"],"cwd":3,"id":1}"#,
            ErrorCode::BadRequest,
        ),
        (r#"{"op":"adopt","pid":-1,"id":1}"#, ErrorCode::BadPid),
        (r#"{"op":"adopt","pid":0,"id":1}"#, ErrorCode::BadPid),
        (
            r#"{"op":"adopt","pid":4294967296,"id":1}"#,
            ErrorCode::BadPid,
        ),
        (r#"{"op":"adopt","pid":1e30,"id":1}"#, ErrorCode::BadPid),
        (r#"{"op":"adopt","pid":1.5,"id":1}"#, ErrorCode::BadPid),
        (r#"{"op":"adopt","pid":"12","id":1}"#, ErrorCode::BadPid),
        (r#"{"op":"register","id":1}"#, ErrorCode::BadRequest),
        (r#"{"op":"kill","id":1}"#, ErrorCode::BadRequest),
        (
            r#"{"op":"kill","tree":"abc","id":1}"#,
            ErrorCode::BadRequest,
        ),
        (r#"{"op":"release","tree":7,"id":1}"#, ErrorCode::BadRequest),
    ];
    for (line, want) in table {
        let err = parse(line).unwrap_err();
        assert_eq!(err.code, want, "{line:?}: {err:?}");
        if line.contains("\"id\":1") {
            assert_eq!(err.id, Some(json!(1)), "{line:?}");
        }
    }
}

#[test]
fn invalid_utf8_is_bad_json() {
    assert_eq!(
        parse_line(b"{\"op\":\"hel\xfflo\"}").unwrap_err().code,
        ErrorCode::BadJson
    );
    assert_eq!(
        parse_line(b"register \xff").unwrap_err().code,
        ErrorCode::BadPid
    );
}

#[test]
fn oversized_lines_are_refused_by_the_parser_too() {
    let line = format!(r#"{{"op":"hello","pad":"{}"}}"#, "x".repeat(MAX_LINE));
    assert_eq!(code(&line), ErrorCode::LineTooLong);
}

#[test]
fn replies_are_one_json_line_with_ok_op_id() {
    let spawned = wire::OkReply::Spawn(wire::SpawnReply {
        tree: TREE.into(),
        pid: 5,
    });
    let text = reply::ok(Some(&json!("a")), &spawned);
    assert!(text.ends_with('\n') && !text[..text.len() - 1].contains('\n'));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v,
        json!({"ok": true, "op": "spawn", "id": "a", "tree": TREE, "pid": 5})
    );
    // No `id` without one; an adopt by pid names no pgid.
    let adopted = wire::OkReply::Adopt(wire::AdoptReply {
        pid: Some(7),
        pgid: None,
        tree: TREE.into(),
        members: 2,
    });
    let v: Value = serde_json::from_str(&reply::ok(None, &adopted)).unwrap();
    assert_eq!(
        v,
        json!({"ok": true, "op": "adopt", "tree": TREE, "pid": 7, "members": 2})
    );
    // Read back as the schema's reply type (what the Rust client does).
    assert_eq!(serde_json::from_value::<wire::OkReply>(v).unwrap(), adopted);

    let err = parse("register 0").unwrap_err();
    let v: Value = serde_json::from_str(&reply::error(&err)).unwrap();
    assert_eq!(v["ok"], json!(false));
    assert_eq!(v["op"], json!("register"));
    assert_eq!(v["error"]["code"], json!("bad_pid"));

    let refused = ProtocolError::refused(RefusalReason::NotOwnerChild, "parent is 1").answering(
        Op::Register,
        None,
        Some(77),
    );
    let v: Value = serde_json::from_str(&reply::error(&refused)).unwrap();
    assert_eq!(
        v,
        json!({"ok": false, "op": "register", "pgid": 77,
               "error": {"code": "refused", "reason": "not_owner_child", "message": "parent is 1"}})
    );
}

proptest! {
    #[test]
    fn any_bytes_parse_or_fail_typed_and_the_reply_is_one_json_line(
        line in proptest::collection::vec(any::<u8>(), 0..300)
    ) {
        match parse_line(&line) {
            Ok(_) => {}
            Err(e) => {
                let text = reply::error(&e);
                prop_assert!(text.ends_with('\n'));
                prop_assert!(!text[..text.len() - 1].contains('\n'));
                let v: Value = serde_json::from_str(&text).unwrap();
                prop_assert_eq!(&v["ok"], &json!(false));
                prop_assert_eq!(&v["error"]["code"], &json!(e.code.as_str()));
            }
        }
    }

    #[test]
    fn every_register_number_in_range_round_trips(pgid in 1i32..=i32::MAX, pad in "[ \t]{0,3}") {
        let line = format!("{pad}register{pad} {pgid}{pad}");
        prop_assert_eq!(request(&line), Request::Register { pgid });
        let json_line = format!(r#"{{"op":"unregister","pgid":{pgid}}}"#);
        prop_assert_eq!(request(&json_line), Request::Unregister { pgid });
    }

    #[test]
    fn no_number_outside_the_range_is_accepted(n in proptest::num::i64::ANY) {
        prop_assume!(!(1..=i64::from(i32::MAX)).contains(&n));
        prop_assert_eq!(code(&format!(r#"{{"op":"adopt","pid":{n}}}"#)), ErrorCode::BadPid);
        let plain = parse(&format!("register {n}")).unwrap_err().code;
        prop_assert_eq!(plain, ErrorCode::BadPid);
    }
}

#[test]
fn wire_names_are_the_names_the_replies_use() {
    // The schema's names (serde) and the replies' (as_str) are one set of names.
    let name = |v: serde_json::Value| v.as_str().unwrap().to_owned();
    for op in Op::ALL {
        assert_eq!(name(serde_json::to_value(op).unwrap()), op.as_str());
    }
    let codes = [
        ErrorCode::LineTooLong,
        ErrorCode::BadJson,
        ErrorCode::NotObject,
        ErrorCode::UnknownOp,
        ErrorCode::BadRequest,
        ErrorCode::BadPid,
        ErrorCode::BadFds,
        ErrorCode::Refused,
        ErrorCode::NotRegistered,
        ErrorCode::UnknownTree,
        ErrorCode::NotFound,
        ErrorCode::NotExecutable,
        ErrorCode::SpawnFailed,
    ];
    for code in codes {
        assert_eq!(name(serde_json::to_value(code).unwrap()), code.as_str());
    }
    let reasons = [
        RefusalReason::NoSuchProcess,
        RefusalReason::NotGroupLeader,
        RefusalReason::NotOwnerChild,
        RefusalReason::OtherUid,
        RefusalReason::Protected,
        RefusalReason::AlreadyGuarded,
        RefusalReason::UnprovenGroup,
        RefusalReason::OtherJob,
    ];
    for reason in reasons {
        assert_eq!(name(serde_json::to_value(reason).unwrap()), reason.as_str());
    }
}

#[test]
fn requests_round_trip_through_the_parser() {
    let tree = || crate::identity::TreeId::parse(TREE).unwrap();
    let requests = [
        Request::Register { pgid: 42 },
        Request::Unregister { pgid: 42 },
        Request::Hello,
        Request::List,
        Request::Adopt { pid: Some(9) },
        Request::Adopt { pid: None },
        Request::AdoptGroup {
            pgid: 42,
            snapshot: vec![crate::snapshot::SnapshotEntry {
                pid: 43,
                start_time: 1234,
            }],
        },
        Request::Kill { tree: tree() },
        Request::Release { tree: tree() },
        Request::Spawn(SpawnRequest {
            argv: vec!["sh".into(), "-c".into(), "echo \"$A\"".into()],
            ..Default::default()
        }),
        Request::Spawn(SpawnRequest {
            argv: vec!["true".into()],
            env: vec![("A".into(), "1".into()), ("B".into(), String::new())],
            env_clear: true,
            cwd: Some("/tmp".into()),
            label: Some("mcp".into()),
        }),
    ];
    for (n, request) in requests.into_iter().enumerate() {
        let id = (n % 2 == 0).then(|| json!(n));
        let envelope = Envelope {
            id: id.clone(),
            request: request.clone(),
        };
        let line = serde_json::to_string(&envelope).unwrap();
        let back = parse(&line).unwrap().unwrap();
        assert_eq!(back, envelope, "{line}");
        assert_eq!(
            parse(&serde_json::to_string(&request).unwrap())
                .unwrap()
                .unwrap()
                .request,
            request
        );
    }
}
