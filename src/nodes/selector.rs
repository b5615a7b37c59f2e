//! `Selector`: a strategy of the `balancing` crate kept in step with this
//! replica's up nodes. The strategy's node set is rebuilt only when the
//! table's membership version moved, so a pick is the strategy's own cost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use balancing::{Node, Pick, Strategy, StrategyKind};

use super::table::NodeTable;
use crate::store::NodeState;

pub struct Selector {
    kind: StrategyKind,
    strategy: Arc<dyn Strategy>,
    table: Arc<NodeTable>,
    /// Table version the strategy's node set was built from (`u64::MAX`: never).
    seen: AtomicU64,
    /// Serialises rebuilds; a std mutex, never held across an await.
    rebuild: Mutex<()>,
}

impl Selector {
    /// `bound`: consistent hashing with bounded loads (c > 1) instead of the
    /// plain ring. Load-aware strategies read the table's in-flight counts.
    pub fn new(
        kind: StrategyKind,
        table: Arc<NodeTable>,
        virtual_nodes: u32,
        bound: Option<f64>,
    ) -> Self {
        let strategy = balancing::build(
            kind,
            virtual_nodes,
            bound,
            table.loads().clone(),
            uuid::Uuid::new_v4().as_u64_pair().0,
        );
        Self {
            kind,
            strategy,
            table,
            seen: AtomicU64::new(u64::MAX),
            rebuild: Mutex::new(()),
        }
    }

    pub fn kind(&self) -> StrategyKind {
        self.kind
    }

    /// A node for `key` among the up nodes, by address.
    pub fn pick(&self, key: &[u8]) -> Option<Pick> {
        self.sync();
        self.strategy.pick(key)
    }

    fn sync(&self) {
        let version = self.table.version();
        if self.seen.load(Ordering::Acquire) == version {
            return;
        }
        let _rebuild = self.rebuild.lock().unwrap_or_else(|e| e.into_inner());
        let version = self.table.version();
        if self.seen.load(Ordering::Acquire) == version {
            return;
        }
        let nodes: Vec<Node> = self
            .table
            .all()
            .iter()
            .filter(|e| e.state() == NodeState::Up)
            // The admin API takes weights in 1..=1000 only; a node with any
            // other (written by hand into Redis) is left out of selection.
            .filter_map(|e| Node::new(&e.address, e.weight()).ok())
            .collect();
        self.strategy.set_nodes(&nodes);
        self.seen.store(version, Ordering::Release);
    }
}
