//! The registry as every command reads it, the same on every platform: the
//! database's trees and audit entries plus the record files of live trees, and the
//! one rule that turns a tree selector into a tree (docs/REGISTRY.md). [`Context`] is
//! what every reading or reconciling command opens first, on every platform; a
//! platform's own context adds what it signals with.

use crate::identity::TreeId;
use crate::registry::record_file::{self, ReadRecord};
use crate::registry::{
    open_registry, AuditEntry, Registry, RegistryError, StateDir, StoredState, TreeRecord,
};
use crate::selector::{SelectError, TreeSelector};
use crate::Error;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// An opened state directory: the registry as this command found it.
pub struct Context {
    pub dir: StateDir,
    pub registry: Registry,
    /// Record files of live trees (their guardian holds the lock), read at open.
    pub live: Vec<ReadRecord>,
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

    /// Whether tree `id`'s guardian holds its record file's lock: the liveness rule
    /// of Windows and the portable tier (docs/REGISTRY.md). A record that cannot be
    /// judged counts as alive: no record is closed on a guess.
    pub fn guardian_alive(&self, id: &str) -> bool {
        use crate::registry::lock::FileLock;
        match FileLock::try_acquire(&record_file::path_of(&self.dir, id)) {
            Ok(None) => true,
            Ok(Some(_)) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(_) => true,
        }
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

/// What a command read when it opened the state directory: the registry (after the
/// fold) and the record files of live trees.
pub(crate) struct History<'a> {
    pub dir: &'a StateDir,
    pub registry: &'a Registry,
    pub live: &'a [ReadRecord],
}

/// Finds the tree `selector` names among recorded trees and unrecorded lock files.
pub fn resolve_tree(
    ctx: &History<'_>,
    selector: &TreeSelector,
) -> Result<(String, Option<TreeRecord>), Error> {
    let mut found: BTreeMap<String, Option<TreeRecord>> = ctx
        .registry
        .trees_by_prefix(selector.as_str())?
        .into_iter()
        .chain(ctx.live.iter().map(|l| l.tree.clone()))
        .map(|r| (r.id.clone(), Some(r)))
        .collect();
    // Record files that appeared since the fold, or that did not parse.
    for (id, _) in record_file::list(ctx.dir) {
        if TreeId::parse(&id).is_some() {
            found.entry(id).or_insert(None);
        }
    }
    let id = selector.pick(found.keys().map(String::as_str))?.to_owned();
    let rec = found.remove(&id).flatten();
    Ok((id, rec))
}

/// One page of the audit log: the newest `limit` entries (of the selected tree) below
/// id `before`, oldest first, without reading the rest. The entries of live trees are
/// still in their record files (no id yet): they are the newest, so they belong to the
/// first page (`before` absent).
pub fn log_page(
    ctx: &History<'_>,
    tree: Option<&TreeSelector>,
    before: Option<i64>,
    limit: usize,
) -> Result<Vec<AuditEntry>, Error> {
    let id = match tree {
        None => None,
        Some(selector) => {
            let mut ids: BTreeSet<String> = ctx
                .registry
                .audit_trees_by_prefix(selector.as_str())?
                .into_iter()
                .collect();
            ids.extend(
                ctx.live
                    .iter()
                    .filter(|l| !l.audit.is_empty())
                    .map(|l| l.tree.id.clone()),
            );
            match selector.pick(ids.iter().map(String::as_str)) {
                Ok(id) => Some(id.to_owned()),
                Err(SelectError::Unknown(_)) => {
                    return match resolve_tree(ctx, selector) {
                        Ok(_) => Ok(Vec::new()),
                        Err(_) => Err(SelectError::Unknown(selector.as_str().into()).into()),
                    };
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let mut page = ctx.registry.audit_page(id.as_deref(), before, limit)?;
    if before.is_none() {
        let mut live: Vec<AuditEntry> = ctx
            .live
            .iter()
            .filter(|l| id.as_deref().is_none_or(|id| l.tree.id == id))
            .flat_map(|l| l.audit.iter().map(|(_, e)| e.clone()))
            .collect();
        live.sort_by_key(|e| e.time_ms);
        page.extend(live);
        let extra = page.len().saturating_sub(limit);
        page.drain(..extra);
    }
    Ok(page)
}

/// The audit log, oldest first; with a selector, only that tree's entries. A tree
/// that is recorded but has nothing logged yet gives an empty log, not an error.
pub fn log(ctx: &History<'_>, tree: Option<&TreeSelector>) -> Result<Vec<AuditEntry>, Error> {
    let mut entries = ctx.registry.audit(None)?;
    // Live trees' entries are still in their record files.
    let mut live: Vec<AuditEntry> = ctx
        .live
        .iter()
        .flat_map(|l| l.audit.iter().map(|(_, e)| e.clone()))
        .collect();
    live.sort_by_key(|e| e.time_ms);
    entries.extend(live);
    let Some(selector) = tree else {
        return Ok(entries);
    };
    let ids: BTreeSet<&str> = entries.iter().filter_map(|e| e.tree.as_deref()).collect();
    let id = match selector.pick(ids) {
        Ok(id) => id.to_owned(),
        Err(SelectError::Unknown(_)) => {
            return match resolve_tree(ctx, selector) {
                Ok(_) => Ok(Vec::new()),
                Err(_) => Err(SelectError::Unknown(selector.as_str().into()).into()),
            };
        }
        Err(e) => return Err(e.into()),
    };
    Ok(entries
        .into_iter()
        .filter(|e| e.tree.as_deref() == Some(id.as_str()))
        .collect())
}

/// What a name on the command line names.
pub enum Named {
    /// The tree whose id it is or begins (see [`resolve_tree`]).
    Tree(String, Option<Box<TreeRecord>>),
    /// Every tree with that label, oldest first (at least one).
    Labelled(Vec<TreeRecord>),
}

/// The trees `name` names: the one tree whose id it is or begins, else every tree
/// with that label. A name that is a valid id prefix but matches no id is tried as a
/// label too.
pub fn trees_named(ctx: &History<'_>, name: &str) -> Result<Named, Error> {
    if let Ok(selector) = TreeSelector::parse(name) {
        match resolve_tree(ctx, &selector) {
            Err(Error::Select(SelectError::Unknown(_))) => {}
            one => return one.map(|(id, rec)| Named::Tree(id, rec.map(Box::new))),
        }
    }
    let mut labelled: BTreeMap<String, TreeRecord> = BTreeMap::new();
    let recorded = ctx.registry.trees(true)?.into_iter();
    for tree in recorded.chain(ctx.live.iter().map(|l| l.tree.clone())) {
        if tree.label.as_deref() == Some(name) {
            // A live record file is newer than the database's row.
            labelled.insert(tree.id.clone(), tree);
        }
    }
    if labelled.is_empty() {
        return Err(SelectError::NoTree(name.into()).into());
    }
    let mut trees: Vec<TreeRecord> = labelled.into_values().collect();
    trees.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
    Ok(Named::Labelled(trees))
}

/// The trees `kill NAME` ends: the tree an id names, or the live trees (not
/// finished, not released) a label names, more than one only with `all`.
pub fn trees_to_kill(
    ctx: &History<'_>,
    name: &str,
    all: bool,
) -> Result<Vec<(String, Option<TreeRecord>)>, Error> {
    let mut trees = match trees_named(ctx, name)? {
        Named::Tree(id, rec) => return Ok(vec![(id, rec.map(|r| *r))]),
        Named::Labelled(trees) => trees,
    };
    trees.retain(|t| !matches!(t.state, StoredState::Finished | StoredState::Released));
    match trees.len() {
        0 => return Err(SelectError::NoLiveLabelled(name.into()).into()),
        1 => {}
        _ if all => {}
        _ => {
            let ids: Vec<&str> = trees.iter().map(|t| t.id.as_str()).collect();
            return Err(SelectError::SeveralLabelled(name.into(), ids.join(", ")).into());
        }
    }
    Ok(trees.into_iter().map(|t| (t.id.clone(), Some(t))).collect())
}

/// `log [--tree NAME]` (one page when `page` is `(before, limit)`): a tree id or
/// prefix gives that tree's entries; a label gives those of every tree with it.
pub fn log_named(
    ctx: &History<'_>,
    name: Option<&str>,
    page: Option<(Option<i64>, usize)>,
) -> Result<Vec<AuditEntry>, Error> {
    let read = |selector: Option<&TreeSelector>| match page {
        Some((before, limit)) => log_page(ctx, selector, before, limit),
        None => log(ctx, selector),
    };
    let Some(name) = name else {
        return read(None);
    };
    if let Ok(selector) = TreeSelector::parse(name) {
        match read(Some(&selector)) {
            Err(Error::Select(SelectError::Unknown(_))) => {}
            done => return done,
        }
    }
    let ids: Vec<String> = match trees_named(ctx, name)? {
        Named::Tree(id, _) => vec![id],
        Named::Labelled(trees) => trees.into_iter().map(|t| t.id).collect(),
    };
    let mut entries = Vec::new();
    for id in &ids {
        entries.extend(read(Some(&TreeSelector::parse(id)?))?);
    }
    if ids.len() > 1 {
        // Database entries in their order, then live trees' (id 0) by time.
        entries.sort_by_key(|e| (e.id == 0, e.id, e.time_ms));
        if let Some((_, limit)) = page {
            let extra = entries.len().saturating_sub(limit);
            entries.drain(..extra);
        }
    }
    Ok(entries)
}
