//! The registry as every command reads it, the same on every platform: the
//! database's trees and audit entries plus the record files of live trees, and the
//! one rule that turns a tree selector into a tree (docs/REGISTRY.md).

use crate::identity::TreeId;
use crate::registry::record_file::{self, ReadRecord};
use crate::registry::{AuditEntry, Registry, StateDir, TreeRecord};
use crate::selector::{SelectError, TreeSelector};
use crate::Error;
use std::collections::{BTreeMap, BTreeSet};

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
