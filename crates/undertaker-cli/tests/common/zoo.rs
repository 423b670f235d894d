//! The escape zoos (trees whose members try every way out of a process tree) and
//! decoys (strangers that record any signal they get).

use super::procs::{read_lines, wait_until, Scratch};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The perl escape zoo: every member appends "<kind> <pid>" to the file named by $1,
/// then waits forever. Kinds: a plain child, a SIGTERM ignorer, a double-forked
/// `setsid` daemon, a process in its own group, a stopped process, a member with a
/// scrubbed environment, and one that forks more children when it gets SIGTERM.
pub const ZOO: &str = r#"
use strict; use POSIX ();
my $out = shift @ARGV;
sub note { open(my $f, '>>', $out) or die; print $f "$_[0] $$\n"; close $f; }
sub forever { sleep 1000 while 1; }
sub spawn { my $code = shift; my $pid = fork(); die "fork: $!" unless defined $pid; if ($pid == 0) { $code->(); POSIX::_exit(0); } return $pid; }
spawn(sub { note('plain'); forever(); });
spawn(sub { $SIG{TERM} = 'IGNORE'; note('ignores_term'); forever(); });
spawn(sub { POSIX::setsid(); spawn(sub { note('setsid_daemon'); forever(); }); POSIX::_exit(0); });
spawn(sub { setpgrp(0, 0); note('own_group'); forever(); });
spawn(sub { note('stopped'); kill('STOP', $$); forever(); });
spawn(sub { %ENV = (); note('scrubbed_env'); exec('perl', '-e', 'sleep 1000 while 1'); });
spawn(sub { $SIG{TERM} = sub { for (1..20) { spawn(sub { $SIG{TERM}='IGNORE'; forever(); }); } }; note('forks_on_term'); forever(); });
forever();
"#;

pub const ZOO_SIZE: usize = 7;

/// Pids recorded by perl zoo members.
pub fn zoo_pids(path: &Path) -> Vec<(String, i32)> {
    read_lines(path)
        .iter()
        .filter_map(|l| {
            let (kind, pid) = l.split_once(' ')?;
            Some((kind.to_owned(), pid.parse().ok()?))
        })
        .collect()
}

/// A shell zoo: a plain child, a `setsid` double fork and a process in its own group,
/// then `members`; it writes `dir/ready` once all are started.
fn shell_zoo(dir: &Path, members: &str) -> String {
    format!(
        r#"
sleep 1000 &
setsid sh -c 'sleep 1000 & exit 0' &
perl -e 'setpgrp(0,0); sleep 1000' &
{members}
sleep 0.3
echo ready > {ready}
wait
"#,
        ready = dir.join("ready").display()
    )
}

/// The shell zoo plus a SIGTERM ignorer and a member that exits at once, leaving its
/// pid in `dir/exited.pid` (for a decoy to take over). Every member keeps the marker.
pub fn zoo_with_exited_member(dir: &Path) -> String {
    shell_zoo(
        dir,
        &format!(
            r#"perl -e '$SIG{{TERM}}="IGNORE"; sleep 1000' &
sh -c 'echo $$ > {}/exited.pid'"#,
            dir.display()
        ),
    )
}

/// The shell zoo plus a SIGTERM ignorer, an environment-scrubbing `env -i setsid`
/// escapee, and a bounded fork loop.
pub fn zoo_with_escapees(dir: &Path) -> String {
    shell_zoo(
        dir,
        r#"sh -c 'trap "" TERM; while :; do sleep 1; done' &
env -i /usr/bin/setsid /bin/sh -c 'trap "" TERM; sleep 1000 & while :; do sleep 1; done' &
sh -c 'trap "" TERM; i=0; while [ $i -lt 3000 ]; do sleep 5 & i=$((i+1)); sleep 0.01; done' &"#,
    )
}

/// A decoy stranger: records every catchable signal it receives to $1, one per line,
/// and writes "ready" first. It puts itself in its own process group, so a group kill
/// aimed at a recycled pgid would reach it.
pub const DECOY: &str = r#"
use strict; use POSIX ();
my $out = shift @ARGV;
setpgrp(0, 0);
sub note { open(my $f, '>>', $out) or die; print $f "$_[0]\n"; close $f; }
for my $s (qw(TERM INT HUP QUIT USR1 USR2 CONT WINCH ALRM PIPE)) { $SIG{$s} = sub { note($s); }; }
note('ready');
sleep 1000 while 1;
"#;

/// Starts a decoy (with no tree marker) logging to `scratch/name`, once it is ready.
pub fn spawn_decoy(scratch: &Scratch, name: &str) -> (Child, PathBuf) {
    let script = scratch.file("decoy.pl", DECOY);
    let log = scratch.path().join(name);
    let child = Command::new("perl")
        .arg(&script)
        .arg(&log)
        .env_remove("UNDERTAKER_TREE")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || read_lines(&log)
            .contains(&"ready".to_string())),
        "decoy did not start"
    );
    (child, log)
}

/// The decoy is alive and got no signal at all.
pub fn assert_decoy_untouched(decoy: &Child, log: &Path) {
    let pid = decoy.id();
    assert!(super::procs::alive(pid as i32), "decoy {pid} was killed");
    assert_eq!(read_lines(log), ["ready"], "decoy {pid} got signals");
}

/// Leaves a subreaper tree labelled `dead` orphaned in `state`: its guardian and
/// sentinel are killed, its two sleepers (one `setsid`) live on.
pub fn orphan_a_subreaper_tree(state: &Path, ready: &Path) {
    let mut dead = super::cli::undertaker()
        .arg("--state-dir")
        .arg(state)
        .args([
            "run",
            "--tier",
            "subreaper",
            "--label",
            "dead",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!(
            "sleep 1000 & setsid sleep 1000 & echo > {}; wait",
            ready.display()
        ))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(super::procs::wait_for_file(ready, Duration::from_secs(60)));
    super::procs::kill9_all(&mut dead);
    assert!(wait_until(Duration::from_secs(60), || {
        super::procs::reap_zombies();
        super::procs::live_processes_except_self().len() == 2
    }));
}
