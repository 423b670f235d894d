//! The pidns tier's teardown: through the namespace init, which the kernel ends
//! the namespace with.

use super::{Cause, Host, Tree};
use crate::linux::proof::signal::{Delivery, Signaller};
use crate::linux::proof::teardown::KILL_CAP;
use rustix::event::PollFlags;
use rustix::process::Signal;
use std::time::{Duration, Instant};

impl Tree {
    /// The pidns tier: SIGTERM to the init, which TERMs its whole namespace and exits
    /// after the grace period; if it has not exited by then (plus a margin), SIGKILL
    /// it, which makes the kernel kill the namespace.
    ///
    /// Every wait here is bounded. The init exits within the grace period (at once
    /// when it finds nothing left); the margin covers its exit. An init that cannot
    /// finish exiting is waiting in the kernel for a member stuck in uninterruptible
    /// sleep: it is reported stuck, not awaited.
    pub(super) fn tear_down_namespace(
        &mut self,
        cause: Cause,
        signaller: &Signaller,
        host: &mut dyn Host,
    ) {
        let Some(init) = &self.live.root else { return };
        if self.live.root_status.is_some() {
            // The usual end: CMD exited, and the init has already done the teardown.
            self.recorder.audit_line(crate::registry::AuditEntry {
                actor: "guardian".into(),
                event: "note".into(),
                pid: Some(init.pid()),
                message: Some("namespace torn down by its init when CMD exited: SIGTERM to every process in it (kill -1), up to the grace period; the kernel killed what was left when the init exited".into()),
                ..Default::default()
            });
            self.recorder.flush_audit();
            return;
        }
        let started = Instant::now();
        let init_pid = init.pid();
        if cause != Cause::CommandExited {
            let delivery = init.signal_own_child(signaller, Signal::TERM);
            self.recorder
                .audit_line(init_signal_line(init_pid, "SIGTERM", delivery));
            self.recorder.flush_audit();
        }
        let margin = Duration::from_millis(500);
        let end = Instant::now() + self.grace + margin;
        let mut exited = init.exited();
        while !exited && Instant::now() < end && !host.out_of_patience() {
            host.wait(end, &[(init.fd(), PollFlags::IN)]);
            exited = init.exited();
        }
        let killed = !exited;
        if !exited {
            tracing::info!(
                "tree {}: grace period of {} ms over: SIGKILL to the namespace init {init_pid}, which ends the namespace",
                self.id,
                self.grace.as_millis()
            );
            let delivery = init.signal_own_child(signaller, Signal::KILL);
            self.recorder
                .audit_line(init_signal_line(init_pid, "SIGKILL", delivery));
            exited = init.poll_until(Instant::now() + KILL_CAP);
        }
        // What happened inside the namespace, which the init did and cannot record.
        self.recorder.audit_line(crate::registry::AuditEntry {
            actor: "guardian".into(),
            event: "note".into(),
            pid: Some(init_pid),
            message: Some(match (exited, killed) {
                (true, false) => "namespace torn down: its init sent SIGTERM to every process in it (kill -1), waited up to the grace period and exited; the kernel killed what was left".into(),
                (true, true) => "namespace torn down: its init did not exit within the grace period and was SIGKILLed; the kernel killed every process in the namespace".into(),
                (false, _) => "namespace init still alive after SIGKILL: a member is stuck in the kernel".into(),
            }),
            ..Default::default()
        });
        self.recorder.flush_audit();
        tracing::debug!(
            "tree {} done: namespace {}, {} ms",
            self.id,
            if exited { "gone" } else { "stuck" },
            started.elapsed().as_millis()
        );
        if !exited {
            tracing::warn!(
                "tree {}: namespace init {} still alive {} s after SIGKILL: a member is stuck in the kernel",
                self.id,
                init.pid(),
                KILL_CAP.as_secs()
            );
            self.live.init_stuck = true;
        }
    }
}

/// The audit line of a signal to a tree's namespace init: our own unreaped child, held
/// by its pidfd since its fork, so the number names it and nobody else.
fn init_signal_line(pid: i32, signal: &str, delivery: Delivery) -> crate::registry::AuditEntry {
    crate::registry::AuditEntry {
        actor: "guardian".into(),
        event: "signal".into(),
        pid: Some(pid),
        signal: Some(signal.into()),
        proof: Some("pidfd+child".into()),
        outcome: Some(
            match delivery {
                Delivery::Delivered => "delivered",
                Delivery::AlreadyGone => "already_gone",
            }
            .into(),
        ),
        message: Some(
            "the namespace init, which passes SIGTERM on to every process in the namespace".into(),
        ),
        ..Default::default()
    }
}
