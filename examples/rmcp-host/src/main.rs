//! An rmcp host whose MCP server runs under undertaker: one `.wrap(Guard::new(..))` on
//! the process-wrap command rmcp spawns. When this host dies, however it dies (kill -9
//! included), the server and everything it started go with it.
//!
//! Usage: rmcp-host SERVER_JS [--hold] [--unguarded] [--leave-child]
//! Prints one JSON line when the client is connected; with `--hold` it then waits to be
//! killed (the CI check `scripts/check-rmcp-example.py` kills it with -9).
//! `--leave-child` starts the server through `sh -c 'sleep 1000 & exec node ...'`: a
//! server that leaves a process behind, which outlives the host unless guarded.

use process_wrap::tokio::CommandWrap;
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use std::sync::Arc;
use undertaker::wrap::Guard;
use undertaker::Supervisor;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let server = args
        .first()
        .ok_or("usage: rmcp-host SERVER_JS [--hold] [--unguarded] [--leave-child]")?;
    let hold = args.iter().any(|a| a == "--hold");
    let unguarded = args.iter().any(|a| a == "--unguarded");
    let leave_child = args.iter().any(|a| a == "--leave-child");

    let supervisor = Arc::new(Supervisor::start()?);
    let guard = Guard::new(Arc::clone(&supervisor));
    let mut command = if leave_child {
        CommandWrap::with_new("sh", |c| {
            c.args(["-c", "sleep 1000 & exec node \"$0\" stdio", server]);
        })
    } else {
        CommandWrap::with_new("node", |c| {
            c.arg(server).arg("stdio");
        })
    };
    if !unguarded {
        command.wrap(guard.clone());
    }
    let transport = TokioChildProcess::new(command)?;
    let server_pid = transport.id();
    let client = ().serve(transport).await?;
    let tools = client.list_tools(Default::default()).await?;
    let info = client
        .peer_info()
        .and_then(|i| i.server_info.as_ref().map(|s| s.name.clone()));
    println!(
        "{}",
        serde_json::json!({
            "server": info,
            "tools": tools.tools.len(),
            "server_pid": server_pid,
            "supervisor_pid": supervisor.pid(),
            "tier": supervisor.tier(),
            "tree": guard.tree(),
        })
    );
    if hold {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    }
    client.cancel().await?;
    Ok(())
}
