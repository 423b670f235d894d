//! `undertaker log`: the audit log, from the database and the live trees' record files
//! (the reading lives in [`crate::history`], shared with Windows).

use super::Context;
use crate::registry::AuditEntry;
use crate::selector::TreeSelector;
use crate::Error;

/// One page of the audit log (see [`crate::history::log_page`]).
pub fn log_page(
    ctx: &Context,
    tree: Option<&TreeSelector>,
    before: Option<i64>,
    limit: usize,
) -> Result<Vec<AuditEntry>, Error> {
    crate::history::log_page(&ctx.history(), tree, before, limit)
}

/// The audit log, oldest first (see [`crate::history::log`]).
pub fn log(ctx: &Context, tree: Option<&TreeSelector>) -> Result<Vec<AuditEntry>, Error> {
    crate::history::log(&ctx.history(), tree)
}
