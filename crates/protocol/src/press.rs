//! What a press does with what its replica heard of it at its node: the
//! one retry rule. A press goes round again only when it provably was not
//! counted; one the node may have counted answers 504 and is never sent to
//! another node; a count is shown only when it is still the session's.

use std::ops::Add;

/// What a replica heard of a press at the session's node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard<T> {
    /// The node counted it: its count. `shown`: whether the count is still
    /// the session's to show ([`count_shown`]).
    Counted { count: T, shown: bool },
    /// A fencing node refused it, uncounted: it cleaned the session after
    /// the mapping was read.
    Refused,
    /// No answer, and the node failed: judged so by this replica (its
    /// timer, a refused connect, a reset, a bad answer; marked down before
    /// its gate opens), or declared down by another. `sent`: a byte of the
    /// press may have reached the node.
    Failed { sent: bool },
    /// No answer in time (or a gateway's 502 or 503) from a node that is
    /// spared (it answers others, or it is the last one up): it stays up.
    /// `sent` as for `Failed`.
    Spared { sent: bool },
}

/// What the press does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next<T> {
    /// 200: the session's clicks, the node's count over the base it
    /// started from.
    Answer(T),
    /// 504: the node took the press and its outcome is unknown.
    Unknown,
    /// Nothing was counted: the press goes round again.
    Again(Again),
}

/// How a press that was not counted goes round again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// On the mapping read anew: a fencing node refused it, having cleaned
    /// the session since the mapping was read.
    Reread,
    /// Its node failed over first (it failed, or was declared down, before
    /// a byte of the press left), then on the mapping read anew.
    FailOver,
    /// Queued again on the same mapping: the connect to a spared node
    /// timed out (its backlog is full; it is alive).
    Requeue,
}

/// The retry rule.
pub fn next<T: Add<Output = T>>(heard: Heard<T>, base: T) -> Next<T> {
    match heard {
        Heard::Counted { count, shown: true } => Next::Answer(base + count),
        Heard::Counted { shown: false, .. } => Next::Unknown,
        Heard::Refused => Next::Again(Again::Reread),
        Heard::Failed { sent: false } => Next::Again(Again::FailOver),
        Heard::Spared { sent: false } => Next::Again(Again::Requeue),
        Heard::Failed { sent: true } | Heard::Spared { sent: true } => Next::Unknown,
    }
}

/// Why a failed call did not take its node down ("Overload is not
/// death").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spared {
    /// The node is alive and saturated.
    Saturated,
    /// Only timeouts speak against it, and no other node serves.
    LastNode,
}

impl Spared {
    pub fn as_str(self) -> &'static str {
        match self {
            Spared::Saturated => "it answers others: saturated, not gone",
            Spared::LastNode => "only timeouts speak against it and no other node serves",
        }
    }
}

/// Whether a call that failed is no evidence that its node is gone, and
/// why: failed (`None`, marked down before its gate opens) or spared. Only
/// an `inconclusive` failure (time ran out, or a gateway's 502 or 503) can
/// be spared; a refusal, a reset or a bad answer never is. `busy`: the
/// node answered others while the call waited, or holds connections of
/// this replica carrying presses (a full backlog, not a dead process).
/// Timeouts alone never take the last node serving down: a stalled
/// machine would otherwise eject every node, and every ejection loses the
/// clicks since the node's last archive. The model's `Timer` takes either
/// outcome at any time, so no property rests on this choice: it is how
/// soon a dead node is found, not whether a count is right.
pub fn spare(inconclusive: bool, busy: bool, others_serve: bool) -> Option<Spared> {
    match (inconclusive, busy, others_serve) {
        (false, _, _) => None,
        (true, true, _) => Some(Spared::Saturated),
        (true, false, false) => Some(Spared::LastNode),
        (true, false, true) => None,
    }
}

/// What the registry says of a press's node when the press's count comes
/// back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeNow<E> {
    pub down: bool,
    /// A fence is up on it: a clean or failover of it is under way.
    pub fenced: bool,
    /// Its fencing epoch: its last clean's token.
    pub epoch: E,
}

/// Whether a node's count may be shown. Always, when the replica stayed
/// in touch with the fence channel while the press was out; after a
/// silence (its lease lapsed: paused, or cut off), only if the registry,
/// read now in one step, has the node up, unfenced, under the epoch the
/// press went out with: the count was made before that read, so no clean
/// or failover of the node started since the press went out can have gone
/// by without it. Else one may have gone by without this replica, and the
/// session moved on: the count is no longer its to show (`None`: the
/// registry could not be read).
pub fn count_shown<E: PartialEq>(silent: bool, now: Option<NodeNow<E>>, sent_epoch: E) -> bool {
    !silent || now.is_some_and(|now| !now.down && !now.fenced && now.epoch == sent_epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_answers_over_the_sessions_base() {
        let heard = Heard::Counted {
            count: 3,
            shown: true,
        };
        assert_eq!(next(heard, 10), Next::Answer(13));
    }

    #[test]
    fn a_press_that_may_have_reached_its_node_is_never_tried_again() {
        for heard in [Heard::Failed { sent: true }, Heard::Spared { sent: true }] {
            assert_eq!(next(heard, 0), Next::<u8>::Unknown);
        }
        let unshown = Heard::Counted {
            count: 1,
            shown: false,
        };
        assert_eq!(next(unshown, 0), Next::Unknown);
    }

    #[test]
    fn a_press_that_provably_was_not_counted_goes_round_again() {
        let again = |how| Next::<u8>::Again(how);
        assert_eq!(next(Heard::Refused, 0), again(Again::Reread));
        let failed = Heard::Failed { sent: false };
        assert_eq!(next(failed, 0), again(Again::FailOver));
        let spared = Heard::Spared { sent: false };
        assert_eq!(next(spared, 0), again(Again::Requeue));
    }

    #[test]
    fn only_an_inconclusive_failure_spares_a_node_busy_with_others_or_the_last_one() {
        for (busy, others) in [(false, false), (true, true), (true, false), (false, true)] {
            assert_eq!(spare(false, busy, others), None);
        }
        assert_eq!(spare(true, true, true), Some(Spared::Saturated));
        assert_eq!(spare(true, true, false), Some(Spared::Saturated));
        assert_eq!(spare(true, false, false), Some(Spared::LastNode));
        assert_eq!(spare(true, false, true), None);
    }

    /// The reason logged and answered says which evidence spared it.
    #[test]
    fn each_reason_to_spare_a_node_says_what_was_seen() {
        assert!(Spared::Saturated.as_str().contains("answers others"));
        assert!(Spared::LastNode.as_str().contains("no other node serves"));
    }

    #[test]
    fn after_a_silence_a_count_is_shown_only_while_its_node_serves_unfenced_under_the_same_epoch() {
        let up = |epoch| {
            Some(NodeNow {
                down: false,
                fenced: false,
                epoch,
            })
        };
        assert!(count_shown(false, None, 1));
        assert!(count_shown(true, up(1), 1));
        assert!(!count_shown(true, up(2), 1));
        let down = Some(NodeNow {
            down: true,
            fenced: false,
            epoch: 1,
        });
        assert!(!count_shown(true, down, 1));
        let fenced = Some(NodeNow {
            down: false,
            fenced: true,
            epoch: 1,
        });
        assert!(!count_shown(true, fenced, 1));
        assert!(!count_shown(true, None, 1));
    }
}
