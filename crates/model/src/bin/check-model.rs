//! `cargo run -p model --release --bin check-model [presses cleans restarts
//! rollbacks crashes lapses deadlines outstanding replays]` (3 1 1 0 0 0 0 2 0
//! by default): checks the protocol
//! with every guard in, then with each guard taken out, and prints what
//! each check found: its states, and the shortest trace that breaks each
//! property broken. `GUARDS=all` checks only with every guard in,
//! `GUARDS=<guard>` with every guard and without that one.

use model::{check, Guards, Protocol};

fn main() {
    let all = Guards::ALL;
    let runs = [
        ("every guard", all),
        (
            "without unknown_is_504",
            Guards {
                unknown_is_504: false,
                ..all
            },
        ),
        (
            "without retry_only_unsent",
            Guards {
                retry_only_unsent: false,
                ..all
            },
        ),
        (
            "without answer_before_timer",
            Guards {
                answer_before_timer: false,
                ..all
            },
        ),
        (
            "without base_guard",
            Guards {
                base_guard: false,
                ..all
            },
        ),
        (
            "without identity_check",
            Guards {
                identity_check: false,
                ..all
            },
        ),
        (
            "without lease_voids_answers",
            Guards {
                lease_voids_answers: false,
                ..all
            },
        ),
        (
            "without silence_order",
            Guards {
                silence_order: false,
                ..all
            },
        ),
        (
            "without unmap_takes_its_own",
            Guards {
                unmap_takes_its_own: false,
                ..all
            },
        ),
        ("0.1.0 (no guard)", Guards::NONE),
    ];
    let arg = |n: usize, default: u8| {
        std::env::args()
            .nth(n)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (presses, cleans, restarts) = (arg(1, 3), arg(2, 1), arg(3, 1));
    let (rollbacks, crashes, lapses) = (arg(4, 0), arg(5, 0), arg(6, 0));
    let (deadlines, outstanding, replays) = (arg(7, 0), arg(8, 2), arg(9, 0));
    // GUARDS=all: every guard only; GUARDS=<guard>: every guard, and
    // without that one.
    let only = std::env::var("GUARDS").unwrap_or_default();
    let chosen = |name: &str| only.is_empty() || name == "every guard" || name.ends_with(&only);
    for (name, guards) in runs.into_iter().filter(|(name, _)| chosen(name)) {
        let started = std::time::Instant::now();
        let report = check(Protocol {
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
