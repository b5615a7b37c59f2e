//! What a failover archives on its dead node's behalf (design.md §4.5):
//! the replicas saw every count the node answered, so the highest total
//! they showed of a session's present placement goes into the archive
//! before the session leaves the node.

use std::ops::Sub;

/// The clicks a failover archives for one session, from the totals the
/// replicas handed over with their acknowledgements for its present
/// placement (`shown`) and the total the archive holds (`archived`): the
/// highest shown, as the clicks it holds beyond the archive. `None` when
/// nothing was handed over or the archive holds as much: the archive
/// never goes below what it holds.
pub fn handed_over<T: Ord + Sub<Output = T> + Copy>(
    shown: impl IntoIterator<Item = T>,
    archived: T,
) -> Option<T> {
    let highest = shown.into_iter().max()?;
    (highest > archived).then(|| highest - archived)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_total_shown_is_archived_beyond_what_the_archive_holds() {
        assert_eq!(handed_over([7u64, 9, 8], 4), Some(5));
    }

    #[test]
    fn nothing_is_archived_when_the_archive_holds_as_much_or_nothing_was_shown() {
        assert_eq!(handed_over([3u64, 4], 4), None);
        assert_eq!(handed_over([3u64], 9), None);
        assert_eq!(handed_over(Vec::<u64>::new(), 0), None);
    }
}
