//! `Selector`: a strategy of the `balancing` crate kept in step with this
//! replica's up nodes. The node set is rebuilt when the table's membership
//! changes, by a task that follows it, never by a pick: a pick is the
//! strategy's own cost: each strategy publishes what it builds with
//! `arc-swap`, as pingora swaps in a new selector, and a pick takes no lock.

use std::sync::{Arc, Weak};

use balancing::{Node, Pick, Strategy, StrategyKind};

use super::record::NodeState;
use super::table::NodeTable;

pub struct Selector {
    kind: StrategyKind,
    strategy: Arc<dyn Strategy>,
}

impl Selector {
    /// `bound`: consistent hashing with bounded loads (c > 1) instead of the
    /// plain ring. Load-aware strategies read the table's in-flight counts.
    /// Starts the task that follows the table (so: inside a runtime).
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
        // Subscribed before the first build: a change in between wakes it.
        let changes = table.subscribe();
        set_up_nodes(strategy.as_ref(), &table);
        tokio::spawn(follow(
            changes,
            Arc::downgrade(&table),
            Arc::downgrade(&strategy),
        ));
        Self { kind, strategy }
    }

    pub fn kind(&self) -> StrategyKind {
        self.kind
    }

    /// A node for `key` among the up nodes, by address.
    pub fn pick(&self, key: &[u8]) -> Option<Pick> {
        self.strategy.pick(key)
    }
}

/// Rebuilds the strategy's node set after every change of membership (a
/// burst of changes wakes it once) until the table or the strategy is gone.
async fn follow(
    mut changes: tokio::sync::watch::Receiver<u64>,
    table: Weak<NodeTable>,
    strategy: Weak<dyn Strategy>,
) {
    while changes.changed().await.is_ok() {
        let (Some(table), Some(strategy)) = (table.upgrade(), strategy.upgrade()) else {
            return;
        };
        set_up_nodes(strategy.as_ref(), &table);
    }
}

fn set_up_nodes(strategy: &dyn Strategy, table: &NodeTable) {
    let nodes: Vec<Node> = table
        .all()
        .iter()
        .filter(|e| e.state() == NodeState::Up)
        // The admin API takes weights in 1..=1000 only; a node with any
        // other (written by hand into Redis) is left out of selection.
        .filter_map(|e| Node::new(&e.address, e.weight()).ok())
        .collect();
    strategy.set_nodes(&nodes);
}
