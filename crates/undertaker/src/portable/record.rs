//! The member stream: each member the guardian proves, as one line
//! `pid serial start`, written to its sentinel and appended to the tree's record
//! before it could matter (a kernel link from CMD to the guardian does not exist on
//! this tier, so what was proven must outlive the guardian). A takeover (sentinel
//! after the guardian's `kill -9`) or a sweep (after both) seeds a fresh lineage
//! from it: a serial is never reused, so a stale line names the same process or
//! nothing.

use super::lineage::{Lineage, Scope};
use super::{Member, ProcessTable};

/// One member as a stream line.
pub fn line(member: &Member) -> String {
    format!("{} {} {}\n", member.pid, member.serial, member.start)
}

/// The members in a stream; malformed lines (a torn last write) are skipped.
pub fn parse(text: &str) -> Vec<(i32, u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let entry = (
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
            );
            f.next().is_none().then_some(entry)
        })
        .collect()
}

/// A lineage seeded from recorded members (and, for a takeover, the dead
/// guardian's serial: CMD's parent serial names it). Every recorded serial is known,
/// alive or not, so orphans that still name one are found by the next scan.
pub fn seeded(
    scope: Scope,
    recorded: &[(i32, u64, u64)],
    table: &mut impl ProcessTable,
) -> Lineage {
    let mut lineage = Lineage::new(scope);
    for &(pid, serial, start) in recorded {
        match table.facts(pid) {
            Some(f) if f.serial == serial => {
                lineage.seed(&f);
            }
            _ => lineage.seed_serial(pid, serial, start),
        }
    }
    lineage
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::portable::Why;

    #[test]
    fn lines_round_trip_and_torn_lines_are_skipped() {
        let m = Member {
            pid: 42,
            serial: 9_000_001,
            start: 77,
            why: Why::Seed,
        };
        let text = format!("{}{}garbage\n1 2\n3 4 5 6\n", line(&m), line(&m));
        assert_eq!(parse(&text), vec![(42, 9_000_001, 77), (42, 9_000_001, 77)]);
    }
}
