//! The sweep's walk of one node's list in one group, read from its head in
//! chunks (`Sessions::expiring`, groups.rs). Sessions live a fixed time
//! from their placement, so a list, in placement order, is also about in
//! the order they end: the walk takes the ended entries from the head and
//! stops after [`LOOKAHEAD`] live ones. Each entry carries its session's
//! end (prelude.lua, `dated_entry`), so this reads the list and nothing
//! else, in plain `LRANGE`s: no script, no mapping read, where a script
//! doing the same paid about a microsecond of Lua per entry.

/// How many live sessions end a walk of a list. A session that ended
/// behind a live one (placed by a replica whose clock is behind, or with a
/// shorter TTL) is swept when that one ends anyway, late by the clocks'
/// difference: a few more find the small inversions at once, while a list
/// with nothing due costs a walk this many reads.
pub(super) const LOOKAHEAD: usize = 4;

/// The first read of every list: about what a list holds that ended since
/// the last sweep, plus the lookahead, at a million sessions and a sweep
/// every few seconds; a list with more is read on, twice as far each time.
pub(super) const FIRST_CHUNK: usize = 32;

/// What the walk knows of one list.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct ListWalk {
    /// Entries read from the head so far.
    pub read: usize,
    live: usize,
    /// The ended entries' ids, ends and how far from the head each was
    /// (its position plus one), in list order, to be checked against their
    /// mappings by the caller.
    pub ended: Vec<(String, i64, usize)>,
    done: bool,
}

/// Where a walk goes on from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// `LRANGE` from `start` to `stop` (inclusive).
    Read { start: usize, stop: usize },
}

impl ListWalk {
    /// Takes the chunk read at `self.read` (`asked` entries asked for):
    /// ended entries (by `by_ms`) are kept, live ones counted, until
    /// `limit` ended, [`LOOKAHEAD`] live, or `most` read. An entry that is
    /// not `{end}\t{id}` (none is written so) is read past.
    pub fn take(
        &mut self,
        chunk: Vec<String>,
        asked: usize,
        by_ms: i64,
        limit: usize,
        most: usize,
    ) {
        let short = chunk.len() < asked;
        for entry in chunk {
            let Some((end, id)) = entry
                .split_once('\t')
                .and_then(|(end, id)| Some((end.parse::<i64>().ok()?, id)))
            else {
                self.read += 1;
                continue;
            };
            self.read += 1;
            if end > by_ms {
                self.live += 1;
            } else {
                self.ended.push((id.to_owned(), end, self.read));
            }
            if self.ended.len() >= limit || self.live >= LOOKAHEAD || self.read >= most {
                self.done = true;
                return;
            }
        }
        self.done |= short;
    }

    /// What to read next; `None` when the walk is over.
    pub fn next(&self, most: usize) -> Option<Next> {
        if self.done || self.read >= most {
            return None;
        }
        let stop = (self.read + self.read.max(FIRST_CHUNK) * 2).min(most) - 1;
        Some(Next::Read {
            start: self.read,
            stop,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dated(end: i64, id: &str) -> String {
        format!("{end}\t{id}")
    }

    #[test]
    fn the_walk_takes_ended_entries_and_stops_after_the_lookahead_of_live_ones() {
        let mut walk = ListWalk::default();
        let chunk = vec![
            dated(5, "a"),
            dated(20, "live1"),
            dated(7, "behind"),
            dated(21, "live2"),
            dated(22, "live3"),
            dated(23, "live4"),
            dated(8, "past-the-lookahead"),
        ];
        walk.take(chunk, 32, 10, 100, 1000);
        assert_eq!(
            walk.ended,
            [("a".to_owned(), 5, 1), ("behind".to_owned(), 7, 3)]
        );
        assert_eq!(walk.read, 6);
        assert_eq!(walk.next(1000), None);
    }

    #[test]
    fn a_full_chunk_of_ended_entries_is_read_on_twice_as_far() {
        let mut walk = ListWalk::default();
        let chunk: Vec<String> = (0..32).map(|i| dated(1, &format!("s{i}"))).collect();
        walk.take(chunk, 32, 10, 100, 1000);
        assert_eq!(walk.ended.len(), 32);
        assert_eq!(
            walk.next(1000),
            Some(Next::Read {
                start: 32,
                stop: 95
            })
        );
        // Never past the most a walk reads.
        assert_eq!(
            walk.next(40),
            Some(Next::Read {
                start: 32,
                stop: 39
            })
        );
    }

    #[test]
    fn a_short_chunk_ends_the_walk_and_the_limit_stops_it() {
        let mut walk = ListWalk::default();
        walk.take(vec![dated(1, "a")], 32, 10, 100, 1000);
        assert_eq!(walk.next(1000), None);
        let mut walk = ListWalk::default();
        walk.take(
            vec![dated(1, "a"), dated(2, "b"), dated(3, "c")],
            32,
            10,
            2,
            1000,
        );
        assert_eq!(walk.ended.len(), 2);
        assert_eq!(walk.next(1000), None);
    }

    #[test]
    fn an_entry_without_an_end_is_read_past() {
        let mut walk = ListWalk::default();
        walk.take(vec!["no-end".to_owned(), dated(1, "a")], 32, 10, 100, 1000);
        assert_eq!(walk.ended, [("a".to_owned(), 1, 2)]);
        assert_eq!(walk.read, 2);
    }

    #[test]
    fn an_id_may_hold_colons_and_digits() {
        let mut walk = ListWalk::default();
        walk.take(vec![dated(1, "12:34\u{e9}")], 32, 10, 100, 1000);
        assert_eq!(walk.ended, [("12:34\u{e9}".to_owned(), 1, 1)]);
    }
}
