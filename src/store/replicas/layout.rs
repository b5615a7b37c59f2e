//! The storage layout's version. Every key and value the module above
//! describes is layout [`LAYOUT`]; a release that changes any of them
//! raises it. Before 1.0 there is no code that reads an older layout: a
//! replica that finds another version under its prefix refuses to serve
//! rather than misread (or corrupt) what is there, and the CHANGELOG says
//! when an upgrade needs every replica stopped first.
//!
//! The version is written with the registry's epoch (fresh or rebuilt),
//! so a Redis that forgot everything forgot it too and gets it back with
//! the rebuild. A registry without one was written by a commit before
//! 0.1.0, which kept no version.

use redis::AsyncCommands;

use super::{Context, Replicas, StoreResult};

/// The layout this release reads and writes.
pub const LAYOUT: u32 = 2;

/// What a replica found under its prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// This release's layout, or nothing yet (a fresh Redis, or one that
    /// forgot: the registry check writes it).
    Known,
    /// Another layout: this replica must not serve from it.
    Unknown(LayoutMismatch),
}

/// A layout this release cannot read, and what the operator can do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Redis holds storage layout {found} under prefix {prefix:?}; this release ({release}) reads layout {LAYOUT} only. \
     Stop every replica, then either start the release that wrote it again, or delete the prefix's keys \
     (redis-cli --scan --pattern '{prefix}*' | xargs redis-cli del) and start this release: \
     Postgres keeps the archive, and each session's next press restores it"
)]
pub struct LayoutMismatch {
    /// What the key held: a number, or "none" (a commit before 0.1.0).
    pub found: String,
    pub prefix: String,
    pub release: &'static str,
}

impl Replicas {
    /// Reads the layout version beside the registry's epoch.
    pub async fn layout(&self) -> StoreResult<Layout> {
        let (version, registry): (Option<String>, bool) = redis::pipe()
            .get(self.key(&["layout"]))
            .exists(self.key(&["registry"]))
            .query_async(&mut self.conn())
            .await
            .context("reading the storage layout's version from Redis")?;
        let found = match version {
            Some(version) if version == LAYOUT.to_string() => return Ok(Layout::Known),
            None if !registry => return Ok(Layout::Known),
            Some(version) => version,
            None => "none (a commit before 0.1.0)".to_owned(),
        };
        Ok(Layout::Unknown(LayoutMismatch {
            found,
            prefix: self.prefix.to_string(),
            release: env!("CARGO_PKG_VERSION"),
        }))
    }

    /// Records this release's layout (before the registry's epoch).
    pub async fn keep_layout(&self) -> StoreResult<()> {
        self.conn()
            .set::<_, _, ()>(self.key(&["layout"]), LAYOUT)
            .await
            .context("writing the storage layout's version to Redis")
    }
}
