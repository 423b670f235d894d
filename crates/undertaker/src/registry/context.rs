//! What every reading or reconciling command opens first, the same on every platform:
//! the state directory, its registry after the fold, and the record files of live
//! trees (docs/REGISTRY.md). A platform's own context adds what it signals with.

use super::record_file::{self, ReadRecord};
use super::state_dir::{self, Origin};
use super::{Registry, RegistryError, StateDir, TreeRecord};
use crate::history::History;
use std::path::Path;

/// An opened state directory: the registry as this command found it.
pub struct Context {
    pub dir: StateDir,
    pub registry: Registry,
    /// Record files of live trees (their guardian holds the lock), read at open.
    pub live: Vec<ReadRecord>,
    /// The boot the registry's trees are read for.
    pub boot_id: String,
}

impl Context {
    /// Opens `state_dir` (None: the default chain) as `uid` and folds at most `limit`
    /// record files (see [`Registry::fold_at_most`]).
    pub fn open(
        state_dir: Option<&Path>,
        uid: u32,
        boot_id: &str,
        limit: usize,
    ) -> Result<Self, RegistryError> {
        let (dir, registry) = open_registry(state_dir, uid, boot_id).map_err(|(_, e)| e)?;
        let live = registry.fold_at_most(&dir, boot_id, limit);
        Ok(Self {
            dir,
            registry,
            live,
            boot_id: boot_id.to_owned(),
        })
    }

    /// Every tree of this boot: the database's, then the live ones.
    pub fn trees(&self) -> Result<Vec<TreeRecord>, RegistryError> {
        let mut trees = self.registry.trees(true)?;
        let live: std::collections::HashSet<&str> =
            self.live.iter().map(|l| l.tree.id.as_str()).collect();
        trees.retain(|t| !live.contains(t.id.as_str()));
        trees.extend(self.live.iter().map(|l| l.tree.clone()));
        Ok(trees)
    }

    /// One tree as it is now: its record file is folded first when its guardian has
    /// finished with it since this command started.
    pub fn tree(&self, id: &str) -> Result<Option<TreeRecord>, RegistryError> {
        if !self.registry.fold_one(&self.dir, id, &self.boot_id) {
            if let Some(read) = record_file::read(&record_file::path_of(&self.dir, id)) {
                return Ok(Some(read.tree));
            }
        }
        self.registry.tree(id)
    }

    /// The registry as every platform reads it.
    pub(crate) fn history(&self) -> History<'_> {
        History {
            dir: &self.dir,
            registry: &self.registry,
            live: &self.live,
        }
    }
}

/// Opens the state directory and registry for `path` (None = the default chain).
/// A corrupt database is replaced and reported on stderr through tracing.
pub fn open_registry(
    path: Option<&Path>,
    uid: u32,
    boot_id: &str,
) -> Result<(StateDir, Registry), (Origin, RegistryError)> {
    let (dir, origin) = state_dir::resolve_and_prepare(path, uid)?;
    let registry = Registry::open(&dir, boot_id).map_err(|e| (origin, e))?;
    if let Some(rec) = &registry.recovered {
        tracing::error!("{rec}");
    }
    Ok((dir, registry))
}
