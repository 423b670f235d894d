//! A real MCP stdio server (the reference `server-everything`) works through
//! `undertaker run` unchanged: JSON-RPC over stdin/stdout, exit on stdin EOF.
//! `.ci/run` installs the server with npm into target/mcp-server; elsewhere the test
//! is skipped when it is not installed (`UNDERTAKER_MCP_SERVER` may point at its
//! dist/index.js).
#![cfg(target_os = "linux")]

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn server_script() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("UNDERTAKER_MCP_SERVER") {
        return Some(PathBuf::from(p));
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = root.join(
        "target/mcp-server/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    p.exists().then_some(p)
}

/// Reads JSON-RPC lines until the response with `id` arrives (notifications may come first).
fn response(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    id: i64,
) -> serde_json::Value {
    for line in lines {
        let line = line.expect("reading the server's stdout");
        let msg: serde_json::Value = serde_json::from_str(&line).expect("a JSON-RPC line");
        if msg["id"] == id {
            return msg;
        }
    }
    panic!("stdout closed before the response to {id}");
}

#[test]
fn mcp_stdio_server_works_through_undertaker() {
    let Some(script) = server_script() else {
        return skip("MCP server-everything not installed (see .ci/run)");
    };
    if Command::new("node").arg("--version").output().is_err() {
        return skip("node not installed");
    }
    let mut child = undertaker()
        .args(["run", "--grace", "1s", "--", "node"])
        .arg(&script)
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"undertaker-test","version":"1"}}}}}}"#
    )
    .unwrap();
    let init = response(&mut lines, 1);
    assert!(init["result"]["serverInfo"]["name"].is_string(), "{init}");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list"}}"#).unwrap();
    let tools = response(&mut lines, 2);
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("tools array")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"echo"), "{names:?}");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"through undertaker"}}}}}}"#
    )
    .unwrap();
    let echoed = response(&mut lines, 3);
    assert!(
        echoed.to_string().contains("through undertaker"),
        "{echoed}"
    );
    // Closing stdin is how a host ends a stdio server; the guardian then exits too.
    drop(stdin);
    let status = wait_child(&mut child, Duration::from_secs(60));
    assert!(status.is_some(), "server did not exit on stdin EOF");
    assert_eq!(status.unwrap().code(), Some(0));
}
