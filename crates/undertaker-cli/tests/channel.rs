//! The control channel of `undertaker supervise` (docs/SUPERVISE.md): which line the
//! file descriptors of a message belong to, how many the channel holds, and what it
//! does to the standard output it shares with its host. Requests are queued on the
//! socket before the supervisor starts, so its first read sees them glued together
//! however fast the machine is. Destructive bodies run inside a private PID namespace.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use serde_json::Value;
use std::fs::File;
use std::io::{BufRead, BufReader, IoSlice, Read};
use std::mem::MaybeUninit;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Our end of a supervisor's socket channel.
struct Channel {
    socket: OwnedFd,
    replies: BufReader<File>,
}

impl Channel {
    fn new() -> (Self, OwnedFd) {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        // A reply that never comes fails the test instead of hanging it.
        rustix::net::sockopt::set_socket_timeout(
            &ours,
            rustix::net::sockopt::Timeout::Recv,
            Some(Duration::from_secs(60)),
        )
        .unwrap();
        let replies = BufReader::new(File::from(ours.try_clone().unwrap()));
        (
            Self {
                socket: ours,
                replies,
            },
            theirs,
        )
    }

    /// One `sendmsg` carrying `data` and, with its first byte, `fds`.
    fn send(&self, data: &[u8], fds: &[BorrowedFd<'_>]) {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(32))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() {
            assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
        }
        let sent = rustix::net::sendmsg(
            &self.socket,
            &[IoSlice::new(data)],
            &mut control,
            SendFlags::NOSIGNAL,
        )
        .unwrap();
        assert_eq!(sent, data.len());
    }

    /// The next reply (events are skipped).
    fn reply(&mut self) -> Value {
        loop {
            let mut line = String::new();
            let n = self.replies.read_line(&mut line).expect("a reply in time");
            assert!(n > 0, "the supervisor closed its output");
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            if v.get("event").is_none() {
                return v;
            }
        }
    }

    /// End of input: the host is gone.
    fn close(&self) {
        rustix::net::shutdown(&self.socket, rustix::net::Shutdown::Write).unwrap();
    }
}

/// `undertaker --state-dir STATE supervise --grace 500ms ARGS…` on `theirs`, started
/// through `prefix` (e.g. `prlimit …`) when given.
fn start(theirs: OwnedFd, state: &Path, args: &[&str], prefix: &[&str]) -> Child {
    let mut cmd = match prefix {
        [] => undertaker(),
        [program, rest @ ..] => {
            let mut c = Command::new(program);
            c.args(rest).arg(UNDERTAKER).env_remove("UNDERTAKER_TREE");
            with_test_state(&mut c);
            c
        }
    };
    let out = theirs.try_clone().unwrap();
    cmd.arg("--state-dir")
        .arg(state)
        .args(["supervise", "--grace", "500ms"])
        .args(args)
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::from(out))
        .spawn()
        .expect("start undertaker supervise")
}

fn pidfd_of(child: &Child) -> OwnedFd {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    // Our unreaped child: the pidfd names it.
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap()
}

/// A process group of two sleepers whose leader is our child, returned once the leader
/// has forked the second (a `register` sent before that would count one member).
fn group() -> Child {
    let leader = Command::new("sh")
        .args(["-c", "sleep 1000 & exec sleep 1000"])
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let children = format!("/proc/{0}/task/{0}/children", leader.id());
    assert!(
        wait_until(Duration::from_secs(60), || {
            std::fs::read_to_string(&children).is_ok_and(|c| !c.trim().is_empty())
        }),
        "the group's leader never forked its member"
    );
    leader
}

fn assert_exits_0(mut sup: Child) {
    let status = wait_child(&mut sup, Duration::from_secs(60)).expect("supervisor exits");
    assert_eq!(status.code(), Some(0), "{status}");
}

/// Defect 16.1: a message without descriptors followed by one with them arrives in one
/// read; the descriptors are the second line's, not the first's.
#[test]
fn descriptors_belong_to_the_line_their_message_began_with() {
    let scratch = Scratch::new("channel-fds");
    let (mut ch, theirs) = Channel::new();
    let (out_r, out_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    let null = File::open("/dev/null").unwrap();
    ch.send(b"{\"op\":\"list\",\"id\":1}\n", &[]);
    ch.send(
        b"{\"op\":\"spawn\",\"id\":2,\"argv\":[\"sh\",\"-c\",\"echo out:$$\"]}\n",
        &[null.as_fd(), out_w.as_fd(), out_w.as_fd()],
    );
    drop(out_w);
    let sup = start(theirs, scratch.path(), &["--tier", "subreaper"], &[]);
    let list = ch.reply();
    assert_eq!(
        (&list["op"], &list["ok"]),
        (&"list".into(), &true.into()),
        "{list}"
    );
    let spawn = ch.reply();
    assert_eq!(spawn["ok"], true, "{spawn}");
    let mut printed = String::new();
    BufReader::new(File::from(out_r))
        .read_line(&mut printed)
        .unwrap();
    assert_eq!(
        printed,
        format!("out:{}\n", spawn["pid"]),
        "the child's stdout"
    );
    ch.close();
    assert_exits_0(sup);
}

/// Defect 16.1, the case where it let a group outlive its host: `register` then an
/// `adopt` carrying a pidfd. Both are accepted, and both trees end with the input.
#[test]
fn a_register_then_an_adopt_by_pidfd_are_both_guarded() {
    if !isolate("a_register_then_an_adopt_by_pidfd_are_both_guarded") {
        return;
    }
    let scratch = Scratch::new("channel-register-adopt");
    let (mut ch, theirs) = Channel::new();
    let mut leader = group();
    let mut adoptee = Command::new("sleep").arg("1000").spawn().unwrap();
    let pidfd = pidfd_of(&adoptee);
    ch.send(format!("register {}\n", leader.id()).as_bytes(), &[]);
    ch.send(b"{\"op\":\"adopt\",\"id\":2}\n", &[pidfd.as_fd()]);
    let sup = start(theirs, scratch.path(), &[], &[]);
    let register = ch.reply();
    assert_eq!(register["ok"], true, "{register}");
    assert_eq!(register["members"], 2, "{register}");
    let adopt = ch.reply();
    assert_eq!(adopt["ok"], true, "{adopt}");
    assert_eq!(adopt["pid"], adoptee.id(), "{adopt}");
    ch.close();
    assert_exits_0(sup);
    for child in [&mut leader, &mut adoptee] {
        let status = wait_child(child, Duration::from_secs(60)).expect("torn down");
        assert!(!status.success(), "{status}");
    }
    assert_nothing_left();
}

/// Defect 16.1 through the Rust client: requests with and without descriptors from
/// several threads at once (as the process-wrap `Guard` adopts while the host lists)
/// each get their own reply and their own descriptors.
#[test]
fn the_rust_client_interleaves_requests_with_and_without_descriptors() {
    if !isolate("the_rust_client_interleaves_requests_with_and_without_descriptors") {
        return;
    }
    let scratch = Scratch::new("channel-client");
    let sup = std::sync::Arc::new(
        undertaker::Supervisor::builder()
            .program(UNDERTAKER)
            .state_dir(scratch.path())
            .grace(Duration::from_millis(500))
            .tier(undertaker::Tier::Subreaper)
            .start()
            .expect("start the supervisor"),
    );
    let listing = {
        let sup = std::sync::Arc::clone(&sup);
        std::thread::spawn(move || {
            for _ in 0..300 {
                sup.request(serde_json::json!({"op": "list"}), &[])
                    .expect("list");
            }
        })
    };
    let mut children = Vec::new();
    for _ in 0..40 {
        let child = Command::new("sleep").arg("1000").spawn().unwrap();
        let tree = sup.adopt_pidfd(pidfd_of(&child).as_fd()).expect("adopt");
        assert_eq!(tree.len(), 32, "{tree}");
        children.push(child);
    }
    listing.join().unwrap();
    drop(std::sync::Arc::into_inner(sup).expect("one owner left"));
    for child in &mut children {
        assert!(wait_child(child, Duration::from_secs(60)).is_some());
    }
    assert_nothing_left();
}

/// Defect 16.5: descriptors sent with an unfinished line never pile up (the channel
/// holds one message's worth, the rest is refused with `bad_fds`), and the teardown
/// at end of input still finds the descriptors it needs: 30 messages × 8 descriptors
/// without a newline under a 128-descriptor limit leave no survivor.
#[test]
fn descriptors_of_an_unfinished_line_are_capped_and_the_teardown_still_runs() {
    if !isolate("descriptors_of_an_unfinished_line_are_capped_and_the_teardown_still_runs") {
        return;
    }
    let scratch = Scratch::new("channel-cap");
    let (mut ch, theirs) = Channel::new();
    let mut leader = group();
    let null = File::open("/dev/null").unwrap();
    let eight = [null.as_fd(); 8];
    let sup = start(
        theirs,
        scratch.path(),
        &[],
        &["prlimit", "--nofile=128:128", "--"],
    );
    ch.send(format!("register {}\n", leader.id()).as_bytes(), &[]);
    let register = ch.reply();
    assert_eq!(register["members"], 2, "{register}");
    // A message with descriptors that begins inside a line: the line is refused.
    ch.send(b"{\"op\":\"list\",", &eight);
    ch.send(b"\"id\":5}", &eight);
    ch.send(b"\n", &[]);
    let refused = ch.reply();
    assert_eq!(refused["error"]["code"], "bad_fds", "{refused}");
    assert_eq!(refused["id"], 5, "{refused}");
    for _ in 0..30 {
        ch.send(b" ", &eight);
    }
    ch.close();
    assert_exits_0(sup);
    let status = wait_child(&mut leader, Duration::from_secs(60)).expect("torn down");
    assert!(!status.success(), "{status}");
    assert_nothing_left();
}

/// Defect 16.11: more descriptors than a line may carry are refused as such, not cut
/// to what fitted ("got 10"), and nothing is started.
#[test]
fn too_many_descriptors_are_refused_not_cut() {
    let scratch = Scratch::new("channel-many");
    let (mut ch, theirs) = Channel::new();
    let null = File::open("/dev/null").unwrap();
    let sup = start(theirs, scratch.path(), &["--tier", "subreaper"], &[]);
    ch.send(
        b"{\"op\":\"spawn\",\"id\":1,\"argv\":[\"sleep\",\"1000\"]}\n",
        &[null.as_fd(); 20],
    );
    let reply = ch.reply();
    assert_eq!(reply["error"]["code"], "bad_fds", "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("more than"), "{message}");
    ch.send(b"{\"op\":\"list\",\"id\":2}\n", &[]);
    let list = ch.reply();
    assert_eq!(list["trees"], serde_json::json!([]), "{list}");
    ch.close();
    assert_exits_0(sup);
}

/// Defect 16.11: a `spawn` label is held to the bound of `--label`.
#[test]
fn a_spawn_label_longer_than_the_bound_is_refused() {
    let scratch = Scratch::new("channel-label");
    let (mut ch, theirs) = Channel::new();
    let sup = start(theirs, scratch.path(), &["--tier", "subreaper"], &[]);
    let long = "x".repeat(undertaker::MAX_LABEL + 1);
    let line = serde_json::json!({"op": "spawn", "id": 1, "argv": ["true"], "label": long});
    ch.send(format!("{line}\n").as_bytes(), &[]);
    let reply = ch.reply();
    assert_eq!(reply["error"]["code"], "bad_request", "{reply}");
    ch.close();
    assert_exits_0(sup);
}

/// Defect 16.7: the supervisor leaves the flags of the stdout it shares with its host
/// alone (O_NONBLOCK there made the host's own writes fail with EAGAIN), and its
/// replies still arrive.
#[test]
fn the_shared_stdout_stays_blocking() {
    let scratch = Scratch::new("channel-stdout");
    let (in_r, in_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    let (out_r, out_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    let mut sup = undertaker()
        .arg("--state-dir")
        .arg(scratch.path())
        .args(["supervise", "--tier", "subreaper"])
        .stdin(Stdio::from(in_r))
        .stdout(Stdio::from(out_w.try_clone().unwrap()))
        .spawn()
        .unwrap();
    rustix::io::write(&in_w, b"{\"op\":\"hello\",\"id\":1}\n").unwrap();
    let mut replies = BufReader::new(File::from(out_r));
    let mut hello = String::new();
    replies.read_line(&mut hello).unwrap();
    assert!(hello.contains("\"ok\":true"), "{hello}");
    let flags = rustix::fs::fcntl_getfl(&out_w).unwrap();
    assert!(
        !flags.contains(rustix::fs::OFlags::NONBLOCK),
        "the host's stdout became non-blocking: {flags:?}"
    );
    drop(in_w);
    drop(out_w);
    let status = wait_child(&mut sup, Duration::from_secs(60)).expect("supervisor exits");
    assert_eq!(status.code(), Some(0));
    let mut rest = String::new();
    replies.read_to_string(&mut rest).unwrap();
}
