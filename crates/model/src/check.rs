//! Running the checker: every reachable state, breadth first, so that a
//! counterexample found is a shortest one.

use std::collections::BTreeMap;

use stateright::{Checker, Model};

use crate::state::Protocol;

/// What one check found.
#[derive(Debug)]
pub struct Report {
    /// Distinct states visited.
    pub states: usize,
    /// Each property that failed, with the shortest trace that breaks it:
    /// one action a line.
    pub counterexamples: BTreeMap<&'static str, Vec<String>>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.counterexamples.is_empty()
    }
}

/// Checks every state `protocol` reaches.
pub fn check(protocol: Protocol) -> Report {
    let properties: Vec<&'static str> = protocol.properties().iter().map(|p| p.name).collect();
    let checker = protocol.checker().threads(2).spawn_bfs().join();
    let mut counterexamples = BTreeMap::new();
    for name in properties {
        if let Some(path) = checker.discovery(name) {
            let trace = path
                .into_actions()
                .into_iter()
                .map(|action| format!("{action:?}"))
                .collect();
            counterexamples.insert(name, trace);
        }
    }
    Report {
        states: checker.unique_state_count(),
        counterexamples,
    }
}
