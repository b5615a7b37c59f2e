//! `cargo run -p model --release --bin check-model`: checks the protocol
//! with every guard in, then with each guard taken out, and prints what
//! each check found: its states, and the shortest trace that breaks each
//! property broken.

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
        ("0.1.0 (no guard)", Guards::NONE),
    ];
    let presses: u8 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    for (name, guards) in runs {
        let started = std::time::Instant::now();
        let report = check(Protocol {
            guards,
            presses,
            outstanding: 2,
            cleans: 1,
            restarts: 1,
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
