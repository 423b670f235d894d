//! `undertaker doctor` on macOS: does each kernel interface the backend needs answer
//! here, and which signal binding is in use (the token, or the re-check with its
//! residual: `proof/signal.rs`).

use crate::macos::commands::reconcile;
use crate::macos::contain::portable::MacOs;
use crate::macos::kernel::{parse, sys};
use crate::macos::proof::signal::{self, Binding};
use crate::portable::{Member, Waker, Why};
use crate::report::{CgroupPlacement, Check, DoctorReport, StateDirCheck, TierCheck};
use crate::Tier;
use std::path::Path;

fn check(name: &'static str, result: Result<String, String>) -> Check {
    let ok = result.is_ok();
    Check {
        name,
        ok,
        detail: result.unwrap_or_else(|e| e),
    }
}

pub fn run(state_dir: Option<&Path>) -> DoctorReport {
    let me = std::process::id() as i32;
    let own = sys::bsd_info(me);
    let mut checks = vec![check(
        "proc_pidinfo_uniqid",
        own.as_ref()
            .map(|i| {
                format!(
                    "flavor 18: uniqueid {}, pid version {}",
                    i.uniqueid, i.version
                )
            })
            .map_err(|e| format!("flavor 18 of our own pid: {e}")),
    )];
    checks.push(check(
        "kern_procargs2",
        sys::procargs2(me)
            .map_err(|e| e.to_string())
            .and_then(|buf| {
                parse::procargs2(&buf)
                    .map(|a| {
                        format!(
                            "{} arguments, {} environment entries",
                            a.argv.len(),
                            a.env.len()
                        )
                    })
                    .ok_or_else(|| "the buffer did not parse".into())
            }),
    ));
    checks.push(check(
        "kqueue_evfilt_proc",
        MacOs::new().map_err(|e| e.to_string()).and_then(|mut os| {
            let info = own.as_ref().map_err(|e| e.to_string())?;
            os.watch(&Member {
                pid: me,
                serial: info.uniqueid,
                start: info.start_us,
                why: Why::Seed,
            });
            Ok("EVFILT_PROC exit|fork|exec registered on our own pid".into())
        }),
    ));
    checks.push(check(
        "boot_session_uuid",
        sys::sysctl_string(c"kern.bootsessionuuid").map_err(|e| e.to_string()),
    ));
    let binding = signal::binding();
    checks.push(Check {
        name: "kernel_checked_signal",
        ok: binding == Binding::AuditToken,
        detail: match binding {
            Binding::AuditToken => "proc_signal_with_audittoken: the kernel refuses a signal whose pid version is stale".into(),
            Binding::Recheck => "proc_signal_with_audittoken is absent (macOS before 14.4): the identity is re-read right before kill(); residual: the number is reused (a full wrap of the pid counter) between the re-read and the kill".into(),
        },
    });
    let linux_only = |tier| TierCheck {
        tier,
        available: false,
        detail: "Linux only".into(),
    };
    DoctorReport {
        kernel: format!(
            "macos {}",
            sys::sysctl_string(c"kern.osrelease").unwrap_or_default()
        ),
        checks,
        tiers: vec![
            TierCheck {
                tier: Tier::Portable,
                available: true,
                detail: "the portable core over libproc and kqueue (lineage, marker, member record, freeze round); a sentinel process covers the guardian's `kill -9` (docs/TIERS.md)".into(),
            },
            linux_only(Tier::Cgroup),
            linux_only(Tier::Pidns),
            linux_only(Tier::Subreaper),
        ],
        auto: Tier::Portable,
        cgroup_placement: CgroupPlacement {
            path: None,
            kind: None,
            reason: "cgroups are Linux-only".into(),
        },
        state_dir: StateDirCheck::of(
            state_dir,
            reconcile::open(state_dir).and_then(|ctx| ctx.registry.trees(false)),
        ),
    }
}
