//! Memory over a cell's epochs: the runner's resident set after each epoch's training, and the
//! rule that flags memory growing epoch after epoch (a leak, as Burn's users report, or caches
//! that are still filling).

use crate::schema::EpochSummary;

/// Epochs, from the second on, that the rule needs (the first holds the allocator's warm-up).
pub const MIN_EPOCHS: usize = 3;

/// Growth below this over the epochs looked at is noise, however steady.
pub const MIN_GROWTH_BYTES: u64 = 16 << 20;

/// Growth below this share of the second epoch's resident set is noise too.
pub const MIN_GROWTH_SHARE: f64 = 0.05;

/// Memory that rose after every epoch from the second on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryGrowth {
    /// Mean growth per epoch, from the second epoch to the last.
    pub bytes_per_epoch: f64,
    pub first_bytes: u64,
    pub last_bytes: u64,
    /// Epochs looked at (the second to the last).
    pub epochs: usize,
}

/// The growth of `epochs`' resident sets, when it is flagged: at least [`MIN_EPOCHS`] epochs
/// after the first, each ending with no less resident memory than the one before, and the
/// rise at least [`MIN_GROWTH_BYTES`] and [`MIN_GROWTH_SHARE`] of the start.
pub fn memory_growth(epochs: &[EpochSummary]) -> Option<MemoryGrowth> {
    let rss: Vec<u64> = epochs
        .iter()
        .skip(1)
        .map(|e| e.rss_bytes)
        .collect::<Option<_>>()?;
    let (&first, &last) = (rss.first()?, rss.last()?);
    let rises = rss.windows(2).all(|w| w[1] >= w[0]);
    let growth = last.saturating_sub(first);
    let flagged = rss.len() >= MIN_EPOCHS
        && rises
        && growth >= MIN_GROWTH_BYTES
        && growth as f64 >= MIN_GROWTH_SHARE * first as f64;
    flagged.then(|| MemoryGrowth {
        bytes_per_epoch: growth as f64 / (rss.len() - 1) as f64,
        first_bytes: first,
        last_bytes: last,
        epochs: rss.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epochs(rss_mib: &[u64]) -> Vec<EpochSummary> {
        rss_mib
            .iter()
            .enumerate()
            .map(|(i, &mib)| EpochSummary {
                epoch: i + 1,
                seconds: 1.0,
                steps: 4,
                samples: 32,
                partial: false,
                mean_loss: 1.0,
                test_accuracy: None,
                rss_bytes: Some(mib << 20),
            })
            .collect()
    }

    #[test]
    fn memory_that_rises_every_epoch_is_flagged_and_steady_memory_is_not() {
        // The first epoch's jump is warm-up; then 64 MiB an epoch.
        let g = memory_growth(&epochs(&[100, 400, 464, 528, 592])).unwrap();
        assert_eq!(g.epochs, 4);
        assert_eq!((g.first_bytes, g.last_bytes), (400 << 20, 592 << 20));
        assert_eq!(g.bytes_per_epoch, (64 << 20) as f64);
        // Steady after warm-up, with the allocator's small ups and downs.
        assert!(memory_growth(&epochs(&[100, 400, 402, 401, 403])).is_none());
        // A rise that falls back is not a leak.
        assert!(memory_growth(&epochs(&[100, 400, 464, 420, 592])).is_none());
        // Too few epochs after the warm-up one to tell.
        assert!(memory_growth(&epochs(&[100, 400, 464])).is_none());
        // A steady rise too small to matter.
        assert!(memory_growth(&epochs(&[100, 4000, 4004, 4008, 4012])).is_none());
        // An epoch without a resident set (another OS): nothing is said.
        let mut e = epochs(&[100, 400, 464, 528, 592]);
        e[2].rss_bytes = None;
        assert!(memory_growth(&e).is_none());
    }
}
