//! Running the checker. The tests ask which properties break: every state
//! up to the replicas' symmetry, depth first (stateright 0.31's
//! breadth-first search takes no symmetry), about half the states and a
//! fraction of the memory. The `check-model` binary asks for traces to read:
//! every state breadth first, so that each counterexample is a shortest one.

use std::collections::{BTreeMap, BTreeSet};

use stateright::{Checker, HasDiscoveries, Model};

use crate::state::Protocol;

/// What one check found.
#[derive(Debug)]
pub struct Report {
    /// Distinct states visited.
    pub states: usize,
    /// Each property that failed, with a trace that breaks it: one action
    /// a line.
    pub counterexamples: BTreeMap<&'static str, Vec<String>>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.counterexamples.is_empty()
    }
}

/// Checks every state `protocol` reaches but one of each pair that differ
/// only by which replica is which (`State`'s `Representative`).
pub fn check(protocol: Protocol) -> Report {
    let properties = names(&protocol);
    let checker = protocol.checker().threads(2).symmetry().spawn_dfs().join();
    report(&checker, properties)
}

/// The same, stopping once each of `properties` has a counterexample: a
/// guard taken out that must break these, whatever else it breaks, need
/// not wait for the rest of a state space of millions.
pub fn check_until_broken(protocol: Protocol, properties: &[&'static str]) -> Report {
    let names = names(&protocol);
    let wanted: BTreeSet<&'static str> = properties.iter().copied().collect();
    let checker = protocol
        .checker()
        .threads(2)
        .symmetry()
        .finish_when(HasDiscoveries::AllOf(wanted))
        .spawn_dfs()
        .join();
    report(&checker, names)
}

/// Checks every state `protocol` reaches, breadth first and without the
/// symmetry: each counterexample is a shortest trace.
pub fn shortest_counterexamples(protocol: Protocol) -> Report {
    let properties = names(&protocol);
    let checker = protocol.checker().threads(2).spawn_bfs().join();
    report(&checker, properties)
}

fn names(protocol: &Protocol) -> Vec<&'static str> {
    protocol.properties().iter().map(|p| p.name).collect()
}

fn report(checker: &impl Checker<Protocol>, properties: Vec<&'static str>) -> Report {
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
