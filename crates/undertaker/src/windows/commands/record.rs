//! A tree's record file on Windows (docs/REGISTRY.md): the neutral
//! [`crate::registry::recorder::Recorder`], with who the guardian is read here.

use crate::identity::TreeId;
use crate::registry::recorder::Start;
use crate::registry::{GuardianRecord, OwnerRecord, RecordedTier, RootRecord};
use crate::windows::kernel::sys;
use crate::RunError;
use std::os::windows::io::BorrowedHandle;
use std::path::Path;

/// Windows has no boot id to read cheaply; creation times are wall-clock instants,
/// so pid + creation time is unique across boots without one. Records of an earlier
/// boot are folded like any dead guardian's (its job died with it).
pub const BOOT_ID: &str = "00000000";

pub use crate::registry::recorder::Recorder;

impl Recorder {
    /// The record of tree `id`, written by its guardian (`run`) or its supervisor.
    pub fn start(
        state_dir: Option<&Path>,
        label: Option<String>,
        tree: &TreeId,
        owner: OwnerRecord,
        supervisor: bool,
    ) -> Result<Self, RunError> {
        let guardian = GuardianRecord {
            pid: sys::current_pid() as i32,
            starttime: sys::own_creation_time().unwrap_or(0),
            pgid: 0,
            pidfs_inode: None,
            supervisor,
        };
        Recorder::open(
            tree,
            Start {
                state_dir,
                uid: 0,
                boot_id: BOOT_ID,
                label,
                tier: RecordedTier::Job,
                guardian,
                owner,
            },
        )
    }

    pub fn root(&self, pid: u32, process: BorrowedHandle<'_>) {
        let starttime = sys::creation_time(process).unwrap_or(0);
        self.root_record(RootRecord {
            pid: pid as i32,
            starttime,
            pgid: pid as i32,
            sid: 0,
            uid: 0,
        });
    }
}
