//! `undertaker log`: the audit log, from the database and the live trees' record files
//! (the reading lives in [`crate::history`], shared with Windows).

use super::Context;
use crate::registry::AuditEntry;
use crate::Error;

/// One page of the audit log (see [`crate::history::log_page`]); `tree` is an id,
/// a prefix or a label ([`crate::history::log_named`]).
pub fn log_page(
    ctx: &Context,
    tree: Option<&str>,
    before: Option<i64>,
    limit: usize,
) -> Result<Vec<AuditEntry>, Error> {
    crate::history::log_named(&ctx.history(), tree, Some((before, limit)))
}

/// The audit log, oldest first (see [`crate::history::log`]).
pub fn log(ctx: &Context, tree: Option<&str>) -> Result<Vec<AuditEntry>, Error> {
    crate::history::log_named(&ctx.history(), tree, None)
}
