//! `supervise`'s refusals in the audit log on Windows, as on Linux (docs/SUPERVISE.md,
//! "Errors"): a host that never reads its replies still finds every `register` or
//! `adopt` that was not accepted, and why, with `undertaker log`. The registry is
//! opened on the first refusal only; a failure to write is a warning.

use crate::registry::{now_ms, state_dir, AuditEntry, Registry, StateDir};
use crate::windows::commands::guardian::BOOT_ID;
use std::path::PathBuf;

/// The actor `undertaker log` shows for a supervisor's refusals (Linux's too).
const ACTOR: &str = "supervise";

pub struct RefusalLog {
    state_dir: Option<PathBuf>,
    registry: Option<Registry>,
    /// Opening failed once: not tried again (a warning per line would flood).
    unusable: bool,
}

impl RefusalLog {
    pub fn new(state_dir: Option<PathBuf>) -> Self {
        Self {
            state_dir,
            registry: None,
            unusable: false,
        }
    }

    /// Writes one refusal: the verb, the pid it named, the reason code and the
    /// reply's message.
    pub fn refused(&mut self, op: &str, target: Option<i32>, reason: &str, message: &str) {
        if self.registry.is_none() && !self.unusable {
            let opened = state_dir::resolve(self.state_dir.as_deref())
                .and_then(|(path, _)| StateDir::prepare(&path, 0))
                .and_then(|dir| Registry::open(&dir, BOOT_ID));
            match opened {
                Ok(r) => self.registry = Some(r),
                Err(e) => {
                    tracing::warn!("refusals not logged: {e}");
                    self.unusable = true;
                }
            }
        }
        let Some(registry) = &self.registry else {
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
}
