//! The little statistics the bench needs: percentiles, ratios and the order in which
//! contenders take turns.

use serde::Serialize;

/// Percentile `p` (0..=100) of `sorted` by linear interpolation between closest ranks
/// (the "type 7" definition: p50 of [1, 2, 3, 4] is 2.5). `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = (p.clamp(0.0, 100.0) / 100.0) * last as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
}

pub fn summarize(samples: &[f64]) -> Option<Summary> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(Summary {
        n: sorted.len(),
        median: percentile(&sorted, 50.0)?,
        p90: percentile(&sorted, 90.0)?,
        p99: percentile(&sorted, 99.0)?,
    })
}

/// Ratio of two medians; `None` when the anchor is zero (nothing to compare against).
pub fn ratio(value: f64, anchor: f64) -> Option<f64> {
    (anchor > 0.0).then(|| value / anchor)
}

/// The order in which `contenders` take turns over `rounds` rounds: every round runs
/// each contender once (A B C), and the starting contender rotates (B C A, C A B …) so
/// no contender always runs right after the same neighbour or always first.
pub fn interleaving(contenders: usize, rounds: usize) -> Vec<usize> {
    let mut order = Vec::with_capacity(contenders * rounds);
    for r in 0..rounds {
        for j in 0..contenders {
            order.push((r + j) % contenders);
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate() {
        let s = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&s, 50.0), Some(2.5));
        assert_eq!(percentile(&s, 0.0), Some(1.0));
        assert_eq!(percentile(&s, 100.0), Some(4.0));
        assert!((percentile(&s, 90.0).unwrap() - 3.7).abs() < 1e-9);
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn summary_sorts_first() {
        let s = summarize(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!(s.n, 3);
        assert_eq!(s.median, 3.0);
        assert!(s.p99 <= 5.0 && s.p99 > s.p90 && s.p90 > s.median);
        assert!(summarize(&[]).is_none());
    }

    #[test]
    fn out_of_range_percentile_is_clamped() {
        let s = [1.0, 2.0];
        assert_eq!(percentile(&s, 150.0), Some(2.0));
        assert_eq!(percentile(&s, -3.0), Some(1.0));
    }

    #[test]
    fn ratio_of_medians() {
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(3.0, 0.0), None);
    }

    #[test]
    fn interleaving_rotates_and_is_fair() {
        assert_eq!(interleaving(2, 3), vec![0, 1, 1, 0, 0, 1]);
        assert_eq!(interleaving(3, 2), vec![0, 1, 2, 1, 2, 0]);
        let order = interleaving(4, 8);
        for c in 0..4 {
            assert_eq!(order.iter().filter(|&&x| x == c).count(), 8);
            // Each contender starts exactly 2 of the 8 rounds.
            assert_eq!(order.chunks(4).filter(|r| r[0] == c).count(), 2);
        }
        assert!(interleaving(0, 5).is_empty());
        assert!(interleaving(3, 0).is_empty());
    }
}
