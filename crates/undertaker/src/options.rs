//! What a caller chooses: the options `run` and `supervise` share ([`GuardOptions`]),
//! `run`'s command on top of them ([`RunOptions`]), `supervise`'s host group
//! ([`SuperviseOptions`]), the owner and the tier. The
//! ground floor: it imports nothing from the rest of the crate.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Who the tree belongs to: when it is gone, the tree goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerSpec {
    /// The process that started undertaker (default).
    Parent,
    /// An explicit process, for hosts that start undertaker through a shell.
    Pid(i32),
    /// An inherited pipe read end: end of file means the owner is gone.
    Fd(i32),
}

/// Containment mechanism for a tree (docs/TIERS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Auto,
    Cgroup,
    Pidns,
    Subreaper,
    /// The macOS shape on Linux (docs/TIERS.md, "portable"): no cgroup, no
    /// subreaper, no PDEATHSIG on CMD; members proven by the portable core. Opt-in.
    Portable,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Auto => "auto",
            Tier::Cgroup => "cgroup",
            Tier::Pidns => "pidns",
            Tier::Subreaper => "subreaper",
            Tier::Portable => "portable",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How trees are guarded, the same for `run` (one tree) and `supervise` (many):
/// `supervise` takes these alone.
#[derive(Debug, Clone)]
pub struct GuardOptions {
    /// The tree's name in `ps` (`supervise`: the default of the trees it creates).
    pub label: Option<String>,
    /// Time between SIGTERM and SIGKILL in a teardown.
    pub grace: Duration,
    pub owner: OwnerSpec,
    /// `run`: when stdin and stdout are pipes or sockets, their far ends gone (the
    /// host that held them) count as the owner's death too (`--no-stdio-owner` turns
    /// it off; docs/GUARANTEES.md, "The stdio peer"). `supervise`'s channel ending
    /// is its stricter form already.
    pub stdio_owner: bool,
    /// `supervise` refuses `pidns` (one namespace init per tree is what `run` is for).
    pub tier: Tier,
    /// Registry location; `None` = `$UNDERTAKER_STATE_DIR`, XDG state, `~/.local/state`.
    pub state_dir: Option<PathBuf>,
}

impl Default for GuardOptions {
    fn default() -> Self {
        Self {
            label: None,
            grace: Duration::from_secs(2),
            owner: OwnerSpec::Parent,
            stdio_owner: true,
            tier: Tier::Auto,
            state_dir: None,
        }
    }
}

/// `undertaker run`: a command and how to guard it.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub command: Vec<OsString>,
    pub guard: GuardOptions,
    /// `--replace`: before CMD starts, end the live trees with the same label that
    /// the same host started (needs a label).
    pub replace: bool,
}

/// `undertaker supervise`: how its trees are guarded, and the host's own group.
#[derive(Debug, Clone, Default)]
pub struct SuperviseOptions {
    pub guard: GuardOptions,
    /// The host's own process group (`--parent-pgid`): never registered, and none of
    /// its members is ever signalled.
    pub parent_pgid: Option<i32>,
}
