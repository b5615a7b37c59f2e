//! The node's counts and the fence it enforces (design.md §4.16).
//!
//! Each session's count remembers the fencing epoch of the press that
//! started it (`since`), and the node remembers the newest clean token it
//! honoured (`floor`). A press that carries an epoch is refused, uncounted,
//! when its epoch is older than what the node holds for the session: the
//! session's `since` if it has a count, else the floor. So:
//!
//! - after a clean of a session (selective or not) the session has no
//!   count, and every press read before that clean (its epoch is older than
//!   the clean's token, which is now at most the floor) is refused;
//! - a selective clean moves the floor but leaves other sessions' counts
//!   alone: their presses go on under the epoch they started with;
//! - a clean under token `T` takes only the counts that started before it
//!   (`since < T`): the same clean sent again, by a cleaner that finishes
//!   another's journal or one that resumed from a pause, leaves alone the
//!   sessions placed on the node since, so a repeated clean is harmless;
//! - nothing here survives a restart, and the node says so by reporting a
//!   new instance id (the balancer then treats it as failed and wipes it).
//!
//! A press without an epoch (a balancer of an earlier release, a curl) is
//! counted as before: the fence is offered, never imposed.

use std::collections::HashMap;

/// One session's count and the epoch it started under.
#[derive(Debug, Clone, Copy)]
struct Count {
    clicks: i32,
    since: u64,
}

/// What a press came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pressed {
    Counted(i32),
    /// The press's epoch is older than `fence`: not counted.
    Refused {
        fence: u64,
    },
}

#[derive(Debug, Default)]
pub struct Counts {
    sessions: HashMap<String, Count>,
    /// The newest clean token honoured.
    floor: u64,
}

impl Counts {
    /// Counts one press of `id`, read under fencing epoch `epoch` if given.
    pub fn press(&mut self, id: String, epoch: Option<u64>) -> Pressed {
        let floor = self.floor;
        match self.sessions.get_mut(&id) {
            Some(count) => {
                if epoch.is_some_and(|e| e < count.since) {
                    return Pressed::Refused { fence: count.since };
                }
                count.clicks = count.clicks.saturating_add(1);
                Pressed::Counted(count.clicks)
            }
            None => {
                if epoch.is_some_and(|e| e < floor) {
                    return Pressed::Refused { fence: floor };
                }
                let since = epoch.unwrap_or(floor);
                self.sessions.insert(id, Count { clicks: 1, since });
                Pressed::Counted(1)
            }
        }
    }

    /// The counts a clean under `token` takes: of `only` (those it holds),
    /// or of every session; with a token, only those that started before
    /// it.
    pub fn snapshot(&self, only: Option<&[String]>, token: Option<u64>) -> Vec<(String, i32)> {
        let taken = |count: &Count| token.is_none_or(|t| count.since < t);
        match only {
            Some(ids) => ids
                .iter()
                .filter_map(|id| {
                    let count = self.sessions.get(id).filter(|c| taken(c))?;
                    Some((id.clone(), count.clicks))
                })
                .collect(),
            None => self
                .sessions
                .iter()
                .filter(|(_, c)| taken(c))
                .map(|(id, c)| (id.clone(), c.clicks))
                .collect(),
        }
    }

    /// Forgets what [`snapshot`](Self::snapshot) took for the same clean;
    /// `token` becomes the floor if it is newer.
    pub fn forget(&mut self, only: Option<&[String]>, token: Option<u64>) {
        let taken = |count: &Count| token.is_none_or(|t| count.since < t);
        match only {
            Some(ids) => {
                for id in ids {
                    if self.sessions.get(id).is_some_and(taken) {
                        self.sessions.remove(id);
                    }
                }
            }
            None => self.sessions.retain(|_, count| !taken(count)),
        }
        if let Some(token) = token {
            self.floor = self.floor.max(token);
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_press_read_before_a_clean_of_its_session_is_refused() {
        let mut counts = Counts::default();
        assert_eq!(counts.press("a".into(), Some(3)), Pressed::Counted(1));
        assert_eq!(counts.press("a".into(), Some(3)), Pressed::Counted(2));
        counts.forget(Some(&ids(&["a"])), Some(7));
        assert_eq!(
            counts.press("a".into(), Some(3)),
            Pressed::Refused { fence: 7 }
        );
        assert_eq!(counts.press("a".into(), Some(7)), Pressed::Counted(1));
        // The session started again under 7: a straggler of 3 stays out.
        assert_eq!(
            counts.press("a".into(), Some(3)),
            Pressed::Refused { fence: 7 }
        );
    }

    #[test]
    fn a_selective_clean_leaves_the_other_sessions_counting() {
        let mut counts = Counts::default();
        counts.press("a".into(), Some(3));
        counts.press("b".into(), Some(3));
        counts.forget(Some(&ids(&["a"])), Some(9));
        assert_eq!(counts.press("b".into(), Some(3)), Pressed::Counted(2));
        assert_eq!(
            counts.press("a".into(), Some(3)),
            Pressed::Refused { fence: 9 }
        );
    }

    #[test]
    fn a_clean_of_everything_refuses_every_older_press() {
        let mut counts = Counts::default();
        counts.press("a".into(), Some(1));
        counts.press("b".into(), Some(1));
        counts.forget(None, Some(4));
        assert_eq!(counts.len(), 0);
        for id in ["a", "b", "new"] {
            assert_eq!(
                counts.press(id.into(), Some(2)),
                Pressed::Refused { fence: 4 }
            );
        }
        assert_eq!(counts.press("a".into(), Some(5)), Pressed::Counted(1));
    }

    #[test]
    fn presses_without_an_epoch_are_counted_as_before() {
        let mut counts = Counts::default();
        counts.forget(None, Some(4));
        assert_eq!(counts.press("a".into(), None), Pressed::Counted(1));
        assert_eq!(counts.press("a".into(), None), Pressed::Counted(2));
        // It started at the floor: a fenced press of the same epoch counts.
        assert_eq!(counts.press("a".into(), Some(4)), Pressed::Counted(3));
    }

    #[test]
    fn a_clean_sent_again_leaves_the_sessions_started_after_it_alone() {
        let mut counts = Counts::default();
        counts.press("a".into(), Some(2));
        counts.press("b".into(), Some(2));
        counts.forget(None, Some(6));
        // Placed again after the clean: their presses carry its token.
        counts.press("a".into(), Some(6));
        counts.press("a".into(), Some(6));
        counts.press("c".into(), None);
        for only in [None, Some(ids(&["a", "c"]))] {
            assert!(counts.snapshot(only.as_deref(), Some(6)).is_empty());
            counts.forget(only.as_deref(), Some(6));
            assert_eq!(counts.len(), 2);
        }
        assert_eq!(counts.press("a".into(), Some(6)), Pressed::Counted(3));
        // A newer clean takes them.
        assert_eq!(counts.snapshot(None, Some(7)).len(), 2);
        counts.forget(None, Some(7));
        assert_eq!(counts.len(), 0);
    }

    #[test]
    fn an_older_token_never_lowers_the_floor() {
        let mut counts = Counts::default();
        counts.forget(None, Some(8));
        counts.forget(None, Some(5));
        counts.forget(None, None);
        assert_eq!(
            counts.press("a".into(), Some(7)),
            Pressed::Refused { fence: 8 }
        );
    }
}
