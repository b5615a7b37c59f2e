//! `cargo run -p model --release --bin check-model [presses cleans restarts
//! rollbacks crashes lapses deadlines outstanding replays fencing cleaner_deaths
//! recoveries]` (3 1 1 0 0 0 0 2 0 1 0 0 by default: fencing is how many of the two nodes fence): checks the protocol
//! with every guard in, then with each guard taken out, and prints what
//! each check found: its states, and the shortest trace that breaks each
//! property broken. `GUARDS=all` checks only with every guard in,
//! `GUARDS=<guard>` with every guard and without that one.

use model::{shortest_counterexamples, Guards, Protocol};

fn main() {
    // TAKEN_OUT=a,b: these guards are out of every run (to see what one
    // guard keeps when another's assumption fails).
    let mut all = Guards::ALL;
    for name in std::env::var("TAKEN_OUT").unwrap_or_default().split(',') {
        if !name.is_empty() {
            all = all.without(name).expect("a guard's name (Guards::NAMES)");
        }
    }
    let mut runs = vec![("every guard".to_string(), all)];
    for name in Guards::NAMES {
        runs.push((format!("without {name}"), all.without(name).unwrap()));
    }
    runs.push(("0.1.0 (no guard)".to_string(), Guards::NONE));
    let arg = |n: usize, default: u8| {
        std::env::args()
            .nth(n)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (presses, cleans, restarts) = (arg(1, 3), arg(2, 1), arg(3, 1));
    let (rollbacks, crashes, lapses) = (arg(4, 0), arg(5, 0), arg(6, 0));
    let (deadlines, outstanding, replays) = (arg(7, 0), arg(8, 2), arg(9, 0));
    let (fencing, cleaner_deaths, recoveries) = (arg(10, 1), arg(11, 0), arg(12, 0));
    // GUARDS=all: every guard only; GUARDS=<guard>: every guard, and
    // without that one. TAKEN_OUT, above.
    let only = std::env::var("GUARDS").unwrap_or_default();
    let chosen = |name: &str| only.is_empty() || name == "every guard" || name.ends_with(&only);
    for (name, guards) in runs.into_iter().filter(|(name, _)| chosen(name)) {
        let started = std::time::Instant::now();
        let report = shortest_counterexamples(Protocol {
            guards,
            presses,
            outstanding,
            cleans,
            restarts,
            rollbacks,
            crashes,
            lapses,
            deadlines,
            replays,
            fencing,
            cleaner_deaths,
            recoveries,
        });
        println!(
            "{name}: {} states in {:.1?}",
            report.states,
            started.elapsed()
        );
        for (property, trace) in &report.counterexamples {
            println!("  broken: {property}");
            for step in trace {
                println!("    {step}");
            }
        }
    }
}
