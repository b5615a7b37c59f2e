//! What the Lua scripts decide, as plain functions: the model's `Place`
//! and the unmaps of its cleans and failovers call them, and the
//! balancer's tests run each script on the same states and compare
//! (`tests/api/model_scripts.rs`), so the model and the scripts cannot
//! drift apart unseen.

/// A session's mapping: its node and its base.
pub type Mapping = Option<(u8, u8)>;

/// What `place.lua` (`claim.lua` on a cluster) makes of a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// A mapping stood: the press goes on with it.
    Standing { node: u8, base: u8 },
    /// Refused: the base was folded before the session's group last
    /// unmapped a session (`base_guard`): fold again.
    Stale,
    /// Created on `node` with the folded base.
    Created { node: u8, base: u8 },
}

/// `place.lua` on `mapping`, for a base folded when the archive was at
/// `folded_at`, the group last unmapping at `unmapped_at`, on `chosen`
/// (an up node; `None` when none is up: nothing is placed, even where a
/// mapping stands, and the press answers 503 `no_node_available`). A cluster's replica chooses the
/// node before `claim.lua` runs, and `place.lua` decides in the same order.
/// A mapping on `stale` (a node the registry no longer has, which the
/// press found its mapping naming) does not stand: the session is placed
/// anew. The model never passes one: it deletes no node.
pub fn place(
    mapping: Mapping,
    stale: Option<u8>,
    folded_at: u8,
    unmapped_at: u8,
    chosen: Option<u8>,
    base: u8,
    base_guard: bool,
) -> Option<Placed> {
    let node = chosen?;
    if let Some((node, base)) = mapping.filter(|(node, _)| Some(*node) != stale) {
        return Some(Placed::Standing { node, base });
    }
    if base_guard && folded_at < unmapped_at {
        return Some(Placed::Stale);
    }
    Some(Placed::Created { node, base })
}

/// `unmap.lua`'s re-based pairs: a live session still on `node`, which
/// forgot every session in a clean, takes its folded total as its new
/// base; one mapped elsewhere meanwhile is left alone. Not an unmap: its
/// group counts none, and a placement folded before it finds it standing.
pub fn rebase(mapping: Mapping, node: u8, total: u8) -> Mapping {
    match mapping {
        Some((n, _)) if n == node => Some((n, total)),
        other => other,
    }
}

/// `unmap.lua` of `node`'s sessions: the mapping left, and whether the
/// session was unmapped (its group counts an unmap: `base_guard`).
pub fn unmap(mapping: Mapping, node: u8) -> (Mapping, bool) {
    match mapping {
        Some((n, _)) if n == node => (None, true),
        other => (other, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_no_node_up_nothing_is_placed_even_where_a_mapping_stands() {
        assert_eq!(place(Some((0, 4)), None, 0, 0, None, 1, true), None);
        assert_eq!(place(None, None, 0, 0, None, 1, true), None);
    }

    #[test]
    fn a_standing_mapping_stands_unless_it_names_the_stale_node() {
        let standing = Some(Placed::Standing { node: 0, base: 4 });
        assert_eq!(place(Some((0, 4)), None, 0, 0, Some(1), 1, true), standing);
        assert_eq!(
            place(Some((0, 4)), Some(1), 0, 0, Some(1), 1, true),
            standing
        );
        let created = Some(Placed::Created { node: 1, base: 2 });
        assert_eq!(
            place(Some((0, 4)), Some(0), 1, 1, Some(1), 2, true),
            created
        );
    }

    #[test]
    fn a_base_folded_before_the_groups_last_unmap_is_refused_under_the_guard() {
        assert_eq!(
            place(None, None, 0, 1, Some(1), 2, true),
            Some(Placed::Stale)
        );
        assert_eq!(
            place(None, None, 1, 1, Some(1), 2, true),
            Some(Placed::Created { node: 1, base: 2 })
        );
        assert_eq!(
            place(None, None, 0, 1, Some(1), 2, false),
            Some(Placed::Created { node: 1, base: 2 })
        );
    }

    #[test]
    fn an_unmap_takes_only_the_nodes_own_session_and_says_so() {
        assert_eq!(unmap(Some((0, 3)), 0), (None, true));
        assert_eq!(unmap(Some((1, 3)), 0), (Some((1, 3)), false));
        assert_eq!(unmap(None, 0), (None, false));
    }

    #[test]
    fn a_rebase_moves_only_the_base_of_a_session_still_on_the_node() {
        assert_eq!(rebase(Some((0, 3)), 0, 7), Some((0, 7)));
        assert_eq!(rebase(Some((1, 3)), 0, 7), Some((1, 3)));
        assert_eq!(rebase(None, 0, 7), None);
    }
}
