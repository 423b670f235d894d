//! `supervise`'s refusals in the audit log (docs/SUPERVISE.md, "Errors"): a host that
//! never reads its replies (Hermes sends them to /dev/null) still finds every
//! `register` or `adopt` that was not accepted, and why, with `undertaker log`.
//!
//! A refusal belongs to no tree, so it has no record file to go into: it is written to
//! the database directly. The registry is opened on the first refusal only (a
//! supervisor that refuses nothing never opens it), and a failure to write is a
//! warning: bookkeeping never costs the supervisor its service. One log for every
//! platform's supervisor (Linux's and Windows'): it needs only who we are (uid, boot
//! id) and the state dir.

use crate::registry::open_registry;
use crate::registry::{now_ms, AuditEntry, Registry};
use std::path::PathBuf;

/// The actor `undertaker log` shows for a supervisor's refusals.
const ACTOR: &str = "supervise";

pub(crate) struct RefusalLog {
    state_dir: Option<PathBuf>,
    /// Our uid and boot id: the registry's owner and its rows' boot.
    uid: u32,
    boot_id: String,
    registry: Option<Registry>,
    /// Opening failed once: not tried again (a warning per line would flood).
    unusable: bool,
}

impl RefusalLog {
    pub(crate) fn new(state_dir: Option<PathBuf>, uid: u32, boot_id: String) -> Self {
        Self {
            state_dir,
            uid,
            boot_id,
            registry: None,
            unusable: false,
        }
    }

    /// Writes one refusal: the verb, the process or group it named, the protocol's
    /// reason code and the reply's message.
    pub(crate) fn refused(&mut self, op: &str, target: Option<i32>, reason: &str, message: &str) {
        let Some(registry) = self.registry() else {
            return;
        };
        let entry = AuditEntry {
            time_ms: now_ms(),
            actor: ACTOR.into(),
            event: "refusal".into(),
            pid: target,
            refusal_code: Some(reason.into()),
            message: Some(format!("{op}: {message}")),
            ..Default::default()
        };
        if let Err(e) = registry.append_audit(&entry) {
            tracing::warn!("refusal not logged: {e}");
        }
    }

    fn registry(&mut self) -> Option<&Registry> {
        if self.registry.is_none() && !self.unusable {
            match open_registry(self.state_dir.as_deref(), self.uid, &self.boot_id) {
                Ok((_, registry)) => self.registry = Some(registry),
                Err((_, e)) => {
                    tracing::warn!("refusals not logged: {e}");
                    self.unusable = true;
                }
            }
        }
        self.registry.as_ref()
    }
}
