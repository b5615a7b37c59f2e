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
pub fn place(
    mapping: Mapping,
    folded_at: u8,
    unmapped_at: u8,
    chosen: Option<u8>,
    base: u8,
    base_guard: bool,
) -> Option<Placed> {
    let node = chosen?;
    if let Some((node, base)) = mapping {
        return Some(Placed::Standing { node, base });
    }
    if base_guard && folded_at < unmapped_at {
        return Some(Placed::Stale);
    }
    Some(Placed::Created { node, base })
}

/// `unmap.lua` of `node`'s sessions: the mapping left, and whether the
/// session was unmapped (its group counts an unmap: `base_guard`).
pub fn unmap(mapping: Mapping, node: u8) -> (Mapping, bool) {
    match mapping {
        Some((n, _)) if n == node => (None, true),
        other => (other, false),
    }
}
