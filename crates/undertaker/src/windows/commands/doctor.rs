//! `undertaker doctor` on Windows: can a kill-on-close job be made and a process be
//! contained in it here, and can the state directory be used.

use crate::report::{CgroupPlacement, Check, DoctorReport, StateDirCheck, TierCheck};
use crate::windows::commands::reconcile;
use crate::windows::contain::job::Job;
use crate::windows::kernel::sys;
use crate::Tier;
use std::path::Path;

pub fn run(state_dir: Option<&Path>) -> DoctorReport {
    let mut random = [0u8; 12];
    let probe = sys::random_bytes(&mut random)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let name: String = random.iter().map(|b| format!("{b:02x}")).collect();
            Job::create(&format!("doctor.{name}")).map_err(|e| e.to_string())
        });
    let job_ok = probe.is_ok();
    let checks = vec![Check {
        name: "job_object_kill_on_close",
        ok: job_ok,
        detail: match &probe {
            Ok(_) => "a job with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE was created".into(),
            Err(e) => e.clone(),
        },
    }];
    let linux_only = |tier| TierCheck {
        tier,
        available: false,
        detail: "Linux only".into(),
    };
    let tiers = vec![
        TierCheck {
            tier: Tier::Auto,
            available: job_ok,
            detail: "a Job Object per tree, kill on close".into(),
        },
        linux_only(Tier::Cgroup),
        linux_only(Tier::Pidns),
        linux_only(Tier::Subreaper),
    ];
    DoctorReport {
        kernel: "windows".into(),
        checks,
        tiers,
        auto: Tier::Auto,
        cgroup_placement: CgroupPlacement {
            path: None,
            kind: None,
            reason: "cgroups are Linux-only".into(),
        },
        state_dir: state_dir_check(state_dir),
    }
}

fn state_dir_check(state_dir: Option<&Path>) -> StateDirCheck {
    let unfinished = reconcile::open(state_dir).and_then(|ctx| ctx.registry.trees(false));
    StateDirCheck::of(state_dir, unfinished)
}
